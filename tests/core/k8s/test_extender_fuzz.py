"""Fuzzing every endpoint: any body gets 200, 400 or 413 with a message — never a 500.

Three kinds of input: arbitrary bytes, arbitrary JSON, and real requests with one
part replaced by arbitrary JSON (the shapes a buggy client or a version skew would
send). The app runs behind the lean HTTP server that ``kubesage serve`` uses, over a
real socket; a crash in a handler would show up as a 500 here.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kubesage.core.k8s.policy_source import FilePolicySource, default_policy_dir
from kubesage.core.k8s.server import create_app
from kubesage.core.k8s.webhook import AdmissionWebhook
from tests.core.k8s import v1_container, v1_pod
from tests.core.k8s.test_extender import NAMES, make_extender
from tests.core.k8s.test_http_server import running
from tests.core.k8s.test_server import admission_review

ENDPOINTS = ("/scheduler/filter", "/scheduler/prioritize", "/scheduler/bind", "/mutate")
FUZZ = settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=20,
)
quantities = st.sampled_from(
    ["1", "500m", "2Gi", "1e3", "1E", "-1", "1.5", "abc", "", "1e999", "9" * 40, "0.0001n", "7Ki"]
)


@pytest.fixture(scope="module")
def client() -> Iterator[httpx.Client]:
    """The production path: the app behind the lean HTTP server, over a real socket."""
    extender, _ = make_extender()
    webhook = AdmissionWebhook(FilePolicySource(default_policy_dir()))
    app = create_app(extender, mutate=webhook.handle, max_body_bytes=256 * 1024)
    try:
        with running(app) as port, httpx.Client(base_url=f"http://127.0.0.1:{port}") as http:
            yield http
    finally:
        webhook.close()


def check(client: httpx.Client, path: str, body: bytes) -> None:
    response = client.post(path, content=body)
    assert response.status_code in (200, 400, 413), (path, body[:300], response.text[:300])
    document = response.json()
    if response.status_code != 200:
        assert isinstance(document["error"], str) and document["error"], document


@FUZZ
@given(path=st.sampled_from(ENDPOINTS), body=st.binary(max_size=300))
def test_arbitrary_bytes(client: httpx.Client, path: str, body: bytes) -> None:
    check(client, path, body)


@FUZZ
@given(path=st.sampled_from(ENDPOINTS), document=json_values)
def test_arbitrary_json(client: httpx.Client, path: str, document: Any) -> None:
    check(client, path, json.dumps(document).encode())


def real_requests() -> dict[str, dict[str, Any]]:
    pod = v1_pod(
        "trainer-0",
        containers=[v1_container(requests={"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "1"})],
        annotations={"kubesage.io/gpu-milli": "500"},
    )
    return {
        "/scheduler/filter": {"Pod": pod, "NodeNames": NAMES},
        "/scheduler/prioritize": {"Pod": pod, "NodeNames": NAMES},
        "/scheduler/bind": {
            "PodName": "trainer-0",
            "PodNamespace": "ml",
            "PodUID": pod["metadata"]["uid"],
            "Node": "h100-a",
        },
        "/mutate": orjson.loads(admission_review(pod)),
    }


def paths_of(document: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path inside ``document`` (dict keys and list indices)."""
    found = [prefix] if prefix else []
    if isinstance(document, dict):
        for key, value in document.items():
            found += paths_of(value, (*prefix, key))
    elif isinstance(document, list):
        for index, value in enumerate(document):
            found += paths_of(value, (*prefix, index))
    return found


REAL = real_requests()
PATHS = {endpoint: paths_of(document) for endpoint, document in REAL.items()}


@FUZZ
@given(data=st.data(), endpoint=st.sampled_from(ENDPOINTS), replacement=json_values)
def test_real_request_with_one_part_replaced(
    client: httpx.Client, data: st.DataObject, endpoint: str, replacement: Any
) -> None:
    document = copy.deepcopy(REAL[endpoint])
    path = data.draw(st.sampled_from(PATHS[endpoint]))
    target = document
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = replacement
    check(client, endpoint, json.dumps(document).encode())


@FUZZ
@given(
    endpoint=st.sampled_from(["/scheduler/filter", "/scheduler/prioritize"]),
    requests=st.dictionaries(
        st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "nvidia.com/mig-3g.40gb"]),
        quantities,
        max_size=4,
    ),
    milli=st.none() | st.text(max_size=6) | st.sampled_from(["1", "999", "1000", "1001", "0"]),
    names=st.lists(st.sampled_from([*NAMES, "unknown-node", ""]), max_size=8),
)
def test_pod_resources_and_annotations(
    client: httpx.Client,
    endpoint: str,
    requests: dict[str, str],
    milli: str | None,
    names: list[str],
) -> None:
    pod = v1_pod(
        "fuzz",
        containers=[v1_container(requests=requests)],
        annotations={} if milli is None else {"kubesage.io/gpu-milli": milli},
    )
    check(client, endpoint, orjson.dumps({"Pod": pod, "NodeNames": names}))

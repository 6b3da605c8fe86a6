"""ListWatch against a list call shaped like the generated client's (raw responses,
ApiException for a non-2xx answer): what a watch refused with HTTP 410 does."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import urllib3
from kubernetes.client.rest import RESTResponse

from kubesage.core.k8s.apiclient import ApiException
from kubesage.core.k8s.watch_stream import ListWatch
from tests.fakes.apiserver import wait_until


def client_error(code: int, reason: str, status: dict[str, Any]) -> ApiException:
    """The ApiException the generated client raises for a non-2xx answer."""
    response = RESTResponse(
        urllib3.HTTPResponse(body=json.dumps(status).encode(), status=code, reason=reason)
    )
    response.read()
    with pytest.raises(ApiException) as caught:
        raise ApiException.from_response(http_resp=response, body=None, data=None)
    return caught.value


class OpenWatch:
    """A watch stream that stays open, sending nothing, until the reflector stops."""

    def __init__(self, stop: threading.Event) -> None:
        self._stop = stop

    def stream(self, amt: int | None = None, decode_content: bool = True) -> Iterator[bytes]:
        self._stop.wait(10)
        yield from ()

    def release_conn(self) -> None:
        pass

    def close(self) -> None:
        self._stop.set()


class NodeList:
    """Nodes at resourceVersion 5, then 9 (compacted past 5): a watch from 5 gets 410."""

    def __init__(self, stop: threading.Event) -> None:
        self.stop = stop
        self.calls: list[tuple[str, str | None]] = []
        self.version = "5"

    def __call__(self, **kwargs: Any) -> Any:
        if not kwargs.get("watch"):
            self.calls.append(("list", None))
            body = {"kind": "NodeList", "metadata": {"resourceVersion": self.version}, "items": []}
            return urllib3.HTTPResponse(body=json.dumps(body).encode(), status=200)
        self.calls.append(("watch", kwargs["resource_version"]))
        if kwargs["resource_version"] == "5":
            self.version = "9"
            raise client_error(
                410,
                "Gone",
                {
                    "kind": "Status",
                    "apiVersion": "v1",
                    "status": "Failure",
                    "message": "too old resource version: 5 (9)",
                    "reason": "Expired",
                    "code": 410,
                },
            )
        return OpenWatch(self.stop)


def test_http_410_on_the_watch_request_relists_without_backoff() -> None:
    stop = threading.Event()
    nodes = NodeList(stop)
    failures: list[None] = []
    reflector = ListWatch(
        "test nodes",
        nodes,
        thread_name="test-nodes",
        lock=threading.Condition(),
        stop=stop,
        on_list=lambda items: None,
        on_event=lambda kind, obj: None,
        on_failure=lambda: failures.append(None),
        backoff_s=0.01,
        max_backoff_s=0.02,
    )
    reflector.start()
    try:
        wait_until(lambda: len(nodes.calls) >= 4, what="the watch after the relist")
    finally:
        stop.set()
        reflector.interrupt()
        reflector.join(5)
    assert nodes.calls == [("list", None), ("watch", "5"), ("list", None), ("watch", "9")]
    assert (reflector.relists, reflector.failures, reflector.error) == (2, 0, None)
    assert failures == []

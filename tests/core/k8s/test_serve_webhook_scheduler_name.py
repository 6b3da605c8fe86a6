"""``kubesage serve --scheduler-name NAME`` on a live cluster (the FAKE API server through
the real client): the webhook knows kubesage schedules as NAME, so it does not redirect
to NAME a pod carrying constraints kubesage cannot honour."""

from __future__ import annotations

import base64
import json
from typing import Any

from kubesage.core.cli.serve_services import live_service
from tests.core.k8s.webhook_support import pod_object, review
from tests.fakes.apiserver import SCHEDULING_POLICIES, FakeApiServer

NAME = "gpu-sched"
ANTI_AFFINITY = {
    "podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {}}
        ]
    }
}


def _answer(mutate: Any, pod: dict[str, Any]) -> tuple[str | None, list[str]]:
    """The schedulerName the webhook's patch sets (None: unchanged), and its warnings."""
    status, answer = mutate(json.dumps(review(pod)).encode())
    assert status == 200
    response = answer["response"]
    patch = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    names = [op["value"] for op in patch if op["path"] == "/spec/schedulerName"]
    return (names[0] if names else None), response.get("warnings", [])


def test_the_webhook_does_not_redirect_to_the_served_scheduler_name_what_it_cannot_honour() -> None:
    with FakeApiServer() as fake:
        fake.add_custom(
            SCHEDULING_POLICIES,
            {
                "apiVersion": "kubesage.io/v1alpha1",
                "kind": "SchedulingPolicy",
                "metadata": {"name": "to-gpu-sched"},
                "spec": {"podSelector": {}, "inject": {"schedulerName": NAME}},
            },
        )
        service = live_service(fake.client(), scheduler_name=NAME)
        try:
            assert service.mutate is not None
            assert _answer(service.mutate, pod_object()) == (NAME, [])
            constrained = pod_object()
            constrained["spec"]["affinity"] = ANTI_AFFINITY
            name, warnings = _answer(service.mutate, constrained)
            assert name is None
            assert any("podAntiAffinity" in warning for warning in warnings), warnings
        finally:
            service.stop()

"""The extender's answers, byte for byte, over a scripted run: speed work must not change them.

A synthetic 300-node cluster, half GPU-allocated by FGD, sees a scripted run of
kube-scheduler's calls for 240 pods of the synthetic workload's shapes (a sliding
window of candidate names, some unknown names, the names that passed sent to
prioritize, the best node bound), plus prioritize calls with lists that differ from
what filter passed, pods from one template under several names, a pod the core
does not model and malformed requests. The digest of every status and body is the
one the handlers answered before the hot path was reworked (issue 19): a change in
any answer, or in the order of any map, changes it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from kubesage.core.annotations import GPU_MILLI_ANNOTATION
from kubesage.core.k8s.embedded import EmbeddedCluster
from kubesage.core.k8s.extender import Extender
from kubesage.core.k8s.extender_wire import ExtenderRequestError
from kubesage.core.policy import PolicyContext, make_policy
from kubesage.core.traces.synthetic import synthetic_workload
from kubesage.core.types import PodRequest

EXPECTED_SHA256 = "6f3e2f1bbf2391dc54b14308db1eff80a746c34904dd41928958e479c397fcb6"
"""Recorded from the handlers as they were before issue 19's speed work, with one answer
changed on purpose since: filter's answer to the pod without a name is a 200 whose
``Error`` says so, no longer a 400 (kube-scheduler reads only a 200's body); the
transcripts before and after differ in that line alone."""


def _pod(index: int, request: PodRequest, *, namespace: str = "bench") -> dict[str, Any]:
    requests = {"cpu": f"{request.cpu_milli}m", "memory": f"{request.memory_mib}Mi"}
    annotations = {}
    if request.num_gpu:
        requests["nvidia.com/gpu"] = str(request.num_gpu)
        if request.is_gpu_sharing:
            annotations[GPU_MILLI_ANNOTATION] = str(request.gpu_milli)
    return {
        "metadata": {
            "name": f"pod-{index:05d}",
            "namespace": namespace,
            "uid": f"uid-{namespace}-{index}",
            "resourceVersion": str(100 + index),
            "annotations": annotations,
        },
        "spec": {
            "containers": [{"name": "main", "resources": {"requests": requests}}],
            "priority": 0,
        },
        "status": {"phase": "Pending", "qosClass": "Guaranteed"},
    }


def _transcript() -> bytes:
    cluster = EmbeddedCluster.synthetic(300)
    policy = make_policy("fgd", PolicyContext(seed=0, workload=tuple(cluster.workload)))
    cluster.fill(policy, 0.5)
    extender = Extender(cluster, policy, cluster.binder(policy))
    with cluster.locked() as (_, node_names):
        names = list(node_names)
    out: list[bytes] = []

    def call(verb: str, document: Any) -> Any:
        handler = getattr(extender, verb)
        try:
            status, body = handler(orjson.dumps(document))
        except ExtenderRequestError as exc:
            status, body = 400, str(exc).encode()
        out.append(b"%s %d %s\n" % (verb.encode(), status, body))
        return orjson.loads(body) if status == 200 else None

    workload = synthetic_workload(240, seed=3)
    start = 0
    for index, request in enumerate(workload):
        pod = _pod(index, request, namespace=("bench", "other")[index % 2])
        window = [names[(start + k) % len(names)] for k in range(60)]
        start = (start + 37) % len(names)
        if index % 10 == 3:
            window[5:5] = ["not-a-node", "also-unknown"]
        filtered = call("filter", {"Pod": pod, "NodeNames": window})
        passing = filtered["NodeNames"]
        if index % 7 == 2:  # prioritize asked about another list than filter passed
            passing = list(reversed(passing)) + window[:3]
        scores = call("prioritize", {"Pod": pod, "NodeNames": passing})
        known = [s for s in scores if s["Host"] in filtered["NodeNames"]]
        if known:
            best = max(known, key=lambda s: s["Score"])["Host"]
            metadata = pod["metadata"]
            binding = {
                "PodName": metadata["name"],
                "PodNamespace": metadata["namespace"],
                "PodUID": metadata["uid"],
                "Node": best,
            }
            call("bind", binding)
    unsupported = _pod(9_000, workload[0])
    unsupported["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/mig-1g.10gb"] = "2"
    call("filter", {"Pod": unsupported, "NodeNames": names[:20]})
    call("prioritize", {"Pod": unsupported, "NodeNames": names[:20]})
    call("filter", {"Pod": _pod(9_001, workload[1]), "NodeNames": [names[0], 7]})
    call("filter", {"Pod": {"metadata": {"name": ""}}, "NodeNames": names[:3]})
    call("filter", {"Pod": _pod(9_002, workload[2]), "Nodes": {"items": []}})
    return b"".join(out)


def test_answers_are_byte_identical_to_the_reference() -> None:
    transcript = _transcript()
    assert transcript.count(b"\n") > 700
    assert hashlib.sha256(transcript).hexdigest() == EXPECTED_SHA256

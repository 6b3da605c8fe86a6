"""Which workloads the loop may patch, and the merge patch a scale becomes for each."""

from __future__ import annotations

import re
from typing import Any

import pytest

from kubesage.core.k8s.workloads import (
    FLINK_DEPLOYMENT,
    ChangeRefusedError,
    kind_of,
    scale_needs_object,
    scale_patch,
)
from kubesage.core.loop.actions import ObjectRef

JOB = ObjectRef("batch/v1", "Job", "ml", "sweep")
PYTORCH_JOB = ObjectRef("kubeflow.org/v1", "PyTorchJob", "ml", "llama")
FLINK = ObjectRef("flink.apache.org/v1beta1", "FlinkDeployment", "ml", "wordcount")


def elastic_job(**elastic: int) -> dict[str, Any]:
    return {
        "metadata": {"name": "llama", "resourceVersion": "812"},
        "spec": {"elasticPolicy": elastic, "pytorchReplicaSpecs": {"Worker": {"replicas": 4}}},
    }


def test_a_job_scales_by_parallelism_without_reading_it() -> None:
    assert not scale_needs_object(JOB)
    assert scale_patch(JOB, 3, None) == {"spec": {"parallelism": 3}}


def test_a_pytorch_job_patch_carries_the_read_resource_version() -> None:
    assert scale_needs_object(PYTORCH_JOB)
    assert scale_patch(PYTORCH_JOB, 2, elastic_job(minReplicas=2, maxReplicas=8)) == {
        "metadata": {"resourceVersion": "812"},
        "spec": {"pytorchReplicaSpecs": {"Worker": {"replicas": 2}}},
    }


@pytest.mark.parametrize(
    ("ref", "replicas", "current", "words"),
    [
        (FLINK, 2, None, "only Job (batch/v1), PyTorchJob (kubeflow.org/v1) can be scaled"),
        (JOB, -1, None, "replicas must be ≥ 0"),
        (PYTORCH_JOB, 9, elastic_job(maxReplicas=8), "bounds [1, 8]"),
        (PYTORCH_JOB, 2, {"spec": {"elasticPolicy": {}}}, "no Worker replica spec"),
    ],
)
def test_scale_refusals(
    ref: ObjectRef, replicas: int, current: dict[str, Any] | None, words: str
) -> None:
    with pytest.raises(ChangeRefusedError, match=re.escape(words)):
        scale_patch(ref, replicas, current)


def test_without_max_replicas_there_is_no_upper_bound() -> None:
    patch = scale_patch(PYTORCH_JOB, 100, elastic_job(minReplicas=2))
    assert patch["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 100


def test_only_kinds_with_rbac_are_patchable() -> None:
    assert kind_of(FLINK) == FLINK_DEPLOYMENT
    with pytest.raises(ChangeRefusedError, match="patches only"):
        kind_of(ObjectRef("apps/v1", "Deployment", "ml", "web"))

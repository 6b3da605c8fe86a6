"""The pod annotation keys that several layers share (the scheduler binds with them, the
launcher and the scenario simulator write them), written once.

A light module (no imports) so those that write the keys need not load the Kubernetes
client that reads them back. A key one module alone reads or writes stays with it.
"""

from __future__ import annotations

GPU_MILLI_ANNOTATION = "kubesage.io/gpu-milli"
"""A GPU-sharing pod's share of one GPU in milli-GPU (``"1"`` .. ``"1000"``)."""
GPU_MODELS_ANNOTATION = "kubesage.io/gpu-models"
"""Comma-separated GPU models the pod may run on (core model names or GFD products)."""
GANG_ANNOTATION = "kubesage.io/gang"
"""Pods with the same value (in one namespace) are placed all-or-nothing."""
GANG_MIN_AVAILABLE_ANNOTATION = "kubesage.io/gang-min-available"
"""Members of a gang that must be placed together."""
GANG_WAITING_TIME_ANNOTATION = "kubesage.io/gang-waiting-time"
"""How long a gang may wait for its members or for room."""
GPU_INDICES_ANNOTATION = "kubesage.io/gpu-indices"
"""Comma-separated GPU indices kubesage chose on the node (``"0,1"``), in ring order."""
MIG_START_ANNOTATION = "kubesage.io/mig-start"
"""For a MIG instance: the memory slice it starts at."""
ELASTIC_MIN_ANNOTATION = "kubesage.io/elastic-min"
"""Fewest replicas an elastic training job runs with (torchrun ``--nnodes`` MIN)."""
ELASTIC_MAX_ANNOTATION = "kubesage.io/elastic-max"
"""Most replicas an elastic training job runs with (torchrun ``--nnodes`` MAX)."""

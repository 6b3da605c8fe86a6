"""PPO checkpoints: safetensors weights with the feature schema stored beside them.

The schema (feature names and sizes, hidden width, format version) goes into the
safetensors metadata; loading refuses a file whose schema differs from this
code's, or whose weights are not finite, with a :class:`ModelError` naming why.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file

from kubesage.core.errors import ModelError
from kubesage.core.rl.features import (
    CANDIDATE_FEATURES,
    GLOBAL_RAW,
    MAX_CANDIDATES,
    REQUEST_FEATURES,
)
from kubesage.core.rl.network import HIDDEN, PCA_DIM, PlacementNetwork

FORMAT = "kubesage-ppo/2"


def schema() -> dict[str, Any]:
    return {
        "format": FORMAT,
        "candidate_features": list(CANDIDATE_FEATURES),
        "request_features": list(REQUEST_FEATURES),
        "max_candidates": MAX_CANDIDATES,
        "global_raw": GLOBAL_RAW,
        "pca_dim": PCA_DIM,
        "hidden": HIDDEN,
    }


def save_network(network: PlacementNetwork, path: Path, info: dict[str, Any] | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().contiguous() for k, v in network.state_dict().items()}
    metadata = {"schema": json.dumps(schema()), "info": json.dumps(info or {})}
    save_file(tensors, str(path), metadata=metadata)


def load_network(path: Path) -> tuple[PlacementNetwork, dict[str, Any]]:
    """The network in ``path`` and its training info; ModelError when unusable."""
    if not path.is_file():
        raise ModelError(f"{path}: no such model file")
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelError(f"{path}: not a safetensors file ({exc})") from exc
    stored = _header_object(path, metadata, "schema")
    if stored != schema():
        differing = sorted(k for k in schema() if stored.get(k) != schema()[k])
        raise ModelError(
            f"{path}: feature schema differs from this version's ({', '.join(differing)}); "
            "retrain with `kubesage train ppo`"
        )
    info = _header_object(path, metadata, "info")
    network = PlacementNetwork()
    try:
        network.load_state_dict(tensors)
    except RuntimeError as exc:
        raise ModelError(f"{path}: weights do not fit the network ({exc})") from exc
    bad = [k for k, v in tensors.items() if not torch.isfinite(v).all()]
    if bad:
        raise ModelError(f"{path}: non-finite weights in {', '.join(bad)}")
    network.eval()
    return network, info


def _header_object(path: Path, metadata: dict[str, str], key: str) -> dict[str, Any]:
    """The JSON object stored under ``key`` in the file's metadata (empty when absent);
    ModelError naming the file and the key when it is not a JSON object."""
    try:
        value = json.loads(metadata.get(key, "{}"))
    except (ValueError, RecursionError) as exc:  # RecursionError: nested too deep
        raise ModelError(f"{path}: metadata '{key}' is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise ModelError(f"{path}: metadata '{key}' is not a JSON object ({value!r:.60})")
    return value

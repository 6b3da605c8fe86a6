"""Training loops shared by the neural forecasters (ST-GCN and the LSTM baseline).

Masked L1 loss on normalised targets (the median minimises it, which suits WAPE),
Adam, gradient clipping, a chronological validation split (with a gap so no
target is in both) and early stopping on the validation loss, the best weights
restored at the end. Deterministic for a seed on a given machine: seeded
initialisation and seeded batch order.

The ST-GCN trains in two stages: its temporal part first (``train``, exactly as
the LSTM baseline trains), then its gated graph residual on the frozen temporal
encodings (``train_residual``). The second stage starts from the gate at zero —
the temporal part alone — and keeps a graph only if it lowers the validation
loss, so the ST-GCN is never worse than its temporal part on validation data.
Frozen encodings are computed once, which makes the second stage cheap.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from kubesage.core.errors import InputError
from kubesage.core.forecast.stgcn import STGCN, window_scaled
from kubesage.core.forecast.windows import Windows

MAX_BATCH_SERIES = 8192
"""Series (windows × entities) in one batch at most: each is an LSTM sequence whose
activations are kept for the backward pass, so this bounds a step's memory."""

ProgressCallback = Callable[[int, int, float], None]
"""Called after each epoch as ``(epoch, epochs, validation_loss)``."""


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 20
    """Upper bound on passes over the training windows."""
    batch_size: int = 64
    """Windows per step (each holds every entity): large batches keep an epoch cheap on CPUs."""
    max_batch_series: int = MAX_BATCH_SERIES
    """Windows × entities per step at most: a large cluster's batch holds fewer windows."""
    learning_rate: float = 3e-3
    weight_decay: float = 1e-5
    patience: int = 3
    """Epochs without a better validation loss before stopping."""
    validation_fraction: float = 0.15
    """The latest share of training windows held out for early stopping."""
    seed: int = 0
    device: str = "cpu"
    """Torch device to train and predict on (``cpu``, ``cuda``, ``cuda:1``)."""


@dataclass(frozen=True)
class TrainReport:
    epochs_run: int
    best_epoch: int
    """0 for the graph residual means the gate stayed at zero (the graph did not help)."""
    best_validation_loss: float
    seconds: float


def masked_l1(prediction: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weight = mask.float()
    return (torch.abs(prediction - target) * weight).sum() / weight.sum().clamp(min=1.0)


def _tensors(windows: Windows, index: np.ndarray, device: torch.device) -> tuple[torch.Tensor, ...]:
    return (
        torch.from_numpy(windows.inputs[index]).to(device),
        torch.from_numpy(windows.targets[index]).to(device),
        torch.from_numpy(windows.target_mask[index]).to(device),
        torch.from_numpy(windows.last[index]).to(device),
    )


def windows_per_batch(windows: Windows, wanted: int, max_series: int = MAX_BATCH_SERIES) -> int:
    """``wanted`` windows, fewer (at least one) when they would hold over ``max_series``
    series."""
    entities = int(windows.last.shape[1])
    return max(1, min(wanted, max_series // max(entities, 1)))


def _device_of(model: nn.Module) -> torch.device:
    return next(model.parameters()).device


def predict_windows(
    model: nn.Module,
    windows: Windows,
    edge_index: torch.Tensor,
    batch_size: int = 32,
    max_series: int = MAX_BATCH_SERIES,
) -> np.ndarray:
    """Normalised forecasts ``(B, H, N, M)`` for every window (on the model's device),
    ``batch_size`` windows at a time but at most ``max_series`` series."""
    model.eval()
    device = _device_of(model)
    edges = edge_index.to(device)
    outputs = []
    batch_size = windows_per_batch(windows, batch_size, max_series)
    with torch.no_grad():
        for start in range(0, windows.inputs.shape[0], batch_size):
            index = np.arange(start, min(start + batch_size, windows.inputs.shape[0]))
            inputs, _, _, last = _tensors(windows, index, device)
            outputs.append(model(inputs, edges, last).cpu().numpy())
    return np.concatenate(outputs).astype(np.float64)


def split(count: int, horizon: int, config: TrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """Chronological training and validation window indices."""
    held_out = max(1, round(count * config.validation_fraction))
    # Consecutive origins share horizon−1 target steps: leave that gap so no
    # validation target was also a training target.
    gap = horizon - 1
    if count - held_out - gap < 1:
        raise ValueError(f"need more than {held_out + gap} training windows, got {count}")
    return np.arange(count - held_out - gap), np.arange(count - held_out, count)


def train(
    model: nn.Module,
    windows: Windows,
    edge_index: torch.Tensor,
    config: TrainConfig,
    on_epoch: ProgressCallback | None = None,
) -> TrainReport:
    started = time.perf_counter()
    device = torch.device(config.device)
    model.to(device)
    edges = edge_index.to(device)
    train_index, validation_index = split(windows.inputs.shape[0], windows.targets.shape[1], config)
    batch = windows_per_batch(windows, config.batch_size, config.max_batch_series)

    def batch_loss(index: np.ndarray) -> torch.Tensor:
        inputs, targets, mask, last = _tensors(windows, index, device)
        return masked_l1(model(inputs, edges, last), targets, mask)

    def validation_loss() -> float:
        return _validation_loss(model, windows, validation_index, edges, batch)

    return _early_stopped(
        model,
        batch_loss,
        validation_loss,
        train_index,
        batch,
        config,
        on_epoch,
        float("inf"),
        started,
    )


def _early_stopped(
    trained: nn.Module,
    batch_loss: Callable[[np.ndarray], torch.Tensor],
    validation_loss: Callable[[], float],
    train_index: np.ndarray,
    batch: int,
    config: TrainConfig,
    on_epoch: ProgressCallback | None,
    start_loss: float,
    started: float,
) -> TrainReport:
    """Adam over ``trained``'s parameters, ``batch`` windows a step, epoch by epoch in a
    seeded order, with gradient clipping; the best validation loss is kept (``start_loss``
    and the current weights count as epoch 0) and training stops ``patience`` epochs
    after it."""
    generator = torch.Generator().manual_seed(config.seed)
    optimiser = torch.optim.Adam(
        trained.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    best_loss, best_epoch, best_state = start_loss, 0, copy.deepcopy(trained.state_dict())
    epoch = 0
    for epoch in range(1, config.epochs + 1):
        trained.train()
        order = train_index[torch.randperm(train_index.size, generator=generator).numpy()]
        for start in range(0, order.size, batch):
            optimiser.zero_grad()
            loss = batch_loss(order[start : start + batch])
            loss.backward()  # type: ignore[no-untyped-call]
            nn.utils.clip_grad_norm_(trained.parameters(), 1.0)
            optimiser.step()
        validation = validation_loss()
        if on_epoch is not None:
            on_epoch(epoch, config.epochs, validation)
        if validation < best_loss - 1e-6:
            best_loss, best_epoch = validation, epoch
            best_state = copy.deepcopy(trained.state_dict())
        elif epoch - best_epoch >= config.patience:
            break
    trained.load_state_dict(best_state)
    return TrainReport(
        epochs_run=epoch,
        best_epoch=best_epoch,
        best_validation_loss=best_loss,
        seconds=time.perf_counter() - started,
    )


def _validation_loss(
    model: nn.Module, windows: Windows, index: np.ndarray, edges: torch.Tensor, batch_size: int
) -> float:
    model.eval()
    device = _device_of(model)
    total, weight = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, index.size, batch_size):
            inputs, targets, mask, last = _tensors(
                windows, index[start : start + batch_size], device
            )
            error = torch.abs(model(inputs, edges, last) - targets) * mask.float()
            total += float(error.sum())
            weight += float(mask.sum())
    return total / max(weight, 1.0)


@dataclass(frozen=True)
class _Encoded:
    """The frozen temporal part's view of every window, computed once."""

    state: torch.Tensor  # (B, N, C)
    scale: torch.Tensor  # (B, N, M)
    anchor: torch.Tensor  # (B, N, M)
    targets: torch.Tensor  # (B, H, N, M)
    mask: torch.Tensor  # (B, H, N, M)


def _encode(model: STGCN, windows: Windows, device: torch.device, batch_size: int) -> _Encoded:
    model.eval()
    states, scales, anchors = [], [], []
    with torch.no_grad():
        for start in range(0, windows.inputs.shape[0], batch_size):
            inputs = torch.from_numpy(windows.inputs[start : start + batch_size]).to(device)
            last = torch.from_numpy(windows.last[start : start + batch_size]).to(device)
            scaled, scale = window_scaled(inputs)
            states.append(model.temporal.encode(scaled)[:, -1])
            scales.append(scale)
            anchors.append(model.temporal.anchor(inputs, last))
    return _Encoded(
        state=torch.cat(states),
        scale=torch.cat(scales),
        anchor=torch.cat(anchors),
        targets=torch.from_numpy(windows.targets).to(device),
        mask=torch.from_numpy(windows.target_mask).to(device),
    )


def train_residual(
    model: STGCN,
    windows: Windows,
    edge_index: torch.Tensor,
    config: TrainConfig,
    on_epoch: ProgressCallback | None = None,
) -> TrainReport:
    """Train the gated graph residual on the frozen temporal part (stage two)."""
    started = time.perf_counter()
    device = torch.device(config.device)
    model.to(device)
    edges = edge_index.to(device)
    batch = windows_per_batch(windows, config.batch_size, config.max_batch_series)
    data = _encode(model, windows, device, batch)
    train_index, validation_index = split(windows.inputs.shape[0], windows.targets.shape[1], config)
    residual = model.residual
    for parameter in model.temporal.parameters():
        parameter.requires_grad_(False)  # frozen: stage two only learns the graph

    def loss_on(index: np.ndarray) -> torch.Tensor:
        chosen = torch.from_numpy(index).to(device)
        prediction = model.combine(
            data.state[chosen], data.scale[chosen], data.anchor[chosen], edges
        )
        return masked_l1(prediction, data.targets[chosen], data.mask[chosen])

    def validation_loss() -> float:
        residual.eval()
        with torch.no_grad():
            return float(loss_on(validation_index))

    # Epoch 0 is the gate at zero: the temporal part alone.
    report = _early_stopped(
        residual,
        loss_on,
        validation_loss,
        train_index,
        batch,
        config,
        on_epoch,
        validation_loss(),
        started,
    )
    for parameter in model.temporal.parameters():
        parameter.requires_grad_(True)
    return report


def check_device(name: str) -> str:
    """``name`` if torch can train there (``cpu``, ``cuda``, ``cuda:N``), else InputError."""
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise InputError(f"--device '{name}' is not a torch device (cpu, cuda, cuda:1)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"--device '{name}': no CUDA device on this machine; use cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise InputError(
                f"--device '{name}': this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif device.type != "cpu":
        raise InputError(f"--device '{name}': only cpu and cuda are supported")
    return name

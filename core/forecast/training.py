"""Training loop shared by the neural forecasters (ST-GCN and the LSTM baseline).

Masked L1 loss on normalised targets (the median minimises it, which suits WAPE),
Adam, gradient clipping, a chronological validation split (with a gap so no
target is in both) and early stopping on the validation loss, the best weights
restored at the end. Deterministic for a
seed on a given machine: seeded initialisation and seeded batch order.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from kubesage.core.forecast.windows import Windows

ProgressCallback = Callable[[int, int, float], None]
"""Called after each epoch as ``(epoch, epochs, validation_loss)``."""


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 30
    """Upper bound on passes over the training windows."""
    batch_size: int = 16
    learning_rate: float = 2e-3
    weight_decay: float = 1e-5
    patience: int = 5
    """Epochs without a better validation loss before stopping."""
    validation_fraction: float = 0.15
    """The latest share of training windows held out for early stopping."""
    seed: int = 0


@dataclass(frozen=True)
class TrainReport:
    epochs_run: int
    best_epoch: int
    best_validation_loss: float
    seconds: float


def masked_l1(prediction: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weight = mask.float()
    return (torch.abs(prediction - target) * weight).sum() / weight.sum().clamp(min=1.0)


def _tensors(windows: Windows, index: np.ndarray) -> tuple[torch.Tensor, ...]:
    return (
        torch.from_numpy(windows.inputs[index]),
        torch.from_numpy(windows.targets[index]),
        torch.from_numpy(windows.target_mask[index]),
        torch.from_numpy(windows.last[index]),
    )


def predict_windows(
    model: nn.Module, windows: Windows, edge_index: torch.Tensor, batch_size: int = 32
) -> np.ndarray:
    """Normalised forecasts ``(B, H, N, M)`` for every window."""
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, windows.inputs.shape[0], batch_size):
            index = np.arange(start, min(start + batch_size, windows.inputs.shape[0]))
            inputs, _, _, last = _tensors(windows, index)
            outputs.append(model(inputs, edge_index, last).numpy())
    return np.concatenate(outputs).astype(np.float64)


def train(
    model: nn.Module,
    windows: Windows,
    edge_index: torch.Tensor,
    config: TrainConfig,
    on_epoch: ProgressCallback | None = None,
) -> TrainReport:
    started = time.perf_counter()
    count = windows.inputs.shape[0]
    held_out = max(1, round(count * config.validation_fraction))
    # Consecutive origins share horizon−1 target steps: leave that gap so no
    # validation target was also a training target.
    gap = windows.targets.shape[1] - 1
    if count - held_out - gap < 1:
        raise ValueError(f"need more than {held_out + gap} training windows, got {count}")
    train_index = np.arange(count - held_out - gap)
    validation_index = np.arange(count - held_out, count)
    generator = torch.Generator().manual_seed(config.seed)
    optimiser = torch.optim.Adam(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )
    best_loss, best_epoch, best_state = float("inf"), 0, copy.deepcopy(model.state_dict())
    epoch = 0
    for epoch in range(1, config.epochs + 1):
        model.train()
        order = train_index[torch.randperm(train_index.size, generator=generator).numpy()]
        for start in range(0, order.size, config.batch_size):
            inputs, targets, mask, last = _tensors(
                windows, order[start : start + config.batch_size]
            )
            optimiser.zero_grad()
            loss = masked_l1(model(inputs, edge_index, last), targets, mask)
            loss.backward()  # type: ignore[no-untyped-call]
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimiser.step()
        validation = _validation_loss(
            model, windows, validation_index, edge_index, config.batch_size
        )
        if on_epoch is not None:
            on_epoch(epoch, config.epochs, validation)
        if validation < best_loss - 1e-6:
            best_loss, best_epoch, best_state = validation, epoch, copy.deepcopy(model.state_dict())
        elif epoch - best_epoch >= config.patience:
            break
    model.load_state_dict(best_state)
    return TrainReport(
        epochs_run=epoch,
        best_epoch=best_epoch,
        best_validation_loss=best_loss,
        seconds=time.perf_counter() - started,
    )


def _validation_loss(
    model: nn.Module, windows: Windows, index: np.ndarray, edge_index: torch.Tensor, batch_size: int
) -> float:
    model.eval()
    total, weight = 0.0, 0.0
    with torch.no_grad():
        for start in range(0, index.size, batch_size):
            inputs, targets, mask, last = _tensors(windows, index[start : start + batch_size])
            error = torch.abs(model(inputs, edge_index, last) - targets) * mask.float()
            total += float(error.sum())
            weight += float(mask.sum())
    return total / max(weight, 1.0)

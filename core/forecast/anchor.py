"""The recent median: where a forecast starts when the window says nothing more.

The least absolute error — what the models train on and what WAPE pools — is
minimised by a median. The median of a series' recent observed values is therefore
the natural level to forecast from: on a sparse series (an idle pod's duty cycle, a
quiet hour's request rate) it is the idle level, where the last value and the mean
carry each burst into the next steps. The neural models forecast a change from it
(:mod:`~kubesage.core.forecast.stgcn`), the ``moving_median`` baseline repeats it and
the least-absolute-error linear model reads it (:mod:`~kubesage.core.forecast.baselines`).
"""

from __future__ import annotations

import torch

ANCHOR_STEPS = 12
"""The steps whose observed median anchors the neural forecasts (0: the last value)."""


def recent_median(x: torch.Tensor, steps: int, last: torch.Tensor) -> torch.Tensor:
    """Per series ``(B, N, M)``, the median of the observed values among the last
    ``steps`` steps of the windows ``x`` ``(B, T, N, 2M)`` (``[values, mask]``; every
    step of a shorter window), the mean of the two middle ones for an even count, as
    numpy's median; ``last`` where none was observed, or where ``steps`` is 0."""
    if steps <= 0:
        return last
    metrics = x.shape[-1] // 2
    recent = x[:, -steps:]
    values, observed = recent[..., :metrics], recent[..., metrics:] > 0
    count = observed.sum(dim=1)
    ordered = torch.sort(torch.where(observed, values, torch.inf), dim=1).values
    low = ((count - 1).clamp(min=0) // 2)[:, None]
    high = (count // 2).clamp(max=recent.shape[1] - 1)[:, None]
    median = (ordered.gather(1, low) + ordered.gather(1, high))[:, 0] / 2
    return torch.where(count > 0, median, last)

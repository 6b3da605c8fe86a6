"""The numpy array types the core's hot paths pass around, named once.

``IntArray`` holds indices, counts and milli-/MiB amounts (int64); ``FloatArray``
scores and measurements (float64); ``Float32Array`` network inputs (what torch
takes); ``BoolArray`` masks over nodes or GPUs.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
Float32Array = npt.NDArray[np.float32]
BoolArray = npt.NDArray[np.bool_]

__all__ = ["BoolArray", "Float32Array", "FloatArray", "IntArray"]

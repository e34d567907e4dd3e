"""Shared argument checks: raise ValueError naming the parameter."""
from __future__ import annotations

import math
import numbers
from typing import Any

import torch


def real(v: Any, name: str, *, positive: bool = False, nonneg: bool = False) -> float:
    """``v`` as a finite float (a one-element real tensor is accepted); optionally > 0 or >= 0."""
    if isinstance(v, torch.Tensor) and v.numel() == 1 and not v.dtype.is_complex and v.dtype != torch.bool:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise ValueError(f"{name} must be a real number, got {v!r} of type {type(v).__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise ValueError(f"{name} must be finite, got {v}")
    if positive and f <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {v}")
    if nonneg and f < 0:
        raise ValueError(f"{name} must be finite and >= 0, got {v}")
    return f


def pos_int(v: Any, name: str) -> int:
    """``v`` as an int >= 1 (bools rejected)."""
    if isinstance(v, bool) or not isinstance(v, numbers.Integral) or int(v) < 1:
        raise ValueError(f"{name} must be a positive integer, got {v!r}")
    return int(v)

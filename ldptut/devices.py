"""The torch device a chapter or a sweep runs on: ``"auto"`` is CUDA where present, else the CPU.

CPU and CUDA draw different random streams (and sum in other orders), so the same seed gives different numbers on
the two: each device alone is deterministic, and stored run records say where they ran
(:func:`ldptut.provenance.provenance`).
"""
from __future__ import annotations

import torch

__all__ = ["check_device_name", "resolve_device"]


def check_device_name(device: str | torch.device) -> str:
    """``device`` as a name ("auto" or a torch device such as "cpu", "cuda", "cuda:1"), or a clear error; whether
    the machine has that device is not checked here (:func:`resolve_device` does)."""
    if isinstance(device, torch.device):
        device = str(device)
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'auto', 'cpu' or 'cuda', got {device!r}")
    if device != "auto":
        try:
            torch.device(device)
        except RuntimeError as e:
            raise ValueError(f"unknown device {device!r}: use 'auto', 'cpu', 'cuda' or 'cuda:N'") from e
    return device


def resolve_device(device: str | torch.device = "auto") -> str:
    """``"auto"`` -> ``"cuda"`` if a CUDA device is available, else ``"cpu"``; any other name is checked and
    returned (``"cuda"`` without CUDA raises, naming the fix)."""
    device = check_device_name(device)
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA device here; use device='auto' or 'cpu'")
    return device

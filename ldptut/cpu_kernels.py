"""Pinning torch's CPU kernels to fixed code paths, so that a chapter gives the same numbers on any x86 CPU.

Float sums depend on the order of their terms, and torch picks that order by the CPU: ATen's vectorised kernels by
the widest SIMD level the CPU has (``ATEN_CPU_CAPABILITY``), oneMKL's matrix products by its code path
(``MKL_CBWR``), oneDNN's convolutions by its ISA (``ONEDNN_MAX_CPU_ISA``). Local training amplifies a last-bit
difference: PD-LDPFL's small default runs, executed on an AVX512 CPU and re-executed on an AVX2 one, moved a checked
loss from 0.69 to 0.35 and accuracies by up to 9.8 points, and a stored run's round-3 accuracy moved by 1.85 points.

:func:`pin` sets those environment variables where the user has not: ATen and oneDNN get AVX2, which every x86-64
CPU of the last decade has; oneMKL gets its COMPATIBLE branch (SSE2 without the approximate rcpps / rsqrtps), since
its documentation says ``MKL_CBWR=AVX2`` means the AVX2 branch on an Intel CPU but falls back to the AUTO branch
(native dispatch with fixed cache sizes and static scheduling) on a non-Intel one, and on an AMD EPYC it did change
the chapters' bits. The variables are read when the libraries first compute, so :func:`pin` runs when ``ldptut`` is
imported (``ldptut/__init__.py``) and must come before any tensor computation (``tests/conftest.py`` imports ldptut
first; notebooks and Ray workers inherit the variables or import ldptut). On an AVX2 CPU ATen's and oneDNN's
pinned kernels are the ones torch picks anyway; oneMKL's COMPATIBLE branch is slower than its native one (measured
on an AMD EPYC with 2 cores: PD-LDPFL's 3-round MLP run 3.7 s against 1.4 s, a round of McMahan's CNN 60 s against
57 s). ``LDPTUT_NATIVE_KERNELS=1`` turns the pin off.

What this cannot remove: oneDNN may still choose block sizes by cache size, so equality across CPU makes is
expected, not guaranteed (stored runs name their CPU).
"""
from __future__ import annotations

import os
import platform
import warnings
from pathlib import Path

__all__ = ["PINNED", "OPT_OUT", "cpu_has_avx2", "pin", "pinned"]

#: The environment variables :func:`pin` sets (unless already set) and their values.
PINNED = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE", "ONEDNN_MAX_CPU_ISA": "AVX2"}

#: Set this environment variable to 1 to keep torch's native kernels (no pin).
OPT_OUT = "LDPTUT_NATIVE_KERNELS"


def cpu_has_avx2() -> bool:
    """True on an x86-64 CPU whose /proc/cpuinfo flags list avx2 and fma (what torch's AVX2 kernels need)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return {"avx2", "fma"} <= flags
    return False


def pinned() -> bool:
    """True when this process asked for the pinned kernels (all of :data:`PINNED` set to their values)."""
    return all(os.environ.get(k, "").lower() == v.lower() for k, v in PINNED.items())


def pin() -> bool:
    """Set :data:`PINNED` in ``os.environ`` (keeping any value the user set) on an AVX2 x86-64 CPU, unless
    ``LDPTUT_NATIVE_KERNELS=1``. Returns :func:`pinned`. Warns when torch had already fixed its CPU capability to
    something else (a tensor computation ran before ``import ldptut``): then import ldptut first, or export the
    variables before starting Python."""
    if os.environ.get(OPT_OUT, "") == "1" or not cpu_has_avx2():
        return False
    for key, value in PINNED.items():
        os.environ.setdefault(key, value)
    if pinned():
        import torch

        got = torch.backends.cpu.get_cpu_capability()
        if got != "AVX2":
            warnings.warn(f"ldptut asked torch for AVX2 CPU kernels (ATEN_CPU_CAPABILITY=avx2) but torch already uses "
                          f"{got}: a tensor computation ran before `import ldptut`. Numbers may differ in the last "
                          f"bits from the book's; import ldptut first, or export "
                          f"{' '.join(f'{k}={v}' for k, v in PINNED.items())} before starting Python.",
                          RuntimeWarning, stacklevel=3)
    return pinned()

"""Where and with what a result was computed: code commit, device (CPU model or GPU name), torch version.

Every stored run record carries :func:`provenance` (``ldptut.runcache``), and every chapter prints
:func:`machine_summary` at the top, so a reader can tell which code on which machine produced a number.
"""
from __future__ import annotations

import datetime as _dt
import functools
import os
import platform
import subprocess
from pathlib import Path
from typing import Any, Iterable, Optional

import torch

from ldptut.cpu_kernels import pinned

__all__ = ["NUMERICS", "NUMERICS_CHANGES", "numerics_flag", "numerics_changes", "run_mechanisms", "package_commit", "IMPORTED_COMMIT", "cpu_model", "cpu_capability",
           "device_name", "kernels_of", "machine_summary", "provenance"]


#: Version of the package's numerics: what the numbers of a stored configuration depend on (random streams, local
#: training, aggregation, evaluation). Bump it in a change that alters the numbers a stored run would give again
#: (``tests/test_stored_runs.py`` re-trains one stored run per chapter and fails on such a change), and say in
#: :data:`NUMERICS_CHANGES` what changed. Every new record keeps the version it was trained with; records without one
#: are version 1. Pages flag older records (:func:`numerics_flag`, in :meth:`ldptut.experiments.Runner.provenance`):
#: their run cache key is the configuration, so they are still loaded, and the flag says they would be re-trained
#: differently now.
NUMERICS = 4

#: Version -> (the mechanisms it changed, by their :data:`ldptut.mechanisms.MECHANISMS` names, or ``None`` for a
#: change that touches every run; what changed). A record of an older version that used none of the changed
#: mechanisms would be trained to the same numbers now, and is "current".
NUMERICS_CHANGES: dict[int, tuple[Optional[frozenset], str]] = {
    2: (frozenset({"laplace", "piecewise", "hybrid"}),
        "Laplace, Piecewise and Hybrid report on a grid, each output drawn with its exact probability "
        "(floating-point-safe samplers, ldptut.fpsafe): other reports from the same seed"),
    3: (frozenset({"gaussian"}),
        "the Gaussian reports on a grid, each output drawn with its exact probability from a 2^-53-step uniform "
        "(its (epsilon, delta) holds for the law it samples): other reports from the same seed"),
    4: (frozenset({"ldpsign"}),
        "ldpsign draws its less likely report with probability Phi(-|w|/sigma) computed without cancellation (the "
        "realised small probability is rounded up, not down, to the uniforms' grid): other reports from the same "
        "seed"),
}


def numerics_changes(version: Any, mechanisms: Optional[Iterable[str]] = None) -> list[str]:
    """What changed since numerics ``version`` that touches a run using ``mechanisms`` (``None``: any run), one
    line per version: "v<n>: <what changed>"."""
    v = _version(version)
    used = None if mechanisms is None else {str(m) for m in mechanisms}
    out = []
    for w in range(v + 1, NUMERICS + 1):
        touched, what = NUMERICS_CHANGES.get(w, (None, "(not recorded)"))
        if touched is None or used is None or used & touched:
            out.append(f"v{w}: {what}")
    return out


def _version(version: Any) -> int:
    return 1 if version is None or (isinstance(version, float) and version != version) else int(version)


def numerics_flag(version: Any, mechanisms: Optional[Iterable[str]] = None) -> str:
    """"current", or "older code (numerics v<n>, now v<NUMERICS>)" for a record trained by older numerics whose
    changes since touch it: with ``mechanisms`` (the mechanism names the run used, :func:`run_mechanisms`), a change
    to other mechanisms leaves it "current"; without, every older record is flagged."""
    v = _version(version)
    if v == NUMERICS or not numerics_changes(v, mechanisms):
        return "current"
    return f"older code (numerics v{v}, now v{NUMERICS})"


def run_mechanisms(config: Any) -> Optional[frozenset]:
    """The :data:`ldptut.mechanisms.MECHANISMS` names a run configuration uses (its ``mechanism_names()``, else its
    ``mechanism`` field), or ``None`` when the configuration does not say (then any change flags it)."""
    names = getattr(config, "mechanism_names", None)
    if callable(names):
        return frozenset(names())
    m = getattr(config, "mechanism", "absent")
    if m == "absent":
        return None
    return frozenset() if m is None else frozenset({str(m)})


def package_commit() -> str:
    """The git commit of the ldptut source tree ('<sha>' or '<sha>-dirty'), or 'unknown' outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "ldptut"], cwd=root, capture_output=True,
                               text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return sha + ("-dirty" if dirty else "")


#: :func:`package_commit` when this process imported ldptut: the code a result computed in this process ran. A
#: record stored an hour later names this commit, not the HEAD of that moment (later commits, or edits, do not
#: reach a process that has already imported the package).
IMPORTED_COMMIT = package_commit()


@functools.lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (from /proc/cpuinfo on Linux, else ``platform.processor()``), or the architecture."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_name(device: Any = "cpu") -> str:
    """'cpu: <CPU model>, <n> cores, <capability>' or 'cuda: <GPU name>' for the torch device a run used."""
    dev = torch.device(device)
    if dev.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(dev)}"
    return f"{dev.type}: {cpu_model()}, {os.cpu_count()} cores, {cpu_capability()}{' (pinned)' if pinned() else ''}"


def kernels_of(device: str) -> str:
    """The CPU kernels a record's device string names: 'AVX2 (pinned)' (:mod:`ldptut.cpu_kernels`), or torch's native
    'AVX2', 'AVX512', ...; '' for none (a GPU, or an old record that names only the architecture)."""
    if not device.startswith("cpu:"):
        return ""
    last = device.rsplit(", ", 1)[-1]
    word = last.split(" ")[0]
    if not (word.isupper() and word.startswith(("AVX", "DEFAULT", "ZVECTOR", "SVE"))):
        return ""
    return word + (" (pinned)" if last.endswith("(pinned)") else "")


def cpu_capability() -> str:
    """The SIMD level torch's CPU kernels use here ("AVX512", "AVX2", ...). Float results of training can
    differ in the last bits between CPUs of different capability or make (other summation orders)."""
    try:
        return torch.backends.cpu.get_cpu_capability()
    except AttributeError:  # pragma: no cover - older torch
        return "unknown"


def machine_summary() -> str:
    """One line naming the machine: CPU model and cores, torch's CPU capability, torch version, GPU if any."""
    kernels = cpu_capability() + (", pinned" if pinned() else "")
    return (f"{platform.machine()} {cpu_model()} with {os.cpu_count()} CPU cores ({kernels}), "
            f"torch {torch.__version__}, "
            f"{'CUDA ' + torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'}")


def provenance(*, device: Any = "cpu", seconds: Optional[float] = None) -> dict:
    """The provenance of a result computed now by this process: commit (:data:`IMPORTED_COMMIT`), UTC date, device,
    torch version, :data:`NUMERICS`, wall seconds."""
    out = {"commit": IMPORTED_COMMIT, "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "device": device_name(device), "torch": torch.__version__, "numerics": NUMERICS}
    if seconds is not None:
        out["seconds"] = round(float(seconds), 3)
    return out

"""On-disk record of finished training runs, so a long paper-scale notebook can be resumed.

A paper-scale chapter run is dozens of full FL trainings (hours on 2 CPU cores). With a cache
directory, every finished run is written as one small JSON file (its configuration, the per-round
history, and provenance: package commit, date, machine, seconds); re-executing the notebook with
the same directory loads finished runs instead of training them again, so an interrupted
``make reproduce`` continues where it stopped and repetitions (more seeds) can be added later.

The key is the SHA-256 of the configuration (canonical JSON): any changed setting is a new run.
Runs are deterministic given their configuration (seeded generators), so a loaded run has the
numbers a fresh run of the same code would give; the provenance says which code that was, and the
notebooks print it next to the results.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

import pandas as pd

__all__ = ["CachedRun", "RunCache", "config_key", "load_records", "load_runs", "package_commit"]

FORMAT = 1


def config_key(config: Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of ``config`` (sorted keys, no spaces)."""
    text = json.dumps(_canonical(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _canonical(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v) for v in value]
    if isinstance(value, float) and math.isnan(value):
        raise ValueError("a run configuration may not contain NaN (it would never match itself)")
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"run configuration values must be JSON scalars, lists or dicts; got {type(value).__name__}")


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


@dataclass
class CachedRun:
    """A finished run: per-round ``history`` (accuracy in [0, 1]), its configuration and provenance."""

    history: pd.DataFrame
    config: dict
    provenance: dict = field(default_factory=dict)
    loaded: bool = False  # True when read from the cache, False when trained in this process

    @property
    def final_accuracy(self) -> float:
        return float(self.history["accuracy"].iloc[-1])


def _read_record(path: Path) -> dict:
    """The run record stored at ``path``; anything else (another format, no history) is an error."""
    doc = json.loads(path.read_text())
    if doc.get("format") != FORMAT or "config" not in doc or not doc.get("history"):
        raise ValueError(f"{path} is not a run record of format {FORMAT}; delete or move the file")
    return doc


class RunCache:
    """Directory of finished runs (``<key>.json``); ``directory=None`` disables caching (always train)."""

    def __init__(self, directory: str | Path | None):
        self.directory = None if directory is None else Path(directory)

    def path(self, config: Mapping[str, Any]) -> Path | None:
        return None if self.directory is None else self.directory / f"{config_key(config)}.json"

    def load(self, config: Mapping[str, Any]) -> CachedRun | None:
        """The cached run for ``config``, or None. A file whose stored configuration differs is an error."""
        path = self.path(config)
        if path is None or not path.exists():
            return None
        doc = _read_record(path)
        if doc["config"] != _canonical(config):
            raise ValueError(f"{path} does not hold this configuration; delete the file to re-run it")
        return CachedRun(history=pd.DataFrame(doc["history"]), config=doc["config"],
                         provenance=doc["provenance"], loaded=True)

    def run(self, config: Mapping[str, Any], train: Callable[[], Any]) -> CachedRun:
        """Load the run for ``config`` or call ``train()`` (returning an object with ``.history``) and store it."""
        cached = self.load(config)
        if cached is not None:
            return cached
        t0 = time.perf_counter()
        result = train()
        from .notebooks import machine_summary

        provenance = {"commit": package_commit(), "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                      "machine": machine_summary(), "seconds": round(time.perf_counter() - t0, 1)}
        run = CachedRun(history=result.history.reset_index(drop=True), config=dict(config), provenance=provenance)
        path = self.path(config)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            doc = {"format": FORMAT, "key": path.stem, "config": _canonical(config), "provenance": provenance,
                   "history": run.history.to_dict(orient="records")}
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(doc, indent=1) + "\n")
            tmp.replace(path)  # atomic: an interrupted write never leaves a half file under the key
        return run


def load_records(directory: str | Path) -> list[CachedRun]:
    """Every run stored in ``directory`` (file-name order), with its whole history. A file that is not
    a run record of this format is an error, not skipped; so is a missing directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"run cache directory {directory} does not exist")
    out = []
    for path in sorted(directory.glob("*.json")):
        doc = _read_record(path)
        out.append(CachedRun(history=pd.DataFrame(doc["history"]), config=doc["config"],
                             provenance={**doc.get("provenance", {}), "key": path.stem}, loaded=True))
    return out


def load_runs(*directories: str | Path) -> pd.DataFrame:
    """Every run stored in ``directories``: one row per run with its configuration, final accuracy (%) and provenance.

    Columns: the configuration's keys, ``accuracy`` (final test accuracy in %), ``commit``, ``date``,
    ``seconds`` (training time), ``key`` (file name) and ``cache`` (its directory). A file that is not
    a run record of this format is an error, not skipped.
    """
    rows = []
    for directory in directories:
        for rec in load_records(directory):
            prov = rec.provenance
            rows.append({**rec.config, "accuracy": 100 * rec.final_accuracy, "commit": prov.get("commit"),
                         "date": prov.get("date"), "seconds": prov.get("seconds"), "key": prov["key"],
                         "cache": Path(directory).as_posix()})
    return pd.DataFrame(rows)

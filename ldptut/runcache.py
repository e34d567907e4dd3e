"""On-disk records of finished training runs, keyed by their typed configuration.

A paper-scale chapter run is dozens of full FL trainings (hours on 2 CPU cores). With a cache
directory, every finished run is written as one small JSON record: its :class:`~ldptut.runconfig.RunConfig`,
the per-round history, and provenance (code commit, date, device, torch version, wall seconds;
:func:`ldptut.provenance.provenance`). Re-executing a notebook with the same directory loads finished
runs instead of training them again, so an interrupted ``make reproduce`` continues where it stopped and
repetitions (more seeds) can be added later.

Records are written to a temporary file of their own and renamed into place, so two processes that
train the same configuration both finish with one valid record, and an interrupted write never leaves
a half record under a key. A record that cannot be read (corrupted, or of the old format 1) raises
:class:`RunCacheError` naming the file and what to do; it is never skipped silently.

The cache only loads and stores: :class:`ldptut.experiments.Runner` decides what is missing, trains it and hands the
finished runs with their provenance to :meth:`RunCache.store_all`. ``LDPTUT_RUNS_LOAD_ONLY=1`` (or
``Runner(..., train=False)``) makes a missing run an error instead of a training: re-rendering a paper-scale page from
stored runs can then never start hours of training.

Nothing finished is lost: the directory is checked writable *before* training (an unwritable folder is an error
naming it, not a surprise after hours); a history value that JSON cannot hold is stored as its number or text, with
a warning naming the column; a record that still cannot be written is pickled to a fallback file that the error
names, and the other runs of the batch are stored first.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

import pandas as pd

from .provenance import numerics_changes, numerics_flag, run_mechanisms
from .runconfig import RunConfig, config_from_dict

__all__ = ["FORMAT", "RunRecord", "RunCache", "RunCacheError", "load_records", "load_runs", "records_table", "stored_table", "code_summary"]

#: Record format. 1: configuration dicts of the first chapters (migrated by python -m ldptut.migrate);
#: 2: typed RunConfig, provenance with device and torch version.
FORMAT = 2


class RunCacheError(RuntimeError):
    """A stored record that cannot be used: corrupted, of another format, or holding another configuration."""


@dataclass
class RunRecord:
    """A finished run: its configuration, per-round ``history`` (accuracy in [0, 1]) and provenance."""

    config: RunConfig
    history: pd.DataFrame
    provenance: dict = field(default_factory=dict)
    loaded: bool = False  # True when read from disk, False when trained in this process
    path: Optional[Path] = None

    @property
    def final_accuracy(self) -> float:
        return float(self.history["accuracy"].iloc[-1])


def _nulls_to_nan(history: pd.DataFrame) -> pd.DataFrame:
    """Columns of numbers and nulls (stored non-finite values) as float, the nulls NaN."""
    def numeric(v: Any) -> bool:
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))

    for col in history.columns:
        if history[col].dtype == object and history[col].map(numeric).all():
            history[col] = history[col].astype(float)
    return history


def _read_record(path: Path) -> RunRecord:
    """The run record stored at ``path``; anything else is a :class:`RunCacheError` naming the file."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RunCacheError(f"{path} is not a readable run record ({type(e).__name__}: {e}); it is corrupted "
                            "(an interrupted copy?): restore it from git (git checkout -- <file>) or delete it "
                            "to train the run again") from e
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        found = doc.get("format") if isinstance(doc, dict) else None
        hint = (" Migrate it with `python -m ldptut.migrate <directory>`." if found == 1 else
                " Delete or move the file.")
        raise RunCacheError(f"{path} is a run record of format {found!r}, not {FORMAT}.{hint}")
    try:
        config = config_from_dict(doc["config"])
        history = _nulls_to_nan(pd.DataFrame(doc["history"]))
        prov = dict(doc["provenance"])
    except (KeyError, TypeError, ValueError) as e:
        raise RunCacheError(f"{path} is a damaged run record ({type(e).__name__}: {e}); restore it from git or "
                            "delete it to train the run again") from e
    if history.empty or "accuracy" not in history:
        raise RunCacheError(f"{path} holds no per-round history; restore it from git or delete it")
    if doc.get("key") != path.stem or config.key() != path.stem:
        raise RunCacheError(f"{path}: its configuration has key {config.key()}, not the file name's {path.stem}; "
                            "the file was renamed or edited by hand: delete it to train the run again")
    return RunRecord(config=config, history=history, provenance=prov, loaded=True, path=path)


def _write_record(path: Path, record: RunRecord) -> None:
    """Write ``record`` to a temporary file of this writer's own, then rename it to ``path`` (atomic)."""
    # JSON has no NaN or infinity: a diverged run's non-finite values (accuracy NaN, loss inf) are stored as
    # null and read back as NaN
    history = [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in row.items()}
               for row in record.history.to_dict(orient="records")]
    doc = {"format": FORMAT, "key": path.stem, "config": record.config.to_dict(), "provenance": record.provenance,
           "history": history}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _jsonable(value: Any) -> Any:
    """A history value JSON can hold: itself, a float for number-like values (numpy scalars, 0-d tensors), None
    for non-finite floats, else its text."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    try:
        f = float(value)
    except (TypeError, ValueError, RuntimeError):
        return str(value)
    return f if math.isfinite(f) else None


def _serialisable_history(history: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """``history`` with every value JSON can hold (:func:`_jsonable`), and the columns that needed it."""
    fixed, changed = history.copy(), []
    for col in history.columns:
        try:
            json.dumps(history[col].tolist(), allow_nan=True)
        except (TypeError, ValueError):
            fixed[col] = history[col].map(_jsonable).astype(object)
            changed.append(str(col))
    return fixed, changed


class RunCache:
    """Directory of finished runs (``<key>.json``).

    ``directory=None`` keeps runs in memory only (a run asked for twice in one session is trained once).
    It loads (:meth:`load`) and stores (:meth:`store`, :meth:`store_all`); it never trains.
    """

    def __init__(self, directory: str | Path | None):
        self.directory = None if directory is None else Path(directory)
        self._memory: dict[str, RunRecord] = {}

    def path(self, config: RunConfig) -> Optional[Path]:
        return None if self.directory is None else self.directory / f"{config.key()}.json"

    def load(self, config: RunConfig) -> Optional[RunRecord]:
        """The stored run of ``config``, or None when there is none."""
        if not isinstance(config, RunConfig):
            raise TypeError(f"the run cache is keyed by RunConfig objects, got {type(config).__name__}")
        key = config.key()
        if key in self._memory:
            return self._memory[key]
        path = self.path(config)
        if path is None or not path.exists():
            return None
        record = _read_record(path)
        if record.config != config:  # pragma: no cover - a SHA-256 collision
            raise RunCacheError(f"{path} holds {record.config}, not {config}")
        self._memory[key] = record
        return record

    def check_writable(self, n_runs: int = 1) -> None:
        """Raise :class:`RunCacheError` naming the directory if a record cannot be written there (checked by
        creating and removing a file), before ``n_runs`` runs are trained and then lost."""
        if self.directory is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(prefix=".write-check.", suffix=".tmp", dir=self.directory)
            os.close(fd)
            os.unlink(tmp)
        except OSError as e:
            raise RunCacheError(f"run cache directory {self.directory} is not writable ({type(e).__name__}: {e}); "
                                f"{n_runs} run(s) would be trained and then lost: fix its permissions or give "
                                "another run cache directory") from e

    def store(self, config: RunConfig, history: pd.DataFrame, provenance: Mapping[str, Any]) -> RunRecord:
        """Keep a finished run (on disk when the cache has a directory). Values JSON cannot hold are stored as
        numbers or text (a warning names the columns)."""
        history, changed = _serialisable_history(history.reset_index(drop=True))
        if changed:
            warnings.warn(f"run {config.key()}: history column(s) {changed} held values JSON cannot hold; stored as "
                          "numbers or text", RuntimeWarning, stacklevel=2)
        record = RunRecord(config=config, history=history, provenance=dict(provenance))
        path = self.path(config)
        if path is not None:
            _write_record(path, record)
            record.path = path
        self._memory[config.key()] = record
        return record

    def store_all(self, pairs: Sequence[tuple[RunConfig, pd.DataFrame, Mapping[str, Any]]]) -> list[RunRecord]:
        """Store every finished run; a run that cannot be written is pickled to a fallback file and the error,
        raised after the others are stored, names it."""
        import pickle

        out, failed = [], []
        for c, h, prov in pairs:
            try:
                out.append(self.store(c, h, prov))
            except Exception as e:  # noqa: BLE001 - whatever it is, the finished run must not be lost
                fd, fallback = tempfile.mkstemp(prefix=f"ldptut-run-{c.key()}.", suffix=".pkl")
                with os.fdopen(fd, "wb") as fh:
                    pickle.dump({"config": c.to_dict(), "history": h, "provenance": prov}, fh)
                failed.append(f"{c.key()} ({type(e).__name__}: {e}) -> {fallback}")
        if failed:
            raise RunCacheError(f"{len(failed)} finished run(s) could not be stored in {self.directory}; each was "
                                f"pickled to a fallback file: " + "; ".join(failed))
        return out


def load_records(directory: str | Path) -> list[RunRecord]:
    """Every run stored in ``directory`` (file-name order). A file that is not a run record of this
    format is an error naming it, not skipped; so is a missing directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"run cache directory {directory} does not exist")
    return [_read_record(p) for p in sorted(directory.glob("*.json"))]


def records_table(records: Iterable[RunRecord]) -> pd.DataFrame:
    """One row per run: its configuration's fields (``range`` as the rule's name), the ``config`` object
    itself, ``accuracy`` (final test accuracy in %; NaN if the run's weights blew up), ``diverged`` (the run
    was stopped as diverging, ``FLConfig(on_divergence="stop")``) and ``last_round``, provenance (commit,
    date, device, torch, seconds, numerics: :data:`ldptut.provenance.NUMERICS` of its training), ``source`` ("stored" or "trained"), ``key`` and ``cache`` (the record's
    directory)."""
    rows = []
    for rec in records:
        fields = rec.config.to_dict()
        flat = {k: (v.get("rule") if isinstance(v, dict) else v) for k, v in fields.items()}
        prov = rec.provenance
        h = rec.history
        diverged = bool(h["diverged"].iloc[-1]) if "diverged" in h and len(h) else False
        rows.append({**flat, "config": rec.config, "accuracy": 100 * rec.final_accuracy, "diverged": diverged,
                     "last_round": int(h["round"].iloc[-1]) if len(h) else 0,
                     "commit": prov.get("commit"), "date": prov.get("date"), "device": prov.get("device"),
                     "torch": prov.get("torch"), "seconds": prov.get("seconds"), "numerics": prov.get("numerics", 1),
                     "source": "stored" if rec.loaded else "trained", "key": rec.config.key(),
                     "cache": rec.path.parent.as_posix() if rec.path is not None else None})
    return pd.DataFrame(rows)


def stored_table(pairs: Iterable[tuple[str, RunConfig]], cache: "RunCache") -> pd.DataFrame:
    """The stored runs of ``pairs`` ((experiment, configuration), e.g. a chapter's grid) as :func:`records_table` rows
    with an ``experiment`` column first; nothing is trained. ``attrs["missing"]`` lists the keys not stored."""
    found, missing = [], []
    for experiment, config in pairs:
        record = cache.load(config)
        if record is None:
            missing.append(config.key())
        else:
            found.append((experiment, record))
    table = records_table(r for _, r in found)
    if len(table):
        table.insert(0, "experiment", [e for e, _ in found])
    table.attrs["missing"] = missing
    return table


def load_runs(*directories: str | Path) -> pd.DataFrame:
    """Every run stored in ``directories`` as :func:`records_table` rows."""
    return records_table(rec for d in directories for rec in load_records(d))


def code_summary(records: Iterable[RunRecord]) -> str:
    """One line for a page: how many runs the present code would train to the same numbers ("current") and how many
    were trained by older code whose changes since touch them (:func:`ldptut.provenance.numerics_flag`), with what
    changed (:data:`ldptut.provenance.NUMERICS_CHANGES`)."""
    counts: dict[str, int] = {}
    changes: list[str] = []
    for rec in records:
        version, used = rec.provenance.get("numerics", 1), run_mechanisms(rec.config)
        flag = numerics_flag(version, used)
        counts[flag] = counts.get(flag, 0) + 1
        changes += [c for c in numerics_changes(version, used) if c not in changes]
    parts = [f"{n} {flag}" for flag, n in sorted(counts.items(), key=lambda kv: kv[0] != "current")]
    line = "code of the runs: " + (", ".join(parts) if parts else "no runs")
    return line + "".join(f"\n  {c}" for c in changes)

"""Migrate stored run records of format 1 to format 2 (typed RunConfig keys), without retraining.

    python -m ldptut.migrate DIRECTORY [DIRECTORY ...]

Format 1 records (the first LDP-FL and Wu et al. paper-scale runs) stored a chapter's configuration
dict; format 2 stores a :class:`ldptut.runconfig.RunConfig`. Each paper module reads its own old records
(:func:`ldp_fl_v1`, :func:`wu2023_v1`): LDP-FL's become one :class:`~ldptut.experiments.FedAvgConfig` each, Wu
et al.'s one-grid-per-seed records one :class:`~ldptut.papers.personalized_ldp_fl.WuConfig` per scenario (the grid's training time
shared among them). Histories are copied unchanged; provenance keeps the commit, date, machine line and
seconds of the original training and adds the device and torch version read from that line, and the
old file's name. A new record is written before its old file is removed; a directory already in format 2
is left as it is.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any, Optional

import pandas as pd

from .runcache import FORMAT, RunCache

__all__ = ["migrate_v1"]


def _provenance(old: dict, *, share: int, source: str) -> dict:
    machine = old.get("machine", "")
    arch = re.match(r"(\S+) with (\d+) CPU cores", machine)
    torch_version = re.search(r"torch (\S+?),", machine)
    gpu = re.search(r"CUDA (.+)$", machine)
    device = (f"cuda: {gpu.group(1)}" if gpu else
              f"cpu: {arch.group(1)}, {arch.group(2)} cores (CPU model not recorded)" if arch else "unknown")
    out = {"commit": old.get("commit"), "date": old.get("date"), "device": device,
           "torch": torch_version.group(1) if torch_version else None, "machine": machine,
           "seconds": round(float(old.get("seconds", 0.0)) / share, 3), "migrated_from": f"{source} (format 1)"}
    if share > 1:
        out["trained_together"] = share
    return out


# ------------------------------------------------------------------- each paper's format-1 records
def ldp_fl_v1(config: dict, history: pd.DataFrame) -> list[tuple[Any, pd.DataFrame]]:
    """A run record of format 1 (the chapter's configuration dict, ranges as ``repr`` strings) as a typed
    :class:`~ldptut.experiments.FedAvgConfig` with its unchanged history."""
    from .experiments import FedAvgConfig
    from .fl import FixedRange, GlobalModelRange
    from .mechanisms import MECHANISMS

    def parse_range(text: Optional[str]) -> FixedRange | GlobalModelRange | None:
        if text is None:
            return None
        m = re.fullmatch(r"(FixedRange|GlobalModelRange)\((.*)\)", text)
        if m is None:
            raise ValueError(f"unknown range {text!r} in a format-1 LDP-FL record")
        kwargs = {k.strip(): float(v) for k, v in (part.split("=") for part in m.group(2).split(","))}
        return (FixedRange if m.group(1) == "FixedRange" else GlobalModelRange)(**kwargs)

    mechanism = config["mechanism"]
    if mechanism is not None:
        names = {cls.__name__: name for name, cls in MECHANISMS.items()}
        mechanism = names[mechanism]
    run = FedAvgConfig(paper="ldp_fl", dataset=config["dataset"], model=config["model"], n_clients=config["n_clients"],
                    rounds=config["rounds"], seed=config["seed"], partition=config["partition"],
                    client_fraction=config["client_fraction"], local_epochs=config["local_epochs"],
                    batch_size=config["batch_size"], lr=config["lr"], send=config["send"],
                    aggregator=config["aggregator"], mechanism=mechanism, epsilon=config["epsilon"],
                    range=parse_range(config["range"]))
    return [(run, history)]


def wu2023_v1(config: dict, history: pd.DataFrame) -> list[tuple[Any, pd.DataFrame]]:
    """A format-1 record (one seed's whole grid, its runs numbered in :func:`grid_scenarios` order) as one
    typed :class:`~ldptut.papers.personalized_ldp_fl.WuConfig` per scenario with its rows of the history."""
    from .papers.personalized_ldp_fl import WuConfig, grid_scenarios

    protocol, name = config["experiment"].split()
    s = config["setting"]
    out = []
    for i, (scenario, label, eps, agg) in enumerate(grid_scenarios(s)):
        rows = history[history["run"] == i].drop(columns="run").reset_index(drop=True)
        if rows.empty:
            raise ValueError(f"{config['experiment']} seed {config['seed']}: no history for run {i} ({label}, {agg})")
        out.append((WuConfig(
            paper="wu2023", dataset=name, model="ovr_logreg", n_clients=s["n_clients"], rounds=config["rounds"],
            seed=config["seed"], protocol=protocol, scenario=scenario, profile=label, epsilons=tuple(eps),
            aggregation=agg, delta=s["delta"], clip=s["clip"], n_train=config["n_train"], n_test=config["n_test"],
            q=s.get("q", 1.0) if protocol == "iid" else 1.0, l2=s.get("l2") if protocol == "noniid" else None,
            reading=config["reading"], on_empty=config["on_empty"], data_seed=config["data_seed"],
            dirichlet_alpha=config["dirichlet_alpha"], local_passes=config["local_passes"], alpha=config["alpha"]),
            rows))
    if sorted(set(history["run"])) != list(range(len(out))):
        raise ValueError(f"{config['experiment']} seed {config['seed']}: runs {sorted(set(history['run']))} do not "
                         f"match the grid's {len(out)} scenarios")
    return out


def migrate_v1(directory: str | Path) -> tuple[int, int]:
    """Rewrite every format-1 record of ``directory`` as format-2 records; returns (old files, new records)."""
    directory = Path(directory)
    cache = RunCache(directory)
    n_old = n_new = 0
    for path in sorted(directory.glob("*.json")):
        doc = json.loads(path.read_text())
        if doc.get("format") == FORMAT:
            continue
        if doc.get("format") != 1:
            raise ValueError(f"{path}: format {doc.get('format')!r} is neither 1 nor {FORMAT}")
        config, history = doc["config"], pd.DataFrame(doc["history"])
        reader = wu2023_v1 if config.get("paper") == "wu2023" else ldp_fl_v1
        runs = reader(config, history)
        for run, rows in runs:
            target = cache.path(run)
            if target.exists() and target != path:
                raise FileExistsError(f"{path}: its run {run.key()} is stored already in {target}")
            cache.store(run, rows, _provenance(doc.get("provenance", {}), share=len(runs), source=path.name))
        if all(cache.path(run) != path for run, _ in runs):
            path.unlink()
        n_old += 1
        n_new += len(runs)
    return n_old, n_new


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m ldptut.migrate DIRECTORY [DIRECTORY ...]")
    for d in sys.argv[1:]:
        old, new = migrate_v1(d)
        print(f"{d}: {old} format-1 records -> {new} format-2 records")

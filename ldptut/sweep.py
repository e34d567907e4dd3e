"""A chapter's experiment grid as Ray tasks: ``python -m ldptut.sweep <chapter> [--params FILE] [--address ADDR]``.

The grid is the chapter's own: its paper module's ``grid(params)`` (the runs the notebook asks for), with the
parameters of the notebook's ``parameters`` cell overridden by a parameter file (``book/params/*.yaml``), checked
against the module's ``Params``. Runs already in the run cache are skipped; the others are grouped as the
chapter's :class:`~ldptut.experiments.Runner` would group them (:meth:`RunConfig.group_key`) and each group is one
Ray task, which trains it and writes its records into the cache (``run_cache`` or ``cache_dir`` of the parameters,
relative to ``book/``, or ``--cache``) as it finishes. So a sweep that is killed resumes where it stopped: run it
again (an interrupt, Ctrl-C, force-cancels the running tasks; their runs are not stored). A task that raises is
retried (``--max-retries``) and, if it still fails, reported with its error at the end (exit code 1), never dropped.
A paper module's ``followup(params, table)`` names runs that depend on the grid's results (CorBin-FL: each method at
the λ chosen on validation); they are trained after the grid, in a second stage. The chapter's page then loads the
cache as usual (``make reproduce CHAPTER=... LOAD_ONLY=1``).

Ray is an optional dependency (``pip install -e '.[sweep]'``). Without ``--address`` Ray starts locally inside this
process (no setup; ``--num-cpus`` caps it); with one (``ray://host:10001`` or ``auto``) the tasks run on that
cluster, whose workers need this package and the data sets (``LDPTUT_DATA_MIRROR``) installed. Each task asks Ray
for ``--cpus-per-task`` CPUs and ``--gpus-per-task`` GPUs; ``--device auto`` trains on CUDA where the worker has it.
"""
from __future__ import annotations

import argparse
import ast
import importlib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from .devices import resolve_device
from .params import ChapterParams
from .runcache import RunCache
from .runconfig import RunConfig, group_indices

__all__ = ["notebook_parameters", "chapter_parameters", "chapter_grid", "followup_grid", "pending_groups", "SweepReport",
           "run_sweep", "main"]

ROOT = Path(__file__).resolve().parent.parent
BOOK = ROOT / "book"


# ------------------------------------------------------------------------------------ the grid
def notebook_parameters(notebook: str | Path) -> dict[str, Any]:
    """The defaults of a notebook's cell tagged ``parameters``: every ``name = <literal>`` assignment."""
    nb = json.loads(Path(notebook).read_text())
    cells = [c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise ValueError(f"{notebook}: expected one cell tagged 'parameters', found {len(cells)}")
    src = "".join(cells[0]["source"]) if isinstance(cells[0]["source"], list) else cells[0]["source"]
    out = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out[node.targets[0].id] = ast.literal_eval(node.value)
    return out


def _paper_module(chapter: str):
    from .papers import PAPERS

    for key in PAPERS:
        mod = importlib.import_module(f"ldptut.papers.{key}")
        if key == chapter or Path(mod.PAPER.chapter).name == chapter:
            return mod
    chapters = ", ".join(Path(importlib.import_module(f"ldptut.papers.{k}").PAPER.chapter).name for k in PAPERS)
    raise ValueError(f"unknown chapter {chapter!r}; the chapters with a paper module: {chapters}")


def chapter_parameters(chapter: str, params_file: Optional[str | Path] = None) -> ChapterParams:
    """The chapter's parameters: its notebook's defaults, overridden by ``params_file`` (YAML), as its paper module's
    ``Params`` (checked: a bad or unknown name raises :class:`~ldptut.params.ParameterError`)."""
    import yaml

    mod = _paper_module(chapter)
    params = notebook_parameters(ROOT / f"{mod.PAPER.chapter}.ipynb")
    if params_file is not None:
        path = Path(params_file)
        if not path.is_file():
            raise FileNotFoundError(f"no parameter file {path} (see book/params/)")
        try:
            doc = yaml.safe_load(path.read_text())
        except yaml.YAMLError as e:
            where = getattr(e, "problem_mark", None)
            at = f" at line {where.line + 1}" if where is not None else ""
            raise ValueError(f"parameter file {path} is not valid YAML{at}: {getattr(e, 'problem', None) or e}") from e
        if doc is not None and not isinstance(doc, dict):
            raise ValueError(f"parameter file {path} must be a mapping of 'name: value' lines, got a YAML "
                             f"{type(doc).__name__}")
        params.update(doc or {})
    return mod.Params.of(params)


def chapter_grid(chapter: str, params: Mapping[str, Any]) -> list[tuple[str, RunConfig]]:
    """(experiment, run) pairs of ``chapter`` at ``params``, from its paper module's ``grid``."""
    mod = _paper_module(chapter)
    if not hasattr(mod, "grid"):
        from .papers import PAPERS

        have = [k for k in PAPERS if hasattr(importlib.import_module(f"ldptut.papers.{k}"), "grid")]
        raise NotImplementedError(f"the {chapter!r} paper module has no grid(params) yet, so it cannot be swept; "
                                  f"chapters that can: {', '.join(have)}")
    return list(mod.grid(params))


def pending_groups(configs: Sequence[RunConfig], cache: RunCache) -> tuple[list[list[RunConfig]], list[RunConfig]]:
    """(groups still to train, runs already stored): distinct configurations not in ``cache``, grouped by
    :meth:`RunConfig.group_key` as :meth:`ldptut.experiments.Runner.run_all` groups them."""
    seen, todo, done = set(), [], []
    for c in configs:
        if c.key() in seen:
            continue
        seen.add(c.key())
        (done if cache.load(c) is not None else todo).append(c)
    return [[todo[i] for i in idx] for idx in group_indices(todo)], done


# ------------------------------------------------------------------------------------ the sweep
#: Seconds to wait for a TCP connection to a Ray cluster's address before giving up with a message.
CONNECT_TIMEOUT = 10.0


def check_address(address: Optional[str], *, timeout: float = CONNECT_TIMEOUT) -> None:
    """Refuse, with a message, a Ray address that cannot work: a ``ray://`` address without Ray's client installed,
    or a host:port that does not accept a TCP connection within ``timeout`` seconds (Ray itself would retry for
    minutes). ``None`` (local Ray) and ``auto`` are left to Ray."""
    import importlib.util
    import socket

    if address is None or address == "auto":
        return
    hostport = address.split("://", 1)[1] if "://" in address else address
    if address.startswith("ray://") and importlib.util.find_spec("grpc") is None:
        raise ImportError(f"the address {address!r} needs Ray's client (Ray Client speaks gRPC): "
                          "pip install 'ray[client]'")
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"a Ray address is host:port, ray://host:port or auto; got {address!r}")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as e:
        raise ConnectionError(f"cannot reach a Ray cluster at {address} within {timeout:g} s ({e}); is it running "
                              "(ray start --head on that machine), and is the port open?") from e


def check_schedulable(cpus_per_task: float, gpus_per_task: float, nodes: Sequence[Mapping[str, float]]) -> None:
    """Refuse tasks that no node can ever run (Ray would queue them forever): each task needs ``cpus_per_task`` CPUs
    and ``gpus_per_task`` GPUs on one node; ``nodes`` are the nodes' resources ({"CPU": n, "GPU": m})."""
    if not nodes:
        raise ValueError("the Ray cluster has no node to run tasks on")
    best_cpu = max(float(n.get("CPU", 0)) for n in nodes)
    best_gpu = max(float(n.get("GPU", 0)) for n in nodes)
    if cpus_per_task > best_cpu:
        raise ValueError(f"--cpus-per-task {cpus_per_task:g} exceeds the largest node's {best_cpu:g} CPUs: no task "
                         "could ever start; ask for fewer CPUs per task (or more with --num-cpus)")
    if gpus_per_task > best_gpu:
        raise ValueError(f"--gpus-per-task {gpus_per_task:g} exceeds the largest node's {best_gpu:g} GPUs: no task "
                         "could ever start" + ("; this machine has no GPU Ray can see" if best_gpu == 0 else ""))


@dataclass
class SweepReport:
    """What a sweep did: keys trained now, keys found stored, and the groups that failed (with the error)."""

    trained: list[str] = field(default_factory=list)
    stored: list[str] = field(default_factory=list)
    failed: list[tuple[list[str], str]] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self) -> str:
        lines = [f"{len(self.trained)} run(s) trained, {len(self.stored)} already stored, "
                 f"{sum(len(k) for k, _ in self.failed)} failed, in {self.seconds:.1f} s"]
        for keys, err in self.failed:
            lines.append(f"  FAILED {', '.join(keys)}: {err}")
        return "\n".join(lines)


def _train_group(configs: list[RunConfig], cache_dir: str, device: str) -> list[str]:
    """One Ray task: train ``configs`` (one group) with the chapter's runner and store them in ``cache_dir``."""
    from .experiments import Runner

    runner = Runner(cache_dir, device=resolve_device(device), progress=False)
    return [r.config.key() for r in runner.run_all(configs)]


def _local_gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def run_sweep(configs: Sequence[RunConfig], *, cache_dir: str | Path, device: str = "cpu", address: Optional[str] = None,
              num_cpus: Optional[int] = None, cpus_per_task: float = 1.0, gpus_per_task: float = 0.0,
              max_retries: int = 2, progress: bool = True) -> SweepReport:
    """Train every run of ``configs`` missing from the run cache ``cache_dir`` as Ray tasks (one per group), each
    storing its records as it finishes; see the module docstring. Ray is started here (locally, or connected to
    ``address``) and shut down at the end if this call started it."""
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the install
        raise ImportError("the sweep runs on Ray, which is not installed: pip install -e '.[sweep]'") from e
    from tqdm import tqdm

    if cpus_per_task <= 0 or gpus_per_task < 0 or max_retries < 0:
        raise ValueError(f"need cpus_per_task > 0, gpus_per_task >= 0, max_retries >= 0; got {cpus_per_task}, "
                         f"{gpus_per_task}, {max_retries}")
    if num_cpus is not None and num_cpus < 1:
        raise ValueError(f"num_cpus (the local Ray's CPUs) must be >= 1, got {num_cpus}")
    if address is None and not ray.is_initialized():  # a local Ray: its one node is known before it starts
        import os

        check_schedulable(cpus_per_task, gpus_per_task, [{"CPU": num_cpus or os.cpu_count() or 1,
                                                          "GPU": _local_gpus()}])
    check_address(address)
    t0 = time.perf_counter()
    cache_dir = str(Path(cache_dir).resolve())
    groups, done = pending_groups(configs, RunCache(cache_dir))
    report = SweepReport(stored=[c.key() for c in done])
    if not groups:
        report.seconds = time.perf_counter() - t0
        return report
    started = not ray.is_initialized()
    if started:
        kw: dict[str, Any] = {"address": address, "include_dashboard": False, "log_to_driver": False,
                              "configure_logging": False}
        if address is None and num_cpus is not None:
            kw["num_cpus"] = num_cpus
        ray.init(**kw)
    pending: dict[Any, list[RunConfig]] = {}
    try:
        check_schedulable(cpus_per_task, gpus_per_task, [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")])
        task = ray.remote(num_cpus=cpus_per_task, num_gpus=gpus_per_task, max_retries=max_retries,
                          retry_exceptions=True)(_train_group)
        pending = {task.remote(g, cache_dir, device): g for g in groups}
        bar = tqdm(total=sum(len(g) for g in groups), desc="sweep (runs)", disable=not progress, mininterval=1.0)
        while pending:
            # a short timeout hands control back to Python every second, so that a SIGINT is seen within a second
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            if not ready:
                continue
            group = pending.pop(ready[0])
            try:
                report.trained += ray.get(ready[0])
            except Exception as e:  # noqa: BLE001 - every failure is reported, none dropped
                report.failed.append(([c.key() for c in group], f"{type(e).__name__}: {str(e).splitlines()[-1]}"))
            bar.update(len(group))
        bar.close()
    except KeyboardInterrupt:  # stop the running tasks first, or shutdown waits for them
        for ref in pending:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
    report.seconds = time.perf_counter() - t0
    return report


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ldptut.sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("chapter", help="the chapter (e.g. pd_ldpfl)")
    ap.add_argument("--params", help="parameter file over the notebook's defaults (book/params/<name>.yaml)")
    ap.add_argument("--cache", help="run cache directory (default: the parameters' run_cache, relative to book/)")
    ap.add_argument("--address", help="Ray cluster address (ray://host:10001, or auto); default: local Ray")
    ap.add_argument("--num-cpus", type=int, help="CPUs of the local Ray (default: all)")
    ap.add_argument("--cpus-per-task", type=float, default=1.0)
    ap.add_argument("--gpus-per-task", type=float, default=0.0)
    ap.add_argument("--device", default="auto", help="torch device of the tasks: auto (CUDA where present), cpu, cuda")
    ap.add_argument("--max-retries", type=int, default=2, help="retries of a failing task before it is reported")
    ap.add_argument("--dry-run", action="store_true", help="list what would be trained, train nothing (no Ray needed)")
    ap.add_argument("--allow-cache-outside-repo", action="store_true",
                    help="accept a parameter file whose run_cache lies outside this repository")
    args = ap.parse_args(argv)
    try:
        return _main(ap, args)
    except (ValueError, FileNotFoundError, NotImplementedError, ImportError, ConnectionError) as e:
        msg = str(e).splitlines()[0] if str(e) else type(e).__name__
        ap.exit(2, f"{ap.prog}: error: {msg}\n")


def _main(ap: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    if args.num_cpus is not None and args.num_cpus < 1:
        raise ValueError(f"--num-cpus must be >= 1, got {args.num_cpus}")
    if args.cpus_per_task <= 0 or args.gpus_per_task < 0:
        raise ValueError(f"--cpus-per-task must be > 0 and --gpus-per-task >= 0, got {args.cpus_per_task:g} and "
                         f"{args.gpus_per_task:g}")
    params = chapter_parameters(args.chapter, args.params)
    stored = params.get("run_cache") or params.get("cache_dir")   # the chapters' name for it, relative to book/
    cache = args.cache or (str((BOOK / stored).resolve()) if stored else None)
    if cache is None:
        raise ValueError("no run cache: the parameters name none (run_cache / cache_dir is None); give --cache DIR "
                         "or a parameter file with one")
    if not args.cache and not args.allow_cache_outside_repo and not Path(cache).is_relative_to(ROOT):
        raise ValueError(f"the parameters' run_cache {stored!r} lies outside this repository ({cache}); pass "
                         "--allow-cache-outside-repo if that is meant, or --cache DIR")
    configs = [c for _, c in chapter_grid(args.chapter, params)]
    if args.dry_run:
        groups, done = pending_groups(configs, RunCache(cache))
        print(f"{args.chapter}: {len(configs)} runs in the grid, {len(done)} stored in {cache}, "
              f"{sum(map(len, groups))} to train in {len(groups)} task(s)")
        for g in groups:
            for c in g:
                print(f"  {c.key()}  {c.label() if hasattr(c, 'label') else c}")
        return 0
    kw = dict(cache_dir=cache, device=args.device, address=args.address, num_cpus=args.num_cpus,
              cpus_per_task=args.cpus_per_task, gpus_per_task=args.gpus_per_task, max_retries=args.max_retries)
    report = run_sweep(configs, **kw)
    print(report.summary())
    if not report.ok:
        return 1
    later = followup_grid(args.chapter, params, RunCache(cache))
    if later:
        print(f"follow-up runs (they depend on the grid's results): {len(later)}")
        report = run_sweep([c for _, c in later], **kw)
        print(report.summary())
    return 0 if report.ok else 1


def followup_grid(chapter: str, params: Mapping[str, Any], cache: RunCache) -> list[tuple[str, RunConfig]]:
    """The runs of ``chapter`` that depend on its grid's results (its paper module's ``followup(params, table)``,
    given the stored runs of the grid as a records table with an ``experiment`` column; e.g. CorBin-FL's runs at the
    λ chosen on validation); empty when the module has none. Raises if a grid run is not stored."""
    from .runcache import stored_table

    mod = _paper_module(chapter)
    if not hasattr(mod, "followup"):
        return []
    table = stored_table(chapter_grid(chapter, params), cache)
    missing = table.attrs["missing"]
    if missing:
        raise ValueError(f"{len(missing)} grid run(s) not stored in {cache.directory}, e.g. {missing[0]}: "
                         "run the grid first")
    return list(mod.followup(params, table))


if __name__ == "__main__":
    sys.exit(main())

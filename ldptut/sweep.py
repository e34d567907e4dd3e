"""A chapter's experiment grid as Ray tasks: ``python -m ldptut.sweep <chapter> [--params FILE] [--address ADDR]``.

The grid is the chapter's own: its paper module's ``grid(params)`` (the runs the notebook asks for), with the
parameters of the notebook's ``parameters`` cell overridden by a parameter file (``book/params/*.yaml``), checked
against the module's ``PARAMETERS``. Runs already in the run cache are skipped; the others are grouped as the
chapter's :class:`~ldptut.experiments.Runner` would group them (:meth:`RunConfig.group_key`) and each group is one
Ray task, which trains it and writes its records into the cache (``run_cache`` or ``cache_dir`` of the parameters,
relative to ``book/``, or ``--cache``) as it finishes. So a sweep that is killed resumes where it stopped: run it
again (an interrupt, Ctrl-C, force-cancels the running tasks; their runs are not stored). A task that raises is
retried (``--max-retries``) and, if it still fails, reported with its error at the end (exit code 1), never dropped.
The chapter's page then loads the cache as usual (``make reproduce CHAPTER=... LOAD_ONLY=1``).

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
from .runcache import RunCache
from .runconfig import RunConfig, group_indices

__all__ = ["notebook_parameters", "chapter_parameters", "chapter_grid", "pending_groups", "SweepReport", "run_sweep",
           "main"]

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


def chapter_parameters(chapter: str, params_file: Optional[str | Path] = None) -> dict[str, Any]:
    """The chapter's parameters: its notebook's defaults, overridden by ``params_file`` (YAML), checked against
    its paper module's ``PARAMETERS``."""
    import yaml

    from .notebooks import check_parameters

    mod = _paper_module(chapter)
    params = notebook_parameters(ROOT / f"{mod.PAPER.chapter}.ipynb")
    if params_file is not None:
        path = Path(params_file)
        if not path.is_file():
            raise FileNotFoundError(f"no parameter file {path} (see book/params/)")
        params.update(yaml.safe_load(path.read_text()) or {})
    spec = getattr(mod, "PARAMETERS", None)
    if spec is not None:
        check_parameters(params, spec)
    return params


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
    ap.add_argument("--dry-run", action="store_true", help="list what would be trained, train nothing")
    args = ap.parse_args(argv)

    params = chapter_parameters(args.chapter, args.params)
    stored = params.get("run_cache") or params.get("cache_dir")   # the chapters' name for it, relative to book/
    cache = args.cache or (str(BOOK / stored) if stored else None)
    if cache is None:
        ap.error("no run cache: the parameters name none (run_cache / cache_dir is None); give --cache DIR "
                 "or a parameter file with one")
    configs = [c for _, c in chapter_grid(args.chapter, params)]
    if args.dry_run:
        groups, done = pending_groups(configs, RunCache(cache))
        print(f"{args.chapter}: {len(configs)} runs in the grid, {len(done)} stored in {cache}, "
              f"{sum(map(len, groups))} to train in {len(groups)} task(s)")
        for g in groups:
            for c in g:
                print(f"  {c.key()}  {c.label() if hasattr(c, 'label') else c}")
        return 0
    report = run_sweep(configs, cache_dir=cache, device=args.device, address=args.address, num_cpus=args.num_cpus,
                       cpus_per_task=args.cpus_per_task, gpus_per_task=args.gpus_per_task,
                       max_retries=args.max_retries)
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())

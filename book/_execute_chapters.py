"""Execute the chapters at their defaults, several at a time, into the book's execution cache (`make book`).

The book's `_config.yml` executes notebooks in `cache` mode: a chapter whose code matches a cached execution is
rendered from it, any other is executed during the build, one after the other. `make book` empties the cache, then
runs this script, which fills it with jupyter-cache's parallel executor (one process per job), so that
`jupyter-book build` finds every chapter executed and only renders.

Each kernel has the thread count OMP_NUM_THREADS gives (`make book` sets 2, the count the committed outputs were
computed with: floating-point sums depend on how many threads share them, and PD-LDPFL's attack and Table 1 numbers
change at one thread), however many kernels run at once. The kernels' threads may then outnumber the cores, so
OpenMP's threads sleep instead of spinning while they wait (OMP_WAIT_POLICY=PASSIVE, see the README's Performance).
On 2 CPU cores, FedSel and CoQ-FL executed one after the other in 255 s, two at a time in 155 s (same outputs).

    python book/_execute_chapters.py [--jobs N] [--cache PATH] [--timeout S] book/<chapter>.ipynb ...

Exits 1, printing each failing chapter's traceback, when any chapter raised (nothing is left half-cached: a failed
execution is not cached, and the build would execute it again and fail on it too).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapters", nargs="+", type=Path, help="chapter notebooks (book/<name>.ipynb)")
    parser.add_argument("--jobs", type=int, default=0,
                        help="chapters executed at a time (default: the number of CPU cores, at most the chapters)")
    parser.add_argument("--cache", type=Path, default=Path("_build/.jupyter_cache"),
                        help="jupyter-cache folder the build reads (jupyter-book's default: _build/.jupyter_cache)")
    parser.add_argument("--timeout", type=int, default=1200, help="seconds per cell (as execute.timeout in _config.yml)")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.chapters if not p.is_file()]
    if missing:
        parser.error(f"chapters: no such notebook: {', '.join(missing)}")
    if args.jobs < 0:
        parser.error(f"--jobs must be >= 0 (0: one per CPU core), got {args.jobs}")
    cores = os.cpu_count() or 1
    jobs = min(args.jobs or cores, len(args.chapters))
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")   # inherited by the kernels

    from jupyter_cache import get_cache
    from jupyter_cache.cache.db import NbProjectRecord
    from jupyter_cache.executors.basic import ExecutionWorkerLocalMProc, ProcessData

    cache = get_cache(str(args.cache))
    records = [cache.add_nb_to_project(str(chapter.resolve())) for chapter in args.chapters]
    threads = os.environ.get("OMP_NUM_THREADS", "torch's default")
    print(f"executing {len(records)} chapters, {jobs} at a time ({cores} CPU cores; threads per kernel: {threads}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']})", flush=True)
    start = time.perf_counter()
    failed = []
    # jupyter-cache's own worker (the one of its "local-parallel" executor: executes in the notebook's folder, caches
    # the result, records a traceback), in a pool of `jobs` processes, reporting each chapter as it finishes
    work = [ProcessData(r.pk, r.uri, cache, args.timeout, False) for r in records]
    with multiprocessing.Pool(jobs) as pool:
        for code, uri in pool.imap_unordered(ExecutionWorkerLocalMProc(), work):
            record = cache.get_cached_project_nb(uri)
            seconds = f"{record.data['execution_seconds']:7.1f} s" if record is not None else "      – "
            if code != 0:
                failed.append(uri)
            print(f"  {Path(uri).name:32s} {seconds}  {'ok' if code == 0 else 'FAILED'}"
                  f"  ({time.perf_counter() - start:.0f} s elapsed)", flush=True)
    print(f"executed in {time.perf_counter() - start:.0f} s (wall)", flush=True)
    if failed:
        for uri in failed:
            record = NbProjectRecord.record_from_uri(uri, cache.db)
            print(f"\n{uri} raised:\n{record.traceback or '(no traceback recorded)'}", file=sys.stderr)
        print(f"{len(failed)} chapter(s) failed: {', '.join(Path(u).name for u in failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

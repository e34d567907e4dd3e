"""Throughput of ``privatize`` for each mechanism next to ``x.clone()`` (float32, CPU or CUDA).

Usage::

    python benchmarks/bench_mechanisms.py [--numel 10000000] [--repeats 7] [--threads N] [--device cpu|cuda|auto]

On CUDA every timed call is followed by ``torch.cuda.synchronize()`` (kernels run asynchronously).

Each repeat times ``x.clone()`` and then every mechanism once (interleaved, so a noisy neighbour
affects all rows alike); after one warm-up round the table reports the best and median wall time,
throughput in Melem/s and the ratio throughput(mechanism) / throughput(clone) (best-to-best and
median-to-median). ``clone`` is the floor for any out-of-place elementwise op: one read, one write
of a fresh tensor. The mechanisms also draw one uniform per element from a ``torch.Generator``
(Mersenne Twister, single-threaded on CPU), which is timed separately as ``torch.rand``.

On CUDA, TwoPoint, Laplace, Piecewise, Hybrid and randomized response run as one fused Triton kernel
(``ldptut.kernels``: one read, Philox uniforms in registers, one write); each of them gets a second row,
"(torch path)", timed with the kernel switched off (``LDPTUT_FUSED=0``), and the kernel's generator alone is
timed as "philox uniforms (kernel)". The Gaussian's grid law (2^-53-step uniforms, float64 cumulatives) gets a row
"gaussian (float noise)": the textbook sampler it replaces, which is not floating-point safe, for the cost.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ldptut import kernels  # noqa: E402
from ldptut.mechanisms import MECHANISMS, make_mechanism  # noqa: E402
from ldptut.provenance import device_name  # noqa: E402
from ldptut.rng import generator  # noqa: E402


def _time(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return time.perf_counter() - t0


def _torch_path(fn: Callable[[], object]) -> object:
    """Run ``fn`` with the fused CUDA kernels switched off (``LDPTUT_FUSED=0``)."""
    os.environ["LDPTUT_FUSED"] = "0"
    try:
        return fn()
    finally:
        del os.environ["LDPTUT_FUSED"]


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--numel", type=int, default=10_000_000, help="elements per tensor (default 10M)")
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats after one warm-up (default 7)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cpu", help="cpu, cuda or auto (CUDA when present)")
    args = ap.parse_args(argv)
    from ldptut.devices import resolve_device

    try:
        dev = resolve_device(args.device)
    except ValueError as e:
        ap.error(str(e))
    sync = torch.cuda.synchronize if torch.device(dev).type == "cuda" else (lambda: None)
    if args.numel < 1 or args.repeats < 1:
        ap.error("--numel and --repeats must be >= 1")
    if args.threads:
        torch.set_num_threads(args.threads)

    n = args.numel
    g0 = torch.Generator(device=dev).manual_seed(args.seed)
    x = torch.empty(n, dtype=torch.float32, device=dev).uniform_(-1.5, 1.5, generator=g0)  # 1/3 outside [-1, 1]
    bits = (torch.rand(n, generator=g0, device=dev) < 0.5).to(torch.float32)
    gen = generator(args.seed, "bench", device=dev)

    cases: Dict[str, Callable[[], object]] = {"x.clone()": lambda: x.clone()}
    cases["torch.rand (RNG alone)"] = lambda: torch.rand(n, generator=gen, dtype=torch.float32, device=dev)
    extra = {"gaussian": {"delta": 1e-5}, "ldpsign": {"delta": 1e-5, "l2_sensitivity": 2.0}}  # their other parameters
    fused = torch.device(dev).type == "cuda" and kernels.enabled()
    if fused:  # the fused kernel's own generator (Philox, counter-based)
        seeds = kernels.seeds_from([gen], dev)
        cases["philox uniforms (kernel)"] = lambda: kernels.uniforms(seeds, n)
    for name in MECHANISMS:
        mech = make_mechanism(name, epsilon=args.epsilon, **extra.get(name, {}))
        inp = bits if name == "randomized_response" else x
        cases[name] = (lambda m=mech, i=inp: m.privatize(i, gen))
        if fused and kernels.usable(mech, inp):  # the same mechanism by the torch path, for comparison
            cases[f"{name} (torch path)"] = (lambda m=mech, i=inp: _torch_path(lambda: m.privatize(i, gen)))
        if name == "gaussian":  # the textbook sampler the grid law replaces (float noise: not safe), for its cost
            cases["gaussian (float noise)"] = (lambda m=mech, i=inp: i.clamp(-1.0, 1.0)
                                               + m.sigma * torch.randn(i.shape, generator=gen, device=i.device))

    times: Dict[str, List[float]] = {k: [] for k in cases}
    for rep in range(args.repeats + 1):
        for k, fn in cases.items():
            t = _time(fn, sync)
            if rep > 0:  # repeat 0 is the warm-up
                times[k].append(t)

    best_clone = min(times["x.clone()"])
    med_clone = statistics.median(times["x.clone()"])
    print(
        f"{device_name(dev)}; torch {torch.__version__}, threads {torch.get_num_threads()}, numel {n:,} float32, "
        f"ε = {args.epsilon:g}, {args.repeats} repeats (+1 warm-up)"
    )
    header = f"{'mechanism':<24} {'best ms':>9} {'median ms':>10} {'Melem/s':>9} {'ratio best':>11} {'ratio median':>13}"
    print(header)
    print("-" * len(header))
    for k, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        print(
            f"{k:<24} {best * 1e3:9.1f} {med * 1e3:10.1f} {n / best / 1e6:9.1f} "
            f"{best_clone / best:11.2f} {med_clone / med:13.2f}"
        )
    print("ratio = throughput(row) / throughput(x.clone()); goal for mechanisms: >= 0.5")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark (not a test): the cost of CoQ-FL / CorBin-FL's correlated pairs next to independent LDP-FL, one run.

(a) the privatizer alone on one round's payloads: m clients x d weights of the authors' MNIST CNN
    (``cnn_pool``, d = 421,642), the per-tensor range from the global model (GlobalModelRange):
    ``fl.LocalPerturbation(TwoPoint)`` (LDP-FL, each client on its own stream) next to
    ``fl.PairedPerturbation`` (random pairs, correlated two-point, the odd client independent);
(b) whole rounds at CorBin-FL's MNIST setting (``ldptut.papers.corbin``: 50 IID clients x 960 images,
    cnn_pool, Adam, batch 64, one local epoch; test accuracy on ``--n-test`` images each round):
    LDP-FL next to CoQ-FL at eps = 1 per weight per round.

Repeats are interleaved (a noisy neighbour slows both rows alike); the table gives the best and the median
seconds and the ratio CoQ-FL / LDP-FL of each (the issue's target: at most 1.2). Runs on ``--device``
(cpu by default; cuda on a GPU machine). Usage:
    python benchmarks/bench_corbin.py [--device cpu] [--clients 50] [--repeats 5] [--round-repeats 1] [--rounds 1]
                                      [--threads N] [--skip-rounds]
"""
from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch

from ldptut import fl, models
from ldptut.experiments import Runner
from ldptut.mechanisms import TwoPoint
from ldptut.papers import corbin as C
from ldptut.rng import client_generator


def _time(fn) -> float:
    t0 = time.perf_counter()
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def _interleaved(cases: dict, repeats: int) -> dict:
    """{name: [seconds per repeat]}: every case once per repeat, in turn."""
    times = {k: [] for k in cases}
    for _ in range(repeats):
        for k, fn in cases.items():
            times[k].append(_time(fn))
    return times


def _rows(times: dict, base: str) -> list[str]:
    b_best, b_med = min(times[base]), statistics.median(times[base])
    out = []
    for k, ts in times.items():
        best, med = min(ts), statistics.median(ts)
        out.append(f"  {k:<46}{best:>10.3f}{med:>10.3f}{best / b_best:>9.2f}{med / b_med:>9.2f}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--clients", type=int, default=50, help="clients per round (CorBin-FL: 50)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats of (a), after one warm-up")
    ap.add_argument("--round-repeats", type=int, default=1, help="timed runs of (b) per method, after one warm-up")
    ap.add_argument("--rounds", type=int, default=1, help="rounds per run in (b)")
    ap.add_argument("--n-test", type=int, default=1000, help="test images evaluated each round in (b)")
    ap.add_argument("--skip-rounds", action="store_true", help="only (a)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: torch's choice; 1 when another job shares the cores)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("clients", "repeats", "round_repeats", "rounds", "n_test"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    dev = torch.device(args.device)
    eps = 1.0
    print(f"machine: {platform.machine()}, device {dev}"
          f"{' (' + torch.cuda.get_device_name(dev) + ')' if dev.type == 'cuda' else ''}, "
          f"{torch.get_num_threads()} torch threads, torch {torch.__version__}")

    # (a) the privatizer on one round's payloads (weights of a real initialised model plus a small spread)
    model = models.build_model("cnn_pool", input_shape=(1, 28, 28), num_classes=10, seed=0).to(dev)
    layout = fl.ParamLayout.from_model(model)
    g = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    m = args.clients
    spread = torch.randn(m, g.numel(), generator=torch.Generator().manual_seed(0)).to(dev)
    payloads = g + 0.01 * spread
    ids = torch.arange(m)
    ctx = fl.RoundContext(round=0, client_ids=ids, layout=layout, global_vector=g,
                          generators=[client_generator(0, 0, i, "privatize", device=dev) for i in range(m)],
                          send="weights", num_samples=torch.full((m,), 960.0), seed=0)
    ind = fl.LocalPerturbation(mechanism=TwoPoint, epsilon=eps, range=fl.GlobalModelRange())
    cor = fl.PairedPerturbation(epsilon=eps, range=fl.GlobalModelRange(), num_rand=5)
    cases = {"LDP-FL: LocalPerturbation(TwoPoint)": lambda: ind(payloads, context=ctx),
             "CoQ-FL: PairedPerturbation (NumRand 5)": lambda: cor(payloads, context=ctx)}
    _interleaved(cases, 1)  # warm-up
    times = _interleaved(cases, args.repeats)
    print(f"\n(a) privatizer only: {m} clients x d = {g.numel():,} weights (cnn_pool), eps = {eps:g} per weight "
          f"per round, {args.repeats} interleaved repeats")
    print(f"  {'what':<46}{'best s':>10}{'median s':>10}{'best x':>9}{'med x':>9}")
    print("\n".join(_rows(times, "LDP-FL: LocalPerturbation(TwoPoint)")))

    if args.skip_rounds:
        return
    # (b) whole rounds at the paper's MNIST setting (fresh seeds each repeat: nothing is memoised)
    runner = Runner(None, device=dev, progress=False)
    base = C.chapter_config(dataset="mnist", rounds=args.rounds, n_clients=m, n_test=args.n_test)
    runner.dataset("mnist")  # loaded once, outside the timings
    seed = iter(range(10_000))
    cases = {f"LDP-FL, {args.rounds} round(s)": lambda: runner.run(C.run("ldp_fl", base=base.replace(seed=next(seed)), epsilon=eps)),
             f"CoQ-FL, {args.rounds} round(s)": lambda: runner.run(C.run("coq_fl", base=base.replace(seed=next(seed)), epsilon=eps))}
    _interleaved(cases, 1)  # warm-up
    times = _interleaved(cases, args.round_repeats)
    print(f"\n(b) whole rounds, CorBin-FL's MNIST setting: {m} clients x {base.n_train // m} images, cnn_pool, "
          f"Adam, batch {base.batch_size}, 1 local epoch, test on {args.n_test:,} images per round; "
          f"{args.round_repeats} interleaved repeat(s)")
    print(f"  {'what':<46}{'best s':>10}{'median s':>10}{'best x':>9}{'med x':>9}")
    print("\n".join(_rows(times, f"LDP-FL, {args.rounds} round(s)")))


if __name__ == "__main__":
    main()

"""Benchmark (not a test): FedSel's one-record-user simulator, vectorised over users, next to a per-user Python loop.

One iteration of FedSel's Algorithm 1 (``ldptut.fedsgd.train``, one epoch) for PS-PM at eps = 2 per user:
PS selection (``selection.PerturbedSampling``, eps1 = mu eps = 0.2, k = round(0.1 d)), the selected value
perturbed by ``mechanisms.Piecewise`` (eps2 = 1.8), logistic regression (l2 = 1e-4), server step
w <- w - lr mean (lr = 1). Every path works on the SAME batch: the same global weights w (1, d) and the same
m = 0.01 N one-record users (N the training users of a 5-fold split, 4/5 of the records; FedSel Section 5.1),
the users' rows gathered from the data set inside the timed iteration:

(a) the package's vectorised path (what ``fedsgd.train`` does each iteration): ``linear.per_example_gradients``
    on (R = 1, m, d), ``fedsgd.SelectedCoordinate(PerturbedSampling, Piecewise).report(g, g, generator)``
    (selection, perturbation and the server's sparse mean), then the update;
(b) a per-user Python loop, as one would write it with per-sample gradients by autograd: for each user, its
    loss on its one record (``linear.losses`` on (1, 1, d)) and ``torch.autograd.grad``; the same selector on
    its (1, d) vector, Piecewise on the selected value, ``index_add_`` into the sum; then the update;
(c) the same loop with the closed-form gradient (``linear.per_example_gradients`` on (1, 1, d)) instead of
    autograd: what (c)/(a) keeps is per-user Python and op-dispatch overhead, (b)/(c) is what autograd adds.

Before timing, the benchmark checks that the three do the same work: (a)'s m gradients equal (b)'s and (c)'s
(allclose), and with the non-private top-1 selector and no perturbation the three give the same update
(with PS-PM they draw their random numbers in another order, so not the same numbers). Timing: every case
runs a block of iterations (as many as fill ``--min-block`` seconds, one for the loops), after one warm-up
block; ``--repeats`` blocks per case, interleaved (a noisy neighbour slows every case alike). The table gives
the best and the median seconds per iteration and the ratios (b)/(a), (c)/(a) of the medians (the issue's
target: (b)/(a) >= 50 at the paper's batch sizes), and (a) split into its stages (medians, as a profile:
the gradients, PS's selection with its two helpers ``top_k_status`` and ``_uniform_pick``, the perturbation,
the server's mean and step), each stage's share of (a) in the ratio column.

Finally (d): one whole paper-scale cross-validation cell, timed once: ``FedSelConfig`` PS-PM at eps = 2 on
syn-L (logistic; 10 x 5-fold = R = 50 runs trained together, 100 iterations of m = 480 users each, test
accuracy every 10 iterations), ``.simulate(x, y)``: the seconds one cell of the chapter's grid costs.

Data sets (``--datasets``): the paper's names in ``ldptut.papers.fedsel.DATASETS``; ADULT needs the data
(``LDPTUT_DATA_MIRROR`` or ``make data``); if it cannot be loaded the row says so and uses synthetic records of
ADULT's size instead (48,842 x 123, ``data.sparse_synthetic``). Runs on ``--device`` (cpu by default). Usage:
    python benchmarks/bench_fedsel.py [--threads 1] [--datasets adult syn_h] [--repeats 7] [--model logistic]
                                      [--device cpu] [--skip-cell]
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from ldptut import data as D
from ldptut import fedsgd, linear
from ldptut.mechanisms import Piecewise
from ldptut.papers import fedsel as F
from ldptut.provenance import device_name, machine_summary, package_commit
from ldptut.selection import PerturbedSampling, _uniform_pick, top_k_status

EPSILON, MU, LR, L2 = 2.0, 0.1, 1.0, 1e-4


def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


# ------------------------------------------------------------------------------------ the three paths
def vectorised(w, x, y, rows, *, reporter, model, gen):
    """(a) one iteration as ``fedsgd.train`` runs it (R = 1): returns the new weights (1, d)."""
    g = linear.per_example_gradients(w, x[rows], y[rows], model=model, l2=L2)   # (1, m, d)
    mean, _ = reporter.report(g, g, gen)
    return w - LR * mean


def vectorised_gradients(w, x, y, rows, *, model):
    return linear.per_example_gradients(w, x[rows], y[rows], model=model, l2=L2)[0]


def user_gradient_autograd(w_leaf, xi, yi, *, model):
    """One user's gradient (1, d) by autograd on its one record."""
    loss = linear.losses(w_leaf, xi.view(1, 1, -1), yi.view(1, 1), model=model, l2=L2)
    (gi,) = torch.autograd.grad(loss.sum(), w_leaf)
    return gi


def user_gradient_closed(w, xi, yi, *, model):
    """One user's gradient (1, d) by the closed form on its one record."""
    return linear.per_example_gradients(w, xi.view(1, 1, -1), yi.view(1, 1), model=model, l2=L2)[0]


def loop(w, x, y, rows, *, selector, perturbation, model, gen, autograd: bool, keep_gradients: bool = False):
    """(b) / (c): one user after the other; returns the new weights (1, d) (and the users' gradients)."""
    d = w.shape[1]
    w_leaf = w.detach().clone().requires_grad_(True) if autograd else w
    total = torch.zeros(d, dtype=w.dtype, device=w.device)
    users = rows[0].tolist()
    grads = []
    for i in users:
        if autograd:
            gi = user_gradient_autograd(w_leaf, x[i], y[i], model=model)
        else:
            gi = user_gradient_closed(w, x[i], y[i], model=model)
        j = selector.select(gi, gen)                                  # (1,)
        v = gi[0, j]                                                  # the selected value, (1,)
        if perturbation is not None:
            v = perturbation.privatize(v, gen)
        total.index_add_(0, j, v)
        if keep_gradients:
            grads.append(gi[0])
    new_w = w - LR * (total / len(users)).unsqueeze(0)
    return (new_w, torch.stack(grads)) if keep_gradients else new_w


# ------------------------------------------------------------------------------------ timing
def _block_size(fn, dev, min_block: float) -> int:
    """Iterations per timed block: enough to fill ``min_block`` seconds (at least 1)."""
    t0 = time.perf_counter()
    fn()
    _sync(dev)
    one = time.perf_counter() - t0
    return max(1, int(min_block / max(one, 1e-7)))


def _interleaved(cases: dict, dev, *, repeats: int, min_block: float) -> dict:
    """{name: [seconds per iteration, one per repeat]}: one warm-up block, then every case once per repeat, in turn."""
    sizes = {k: _block_size(fn, dev, min_block) for k, fn in cases.items()}
    times = {k: [] for k in cases}
    for r in range(repeats + 1):
        for k, fn in cases.items():
            t0 = time.perf_counter()
            for _ in range(sizes[k]):
                fn()
            _sync(dev)
            if r:  # r = 0: warm-up
                times[k].append((time.perf_counter() - t0) / sizes[k])
    return times


def _ms(s: float) -> str:
    return f"{1e3 * s:>11.3f}"


# ------------------------------------------------------------------------------------ one data set
def load(name: str, dev) -> tuple[torch.Tensor, torch.Tensor, str]:
    label = F.DATASETS[name]["label"]
    try:
        x, y = F.prepare(name)
    except Exception as e:  # noqa: BLE001 - no data here: say so, and time records of the same size
        spec = F.DATASETS[name]
        x, y = D.sparse_synthetic(spec["records"], spec["paper_d"], c1=0.01, c2=0.9, seed=0)
        label = f"{label} NOT LOADED ({type(e).__name__}); synthetic {spec['records']:,} x {spec['paper_d']} instead"
    return x.to(dev), y.to(dev), label


def bench_dataset(name: str, args, dev) -> tuple[str, float]:
    x, y, label = load(name, dev)
    n, d = x.shape
    n_train = (n // 5) * 4                      # the training users of one fold of a 5-fold split
    m = n_train // round(1 / F.SETTINGS["batch_fraction"])   # 0.01 N, as FedSelConfig.simulate: N // 100 iterations
    k = max(1, round(F.SETTINGS["k_fraction"] * d))
    e1 = MU * EPSILON
    e2 = EPSILON - e1
    gsetup = torch.Generator().manual_seed(args.seed)
    rows = torch.randperm(n, generator=gsetup)[:m].unsqueeze(0).to(dev)       # (1, m): the batch's users
    w = (0.1 * torch.randn(1, d, generator=gsetup)).to(dev)                   # the global weights
    selector, perturbation = PerturbedSampling(epsilon=e1, k=k), Piecewise(epsilon=e2)
    reporter = fedsgd.SelectedCoordinate(selector, perturbation)
    gen = torch.Generator(device=dev).manual_seed(args.seed)
    model = args.model

    # ---- same work: the gradients, and the whole update with a deterministic reporter
    g_vec = vectorised_gradients(w, x, y, rows, model=model)
    _, g_auto = loop(w, x, y, rows, selector=fedsgd.TopOne(), perturbation=None, model=model, gen=gen,
                     autograd=True, keep_gradients=True)
    _, g_closed = loop(w, x, y, rows, selector=fedsgd.TopOne(), perturbation=None, model=model, gen=gen,
                       autograd=False, keep_gradients=True)
    dg = max(float((g_vec - g_auto).abs().max()), float((g_vec - g_closed).abs().max()))
    same_g = torch.allclose(g_vec, g_auto, rtol=1e-5, atol=1e-6) and torch.allclose(g_vec, g_closed, rtol=1e-5, atol=1e-6)
    top = fedsgd.SelectedCoordinate(fedsgd.TopOne(), None)
    w_a = vectorised(w, x, y, rows, reporter=top, model=model, gen=gen)
    w_b = loop(w, x, y, rows, selector=fedsgd.TopOne(), perturbation=None, model=model, gen=gen, autograd=True)
    w_c = loop(w, x, y, rows, selector=fedsgd.TopOne(), perturbation=None, model=model, gen=gen, autograd=False)
    dw = max(float((w_a - w_b).abs().max()), float((w_a - w_c).abs().max()))
    same_w = torch.allclose(w_a, w_b, rtol=1e-5, atol=1e-6) and torch.allclose(w_a, w_c, rtol=1e-5, atol=1e-6)
    if not (same_g and same_w):
        raise AssertionError(f"{name}: the paths disagree (max |dg| = {dg:.2e}, max |dw| = {dw:.2e}); "
                             "the benchmark would not compare equal work")

    # ---- timings
    ka, kb, kc = "(a) vectorised (package)", "(b) per-user loop, autograd", "(c) per-user loop, closed form"
    cases = {
        ka: lambda: vectorised(w, x, y, rows, reporter=reporter, model=model, gen=gen),
        kb: lambda: loop(w, x, y, rows, selector=selector, perturbation=perturbation, model=model, gen=gen, autograd=True),
        kc: lambda: loop(w, x, y, rows, selector=selector, perturbation=perturbation, model=model, gen=gen, autograd=False),
    }
    times = _interleaved(cases, dev, repeats=args.repeats, min_block=args.min_block)

    # ---- (a) stage by stage, on the same batch (a profile of the vectorised path)
    g = vectorised_gradients(w, x, y, rows, model=model).unsqueeze(0)
    j = selector.select(g, gen)
    val = g.gather(-1, j.unsqueeze(-1)).squeeze(-1)
    pv = perturbation.privatize(val, gen)
    z = top_k_status(g, k)
    stages = {
        "  gather the batch x[rows], y[rows]": lambda: (x[rows], y[rows]),
        "  per_example_gradients (incl. gather)": lambda: linear.per_example_gradients(w, x[rows], y[rows], model=model, l2=L2),
        "  PerturbedSampling.select": lambda: selector.select(g, gen),
        "    of which top_k_status (topk threshold)": lambda: top_k_status(g, k),
        "    of which _uniform_pick (one uniform per user)": lambda: _uniform_pick(z, gen),
        "  gather s_j + Piecewise.privatize": lambda: perturbation.privatize(g.gather(-1, j.unsqueeze(-1)).squeeze(-1), gen),
        "  sparse_mean + w - lr mean": lambda: w - LR * fedsgd.sparse_mean(j, pv, d),
    }
    stimes = _interleaved(stages, dev, repeats=args.repeats, min_block=args.min_block)

    a_med = statistics.median(times[ka])
    print(f"\n{label}: n = {n:,} records, d = {d}, batch m = {n_train:,} // 100 = {m} users, k = {k}; "
          f"{model}, PS (eps1 = {e1:g}) + PM (eps2 = {e2:g}); {args.repeats} interleaved repeats")
    print(f"  same work: max |g(a) - g(b), g(c)| = {dg:.1e} over {m} x {d} gradients, "
          f"top-1 update max |w(a) - w(b), w(c)| = {dw:.1e} (allclose: yes)")
    print(f"  {'what (one iteration)':<44}{'best ms':>11}{'median ms':>11}{'x (a)':>10}{'per user us':>13}")
    for key, ts in times.items():
        med = statistics.median(ts)
        print(f"  {key:<44}{_ms(min(ts))}{_ms(med)}{med / a_med:>10.1f}{1e6 * med / m:>13.2f}")
    print(f"  {'(a) by stage:':<44}")
    for key, ts in stimes.items():
        med = statistics.median(ts)
        print(f"  {key:<44}{_ms(min(ts))}{_ms(med)}{med / a_med:>10.2f}")
    ratio = statistics.median(times[kb]) / a_med
    return (f"{label.split(' NOT')[0]}, d = {d}, m = {m}: (b)/(a) = {ratio:.0f}x, "
            f"(c)/(a) = {statistics.median(times[kc]) / a_med:.0f}x"), ratio


# ------------------------------------------------------------------------------------ a whole cell
def bench_cell(args, dev) -> None:
    base = F.base_config(args.cell_dataset, args.model, folds=5, repeats=10)
    run = F.method_config("PS-PM", base=base, epsilon=EPSILON)
    t0 = time.perf_counter()
    x, y = F.prepare(args.cell_dataset)
    t_prep = time.perf_counter() - t0
    t0 = time.perf_counter()
    res = run.simulate(x, y, device=dev, progress=False)
    _sync(dev)
    t_sim = time.perf_counter() - t0
    R = run.repeats * run.folds
    m = (x.shape[0] // run.folds) * (run.folds - 1) // run.rounds
    print(f"\n(d) one whole cell: {run.label()}, {run.repeats} x {run.folds}-fold = R = {R} runs vectorised, "
          f"{run.rounds} iterations x m = {m} users (d = {x.shape[1]}), test accuracy every {run.eval_every}")
    print(f"  {'what':<44}{'seconds':>11}")
    print(f"  {'prepare(' + repr(args.cell_dataset) + ') (data, once per data set)':<44}{t_prep:>11.3f}")
    print(f"  {'FedSelConfig.simulate (R x 100 iterations)':<44}{t_sim:>11.3f}")
    print(f"  {'  per iteration of all R runs (ms)':<44}{1e3 * t_sim / run.rounds:>11.3f}")
    print(f"  final accuracy over the R runs: mean {float(res.final.mean()):.4f}, std {float(res.final.std()):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--datasets", nargs="+", default=["adult", "syn_h"], choices=sorted(F.DATASETS),
                    help="the batches to time (m = 0.01 x 4/5 of the records)")
    ap.add_argument("--model", default="logistic", choices=linear.MODELS)
    ap.add_argument("--repeats", type=int, default=7, help="timed blocks per case, after one warm-up block")
    ap.add_argument("--min-block", type=float, default=0.05, help="seconds a timed block of iterations lasts at least")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cell-dataset", default="syn_l", choices=sorted(F.DATASETS), help="data set of (d)")
    ap.add_argument("--skip-cell", action="store_true", help="no (d)")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch.set_num_threads (default: torch's choice; 1 when another job shares the cores)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.repeats < 1:
        ap.error(f"--repeats must be >= 1, got {args.repeats}")
    if args.min_block < 0:
        ap.error(f"--min-block must be >= 0, got {args.min_block}")
    dev = torch.device(args.device)
    print(f"machine: {machine_summary()}")
    print(f"device {device_name(dev)}; {torch.get_num_threads()} torch threads; ldptut {package_commit()}")
    summary = [bench_dataset(name, args, dev) for name in args.datasets]
    if not args.skip_cell:
        bench_cell(args, dev)
    print("\nsummary (medians; target (b)/(a) >= 50x):")
    for line, ratio in summary:
        print(f"  {line}  {'ok' if ratio >= 50 else 'BELOW TARGET'}")


if __name__ == "__main__":
    main()

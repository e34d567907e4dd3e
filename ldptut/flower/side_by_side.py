"""The Flower appendix's experiment: the same runs in the round engine and in a Flower federation, Flower's own
``LocalDpMod`` beside them, and what its noise formula guarantees.

The setting is the mechanism comparison's MNIST benchmark (:mod:`ldptut.papers.comparison`: the small CNN, its
learning rate and ranges), cut to fewer clients, images and rounds so that it runs in minutes on 2 CPU cores. Each
method runs once per seed in each system from the same :meth:`~ldptut.experiments.FedAvgConfig.engine_call`; the engine
trains with one torch thread, as each Flower client does (floating-point sums depend on the thread count).
"""
from __future__ import annotations

import math
from typing import Any

import pandas as pd
import torch
from flwr.client.mod import LocalDpMod

from .. import fl
from ..accounting import gaussian_epsilon, gaussian_sigma
from ..intervals import interval_cell
from ..params import ChapterParams, P, chapter_params, param
from ..papers import comparison as C
from .simulation import simulate

#: The methods of the appendix: name -> what the tables call it.
METHODS: dict[str, str] = {
    "fedavg": "FedAvg (no privacy)",
    "two_point": "Two-point, fixed range (LDP-FL)",
    "pairs": "Correlated pairs (CoQ-FL)",
    "localdp": "Flower's LocalDpMod",
}
#: The comparison's benchmark whose setting the appendix takes.
TASK = "mnist"


@chapter_params
class Params(ChapterParams):
    """The appendix's parameters (``book/flower.ipynb``'s parameters cell: the same names, defaults and order)."""

    methods: list[str] = param(P.list_of(P.choice(*METHODS), nonempty=True), list(METHODS))
    epsilon: float = param(P.pos_float, 4.0)
    localdp_epsilons: list[float] = param(P.list_of(P.pos_float), [1.0])
    localdp_same_epsilon: bool = param(P.boolean, True)
    delta: float = param(P.fraction, 1e-5)
    clip: float = param(P.pos_float, 0.3)
    seeds: list[int] = param(P.list_of(P.nonneg_int, nonempty=True), [0, 1, 2])
    rounds: int = param(P.pos_int, 5)
    n_clients: int = param(P.pos_int, 10)
    n_train: int = param(P.pos_int, 3000)
    num_cpus: int = param(P.pos_int, 2)
    device: str = param(P.choice("cpu"), "cpu")


def dimension() -> int:
    """d, the weights of the benchmark's MNIST model (the small CNN: 26,698)."""
    return C.dimension(TASK)


def localdp_epsilons(p: Params) -> list[float]:
    """The ε per model per round LocalDpMod runs at: ``localdp_epsilons``, and with ``localdp_same_epsilon`` the
    two-point mechanism's d ε (ε per weight per round composed over the d weights)."""
    out = list(p["localdp_epsilons"])
    if p["localdp_same_epsilon"]:
        out.append(dimension() * p["epsilon"])
    return out


def config(method: str, p: Params, *, seed: int) -> C.ComparisonConfig:
    """The comparison's MNIST run of ``method`` ("fedavg", "two_point", "pairs"; LocalDpMod runs on FedAvg's) with
    ``n_clients``, ``rounds`` and ``n_train`` of ``p``, at ε per weight per round ``epsilon``."""
    base = C.base_config(TASK, seed=seed, rounds=p["rounds"], n_clients=p["n_clients"]).replace(n_train=p["n_train"])
    if method in ("fedavg", "localdp"):
        return base
    return C.method_config(method, base=base, task=TASK, epsilon=p["epsilon"], d=dimension())


def localdp_mod(epsilon: float, p: Params) -> LocalDpMod:
    """Flower's ``LocalDpMod`` at ε per model per round: the update clipped to L2 norm ``clip`` C, noise with its
    formula at sensitivity 2C (two clipped updates differ by at most 2C in L2: the replace-one neighbours of LDP)."""
    return LocalDpMod(clipping_norm=p["clip"], sensitivity=2.0 * p["clip"], epsilon=float(epsilon), delta=p["delta"])


def _one_thread(fn: Any, *args: Any, **kwargs: Any) -> Any:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return fn(*args, **kwargs)
    finally:
        torch.set_num_threads(threads)


def _rows(res: fl.FLResult, **info: Any) -> list[dict]:
    cols = [c for c in ("round", "accuracy", "loss", "seconds", "epsilon_round", "epsilon_total") if c in res.history]
    return [{**info, **row} for row in res.history[cols].to_dict("records")]


def run(p: Params, ds: Any, *, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method of ``p`` at every seed: in the engine (:func:`ldptut.fl.simulate`, one thread) and as a Flower
    federation (:func:`ldptut.flower.simulate`, ``num_cpus`` Ray workers); LocalDpMod in Flower only, at each ε of
    :func:`localdp_epsilons`. Returns (history: one row per method, ε, system, seed and round; per seed and method the
    largest absolute difference of the two systems' final global models, NaN where one system ran, and for FedAvg,
    when this process has more than one torch thread, the same for the engine trained at that thread count)."""
    from tqdm.auto import tqdm

    p = Params.of(p)
    jobs = [(m, e, s) for m in p["methods"] for e in (localdp_epsilons(p) if m == "localdp" else [None])
            for s in p["seeds"]]
    rows, diffs = [], []
    for method, eps, seed in tqdm(jobs, desc="runs (method, seed)", disable=not progress):
        cfg = config(method, p, seed=seed)
        call, run_, inputs = cfg.engine_call(ds, progress=False)
        name = METHODS[method] + (f", ε = {eps:,.6g}" if eps is not None else "")
        info = dict(method=name, key=method, epsilon_model=eps if eps is not None else
                    (None if method == "fedavg" else dimension() * p["epsilon"]), seed=seed)
        if method == "localdp":
            fed = simulate(call, run_, **inputs, mods=[localdp_mod(eps, p)], num_cpus=p["num_cpus"])
            rows += _rows(fed, system="Flower", **info)
            diffs.append({**info, "max |Δw|": math.nan})
            continue
        eng = _one_thread(fl.simulate, call, [run_], **inputs)
        fed = simulate(call, run_, **inputs, num_cpus=p["num_cpus"])
        rows += _rows(eng, system="engine", **info) + _rows(fed, system="Flower", **info)
        diff = {**info, "max |Δw|": float((eng.weights - fed.weights).abs().max())}
        if method == "fedavg" and torch.get_num_threads() > 1:   # the control: the engine at this process's threads
            threads = fl.simulate(call, [run_], **inputs)
            diff.update({"threads": torch.get_num_threads(),
                         "max |Δw|, engine at its threads": float((threads.weights - fed.weights).abs().max())})
        diffs.append(diff)
    return pd.DataFrame(rows), pd.DataFrame(diffs)


def agreement_table(history: pd.DataFrame, diffs: pd.DataFrame) -> pd.DataFrame:
    """Per method: the final test accuracy (%) in each system, mean [95 % t-interval] over seeds, the seeds whose
    final global models are identical bit for bit, and the largest difference of the final weights."""
    last = history[history["round"] == history["round"].max()]
    out = []
    for name, g in last.groupby("method", sort=False):
        d = diffs[diffs["method"] == name]
        row = {"method": name}
        for system in ("engine", "Flower"):
            acc = g.loc[g["system"] == system, "accuracy"] * 100
            row[f"{system}: accuracy (%)"] = interval_cell(acc.reset_index(drop=True)) if len(acc) else "not run"
        both = d["max |Δw|"].notna()
        row["identical models (seeds)"] = f"{int((d['max |Δw|'] == 0).sum())} of {int(both.sum())}" if both.any() \
            else "Flower only"
        row["max |Δw|"] = float(d["max |Δw|"].max()) if both.any() else math.nan
        out.append(row)
    return pd.DataFrame(out)


def time_table(history: pd.DataFrame) -> pd.DataFrame:
    """Per method and system: the median wall time of a round after the first (training, privatizing, messages,
    aggregation and the test-set evaluation) and of round 1 (Flower's includes starting Ray and its workers)."""
    out = []
    for (name, system), g in history.groupby(["method", "system"], sort=False):
        later = g.loc[g["round"] > 1, "seconds"]
        out.append({"method": name, "system": system, "s per round (rounds ≥ 2, median)":
                    float(later.median()) if len(later) else math.nan,
                    "round 1 (s, median)": float(g.loc[g["round"] == 1, "seconds"].median())})
    t = pd.DataFrame(out)
    wide = t.pivot(index="method", columns="system")
    wide.columns = [f"{system}: {what}" for what, system in wide.columns]
    wide = wide.reindex(list(dict.fromkeys(t["method"])))
    if {"engine: s per round (rounds ≥ 2, median)", "Flower: s per round (rounds ≥ 2, median)"} <= set(wide.columns):
        wide["Flower / engine (rounds ≥ 2)"] = (wide["Flower: s per round (rounds ≥ 2, median)"]
                                                / wide["engine: s per round (rounds ≥ 2, median)"])
    return wide.reset_index()


def pair_law_table(*, epsilon: float = 1.0, num_rand: int = 5, x_leader: float = 0.3, x_follower: float = -0.2,
                   n: int = 200_000, seed: int = 0) -> pd.DataFrame:
    """One pair's four joint outcomes at inputs (``x_leader``, ``x_follower``) on the range [-1, 1]: the exact law
    (:meth:`~ldptut.mechanisms.CorrelatedTwoPoint.joint_distribution`), the frequencies over ``n`` coordinates of two
    :class:`~ldptut.flower.PrivatizerMod` s drawing apart from their pair's seed (:class:`~ldptut.flower.PairedRule`'s
    assignment), those of the engine's batched sampler, and the independent pair's exact law (NumRand = 0)."""
    import numpy as np

    from ..fl import FixedRange, PairedPerturbation
    from ..mechanisms import CorrelatedTwoPoint
    from ..rng import generator
    from .mod import PrivatizerMod
    from .pairing import assign_pairs

    priv = PairedPerturbation(epsilon=epsilon, range=FixedRange(0.0, 1.0), num_rand=num_rand)
    mod = PrivatizerMod(priv, seed=seed)
    inputs = {"leader": np.full(n, x_leader, dtype=np.float32), "follower": np.full(n, x_follower, dtype=np.float32)}
    reports = {}
    for cid, (role, pair_seed) in enumerate(assign_pairs(2, seed=seed, round=1)):
        arrays, _ = mod.privatize([inputs[role]], [np.zeros(n, dtype=np.float32)], round=1, client=cid,
                                  num_examples=1, pair=(role, pair_seed))
        reports[role] = arrays[0] > 0
    mech = CorrelatedTwoPoint(epsilon=epsilon, num_rand=num_rand)
    bl, bf = mech.privatize_pairs(torch.full((n,), x_leader), torch.full((n,), x_follower),
                                  shared=generator(seed, "pair-shared"), local=generator(seed, "pair-local"))
    xl, xf = torch.tensor([x_leader], dtype=torch.float64), torch.tensor([x_follower], dtype=torch.float64)
    _, exact = mech.joint_distribution(xl, xf)
    _, indep = CorrelatedTwoPoint(epsilon=epsilon, num_rand=0).joint_distribution(xl, xf)
    rows = []
    for i, lead in enumerate(("-", "+")):
        for j, follow in enumerate(("-", "+")):
            fl_, ff_ = (reports["leader"] == (i == 1)), (reports["follower"] == (j == 1))
            el, ef = (bl > 0) == (i == 1), (bf > 0) == (j == 1)
            p = float(exact[0, i, j])
            rows.append({"leader, follower": f"{lead}, {follow}", "exact": p,
                         "Flower: two Mods": float((fl_ & ff_).mean()), "engine: batched": float((el & ef).double().mean()),
                         "5 standard errors": 5 * math.sqrt(p * (1 - p) / n), "independent pair (exact)": float(indep[0, i, j])})
    return pd.DataFrame(rows)


def seed_holder_table(epsilons: list[float], *, num_rand: int = 5, grid: int = 201) -> pd.DataFrame:
    """What a server that chose a pair's seed sees of the leader: the shared index K and the two reports. Given K the
    follower's report does not depend on the leader's input, so the view is (K, the leader's report): the colluding
    partner's view of the CoQ-FL chapter (:func:`ldptut.papers.corbin.colluding_view_loss`). Beside it, the view of a
    server that sees both reports without K (:func:`~ldptut.papers.corbin.joint_view_loss`, the worst partner input
    over -1, 0, 1). ε per weight per round on [-1, 1]."""
    from ..mechanisms import CorrelatedTwoPoint
    from ..papers import corbin

    rows = []
    for e in epsilons:
        mech = CorrelatedTwoPoint(epsilon=e, num_rand=num_rand)
        holder = corbin.colluding_view_loss(mech, grid=grid)
        joint = [corbin.joint_view_loss(mech, xp, grid=grid) for xp in (-1.0, 0.0, 1.0)]
        rows.append({"ε (per weight per round)": e, "NumRand": num_rand,
                     "seed holder: max privacy loss": holder["max privacy loss"], "seed holder: δ at ε": holder["δ at ε"],
                     "both reports, no seed: max privacy loss": max(j["max privacy loss"] for j in joint),
                     "both reports, no seed: δ at ε": max(j["δ at ε"] for j in joint)})
    return pd.DataFrame(rows)


def classical_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """LocalDpMod's noise std: the classical Gaussian mechanism's σ = Δ √(2 ln(1.25/δ)) / ε (Dwork and Roth 2014,
    Thm. A.1, proven for ε < 1), as ``flwr.supercore.differential_privacy`` computes it."""
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def classical_breaks_at(delta: float) -> float:
    """The ε above which the classical formula's σ no longer gives the stated ε at δ (the exact ε of that σ, by
    :func:`ldptut.accounting.gaussian_epsilon`, equals the stated one there; below it the formula is conservative).
    Independent of the sensitivity: μ = Δ/σ = ε / √(2 ln(1.25/δ)). Bisection to 1e-9 relative."""
    def exceeds(e: float) -> bool:
        return gaussian_epsilon(delta, e / math.sqrt(2.0 * math.log(1.25 / delta))) > e

    lo, hi = 1e-3, 1.0
    while not exceeds(hi):
        lo, hi = hi, 2.0 * hi
    while hi - lo > 1e-9 * hi:
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if exceeds(mid) else (mid, hi)
    return hi


def localdp_table(epsilons: list[float], *, delta: float, clip: float) -> pd.DataFrame:
    """What LocalDpMod's formula gives at each stated ε (per model per round, sensitivity 2C): its σ, the exact ε
    that σ gives at the same δ (Balle and Wang 2018, Thm. 8: :func:`ldptut.accounting.gaussian_epsilon`), and the σ
    the exact calibration needs for the stated ε (:func:`ldptut.accounting.gaussian_sigma`)."""
    rows = []
    for e in epsilons:
        sens = 2.0 * clip
        s = classical_sigma(e, delta, sens)
        exact = gaussian_epsilon(delta, sens / s)
        rows.append({"stated ε (per model per round)": e, "δ": delta, "LocalDpMod's σ": s,
                     "exact ε of that σ at δ": exact, "exact / stated": exact / e,
                     "σ the exact calibration needs": gaussian_sigma(e, delta, sens),
                     "covered by its theorem (ε < 1)": "yes" if e < 1 else "no"})
    return pd.DataFrame(rows)


def accuracy_figure(history: pd.DataFrame):
    """Test accuracy (%) against the round, mean over seeds: each method in one colour, the engine solid, Flower
    dashed with markers."""
    import matplotlib.pyplot as plt

    from ..display import figure, integer_rounds

    fig, ax = figure(height=4.6)
    mean = history.groupby(["method", "system", "round"], sort=False)["accuracy"].mean().reset_index()
    palette = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    colours = {name: palette[i % len(palette)] for i, name in enumerate(dict.fromkeys(mean["method"]))}
    for (name, system), g in mean.groupby(["method", "system"], sort=False):
        ax.plot(g["round"], 100 * g["accuracy"], color=colours[name],
                linestyle="-" if system == "engine" else "--", marker=None if system == "engine" else "o",
                markersize=4, label=f"{name} ({system})")
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy (%)")
    integer_rounds(ax)
    ax.set_title(f"Test accuracy, mean over {history['seed'].nunique()} seeds: the engine solid, Flower dashed",
                 fontsize=10)
    ax.legend(fontsize=8, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    ax.grid(alpha=0.3)
    return fig


"""Numbers the papers report, with where they come from, for "paper vs ours" tables.

These are the papers' published figures (test accuracy in %), never our results; every chapter prints
them next to numbers computed by code that ran.
"""
from __future__ import annotations

import pandas as pd

__all__ = ["LDP_FL_HEADLINE", "LDP_FL_TABLE1", "LDP_FL_N_CLIENTS", "LDP_FL_FIXED_RANGE",
           "ldp_fl_comparison", "wu_comparison"]

#: LDP-FL (Sun, Qian, Chen, IJCAI 2021), Section 5 text: accuracy (%) at the stated setting.
#: eps is per weight per round; n = number of clients.
LDP_FL_HEADLINE = [
    {"dataset": "mnist", "epsilon": 1.0, "n_clients": 100, "range": "fixed (0, 0.075)", "accuracy": 96.24},
    {"dataset": "fashion_mnist", "epsilon": 4.0, "n_clients": 200, "range": "fixed (0, 0.015)", "accuracy": 86.26},
    {"dataset": "cifar10", "epsilon": 10.0, "n_clients": 500, "range": "adaptive", "accuracy": 61.46},
]

#: LDP-FL Section 5: clients n per data set (Table 1 uses the same n as the headline settings).
LDP_FL_N_CLIENTS = {p["dataset"]: p["n_clients"] for p in LDP_FL_HEADLINE}

#: LDP-FL Section 5: the fixed range (c, r) per data set (CIFAR-10's fixed range in Table 1 is not given).
LDP_FL_FIXED_RANGE = {"mnist": (0.0, 0.075), "fashion_mnist": (0.0, 0.015)}

#: LDP-FL Table 1: fixed vs adaptive range, accuracy (%), eps per weight per round.
LDP_FL_TABLE1 = [
    {"dataset": "mnist", "epsilon": 5.0, "fixed": 96.34, "adaptive": 96.06},
    {"dataset": "mnist", "epsilon": 10.0, "fixed": 96.39, "adaptive": 96.11},
    {"dataset": "fashion_mnist", "epsilon": 5.0, "fixed": 85.95, "adaptive": 87.54},
    {"dataset": "fashion_mnist", "epsilon": 10.0, "fixed": 86.10, "adaptive": 87.57},
    {"dataset": "cifar10", "epsilon": 5.0, "fixed": 13.54, "adaptive": 58.89},
    {"dataset": "cifar10", "epsilon": 10.0, "fixed": 14.28, "adaptive": 60.37},
]

#: Wu, Xu, Zhu (Appl. Sci. 2023), Section 5: experiment settings as printed (5.2.1 IID, 5.3.1 non-IID).
#: "mnist" in the paper's IID runs is scikit-learn's 8x8 digits (Section 5.1). eps per client, delta_i
#: per client; q is the per-round sampling probability (IID only); c the clipping bound; l2 = Delta_2.
#: Non-IID train sizes and the Dirichlet concentration are not given (see the chapter).
WU_SETTINGS = {
    "iid": {
        "digits": {"n_clients": 3, "rounds": 10, "batch": 50, "test_size": 300, "delta": 1 / 500, "q": 0.8,
                   "clip": 200.0, "epsilons": [1.0, 5.0, 10.0],
                   "profiles": {"{1,1,10}": [1, 1, 10], "{1,5,10}": [1, 5, 10], "{1,10,10}": [1, 10, 10]}},
        "fashion_mnist": {"n_clients": 3, "rounds": 20, "batch": 50, "test_size": 600, "delta": 1 / 1000, "q": 0.9,
                          "clip": 2.0, "epsilons": [0.05, 0.5, 1.0],
                          "profiles": {"{0.05,0.05,1}": [0.05, 0.05, 1], "{0.05,0.5,1}": [0.05, 0.5, 1],
                                       "{0.05,1,1}": [0.05, 1, 1]}},
        "covertype": {"n_clients": 10, "rounds": 50, "batch": 1000, "test_size": 30000, "train_size": 500000,
                      "delta": 1 / 50000, "q": 0.8, "clip": 2.0, "epsilons": [1.0, 5.0, 10.0],
                      "profiles": {"L/H": [1] * 5 + [10] * 5, "L/M/H": [1, 1, 1, 5, 5, 5, 5, 10, 10, 10]}},
    },
    "noniid": {
        "digits": {"n_clients": 10, "rounds": 10, "batch": 400, "test_size": 2400, "delta": 1e-5, "clip": 4.0,
                   "l2": 8.0, "epsilons": [5.0, 10.0, 15.0],
                   "profiles": {"L/H": [5] * 5 + [15] * 5, "L/M/H": [5, 5, 5, 10, 10, 10, 10, 15, 15, 15]}},
        "fashion_mnist": {"n_clients": 10, "rounds": 10, "batch": 200, "test_size": 1200, "delta": 1e-5, "clip": 4.0,
                          "l2": 8.0, "epsilons": [5.0, 10.0, 15.0],
                          "profiles": {"L/H": [5] * 5 + [15] * 5, "L/M/H": [5, 5, 5, 10, 10, 10, 10, 15, 15, 15]}},
        "covertype": {"n_clients": 10, "rounds": 20, "batch": 2500, "test_size": 30000, "delta": 1e-5, "clip": 2.0,
                      "l2": 4.0, "epsilons": [1.0, 5.0, 10.0],
                      "profiles": {"L/H": [1] * 5 + [10] * 5, "L/M/H": [1, 1, 1, 5, 5, 5, 5, 10, 10, 10]}},
    },
}

#: Wu et al. Section 5.2.2 / 5.3.2: accuracy (%) without noise, and the gains (points) of B and C over A.
WU_REPORTED = {
    ("iid", "digits"): {"no_noise": 88.7, "gain_B": 5.57, "gain_C": 11.28},
    ("iid", "fashion_mnist"): {"no_noise": 73.1, "gain_B": 3.04, "gain_C": 3.93},
    ("iid", "covertype"): {"no_noise": 49.0, "gain_B": 4.07, "gain_C": 10.90},
    ("noniid", "digits"): {"no_noise": 65.2, "gain_B": None, "gain_C": 6.97},
    ("noniid", "fashion_mnist"): {"no_noise": 49.8, "gain_B": None, "gain_C": 19.85},
    ("noniid", "covertype"): {"no_noise": 62.6, "gain_B": None, "gain_C": None},  # "does not obtain accuracy gains"
}
#: The paper's experiments as the chapter names them ("iid digits", ...), in the paper's order.
WU_EXPERIMENTS = [f"{protocol} {name}" for protocol, name in WU_REPORTED]
__all__ += ["WU_SETTINGS", "WU_REPORTED", "WU_EXPERIMENTS"]


def _mean_std(values: pd.Series, *, fmt: str = ".1f", count: bool = True) -> str:
    """'mean ± std' (sample std), one decimal (``fmt`` for the mean, e.g. "+.1f" for gains); with ``count``
    the number of seeds follows; a single value has no std; no value is "not run"."""
    if len(values) == 0:
        return "not run"
    seeds = f" ({len(values)} seed{'s' if len(values) > 1 else ''})" if count else ""
    if len(values) == 1:
        return f"{values.iloc[0]:{fmt}}{seeds}"
    return f"{values.mean():{fmt}} ± {values.std():.1f}{seeds}"


def ldp_fl_comparison(runs: pd.DataFrame, *, batch_size: int = 32, local_epochs: int = 1,
                      client_fraction: float = 1.0) -> pd.DataFrame:
    """LDP-FL's reported accuracies next to ours from stored runs (``ldptut.runcache.load_runs``).

    For each claim (Section 5 headline numbers and Table 1) the runs of the same data set, number of
    clients, epsilon (per weight per round) and range rule are selected, at the given local computation
    (which the paper does not state) and fraction of clients; "ours" is their final accuracy, mean ± std
    over seeds (sample std), and "non-private" the same for the non-private runs with identical settings
    and the same seeds.
    "fixed" is the paper's fixed range for the data set (``LDP_FL_FIXED_RANGE``), "adaptive" our rule
    (``GlobalModelRange``). Where the paper gives no fixed range (CIFAR-10's Table 1), any stored fixed
    range matches and "settings" names it as ours.
    """
    need = {"dataset", "n_clients", "epsilon", "range", "mechanism", "batch_size", "local_epochs",
            "client_fraction", "accuracy", "seed", "model", "rounds", "lr"}
    if runs.empty:
        runs = pd.DataFrame(columns=sorted(need))
    if not need <= set(runs.columns):
        raise ValueError(f"runs lacks the columns {sorted(need - set(runs.columns))}; use runcache.load_runs")
    claims = [(f"{p['dataset']} ε={p['epsilon']:g} n={p['n_clients']} {p['range']}", p["dataset"], p["epsilon"],
               p["n_clients"], p["range"], p["accuracy"]) for p in LDP_FL_HEADLINE]
    for p in LDP_FL_TABLE1:
        for rule in ("fixed", "adaptive"):
            claims.append((f"Table 1 {p['dataset']} ε={p['epsilon']:g} {rule}", p["dataset"], p["epsilon"],
                           LDP_FL_N_CLIENTS[p["dataset"]], rule, p[rule]))
    rows = []
    for label, dataset, eps, n, rule, paper in claims:
        same = runs[(runs["dataset"] == dataset) & (runs["n_clients"] == n) & (runs["batch_size"] == batch_size)
                    & (runs["local_epochs"] == local_epochs) & (runs["client_fraction"] == client_fraction)]
        if rule.startswith("fixed"):
            fixed = LDP_FL_FIXED_RANGE.get(dataset)
            prefix = "FixedRange(" if fixed is None else f"FixedRange(center={fixed[0]!r}, radius={fixed[1]!r})"
        else:
            prefix = "GlobalModelRange("
        ours = same[(same["epsilon"] == eps) & same["range"].fillna("").astype(str).str.startswith(prefix)]
        nonpriv = same[same["mechanism"].isna() & same["seed"].isin(ours["seed"])]
        settings = ""
        if len(ours):
            first = ours.iloc[0]
            settings = (f"{first['model']}, {first['rounds']} rounds, lr {first['lr']:g}, batch {batch_size}, "
                        f"{local_epochs} local epoch(s)")
            if rule.startswith("fixed") and dataset not in LDP_FL_FIXED_RANGE:
                settings += f", ours (not the paper's) {first['range']}"
        rows.append({"claim": label, "paper (%)": paper,
                     "ours (%)": _mean_std(ours["accuracy"]),
                     "ours non-private (%)": _mean_std(nonpriv["accuracy"]) if len(ours) else "",
                     "settings": settings})
    return pd.DataFrame(rows)


def wu_comparison(final: pd.DataFrame) -> pd.DataFrame:
    """Wu et al.'s reported no-noise accuracy and gains of B and C over A next to ours, per experiment.

    ``final``: the last round of every run (columns experiment "iid digits" etc., kind, profile,
    aggregation, seed, accuracy in [0, 1]). The paper does not say how it averages a gain over
    profiles; ours is the **paired** difference B - A (C - A) of runs with the same seed and profile,
    averaged over the profiles, then mean ± sample std over seeds. "exceeds spread" is "yes" when
    |mean| > std (needs at least two seeds, else "1 seed"). Rows follow ``WU_EXPERIMENTS``.
    """
    need = {"experiment", "kind", "profile", "aggregation", "seed", "accuracy"}
    if not need <= set(final.columns):
        raise ValueError(f"final lacks the columns {sorted(need - set(final.columns))}")
    present = set(final["experiment"])
    unknown = sorted(present - set(WU_EXPERIMENTS))
    if unknown:
        raise ValueError(f"no reported numbers for experiment(s) {unknown}; known: {WU_EXPERIMENTS}")
    rows = []
    for key in [k for k in WU_EXPERIMENTS if k in present]:  # the paper's order, whatever the order of the runs
        proto, name = key.split()
        rep = WU_REPORTED[(proto, name)]
        f = final[final["experiment"] == key]
        nn = 100 * f[f["profile"] == "no noise"]["accuracy"]
        rows.append({"experiment": key, "quantity": "no-noise accuracy (%)", "paper": rep["no_noise"],
                     "ours": _mean_std(nn, count=False), "exceeds spread": ""})
        pers = f[f["kind"] == "personalized"].pivot_table(index=["profile", "seed"], columns="aggregation",
                                                           values="accuracy")
        for agg in ("B", "C"):
            claim = rep[f"gain_{agg}"]
            if claim is None:
                claim = "not reported" if agg == "B" and proto == "noniid" else "none (no gain)"
            if agg not in pers or "A" not in pers:
                rows.append({"experiment": key, "quantity": f"gain of {agg} over A (points)", "paper": claim,
                             "ours": "not run", "exceeds spread": ""})
                continue
            gain = 100 * (pers[agg] - pers["A"]).groupby("seed").mean()  # averaged over profiles, per seed
            spread = "1 seed" if len(gain) < 2 else ("yes" if abs(gain.mean()) > gain.std() else "no")
            rows.append({"experiment": key, "quantity": f"gain of {agg} over A (points)", "paper": claim,
                         "ours": _mean_std(gain, fmt="+.1f", count=False), "exceeds spread": spread})
    return pd.DataFrame(rows)


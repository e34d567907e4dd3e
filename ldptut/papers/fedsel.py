"""FedSel: federated SGD under LDP with private top-k dimension selection (Liu, Cao, Yoshikawa, Chen, DASFAA 2020).

Source: ``../shared/papers/fedsel_liu2020.txt`` (arXiv 2003.10637) and NOTES.md section 4.

The generic parts live in the package: the selection mechanisms EXP / PE / PS (:mod:`ldptut.selection`, each
with its exact output law and exact privacy loss), the value perturbations PM / HM / Duchi
(:mod:`ldptut.mechanisms`: :class:`~ldptut.mechanisms.Piecewise`, :class:`~ldptut.mechanisms.Hybrid`,
:class:`~ldptut.mechanisms.TwoPoint` on [-1, 1]), the one-record-user simulator with its reporters
(:mod:`ldptut.fedsgd`) and the linear models (:mod:`ldptut.linear`). This module holds the paper's settings,
Table 3, the data as the paper prepares it, the experiment grid (:class:`FedSelConfig`), the claim checks and
the paper-vs-ours table.

Units. ε is the budget **per user over the whole training**; with E epochs each user sends one report per
epoch, each ε' = ε / E (Algorithm 1, line 3); a two-stage report spends ε1 = μ ε' on the selection and
ε2 = ε' - ε1 on the value (Theorem 3.1). The "-C" control groups spend ε1 + ε' per report.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Optional, Sequence

import pandas as pd
import torch

from .._validate import epsilon as _epsilon, one_of, pos_int, real
from .. import data as _data
from .. import fedsgd
from ..mechanisms import Hybrid, Piecewise, TwoPoint
from ..params import ChapterParams, P, chapter_params, param
from ..rng import generator
from ..runconfig import RunConfig, TrainingEnv
from ..selection import ExponentialSelection, PerturbedEncoding, PerturbedSampling
from . import Paper, Reported, cv_interval

__all__ = ["PAPER", "EPSILON_UNIT", "SETTINGS", "DATASETS", "REPORTED", "prepare", "FedSelConfig", "METHODS",
           "method_config", "configs", "hyper_parameter_free_mu", "pe_privacy_table", "two_stage_epsilon",
           "selection_seconds", "table3_runs", "gains_losses", "compare", "runs_table", "base_config", "TABLE3_METHODS",
           "SELECTION_ONLY", "IN_CLEAR", "FLAT_PAIRS", "CURVE_METHODS", "CONVERGENCE_EPSILON", "ACCUMULATION_METHODS",
           "LRS", "DIM_METHODS", "DIM_DATASET", "GRID_PARTS", "Params", "check_settings", "grid", "tuned_lrs", "tuned_configs", "HOLDOUTS",
           "plot_tuning", "dim_table", "plot_dim_sweep", "FIG2_TUNED_METHODS", "FIG2_PAIRS", "fig2_gains",
           "fig2_differences", "followup", "convergence_configs", "plot_convergence", "difference_cell", "difference",
           "in_method_order", "plot_fig2_tuned", "plot_fig2", "plot_fig3", "plot_selection_cost", "data",
           "majority_rate", "selection_check", "budget_table", "data_table", "wide", "alpha_text", "COMPARE_VIEW",
           "compare_view"]

PAPER = Paper(
    key="fedsel",
    citation="Ruixuan Liu, Yang Cao, Masatoshi Yoshikawa, Hong Chen. FedSel: Federated SGD under Local "
             "Differential Privacy with Top-k Dimension Selection. DASFAA 2020 (arXiv 2003.10637).",
    chapter="book/fedsel",
    intro="**FedSel**: report one privately selected top-k coordinate instead of one random one; the three "
          "selection mechanisms with their exact privacy loss (PE's exceeds its claim), re-run on BANK, ADULT, "
          "KDD99 and synthetic data with one-record users.",
)

EPSILON_UNIT = "per user over the training (ε' = ε/E per report, one report per epoch)"

#: The paper's data sets (Section 5.1): d as printed, records as printed; ``ours_d`` is what our encoding gives.
DATASETS = {
    "syn_l": {"paper_d": 100, "records": 60000, "c1": 0.01, "c2": 0.9, "label": "syn-L-0.01-0.9"},
    "syn_h": {"paper_d": 300, "records": 100000, "c1": 0.01, "c2": 0.9, "label": "syn-H-0.01-0.9"},
    "bank": {"paper_d": 32, "records": 45211, "label": "BANK"},
    "adult": {"paper_d": 123, "records": 48842, "label": "ADULT"},
    "kdd99": {"paper_d": 114, "records": 70000, "label": "KDD99"},
}

#: Section 5.1 ("Choices of Parameters") and Algorithm 1. What the paper does not give is marked.
SETTINGS = {
    "batch_fraction": 0.01,          # m = 0.01 N (N: the training users of a fold): 100 iterations per epoch
    "k_fraction": 0.1,               # k = 0.1 d
    "mu": 0.1,                       # ε1 = μ ε'
    "l2": 1e-4,                      # λ
    "folds": 5, "repeats": 10,       # 10 x 5-fold cross-validation
    "epochs": 1,                     # "for one epoch unless otherwise stated"; Fig. 3(a) uses two
    "compression_ratio": 0.1,        # q = 0.1 d for the compressed solution
    "theta": 0.2,                    # the hyper-parameter-free strategy's threshold (Fig. 3(c))
    "models": ("logistic", "svm"),
    "lr": "not given (the same for every method); ours: 1.0",
    "eta": "not given; ours: 0.5 (it only matters from the second epoch on)",
    "value_range": "[-1, 1]: the selected value is clipped to it (Section 3.3)",
}
LR, ETA = 1.0, 0.5

_ACC = "accuracy difference in points (%), test accuracy averaged over 10 x 5-fold cross-validation, ε = 2"

#: Table 3 (ε = 2, one epoch): gain = acc(X-PM-C) - acc(PM), loss = acc(X-PM-C) - acc(X-PM), X = EXP/PE/PS.
_TABLE3 = [
    ("syn_l", "logistic", 8.6074, 0.3517, 5.410, 1.192, 5.975, 0.4970),
    ("syn_l", "svm", 7.1950, 2.1593, 3.7704, 0.8533, 5.065, 2.0816),
    ("bank", "logistic", 2.4197, -0.157, 3.2338, 0.0464, 2.5525, 0.1463),
    ("bank", "svm", 4.3823, 0.4436, 3.4369, 0.2530, 4.0244, 0.0164),
    ("kdd99", "logistic", 2.0471, 0.5091, 2.5148, 0.2322, 2.0171, 0.3428),
    ("kdd99", "svm", 1.85629, -0.1625, 2.2168, 0.2288, 1.8291, 0.4465),
    ("adult", "logistic", 5.5745, 0.2935, 5.6445, 1.3096, 6.0535, 0.8091),
    ("adult", "svm", 5.5361, 0.1949, 5.6057, 0.9550, 5.1442, 0.3852),
]
REPORTED = [
    Reported(claim=f"{DATASETS[ds]['label']} {model} {sel.upper()}-{what}", value=value, metric=_ACC, source="Table 3",
             epsilon=2.0, epsilon_unit=EPSILON_UNIT,
             setting=(("dataset", ds), ("model", model), ("selection", sel), ("what", what)))
    for ds, model, *vals in _TABLE3
    for (sel, what), value in zip([(s, w) for s in ("exp", "pe", "ps") for w in ("gain", "loss")], vals)
]


# ------------------------------------------------------------------------------------ data
def prepare(name: str, *, seed: int = 0, device: Any = "cpu", dim: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The records of data set ``name`` (:data:`DATASETS`) as FedSel's users hold them: (x (n, d), y (n,) in {-1, +1}).

    Real data: the package's loader (numeric columns standardised, categorical one-hot; train and test
    joined, since the paper cross-validates over all records), then every column divided by its largest
    |value| so that x is in [-1, 1]^d (one-hot columns stay 0/1) and so every gradient coordinate of the
    unregularised losses is in [-1, 1], the value perturbations' input range. Labels: ADULT >50K, BANK
    "yes", KDD99 any attack = +1. KDD99: 70,000 records drawn without replacement (seed 0) from the 10 %
    file, as the paper's count. Synthetic: :func:`ldptut.data.sparse_synthetic` at the generator's own
    scale (entries N(0, 1) or 0.01 N(0, 1); values beyond [-1, 1] are clipped by the value perturbation).
    Dividing the synthetic features by their largest |value| (about 4.5) as well shrinks every gradient
    about 4.5 times against the same noise; the chapter shows what that does. ``dim`` (synthetic data only) replaces
    the data set's d, the same records and generator otherwise (the sweep over d).
    """
    one_of(name, "dataset", sorted(DATASETS))
    spec = DATASETS[name]
    if dim is not None and not name.startswith("syn"):
        raise ValueError(f"dim applies to the synthetic data sets only (syn_l, syn_h), not {name!r}")
    if name.startswith("syn"):
        d = spec["paper_d"] if dim is None else pos_int(dim, "dim")
        x, y = _data.sparse_synthetic(spec["records"], d, c1=spec["c1"], c2=spec["c2"], seed=seed)
    else:
        kw = {"binary": True} if name == "kdd99" else {}
        x, y = _data.joined(_data.load_dataset(name, **kw))
        x, y = x.float(), _data.signed_labels(y)
        if name == "kdd99":
            x, y = _data.subsample(x, y, spec["records"], generator(0, "fedsel-kdd99-subsample"))
        x = _data.max_abs_scaled(x)
    return x.to(device), y.to(device)


# ------------------------------------------------------------------------------------ runs
SELECTIONS = ("full", "random", "top", "exp", "pe", "ps", "projection", "uniform")
#: Where a run is evaluated: "test" (the cross-validation's test fold) or "validation" (a part of the training folds,
#: for tuning; :func:`ldptut.fedsgd.cross_validation`).
HOLDOUTS = ("test", "validation")
PERTURBATIONS = {"pm": Piecewise, "hm": Hybrid, "duchi": TwoPoint}


@dataclass(frozen=True, kw_only=True)
class FedSelConfig(RunConfig):
    """One cell of FedSel's experiments: all ``repeats`` x ``folds`` cross-validation runs of one method on one
    data set, trained together (R = repeats * folds runs vectorised); the record holds the mean, std, min and
    max over the R runs of the test accuracy.

    ``selection``: "full" (NP), "random" (RS / the flat solutions), "top" (NP-K, top-1), "exp" / "pe" / "ps"
    (FedSel), "projection" (the compressed solution), "uniform" (the control "U-PM": FedSel's two-stage report
    with a uniformly random index, value not rescaled by d, the whole ε' on the value); ``perturbation``: "pm" / "hm" / "duchi" or None (in
    clear). ``epsilon``: per user over the training (:data:`EPSILON_UNIT`); ``control``: the "-C" groups (the
    value gets all of ε', the selection ε1 on top); ``accumulate``: "g" or "alpha_g" (the "-O" variant).
    ``n_clients`` is the number of records (users) of the data set; ``rounds`` the iterations per epoch.
    ``holdout``: "test" (train on folds - 1 parts, evaluate on the test part) or "validation" (train on folds - 2
    parts, evaluate on one of the training parts; the test part is never touched), for tuning.
    ``dim``: the synthetic data's d instead of the data set's (the sweep over d; None: the data set's own).
    The history's last row holds every run's final accuracy (``accuracy_runs``), for paired comparisons.
    """

    kind: ClassVar[str] = "fedsel"

    selection: str = "full"
    perturbation: Optional[str] = None
    epsilon: Optional[float] = None
    mu: float = 0.1
    control: bool = False
    k_fraction: float = 0.1
    compression_ratio: float = 0.1
    epochs: int = 1
    lr: float = LR
    eta: float = ETA
    l2: float = 1e-4
    accumulate: str = "g"
    folds: int = 5
    repeats: int = 10
    eval_every: int = 10
    holdout: str = "test"
    dim: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of(self.dataset, "dataset", sorted(DATASETS))
        one_of(self.model, "model", SETTINGS["models"])
        one_of(self.selection, "selection", SELECTIONS)
        if self.perturbation is not None:
            one_of(self.perturbation, "perturbation", sorted(PERTURBATIONS))
        private = self.perturbation is not None or self.selection in ("exp", "pe", "ps")
        if private and self.epsilon is None:
            raise ValueError(f"{self.method} is private: give epsilon ({EPSILON_UNIT})")
        if not private and self.epsilon is not None:
            raise ValueError(f"{self.method} is not private: epsilon must be None")
        if self.epsilon is not None:
            _epsilon(self.epsilon)
        if not 0 < self.mu < 1:
            raise ValueError(f"mu must be in (0, 1), got {self.mu}")
        if self.control and not (self.selection in ("exp", "pe", "ps") and self.perturbation is not None):
            raise ValueError("control ('-C') applies to a private selection with a value perturbation")
        if self.selection in ("full", "top") and self.perturbation is not None:
            raise ValueError(f"selection={self.selection!r} sends in clear (the top-1 index is a function of the data); "
                             "perturbation must be None")
        if self.selection == "projection" and self.perturbation is None:
            raise ValueError("the compressed solution perturbs its projected value: give a perturbation")
        for name in ("k_fraction", "compression_ratio"):
            v = real(getattr(self, name), name, positive=True)
            if v >= 1:
                raise ValueError(f"{name} must be in (0, 1), got {v}")
        pos_int(self.epochs, "epochs")
        real(self.lr, "lr", positive=True)
        real(self.eta, "eta", nonneg=True)
        real(self.l2, "l2", nonneg=True)
        one_of(self.accumulate, "accumulate", fedsgd.ACCUMULATE)
        one_of(self.holdout, "holdout", HOLDOUTS)
        if self.dim is not None:
            if not self.dataset.startswith("syn"):
                raise ValueError(f"dim applies to the synthetic data sets only, not {self.dataset!r}")
            if pos_int(self.dim, "dim") < 2:
                raise ValueError(f"dim must be >= 2, got {self.dim}")
        if self.holdout == "validation" and self.folds < 3:
            raise ValueError(f"holdout='validation' needs folds >= 3 (one part tests, one validates), got {self.folds}")

    # ---- budgets ------------------------------------------------------------------------------------
    @property
    def epsilon_report(self) -> Optional[float]:
        """ε' = ε / E, the budget of one report (None in clear)."""
        return None if self.epsilon is None else self.epsilon / self.epochs

    @property
    def budgets(self) -> tuple[Optional[float], Optional[float]]:
        """(ε1 for the selection, ε2 for the value) of one report, as the paper allots them (Table 2)."""
        e = self.epsilon_report
        private_sel = self.selection in ("exp", "pe", "ps")
        if e is None:
            return None, None
        if self.perturbation is None:
            return e, None                               # selection only: all of ε' selects (Fig. 2)
        if not private_sel:
            return None, e                               # flat / compressed: all of ε' on the value
        e1 = self.mu * e
        return e1, (e if self.control else e - e1)

    @property
    def method(self) -> str:
        """The paper's name: "NP", "NP-RS", "NP-K", "PS", "PM", "PS-PM", "PS-PM-C", "PS-PM-O", "PM-RP"."""
        pert = (self.perturbation or "").upper().replace("DUCHI", "Duchi")
        o = "-O" if self.accumulate == "alpha_g" else ""
        if self.selection == "full":
            return "NP" + o
        if self.selection in ("random", "top"):
            return ({"random": "NP-RS", "top": "NP-K"}[self.selection] if not pert else pert) + o
        if self.selection == "projection":
            return f"{pert}-RP" + o
        if self.selection == "uniform":
            return ("U-" + pert if pert else "U") + o
        name = self.selection.upper() + (f"-{pert}" if pert else "")
        return name + ("-C" if self.control else "") + o

    def mechanism_names(self) -> list:
        """The value perturbation's mechanism name (:data:`ldptut.mechanisms.MECHANISMS`), if any; the private
        selections sample with their own exact laws (:mod:`ldptut.selection`)."""
        return [] if self.perturbation is None else [PERTURBATIONS[self.perturbation].name]

    def label(self) -> str:
        eps = "" if self.epsilon is None else f" ε={self.epsilon:g}"
        on = ", on validation" if self.holdout == "validation" else ""
        dim = "" if self.dim is None else f", d={self.dim}"
        return f"{self.method}{eps} ({DATASETS[self.dataset]['label']}{dim}, {self.model}, α={self.lr:g}{on})"

    # ---- simulator pieces ---------------------------------------------------------------------------
    def reporter(self, d: int, *, device: Any = "cpu") -> Any:
        e1, e2 = self.budgets
        k = max(1, round(self.k_fraction * d))
        pert = None if self.perturbation is None else PERTURBATIONS[self.perturbation](epsilon=e2)
        if self.selection == "full":
            return fedsgd.FullGradient()
        if self.selection == "random":
            return fedsgd.RandomCoordinate(pert)
        if self.selection == "projection":
            q = max(1, round(self.compression_ratio * d))
            phi = fedsgd.projection_matrix(d, q, generator(self.seed, "fedsel-projection"), device=device)
            return fedsgd.ProjectedCoordinate(phi, pert)
        selector = {"top": lambda: fedsgd.TopOne(), "uniform": lambda: fedsgd.UniformIndex(),
                    "exp": lambda: ExponentialSelection(epsilon=e1),
                    "pe": lambda: PerturbedEncoding(epsilon=e1, k=k),
                    "ps": lambda: PerturbedSampling(epsilon=e1, k=k)}[self.selection]()
        return fedsgd.SelectedCoordinate(selector, pert)

    def simulate(self, x: torch.Tensor, y: torch.Tensor, *, device: Any = "cpu", progress: bool = True) -> fedsgd.TrainResult:
        """Train the R = repeats x folds runs on the records (x, y) (:func:`prepare`)."""
        if x.shape[0] != self.n_clients:
            raise ValueError(f"this run has n_clients = {self.n_clients} one-record users, got {x.shape[0]} records")
        x, y = x.to(device), y.to(device)
        train_idx, test_mask = fedsgd.cross_validation(x.shape[0], folds=self.folds, repeats=self.repeats,
                                                       seed_generator=generator(self.seed, "fedsel-cv"), device=device,
                                                       holdout=self.holdout)
        m = max(1, train_idx.shape[1] // self.rounds)
        return fedsgd.train(x, y, train_idx, test_mask, reporter=self.reporter(x.shape[1], device=device),
                            model=self.model, lr=self.lr, l2=self.l2, batch_size=m, epochs=self.epochs, eta=self.eta,
                            accumulate=self.accumulate, generator=generator(self.seed, "fedsel-train", device=device),
                            eval_every=self.eval_every, progress=progress, desc=self.label())

    def group_key(self) -> Any:
        return (self.dataset, self.dim)

    @classmethod
    def train_group(cls, configs: Sequence["FedSelConfig"], *, env: TrainingEnv) -> list[pd.DataFrame]:
        out = []
        for c in configs:
            x, y = env.memo(("fedsel-data", c.dataset, c.dim), lambda: prepare(c.dataset, dim=c.dim))
            res = c.simulate(x, y, device=env.device, progress=env.progress)
            out.append(res.history.rename(columns={"iteration": "round"}))
        return out


#: The chapter's methods: name -> (selection, perturbation, control, accumulate).
METHODS = {
    "NP": ("full", None, False, "g"), "NP-RS": ("random", None, False, "g"), "NP-K": ("top", None, False, "g"),
    "EXP": ("exp", None, False, "g"), "PE": ("pe", None, False, "g"), "PS": ("ps", None, False, "g"),
    **{p.upper().replace("DUCHI", "Duchi"): ("random", p, False, "g") for p in PERTURBATIONS},
    **{f"{s.upper()}-{p.upper().replace('DUCHI', 'Duchi')}{c}": (s, p, bool(c), "g")
       for s in ("exp", "pe", "ps") for p in PERTURBATIONS for c in ("", "-C")},
    **{f"{s.upper()}-PM-O": (s, "pm", False, "alpha_g") for s in ("exp", "pe", "ps")},
    "PM-RP": ("projection", "pm", False, "g"),
    "U-PM": ("uniform", "pm", False, "g"),
}


def method_config(method: str, *, base: FedSelConfig, epsilon: Optional[float] = None) -> FedSelConfig:
    """``base`` turned into the paper's ``method`` (a :data:`METHODS` name) at ``epsilon`` (ignored in clear)."""
    one_of(method, "method", list(METHODS))
    sel, pert, control, acc = METHODS[method]
    private = pert is not None or sel in ("exp", "pe", "ps")
    return base.replace(selection=sel, perturbation=pert, control=control, accumulate=acc,
                        epsilon=epsilon if private else None)


def base_config(dataset: str, model: str, *, folds: int = 5, repeats: int = 10, seed: int = 0, **kw: Any) -> FedSelConfig:
    """NP on ``dataset`` with ``model`` at the paper's settings (100 iterations per epoch)."""
    n = DATASETS[one_of(dataset, "dataset", sorted(DATASETS))]["records"]
    return FedSelConfig(paper="fedsel", dataset=dataset, model=model, n_clients=n, rounds=100, seed=seed,
                     folds=folds, repeats=repeats, **kw)


def configs(*, datasets: Sequence[str], models: Sequence[str], epsilons: Iterable[float], methods: Sequence[str],
            folds: int = 5, repeats: int = 10, seed: int = 0, **kw: Any) -> list[tuple[str, FedSelConfig]]:
    """The grid: every method on every (data set, model), at every ε for the private ones (once for NP)."""
    out = []
    epsilons = list(epsilons)
    for ds in datasets:
        for model in models:
            b = base_config(ds, model, folds=folds, repeats=repeats, seed=seed, **kw)
            for m in methods:
                private = METHODS[m][1] is not None or METHODS[m][0] in ("exp", "pe", "ps")
                for e in (epsilons if private else [None]):
                    out.append(("grid", method_config(m, base=b, epsilon=e)))
    return out


# ------------------------------------------------------------------------------------ the chapter's grid
#: Table 3's methods (the columns of the paper's table).
TABLE3_METHODS = ["NP", "PM", "U-PM", "EXP-PM", "PE-PM", "PS-PM", "EXP-PM-C", "PE-PM-C", "PS-PM-C"]
#: Fig. 2: the selections alone (ε1 = ε), the runs in clear, the flat and two-stage pairs, and the rest of its panels.
SELECTION_ONLY = ["EXP", "PE", "PS"]
IN_CLEAR = ["NP", "NP-RS", "NP-K"]
FLAT_PAIRS = [("PM", "PS-PM"), ("HM", "PS-HM"), ("Duchi", "PS-Duchi")]
CURVE_METHODS = SELECTION_ONLY + IN_CLEAR + [m for pair in FLAT_PAIRS for m in pair] + ["EXP-PM", "PE-PM", "PM-RP"]
#: The convergence check: the selections alone at this ε (per user, one epoch) beside the runs in clear.
CONVERGENCE_EPSILON = 4.0
#: Fig. 3(a): g vs αg ("-O") accumulation.
ACCUMULATION_METHODS = ["PM", "EXP-PM", "PE-PM", "PS-PM", "EXP-PM-O", "PE-PM-O", "PS-PM-O"]
#: The learning rates each Table 3 method is tuned over (on validation): from below 1/d (a flat report is d times
#: a selected one, so flat PM at α/d steps like a two-stage report at α; d is 51-118 here) to 30 times the
#: paper-silent default 1 (a two-stage report moves one coordinate, unscaled). The paper-scale parameter file uses
#: it; the chapter's defaults a coarser grid.
LRS = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0)
#: The sweep over d (Table 1, Theorem 4.1: the two-stage report's noise and required batch size grow more slowly
#: with d than the flat one's): synthetic data at each d of ``dims``, these methods, each at its own tuned α.
DIM_METHODS = ["NP", "PM", "U-PM", "EXP-PM", "PS-PM"]
DIM_DATASET = "syn_l"
#: Fig. 2's private methods at each one's own α (chosen on validation, as Table 3's): the flat and two-stage pairs,
#: the uniform-index control U-PM and the compressed PM-RP; and the differences its table gives (a − b, points).
FIG2_TUNED_METHODS = ["PM", "U-PM", "EXP-PM", "PE-PM", "PS-PM", "HM", "PS-HM", "Duchi", "PS-Duchi", "PM-RP"]
FIG2_PAIRS = [("PS-PM", "PM"), ("EXP-PM", "PM"), ("PE-PM", "PM"), ("PS-PM", "U-PM"), ("PS-HM", "HM"),
              ("PS-Duchi", "Duchi"), ("PM-RP", "PM"), ("PM-RP", "PS-PM")]
#: The chapter's experiments, in the notebook's order.
GRID_PARTS = ("table 3", "tuning", "fig 2", "fig 2 tuning", "convergence", "convergence tuning", "fig 3a", "fig 3b",
              "d sweep")

#: The chapter's parameters and their checks (:func:`ldptut.notebooks.setup` checks them; the notebook's parameters
#: cell holds the defaults, ``book/params/fedsel-paper.yaml`` the paper-scale values); :func:`check_settings` adds
#: the checks a type cannot say.
@chapter_params
class Params(ChapterParams):
    """The chapter's parameters (``book/fedsel.ipynb``'s parameters cell: the same names, defaults and order),
    each with its check; a parameter file gives other values for some."""

    datasets: list[str] = param(P.list_of(P.choice("bank", "adult", "kdd99", "syn_l", "syn_h")), ["adult", "kdd99"])
    models: list[str] = param(P.list_of(P.choice("logistic", "svm")), ["logistic"])
    epsilon: float = param(P.pos_float, 2.0)
    epsilons: list[float] = param(P.list_of(P.pos_float), [0.5, 4.0])
    curve_dataset: str = param(P.choice("bank", "adult", "kdd99", "syn_l", "syn_h"), "adult")
    folds: int = param(P.pos_int, 3)
    repeats: int = param(P.pos_int, 1)
    mu: float = param(P.fraction, 0.1)
    mus: list[float] = param(P.list_of(P.fraction), [0.05, 0.1, 0.2, 0.4, 0.8])
    lr: float = param(P.pos_float, 1.0)
    lrs: list[float] = param(P.list_of(P.pos_float), [0.01, 0.3, 10.0])
    tune_repeats: int = param(P.pos_int, 1)
    dims: list[int] = param(P.list_of(P.pos_int), [25, 100])
    fig2_tuned_methods: list[str] = param(
        P.list_of(P.choice(*[m for m in METHODS if METHODS[m][1] is not None])),
        ["PM", "U-PM", "PS-PM"])
    eta: float = param(P.real, 0.5)
    accumulation_epochs: int = param(P.pos_int, 2)
    accumulation_lr: float = param(P.pos_float, 0.3)
    timing_dims: list[int] = param(P.list_of(P.pos_int), [10, 100, 1000, 10000])
    selection_samples: int = param(P.pos_int, 200000)
    device: str = param(P.device, "auto")
    run_cache: Optional[str] = param(P.optional(P.string), None)
    paper_runs_dir: Optional[str] = param(P.optional(P.string), "runs/cache/fedsel")

    def check(self) -> None:
        check_settings(self)




def check_settings(p: Mapping[str, Any]) -> None:
    """What the parameters' own checks cannot say (:meth:`Params.check` calls it): cross-validation with a validation part needs ``folds`` >= 3 (one
    part tests, one validates), and the value needs a budget too, so ``mu`` and every ``mus`` < 1 (ValueError
    otherwise)."""
    folds, mu, mus = p["folds"], p["mu"], p["mus"]
    if folds < 3:
        raise ValueError(f"folds must be >= 3 (cross-validation with a validation part for tuning), got {folds}")
    if not mu < 1 or not all(m < 1 for m in mus):
        raise ValueError(f"mu and mus must be in (0, 1): the value needs a budget too; got mu = {mu}, mus = {mus}")


def grid(p: Mapping[str, Any], *, parts: Optional[Sequence[str]] = None) -> list[tuple[str, FedSelConfig]]:
    """The chapter's experiment grid from its parameters ``p`` (the notebook's names, e.g. a parameter file over the
    defaults), as (experiment, run) pairs in the notebook's order (:data:`GRID_PARTS`; ``parts`` selects some):

    * "table 3": :data:`TABLE3_METHODS` on every data set and model at ``epsilon``, all at one learning rate ``lr``
      (the paper's protocol: "the same in each case");
    * "tuning": the same methods at every learning rate of ``lrs``, each evaluated on a validation part of the
      training folds (``holdout="validation"``, ``tune_repeats`` x ``folds``); :func:`tuned_lrs` picks each
      method's own α and :func:`tuned_configs` gives Table 3's runs on test at it (they depend on these results,
      so they are not in the grid);
    * "fig 2": :data:`CURVE_METHODS` on ``curve_dataset``, both models, every ε of ``epsilons``;
    * "fig 2 tuning": ``fig2_tuned_methods`` on ``curve_dataset``, both models, every ε, every α of ``lrs`` on
      validation (``tune_repeats``); :func:`tuned_configs` gives their test runs, :func:`fig2_gains` the table;
    * "convergence": the selections alone at :data:`CONVERGENCE_EPSILON` and the runs in clear, first model,
      evaluated every 5 iterations;
    * "convergence tuning": the same methods at every α of ``lrs`` on validation (``tune_repeats``); :func:`followup`
      gives their test runs at the chosen α, evaluated every 5 iterations;
    * "fig 3a": :data:`ACCUMULATION_METHODS` over ``accumulation_epochs`` epochs at ``accumulation_lr``;
    * "fig 3b": PS-PM at every μ of ``mus`` and ε, and flat PM at every ε;
    * "d sweep": :data:`DIM_METHODS` on :data:`DIM_DATASET` at every d of ``dims``, first model, ``epsilon``, every α
      of ``lrs`` on validation (``tune_repeats``); :func:`tuned_configs` gives their test runs.

    A run may serve several experiments (e.g. PM at ε = 2 on the curve data set). The chapter and
    ``python -m ldptut.sweep fedsel`` both build their runs here."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    check_settings(p)
    unknown = [x for x in (parts or ()) if x not in GRID_PARTS]
    if unknown:
        raise ValueError(f"unknown parts {unknown}; the chapter's experiments: {', '.join(GRID_PARTS)}")
    common = {"folds": p["folds"], "repeats": p["repeats"], "eta": p["eta"]}
    curve, first = [p["curve_dataset"]], list(p["models"])[:1]
    epsilons = p["epsilons"]
    want = GRID_PARTS if parts is None else parts
    out: list[tuple[str, FedSelConfig]] = []
    if "table 3" in want:
        out += [("table 3", c) for _, c in configs(datasets=p["datasets"], models=p["models"], epsilons=[p["epsilon"]],
                                                   methods=TABLE3_METHODS, mu=p["mu"], lr=p["lr"], **common)]
    if "tuning" in want:
        tune = {**common, "repeats": p["tune_repeats"]}
        out += [("tuning", c.replace(lr=a, holdout="validation")) for a in p["lrs"]
                for _, c in configs(datasets=p["datasets"], models=p["models"], epsilons=[p["epsilon"]],
                                    methods=TABLE3_METHODS, mu=p["mu"], **tune)]
    if "fig 2" in want:
        out += [("fig 2", c) for _, c in configs(datasets=curve, models=p["models"], epsilons=epsilons,
                                                 methods=CURVE_METHODS, mu=p["mu"], lr=p["lr"], **common)]
    if "fig 2 tuning" in want:
        tune = {**common, "repeats": p["tune_repeats"]}
        out += [("fig 2 tuning", c.replace(lr=a, holdout="validation")) for a in p["lrs"]
                for _, c in configs(datasets=curve, models=p["models"], epsilons=epsilons,
                                    methods=p["fig2_tuned_methods"], mu=p["mu"], **tune)]
    if "convergence" in want:
        out += [("convergence", c.replace(eval_every=5))
                for _, c in configs(datasets=curve, models=first, epsilons=[CONVERGENCE_EPSILON],
                                    methods=IN_CLEAR + SELECTION_ONLY, mu=p["mu"], lr=p["lr"], **common)]
    if "convergence tuning" in want:
        tune = {**common, "repeats": p["tune_repeats"]}
        out += [("convergence tuning", c.replace(lr=a, holdout="validation")) for a in p["lrs"]
                for _, c in configs(datasets=curve, models=first, epsilons=[CONVERGENCE_EPSILON],
                                    methods=IN_CLEAR + SELECTION_ONLY, mu=p["mu"], **tune)]
    if "fig 3a" in want:
        out += [("fig 3a", c) for _, c in configs(datasets=curve, models=first, epsilons=epsilons,
                                                  methods=ACCUMULATION_METHODS, mu=p["mu"], lr=p["accumulation_lr"],
                                                  epochs=p["accumulation_epochs"], **common)]
    if "fig 3b" in want:
        out += [("fig 3b", method_config("PS-PM", base=base_config(p["curve_dataset"], first[0], mu=m, lr=p["lr"], **common),
                                      epsilon=e)) for m in p["mus"] for e in epsilons]
        out += [("fig 3b", c) for _, c in configs(datasets=curve, models=first, epsilons=epsilons, methods=["PM"],
                                                  lr=p["lr"], **common)]
    if "d sweep" in want:
        tune = {**common, "repeats": p["tune_repeats"]}
        out += [("d sweep", c.replace(lr=a, holdout="validation", dim=d)) for d in p["dims"] for a in p["lrs"]
                for _, c in configs(datasets=[DIM_DATASET], models=first, epsilons=[p["epsilon"]], methods=DIM_METHODS,
                                    mu=p["mu"], **tune)]
    return out


def tuned_lrs(runs: pd.DataFrame) -> pd.DataFrame:
    """Each method's own learning rate, chosen on validation: from runs evaluated with ``holdout="validation"``
    (:func:`runs_table` rows; other runs are ignored), for each (data set, model, method, ε, μ) the α of the highest
    mean validation accuracy (ties: the smallest α). Columns: dataset, model, method, epsilon, mu, lr (the choice),
    "validation accuracy" (%), "at grid edge" (the choice is the smallest or largest α tried: the grid may not
    reach the best), "tried" (the α tried, ascending), config (the chosen validation run); runs over another
    ``dim`` are tuned separately (column dim)."""
    if runs.empty:
        return pd.DataFrame(columns=["dataset", "model", "method", "epsilon", "mu", "dim", "lr", "validation accuracy",
                                     "at grid edge", "tried", "config"])
    val = runs[runs["config"].map(lambda c: c.holdout == "validation")]
    rows = []
    keys = val["config"].map(lambda c: (c.dataset, c.model, c.method, c.epsilon, c.mu, c.epochs, c.repeats,
                                        c.folds, c.dim))
    for key, g in val.groupby(keys, sort=False):
        g = g.assign(_lr=g["config"].map(lambda c: c.lr)).sort_values("_lr", kind="stable")
        if g["_lr"].duplicated().any():
            raise ValueError(f"two validation runs at one α for {key[2]} on {key[0]} / {key[1]}: filter them first")
        best = g.loc[g["accuracy"].idxmax()] if g["accuracy"].notna().any() else g.iloc[0]
        tried = list(g["_lr"])
        rows.append({"dataset": key[0], "model": key[1], "method": key[2], "epsilon": key[3], "mu": key[4], "dim": key[8],
                     "lr": best["_lr"], "validation accuracy": best["accuracy"],
                     "at grid edge": len(tried) > 1 and best["_lr"] in (tried[0], tried[-1]), "tried": tried,
                     "config": best["config"]})
    return pd.DataFrame(rows)


def tuned_configs(tuned: pd.DataFrame, *, repeats: int, experiment: str = "table 3 tuned") -> list[tuple[str, FedSelConfig]]:
    """Table 3's runs on test at each method's tuned α (:func:`tuned_lrs`): the chosen validation run with
    ``holdout="test"`` and ``repeats`` repetitions (the same folds and seed as every other test run, so the gains
    are paired fold by fold), as (``experiment``, run) pairs."""
    pos_int(repeats, "repeats")
    return [(experiment, c.replace(holdout="test", repeats=repeats)) for c in tuned["config"]]


# ------------------------------------------------------------------------------------ claim checks
def hyper_parameter_free_mu(*, m: int, epsilon_report: float, d: int, theta: float = 0.2) -> float:
    """Section 5.3's strategy, in our reading: first give the value ε2 >= sqrt(d ln d / m) (the Ω's constant
    is not given; we take 1), then the rest of ε' to the selection, at most the share θ:
    μ = clip(1 - sqrt(d ln d / m) / ε', 0, θ)."""
    need = math.sqrt(pos_int(d, "d") * math.log(d) / pos_int(m, "m"))
    return min(real(theta, "theta", positive=True), max(0.0, 1.0 - need / _epsilon(epsilon_report)))


def pe_privacy_table(*, ds: Sequence[int], k_fractions: Sequence[float] = (0.1,), epsilons: Sequence[float] = (1.0,),
                     ks: Sequence[int] = ()) -> pd.DataFrame:
    """PE's exact privacy loss (:meth:`~ldptut.selection.PerturbedEncoding.privacy_loss`) against Lemma 2's ε1,
    for each d, k (explicit ``ks`` or ``round(k_fraction d)``) and ε1; EXP and PS beside it (both exact)."""
    rows = []
    for d in ds:
        kk = list(ks) or sorted({max(1, round(f * d)) for f in k_fractions})
        for k in kk:
            if not 1 <= k < d:
                continue
            for e in epsilons:
                pe = PerturbedEncoding(epsilon=e, k=k).privacy_loss(d)
                rows.append({"d": d, "k": k, "ε1 (claimed)": e, "PE true loss": pe, "PE / ε1": pe / e,
                             "PS true loss": PerturbedSampling(epsilon=e, k=k).privacy_loss(d),
                             "EXP true loss": ExponentialSelection(epsilon=e).privacy_loss(d)})
    return pd.DataFrame(rows)


def two_stage_epsilon(run: FedSelConfig, d: int) -> dict[str, float]:
    """One report's budget as claimed (ε1 + ε2) and as it truly is (the selection's exact loss + ε2), and the
    composed figure per user over the training (E reports).

    A run without value perturbation (``perturbation=None``: the selection-only runs of Fig. 2 and the "PE" row of
    the budget table) sends the selected coordinate's raw value, unclipped: one report already tells the value, so
    its true loss is unbounded (``inf``), whatever the selection's ε1; ``private`` says whether the report is LDP at
    all."""
    e1, e2 = run.budgets
    k = max(1, round(run.k_fraction * d))
    true_sel = 0.0
    if run.selection in ("exp", "pe", "ps") and e1 is not None:
        sel = {"exp": lambda: ExponentialSelection(epsilon=e1), "pe": lambda: PerturbedEncoding(epsilon=e1, k=k),
               "ps": lambda: PerturbedSampling(epsilon=e1, k=k)}[run.selection]()
        true_sel = sel.privacy_loss(d)
    claimed = (e1 or 0.0) + (e2 or 0.0)
    private = run.perturbation is not None
    true = true_sel + (e2 or 0.0) if private else math.inf   # the raw value is sent in clear
    return {"ε1": e1 or 0.0, "ε2": e2 or 0.0, "per report, claimed": claimed, "per report, true": true,
            "per user (E reports), claimed": claimed * run.epochs, "per user (E reports), true": true * run.epochs,
            "private": private}


def selection_seconds(d: int, *, users: int = 1000, repeats: int = 5, epsilon: float = 1.0, k_fraction: float = 0.1,
                      seed: int = 0) -> dict[str, float]:
    """Seconds per user for one selection (best of ``repeats``, ``users`` users vectorised) at dimension d:
    EXP, PE, PS, the top-1 (no privacy) and a random coordinate, on Gaussian vectors."""
    d = pos_int(d, "d")
    k = max(1, round(k_fraction * d))
    v = torch.randn(users, d, generator=generator(seed, "fedsel-timing"))
    g = generator(seed, "fedsel-timing-draws")
    sels = {"EXP": ExponentialSelection(epsilon=epsilon), "PE": PerturbedEncoding(epsilon=epsilon, k=k),
            "PS": PerturbedSampling(epsilon=epsilon, k=k), "top-1": fedsgd.TopOne()}
    out = {}
    for name, s in sels.items():
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            s.select(v, g)
            best = min(best, time.perf_counter() - t0)
        out[name] = best / users
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        torch.randint(d, (users,), generator=g)
        best = min(best, time.perf_counter() - t0)
    out["random"] = best / users
    return out


# ------------------------------------------------------------------------------------ paper vs ours
def table3_runs(runs: pd.DataFrame, *, lr: Optional[float] = LR, mu: float = 0.1) -> pd.DataFrame:
    """The runs at Table 3's settings, evaluated on test: one epoch, accumulating g, the data sets' own d (not the
    sweep over d), the given ``mu`` and ``lr``
    (a cache holds other settings too, e.g. the tuning runs); ``lr=None`` keeps every learning rate (for the runs at
    each method's tuned α, one per method)."""
    if runs.empty:
        return runs
    keep = runs["config"].map(lambda c: c.epochs == 1 and c.accumulate == "g" and c.mu == mu and c.dim is None
                              and c.holdout == "test" and (lr is None or c.lr == lr))
    return runs[keep]


def _cell(runs: pd.DataFrame, ds: str, model: str, method: str, eps: float) -> Optional[pd.Series]:
    sel = runs[(runs["dataset"] == ds) & (runs["model"] == model)]
    sel = sel[sel["config"].map(lambda c: c.method == method and c.epsilon == eps)]
    if len(sel) > 1:
        raise ValueError(f"{len(sel)} runs of {method} at ε = {eps:g} on {ds} / {model}: filter them first "
                         "(table3_runs)")
    return None if sel.empty else sel.iloc[0]


def _difference(a: Optional[pd.Series], b: Optional[pd.Series]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """acc(a) - acc(b) in points, and its 95 % interval paired fold by fold (:func:`ldptut.papers.cv_interval`)
    where both runs hold their per-fold accuracies over the same folds (None otherwise)."""
    if a is None or b is None:
        return None, None, None
    diff = float(a["accuracy"]) - float(b["accuracy"])
    ra, rb = a.get("accuracy_runs"), b.get("accuracy_runs")
    ca, cb = a["config"], b["config"]
    paired = (isinstance(ra, list) and isinstance(rb, list) and len(ra) == len(rb) > 1
              and (ca.seed, ca.folds, ca.repeats, ca.holdout) == (cb.seed, cb.folds, cb.repeats, cb.holdout))
    if not paired:
        return diff, None, None
    _, lo, hi = cv_interval([100 * (x - y) for x, y in zip(ra, rb)], folds=ca.folds)
    return diff, lo, hi


def gains_losses(runs: pd.DataFrame, *, epsilon: float = 2.0, lr: Optional[float] = LR, mu: float = 0.1) -> pd.DataFrame:
    """Table 3 from runs (:func:`runs_table` rows) at ``lr`` and ``mu`` (:func:`table3_runs`; ``lr=None``: each
    method's own α, one run per method): for each (data set, model) and X in EXP / PE / PS, gain =
    acc(X-PM-C) - acc(PM) and loss = acc(X-PM-C) - acc(X-PM), in points, at ``epsilon``; and the gain over the
    control, acc(X-PM-C) - acc(U-PM): the same two-stage report (not rescaled by d, accumulator kept, the whole ε'
    on the value) with a uniformly random index, so what is left is what the private selection itself adds (None
    where a run is missing). Each difference has a 95 % interval ("... lo", "... hi"), paired over the
    cross-validation runs with the corrected resampled t (:func:`ldptut.papers.cv_interval`); None where the
    records hold no per-run accuracies (runs stored before they were kept)."""
    runs = table3_runs(runs, lr=lr, mu=mu)
    rows = []
    for (ds, model), _ in runs.groupby(["dataset", "model"], sort=False):
        control = _cell(runs, ds, model, "U-PM", epsilon)
        for sel in ("EXP", "PE", "PS"):
            c, flat, two = (_cell(runs, ds, model, m, epsilon) for m in (f"{sel}-PM-C", "PM", f"{sel}-PM"))
            row = {"dataset": ds, "model": model, "selection": sel}
            for name, other in (("gain", flat), ("loss", two), ("gain over control", control)):
                row[name], row[f"{name} lo"], row[f"{name} hi"] = _difference(c, other)
            rows.append(row)
    return pd.DataFrame(rows)


def difference(a: Optional[pd.Series], b: Optional[pd.Series]) -> tuple[Optional[float], Optional[float], Optional[float]]:
    """acc(a) - acc(b) in points for two :func:`runs_table` rows and its 95 % interval (lo, hi) paired over their
    cross-validation runs (:func:`ldptut.papers.cv_interval`); lo and hi are None where the rows hold no per-run
    accuracies over the same folds, all three None where either row is None."""
    return _difference(a, b)


def _with_interval(v: Any, lo: Any, hi: Any) -> str:
    if v is None or pd.isna(v):
        return "not run"
    if lo is None or pd.isna(lo):
        return f"{v:+.2f}"
    return f"{v:+.2f} [{lo:+.1f}, {hi:+.1f}]"


def difference_cell(a: Optional[pd.Series], b: Optional[pd.Series]) -> str:
    """acc(a) - acc(b) in points for two :func:`runs_table` rows, as "difference [lo, hi]" with the 95 % interval
    paired over their cross-validation runs (:func:`ldptut.papers.cv_interval`), the difference alone where
    the rows hold no per-run accuracies over the same folds, "not run" where either row is None."""
    return _with_interval(*_difference(a, b))


def _verdict(paper: float, lo: Any, hi: Any) -> str:
    """"yes" when our 95 % interval excludes 0 on the paper's side, "opposite" when it excludes 0 on the other
    side, "unclear" when it contains 0, "" without an interval."""
    if lo is None or pd.isna(lo):
        return ""
    if lo > 0 or hi < 0:
        return "yes" if (lo > 0) == (paper > 0) else "opposite"
    return "unclear"


def compare(runs: pd.DataFrame, *, lr: Optional[float] = LR, mu: float = 0.1) -> pd.DataFrame:
    """Table 3 (paper) beside ours (:func:`gains_losses` at ε = 2 per user, one epoch, ``lr`` for every method, or
    ``lr=None`` for the runs at each method's tuned α), one row per data set, model and selection: each of our
    differences with its paired 95 % interval, "gain: sign reproduced" ("yes" only where the interval excludes 0 on
    the paper's side; "unclear" where it contains 0), and our gain over the uniform-index control U-PM (the paper
    has none); "not run" where we have no runs."""
    runs = table3_runs(runs, lr=lr, mu=mu)
    cols = ["dataset", "model", "selection"] + [f"{n}{s}" for n in ("gain", "loss", "gain over control")
                                                for s in ("", " lo", " hi")]
    ours = gains_losses(runs, lr=lr, mu=mu) if len(runs) else pd.DataFrame(columns=cols)
    rows = []
    for ds, model, *vals in _TABLE3:
        for i, sel in enumerate(("EXP", "PE", "PS")):
            o = ours[(ours["dataset"] == ds) & (ours["model"] == model) & (ours["selection"] == sel)]
            get = lambda name: (None, None, None) if o.empty else tuple(o[name + s].iloc[0] for s in ("", " lo", " hi"))  # noqa: E731
            n = ""
            if not o.empty:
                c = runs[(runs["dataset"] == ds) & (runs["model"] == model)]["config"].iloc[0]
                n = f"{c.repeats} x {c.folds}-fold"
            gain = get("gain")
            rows.append({"data set": DATASETS[ds]["label"], "model": model, "selection": sel,
                         "gain, paper": vals[2 * i], "gain, ours [95 % CI]": _with_interval(*gain),
                         "gain: sign reproduced": _verdict(vals[2 * i], gain[1], gain[2]),
                         "loss, paper": vals[2 * i + 1], "loss, ours [95 % CI]": _with_interval(*get("loss")),
                         "gain over U-PM, ours [95 % CI]": _with_interval(*get("gain over control")),
                         "ours: runs": n})
    return pd.DataFrame(rows)


def runs_table(records: Iterable[Any]) -> pd.DataFrame:
    """:func:`ldptut.runcache.records_table` of FedSel records plus ``method``, ``accuracy_std`` (sample std over
    the R cross-validation runs, points), ``accuracy_runs`` (the R runs' final accuracies in [0, 1], a list; None for
    records stored before they were kept) and ``misclassification`` (%), the paper's Fig. 2 axis."""
    from ..runcache import records_table

    records = list(records)
    t = records_table(records)
    if t.empty:
        return t
    t["method"] = t["config"].map(lambda c: c.method)
    t["accuracy_std"] = [100 * float(r.history["accuracy_std"].iloc[-1]) for r in records]
    t["accuracy_runs"] = [_runs_of(r.history) for r in records]
    t["misclassification"] = 100 - t["accuracy"]
    return t


def _runs_of(history: pd.DataFrame) -> Optional[list]:
    if "accuracy_runs" not in history:
        return None
    v = history["accuracy_runs"].iloc[-1]
    return [float(a) for a in v] if isinstance(v, (list, tuple)) else None


def _eps_axis(ax, epsilons: Sequence[float], *, xlabel: str = "ε per user (one epoch)",
              majority: Optional[float] = None) -> None:
    """A log ε axis with a tick at each ε, misclassification on y, the constant classifier's rate (``majority``:
    its accuracy, %) as a dashed line, a light grid and a small legend."""
    import matplotlib.pyplot as plt

    ax.set(xscale="log", xlabel=xlabel, ylabel="misclassification (%)")
    ax.set_xticks(list(epsilons), [f"{e:g}" for e in epsilons])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    if majority is not None:
        ax.axhline(100 - majority, color="tab:red", ls="--", lw=0.8, label="majority class")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6.5, handlelength=1.6, labelspacing=0.3)


def _sweep(ax, runs: pd.DataFrame, methods: Sequence[str], *, x: str = "epsilon", y: str = "misclassification") -> None:
    """One line per method of ``runs`` (:func:`runs_table` rows) against ``x``, error bars ± the std over the
    cross-validation runs; a method in clear (no ε) as a dotted horizontal line. Points of different methods are
    shifted slightly along the (log) x axis so that coinciding ones stay visible."""
    clear_colors = {"NP": "black", "NP-RS": "tab:gray", "NP-K": "tab:brown"}
    present = [m for m in methods if m in set(runs["method"])]
    private = [m for m in present if not runs[runs["method"] == m][x].isna().all()]
    for m in present:
        t = runs[runs["method"] == m]
        if m not in private:
            ax.axhline(t[y].iloc[0], ls=":", color=clear_colors.get(m, "k"), label=f"{m} (in clear)")
            continue
        i = private.index(m)
        shift = 1.04 ** (i - (len(private) - 1) / 2)
        t = t.sort_values(x)
        ax.errorbar(t[x] * shift, t[y], yerr=t["accuracy_std"], marker="os^vDx<>"[i % 8], ms=4,
                    ls=["-", "--", ":", "-."][i % 4], lw=1.2, capsize=2, label=m)


def plot_tuning(runs: pd.DataFrame, *, model: str, majority: Optional[Mapping[str, float]] = None) -> Any:
    """Validation accuracy (%) against the learning rate α (log axis), one panel per data set of ``runs`` (the
    "tuning" runs, :func:`runs_table` rows) for ``model``, two panels per row, one line per method, each method's
    chosen α (:func:`tuned_lrs`) circled; ``majority`` (data set -> %) draws the constant classifier's rate. The
    figure is as wide as the book's column (:func:`ldptut.display.figure`). Returns the figure."""
    from matplotlib.ticker import FuncFormatter

    from ..display import figure

    val = runs[runs["config"].map(lambda c: c.holdout == "validation" and c.model == model)]
    datasets = list(dict.fromkeys(val["dataset"]))
    if not datasets:
        raise ValueError(f"no validation runs for model {model!r}")
    tuned = tuned_lrs(val)
    ncols = 1 if len(datasets) == 1 else 2
    nrows = math.ceil(len(datasets) / ncols)
    fig, axes = figure(ncols, nrows, height=2.7 * nrows + 0.7, squeeze=False)
    styles = ["-", "--", ":", "-."]
    flat = list(axes.flat)
    for ax, ds in zip(flat, datasets):
        t = val[val["dataset"] == ds].assign(lr=lambda f: f["config"].map(lambda c: c.lr))
        for i, method in enumerate(m for m in TABLE3_METHODS if m in set(t["method"])):
            line = t[t["method"] == method].sort_values("lr")
            (h,) = ax.plot(line["lr"], line["accuracy"], ls=styles[i % 4], marker="os^vDx<>P"[i % 9], ms=4, lw=1.2,
                           label=method)
            pick = tuned[(tuned["dataset"] == ds) & (tuned["method"] == method)]
            if len(pick):
                ax.plot(pick["lr"], pick["validation accuracy"], "o", mfc="none", mec=h.get_color(), ms=10, mew=1.2)
        if majority and ds in majority:
            ax.axhline(majority[ds], color="tab:red", lw=0.8, ls="--", label="majority class")
        ax.set(xscale="log", xlabel="learning rate α", ylabel="validation accuracy (%)",
               title=f"{DATASETS[ds]['label']}, {model}")
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.grid(alpha=0.3)
    for ax in flat[len(datasets):]:
        ax.set_visible(False)
    handles, labels = flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 5), fontsize=7, frameon=False)
    return fig


def plot_fig2(runs: pd.DataFrame, *, majority: Optional[float] = None, models: Optional[Sequence[str]] = None) -> Any:
    """Fig. 2 at one α (the paper's protocol): misclassification (%) on test against ε per user (log axis), mean ±
    std over the cross-validation runs, for each model of ``runs`` (:func:`runs_table` rows of the "fig 2" runs, one
    data set) four panels, two per row: the selections alone against the runs in clear (not private: the selected
    value is sent as it is), PM flat against two-stage, HM and Duchi flat against PS, and the compressed PM-RP;
    ``majority`` (accuracy %, the constant classifier) draws its rate. Returns the figure."""
    from ..display import figure

    models = list(models or dict.fromkeys(runs["model"]))
    label = ", ".join(DATASETS[d]["label"] for d in sorted(set(runs["dataset"])))
    epsilons = sorted(e for e in set(runs["epsilon"]) if not pd.isna(e))
    panels = [("selection only, not private", IN_CLEAR + SELECTION_ONLY),
              ("PM: flat vs two-stage", ["PM", "PS-PM", "EXP-PM", "PE-PM"]),
              ("HM and Duchi: flat vs PS", ["HM", "PS-HM", "Duchi", "PS-Duchi"]),
              ("compressed (q = 0.1 d)", ["PM", "PS-PM", "PM-RP"])]
    fig, axes = figure(2, 2 * len(models), height=2.9 * 2 * len(models), squeeze=False)
    for k, model in enumerate(models):
        t = runs[runs["model"] == model]
        for ax, (title, methods) in zip(axes[2 * k:2 * k + 2].flat, panels):
            _sweep(ax, t, methods)
            ax.set_title(f"{label}, {model}: {title}", fontsize=9)
            _eps_axis(ax, epsilons, majority=majority)
    return fig


def plot_fig3(f3a: pd.DataFrame, f3b: pd.DataFrame, *, majority: Optional[float] = None, epochs: int = 2,
              lr: float = 0.3) -> Any:
    """Fig. 3, two panels: (a) accumulating g against αg ("-O") over ``epochs`` epochs at α = ``lr`` (``f3a``: the
    "fig 3a" runs), (b) PS-PM at each budget split μ and flat PM (``f3b``: the "fig 3b" runs, one epoch; column
    ``label``); misclassification (%) on test against ε per user, mean ± std over the cross-validation runs.
    Returns the figure."""
    from ..display import figure

    fig, (a, b) = figure(2, height=3.6)
    _sweep(a, f3a, list(dict.fromkeys(f3a["method"])))
    a.set_title(f"(a) g vs αg (-O), {epochs} epochs, α = {lr:g}", fontsize=9)
    _eps_axis(a, sorted(set(f3a["epsilon"])), xlabel=f"ε per user ({epochs} epochs)", majority=majority)
    for i, (lab, t) in enumerate(f3b.groupby("label", sort=False)):
        t = t.sort_values("epsilon")
        b.errorbar(t["epsilon"], t["misclassification"], yerr=t["accuracy_std"], marker="os^vDx"[i % 6], ms=4,
                   ls="--" if lab.startswith("PM") else "-", lw=1.2, capsize=2, label=lab)
    b.set_title("(b) the budget split μ (ε1 = μ ε'), one epoch", fontsize=9)
    _eps_axis(b, sorted(set(f3b["epsilon"])), majority=majority)
    return fig


def plot_selection_cost(times: pd.DataFrame) -> Any:
    """Microseconds per user and selection against d (log-log), one line per selector (``times``: one row per d,
    index d, columns the selectors' seconds per user, :func:`selection_seconds`), with lines ∝ d and ∝ d² through
    EXP at the largest d. Returns the figure."""
    from ..display import figure

    fig, ax = figure(1, height=3.6)
    for i, col in enumerate(times.columns):
        ax.plot(times.index, 1e6 * times[col], marker="os^vD"[i % 5], ms=4, label=col)
    dims = times.index.to_series().astype(float)
    d_last, exp_last = dims.iloc[-1], 1e6 * times["EXP"].iloc[-1]
    ax.plot(dims, exp_last * dims / d_last, "k--", lw=0.8, label="∝ d (through EXP at the largest d)")
    ax.plot(dims, exp_last * (dims / d_last) ** 2, "k:", lw=0.8, label="∝ d² (the paper's count for EXP)")
    ax.set(xscale="log", yscale="log", xlabel="d (dimensions)", ylabel="µs per user per selection")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7)
    return fig



def dim_table(runs: pd.DataFrame, *, pairs: Sequence[tuple[str, str]] = (("PS-PM", "PM"), ("PS-PM", "U-PM"),
                                                                         ("EXP-PM", "U-PM"), ("U-PM", "PM"))) -> pd.DataFrame:
    """The sweep over d on test (:func:`runs_table` rows with ``dim`` set, one run per method and d, e.g. at each
    method's tuned α): per d, each method's mean test accuracy (%) and, per pair (a, b) of ``pairs``,
    acc(a) - acc(b) in points with its 95 % interval paired over the folds (:func:`ldptut.papers.cv_interval`)."""
    t = runs[runs["config"].map(lambda c: c.dim is not None and c.holdout == "test")]
    rows = []
    for d in sorted({c.dim for c in t["config"]}):
        at = t[t["config"].map(lambda c: c.dim == d)]
        row: dict[str, Any] = {"d": d}
        cells = {}
        present = set(at["method"])
        for method in [m for m in DIM_METHODS if m in present] + sorted(present - set(DIM_METHODS)):
            sel = at[at["method"] == method]
            if len(sel) > 1:
                raise ValueError(f"{len(sel)} runs of {method} at d = {d}: give one per method (e.g. the tuned ones)")
            cells[method] = sel.iloc[0]
            row[method] = float(sel["accuracy"].iloc[0])
        for a, b in pairs:
            row[f"{a} − {b}"] = difference_cell(cells.get(a), cells.get(b))
        rows.append(row)
    return pd.DataFrame(rows)


def in_method_order(table: pd.DataFrame) -> pd.DataFrame:
    """``table``'s rows (with columns model and method) sorted by model, then method: Fig. 2's methods in the order of
    :data:`FIG2_TUNED_METHODS` (flat PM and its two-stage variants, HM, Duchi, PM-RP), the others after them in the
    order of :data:`METHODS`; a pivot with ``sort=False`` then lists them so. The sort is stable."""
    order = {m: i for i, m in enumerate(dict.fromkeys([*FIG2_TUNED_METHODS, *METHODS]))}
    return table.sort_values(["model", "method"], key=lambda col: col.map(order) if col.name == "method" else col,
                             kind="stable")


def convergence_configs(tuned: pd.DataFrame, *, repeats: int) -> list[tuple[str, FedSelConfig]]:
    """The convergence check's test runs at each method's tuned α (:func:`tuned_configs`, experiment "convergence
    tuned"), evaluated every 5 iterations."""
    return [(e, c.replace(eval_every=5)) for e, c in tuned_configs(tuned, repeats=repeats,
                                                                     experiment="convergence tuned")]


def plot_convergence(records: Iterable[Any], *, majority: Optional[float] = None, title: str = "") -> Any:
    """Misclassification rate (%) on test against the iteration, one line per record (a FedSel run evaluated every
    few iterations), labelled by method and, where the runs' α differ, α; ``majority`` (accuracy %, the constant
    classifier) draws its rate. One panel as wide as the book's column. Returns the figure."""
    from ..display import figure, integer_rounds

    records = list(records)
    lrs = {r.config.lr for r in records}
    fig, ax = figure(1, height=3.4)
    for i, rec in enumerate(records):
        h = rec.history
        label = rec.config.method + (f" (α = {rec.config.lr:g})" if len(lrs) > 1 else "")
        ax.plot(h["round"], 100 * (1 - h["accuracy"]), marker=".", ls=["-", "--", ":", "-."][i % 4], label=label)
    if majority is not None:
        ax.axhline(100 - majority, color="tab:red", ls="--", lw=0.8, label="majority class")
    ax.set(xlabel="iteration (batches of m users)", ylabel="misclassification (%)")
    if title:
        ax.set_title(title, fontsize=9)
    integer_rounds(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    return fig



def fig2_differences(runs: pd.DataFrame, *, pairs: Sequence[tuple[str, str]] = tuple(FIG2_PAIRS)) -> pd.DataFrame:
    """Fig. 2's comparisons from test runs with one run per (model, method, ε) on one data set (:func:`runs_table`
    rows, e.g. the runs at each method's tuned α from :func:`tuned_configs`): per model, ε and pair (a, b) of
    ``pairs`` with both methods in ``runs``, "difference" = acc(a) - acc(b) in points (above 0: a is the more
    accurate) and its 95 % interval "lo", "hi" paired over the cross-validation runs
    (:func:`ldptut.papers.cv_interval`; None without per-run accuracies, NaN difference where a run is missing)."""
    t = runs[runs["config"].map(lambda c: c.holdout == "test" and c.epsilon is not None)] if len(runs) else runs
    if not len(t):
        return pd.DataFrame(columns=["model", "epsilon", "pair", "difference", "lo", "hi"])
    datasets = sorted(set(t["dataset"]))
    if len(datasets) > 1:
        raise ValueError(f"fig2_differences takes the runs of one data set, got {datasets}")
    present = set(t["method"])
    rows = []
    for (model, eps), _ in t.groupby(["model", "epsilon"], sort=True):
        for a, b in [(a, b) for a, b in pairs if a in present and b in present]:
            diff, lo, hi = _difference(_cell(t, datasets[0], model, a, eps), _cell(t, datasets[0], model, b, eps))
            rows.append({"model": model, "epsilon": eps, "pair": f"{a} − {b}",
                         "difference": float("nan") if diff is None else diff, "lo": lo, "hi": hi})
    return pd.DataFrame(rows)


def fig2_gains(runs: pd.DataFrame, *, pairs: Sequence[tuple[str, str]] = tuple(FIG2_PAIRS)) -> pd.DataFrame:
    """:func:`fig2_differences` as a table that fits a page: one row per pair ("a − b") and model, one column per
    ε per user, each cell "difference [lo, hi]" in points ("not run" where a run is missing)."""
    d = fig2_differences(runs, pairs=pairs)
    if not len(d):
        return pd.DataFrame(columns=["a − b (points)", "model"])
    d["cell"] = [_with_interval(None if pd.isna(v) else v, lo, hi)
                 for v, lo, hi in zip(d["difference"], d["lo"], d["hi"])]
    d["pair"] = pd.Categorical(d["pair"], categories=list(dict.fromkeys(d["pair"])), ordered=True)
    wide = d.pivot_table(index=["pair", "model"], columns="epsilon", values="cell", aggfunc="first", observed=True)
    wide.columns = [f"ε = {e:g}" for e in wide.columns]
    return wide.reset_index().rename(columns={"pair": "a − b (points)"})


def followup(p: Mapping[str, Any], table: pd.DataFrame) -> list[tuple[str, FedSelConfig]]:
    """The test runs that depend on :func:`grid`'s results: each method at the α chosen on validation
    (:func:`tuned_lrs`, :func:`tuned_configs`, ``repeats`` repetitions) for Table 3 ("tuning" -> "table 3 tuned"),
    Fig. 2 ("fig 2 tuning" -> "fig 2 tuned"), the convergence check ("convergence tuning" -> "convergence tuned",
    evaluated every 5 iterations) and the sweep over d ("d sweep" -> "d sweep tuned"); ``table`` is the grid's
    stored runs as a records table with an ``experiment`` column (:func:`ldptut.runcache.stored_table`)."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    out: list[tuple[str, FedSelConfig]] = []
    if not len(table):
        return out
    for part, experiment in (("tuning", "table 3 tuned"), ("fig 2 tuning", "fig 2 tuned"),
                             ("convergence tuning", "convergence tuned"), ("d sweep", "d sweep tuned")):
        sel = table[table["experiment"] == part]
        if len(sel):
            tuned = tuned_lrs(sel)
            out += (convergence_configs(tuned, repeats=p["repeats"]) if part == "convergence tuning" else
                    tuned_configs(tuned, repeats=p["repeats"], experiment=experiment))
    return out


def plot_fig2_tuned(runs: pd.DataFrame, *, majority: Optional[float] = None,
                    panels: Sequence[Sequence[str]] = (("PM", "U-PM", "EXP-PM", "PE-PM", "PS-PM", "PM-RP"),
                                                       ("HM", "PS-HM", "Duchi", "PS-Duchi")),
                    titles: Sequence[str] = ("PM family", "HM and Duchi")) -> Any:
    """Fig. 2 at each method's own α: misclassification rate (%) on test against ε per user (log axis), mean ± std
    over the cross-validation runs, one row per model and one panel per group of ``panels`` (methods absent from
    ``runs`` are left out; two panels per row at most, as wide as the book's column; ``titles`` name the groups);
    ``majority`` (%, accuracy of the constant classifier) draws its rate. Points that coincide are shifted slightly
    along ε. Returns the figure."""
    from ..display import figure

    t = runs[runs["config"].map(lambda c: c.holdout == "test" and c.epsilon is not None)]
    models = list(dict.fromkeys(t["model"]))
    named = [([m for m in g if m in set(t["method"])], name) for g, name in zip(panels, titles)]
    groups = [g for g, _ in named if g]
    names = [name for g, name in named if g]
    if len(groups) > 2:
        raise ValueError(f"at most two panels per row fit the book's column, got {len(groups)} groups")
    fig, axes = figure(len(groups), len(models), height=3.3 * len(models), squeeze=False)
    epsilons = sorted(set(t["epsilon"]))
    label = ", ".join(DATASETS[d]["label"] for d in sorted(set(t["dataset"])))
    for row, model in zip(axes, models):
        for ax, group, name in zip(row, groups, names):
            _sweep(ax, t[t["model"] == model], group)
            ax.set_title(f"{label}, {model}, own α: {name}", fontsize=9)
            _eps_axis(ax, epsilons, majority=majority)
    return fig


def plot_dim_sweep(runs: pd.DataFrame, *, methods: Sequence[str] = tuple(DIM_METHODS), title: str = "") -> Any:
    """Test accuracy (%) against d (log axis) for each method of the sweep over d (:func:`dim_table`'s runs), mean
    ± std over the cross-validation runs; one panel as wide as the book's column. Returns the figure."""
    import matplotlib.pyplot as plt

    from ..display import figure

    t = runs[runs["config"].map(lambda c: c.dim is not None and c.holdout == "test")]
    t = t.assign(d=t["config"].map(lambda c: c.dim))
    fig, ax = figure(1, height=3.4)
    present = [m for m in methods if m in set(t["method"])]
    for i, m in enumerate(present):
        line = t[t["method"] == m].sort_values("d")
        shift = 1.03 ** (i - (len(present) - 1) / 2)   # keep coinciding points visible
        ax.errorbar(line["d"] * shift, line["accuracy"], yerr=line["accuracy_std"], marker="os^vD"[i % 5], ms=4,
                    ls=["-", "--", ":", "-."][i % 4], capsize=2, label=m)
    ds = sorted(set(t["d"]))
    ax.set_xscale("log")
    ax.set_xticks(ds, [str(d) for d in ds])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel="d (dimensions of the synthetic data)", ylabel="test accuracy (%)")
    if title:
        ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    return fig


# ------------------------------------------------------------------------------------ the chapter's tables
def data(runner: Any, name: str, *, dim: Optional[int] = None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`prepare` once per (data set, d) and ``runner`` (:class:`ldptut.experiments.Runner`): the same memo
    its training uses (:meth:`FedSelConfig.train_group`), so a chapter's tables and runs prepare each data set once."""
    return runner.memo(("fedsel-data", name, dim), lambda: prepare(name, dim=dim))


def majority_rate(y: torch.Tensor) -> float:
    """The constant classifier's accuracy (%) on labels ``y`` in {-1, +1}: the share of the larger class."""
    pos = (y > 0).double().mean().item()
    return 100 * max(pos, 1.0 - pos)


def selection_check(samples: int, *, epsilon: float = 1.0, k: int = 2, seed: int = 0) -> pd.DataFrame:
    """Each selection sampler (EXP, PE, PS at ``epsilon``, top-``k``) against its exact output law on one fixed
    vector of d = 10 coordinates, ``samples`` draws: the exact probability of the top-1 index and the largest
    |frequency - exact| in standard errors over the d + 1 outcomes (PE's ``EMPTY`` counted as outcome d), "< 5"
    when below 5 (the sampler follows its law), the value with "(FAIL)" otherwise."""
    from ..selection import EMPTY

    samples = pos_int(samples, "samples")
    v = torch.tensor([[0.3, -2.0, 0.1, 1.5, -0.2, 0.05, 0.7, -0.9, 0.0, 0.4]]).repeat(samples, 1)
    d = v.shape[1]
    rows = []
    for name, sel in [("EXP", ExponentialSelection(epsilon=epsilon)), ("PE", PerturbedEncoding(epsilon=epsilon, k=k)),
                      ("PS", PerturbedSampling(epsilon=epsilon, k=k))]:
        j = sel.select(v, generator(seed, "selection-check", name))
        exact = sel.output_distribution(v[:1])[0]
        outcomes = torch.where(j == EMPTY, d, j)
        freq = torch.bincount(outcomes, minlength=exact.numel()).double() / samples
        se = (exact * (1 - exact) / samples).sqrt().clamp(min=1e-12)
        z = ((freq - exact).abs() / se).max().item()
        rows.append({"mechanism": name, "P[top-1 index] exact": round(exact[1].item(), 4),
                     "max |freq - exact| / s.e.": "< 5" if z < 5 else f"{z:.1f} (FAIL)"})
    return pd.DataFrame(rows)


def budget_table(datasets: Sequence[str], *, epsilon: float, mu: float, runner: Any = None,
                 methods: Sequence[str] = ("EXP-PM", "PE-PM", "PS-PM", "PE-PM-C", "PE")) -> pd.DataFrame:
    """One report's budget on each data set (its d from :func:`prepare`, memoised by ``runner`` when given) for
    ``methods`` at ``epsilon`` per user, one epoch, μ = ``mu`` (:func:`two_stage_epsilon`): ε1, ε2, the claimed and
    the true loss per report ("unbounded" for a run that sends its value in clear)."""
    rows = []
    for ds in datasets:
        d = (data(runner, ds) if runner is not None else prepare(ds))[0].shape[1]
        for meth in methods:
            b = two_stage_epsilon(method_config(meth, base=base_config(ds, "logistic", mu=mu), epsilon=epsilon), d)
            rows.append({"data set": DATASETS[ds]["label"], "d": d, "method": meth,
                         "ε1": round(b["ε1"], 3), "ε2": round(b["ε2"], 3),
                         "per report: claimed": round(b["per report, claimed"], 4),
                         "true": f"{b['per report, true']:.4f}" if b["private"] else "unbounded"})
    return pd.DataFrame(rows)


def data_table(names: Sequence[str], *, folds: int, runner: Any = None) -> pd.DataFrame:
    """The data sets as the chapter uses them (:func:`prepare`, memoised by ``runner`` when given): records (one
    per user), our d and the paper's, the positive share and the majority class (%), the training users of a fold
    at ``folds``-fold cross-validation, the batch m = 0.01 N and k = 0.1 d."""
    rows = []
    for ds in names:
        x, y = data(runner, ds) if runner is not None else prepare(ds)
        n_train = (x.shape[0] // folds) * (folds - 1)
        rows.append({"data set": DATASETS[ds]["label"], "records (users)": x.shape[0], "d (ours)": x.shape[1],
                     "d (paper)": DATASETS[ds]["paper_d"], "positives (%)": round(100 * (y > 0).double().mean().item(), 1),
                     "majority class (%)": round(majority_rate(y), 1), "users per fold": n_train,
                     "batch m = 0.01 N": n_train // 100, "k = 0.1 d": round(0.1 * x.shape[1])})
    return pd.DataFrame(rows)


def wide(frame: pd.DataFrame, *, index: Sequence[str], columns: str, values: str,
         order: Optional[Sequence[Any]] = None) -> pd.DataFrame:
    """``frame`` pivoted for a table: one row per ``index`` (in order of appearance), one column per value of
    ``columns`` (``order`` picks and orders them; ε columns are named "ε = 0.5"), the first ``values`` of each cell;
    a "dataset" index becomes "data set" with the paper's labels (:data:`DATASETS`)."""
    w = frame.pivot_table(index=list(index), columns=columns, values=values, aggfunc="first", sort=False)
    if order is not None:
        w = w[[c for c in order if c in w.columns]]
    elif columns == "epsilon":
        w = w.sort_index(axis=1)
    if columns == "epsilon":
        w.columns = [f"ε = {e:g}" for e in w.columns]
    out = w.reset_index()
    out.columns.name = None
    if "dataset" in out.columns:
        out["dataset"] = out["dataset"].map(lambda d: DATASETS[d]["label"] if d in DATASETS else d)
        out = out.rename(columns={"dataset": "data set"})
    return out


def alpha_text(tuned: pd.DataFrame) -> list[str]:
    """Each chosen α of :func:`tuned_lrs` as text, with "*" where it lies at the grid's edge."""
    return [f"{a:g}" + ("*" if edge else "") for a, edge in zip(tuned["lr"], tuned["at grid edge"])]


#: :func:`compare`'s columns as a chapter shows them (shorter headers, the verdict and the runs left to the text).
COMPARE_VIEW = {"data set": "data set", "model": "model", "selection": "X", "gain, paper": "gain: paper",
                "gain, ours [95 % CI]": "gain: ours [95 % CI]", "gain: sign reproduced": "sign reproduced",
                "loss, paper": "loss: paper", "loss, ours [95 % CI]": "loss: ours [95 % CI]",
                "gain over U-PM, ours [95 % CI]": "X-PM-C − U-PM [95 % CI]"}


def compare_view(cmp: pd.DataFrame) -> pd.DataFrame:
    """:func:`compare`'s rows that we ran, with the columns of :data:`COMPARE_VIEW` under their short names; the
    paper's numbers rounded to 2 decimals (points)."""
    out = cmp[cmp["gain, ours [95 % CI]"] != "not run"][list(COMPARE_VIEW)].rename(columns=COMPARE_VIEW)
    for c in ("gain: paper", "loss: paper"):
        out[c] = out[c].astype(float).round(2)
    return out.reset_index(drop=True)

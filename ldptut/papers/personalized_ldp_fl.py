"""Personalized privacy budgets in LDP-FL (Wu, Xu, Zhu, "Local Differential Privacy-Based Federated Learning
under Personalized Settings", Appl. Sci. 13(7):4168, 2023): settings, published numbers, the pieces of the
method, the experiment grid as typed runs, and paper vs ours.

Client side (Section 3.1, Algorithms 1 and 2): each client trains a logistic regression from the
global model with scikit-learn's per-sample SGD and its "optimal" learning-rate schedule
(:class:`ldptut.training.PerSampleSGD`), on a sample of its data drawn with probability ``q`` (IID case),
clips every weight to [-c, c] and perturbs it: Gaussian noise with the paper's σ_i
(:func:`paper_gaussian_sigma`, IID) or the stochastic sign ``ldpsign`` (non-IID), both in
:mod:`ldptut.mechanisms` (:class:`~ldptut.mechanisms.Gaussian`, :class:`~ldptut.mechanisms.LdpSign`), by
:class:`PersonalizedPerturbation`.

Server side (Section 4): aggregation A (arithmetic mean), B (:class:`WeightedBySigma`, α_i ∝ 1/σ_i)
and C (:class:`ProbabilitySelection`, keep the clients with P_i > ω, ω ~ U(0, 1) per round); in the
non-IID protocol the server takes the sign of the aggregate (:class:`SignOf`). All are
:class:`ldptut.fl.Aggregator` callables.

Every run of the paper's grid is a :class:`WuConfig`; the runs of one experiment are trained together by the
round engine (:func:`ldptut.fl.simulate`: a (run, client) pair is one row of a stacked tensor), so a
whole grid of privacy profiles, aggregations and seeds costs about as much as one run.

Model: one-vs-rest logistic regression, as scikit-learn's ``SGDClassifier(loss="log_loss")`` fits
for more than two classes: K independent binary classifiers (class k vs the rest), prediction
argmax_k (w_k · x + b_k). The flattened model is (W row by row, then b): d = K (D + 1), the layout of
:class:`ldptut.models.LogisticRegression`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from .. import data as _d
from .. import partition as _p
from .._validate import one_of, pos_int, real
from ..fl import (C_READINGS, ON_EMPTY, FLConfig, PersonalizedPerturbation, ProbabilitySelection, Run, SignOf,
                  WeightedBySigma, inverse_sigma_weights, mean_aggregator, selection_probabilities, simulate)
from ..mechanisms import Gaussian, LdpSign, Mechanism
from ..models import LogisticRegression
from ..params import ChapterParams, P, chapter_params, param
from ..provenance import numerics_flag, run_mechanisms
from ..rng import generator
from ..runcache import RunRecord, load_records
from ..runconfig import RunConfig, TrainingEnv
from ..training import PerSampleSGD
from . import Paper, Reported, mean_std, t_interval

__all__ = ["PAPER", "SETTINGS", "REPORTED", "EXPERIMENTS", "SIGMA_READINGS", "paper_gaussian_sigma",
           "inverse_sigma_weights", "selection_probabilities", "WeightedBySigma", "ProbabilitySelection", "SignOf",
           "PersonalizedPerturbation", "Experiment", "load_experiment", "client_mechanisms", "grid_scenarios",
           "reported", "WuConfig", "configs", "run_experiment", "histories", "load_runs", "final_rounds",
           "paired_t_interval", "majority_rate", "no_skill_rates", "compare", "OTHER_READING", "C_READINGS", "c_readings_table", "Params", "chapter_experiment", "grid",
           "MNIST_EXTENSION", "FEATURES", "model_size", "privacy_tables", "selection_table", "lemma_table",
           "blank_repeats", "accuracy_table", "plot_experiment", "sigma_readings_tables", "gains_text",
           "accuracy_range", "paper_scale_report", "covertype_check", "scenario_order", "privacy_shown",
           "selection_shown", "accuracy_shown", "compare_shown", "readings_shown", "lemma_shown", "c_readings_shown",
           "noise_versus_no_noise"]

PAPER = Paper(
    key="personalized_ldp_fl",
    citation="X. Wu, L. Xu, L. Zhu. Local Differential Privacy-Based Federated Learning under Personalized "
             "Settings. Applied Sciences 13(7):4168, 2023.",
    chapter="book/personalized_ldp_fl",
    intro="**Personalized budgets** (Wu et al., 2023): Gaussian and sign perturbation with a budget per "
          "client, weighted and probability-based aggregation, and the privacy the noise really gives.",
)

PROTOCOLS = ("iid", "noniid")
AGGREGATIONS = ("A", "B", "C")

#: Wu, Xu, Zhu (Appl. Sci. 2023), Section 5: experiment settings as printed (5.2.1 IID, 5.3.1 non-IID).
#: "mnist" in the paper's IID runs is scikit-learn's 8x8 digits (Section 5.1). eps per client, delta_i
#: per client; q is the per-round sampling probability (IID only); c the clipping bound; l2 = Delta_2.
#: Non-IID train sizes and the Dirichlet concentration are not given (see the chapter).
SETTINGS = {
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

#: Section 5.2.2 / 5.3.2: accuracy (%) without noise and the gains (points) of B and C over A, per
#: experiment ("<protocol> <dataset>"). "Accuracy" is the federated model's share of correctly classified
#: samples (Section 5); the paper gives test-set sizes, so we read it as test accuracy. ε is per client,
#: per coordinate (the paper's own label; Section 2 of the chapter gives the exact guarantee). A gain of
#: None means the paper states there is none; a gain not listed is not reported (B, non-IID).
_METRIC = "federated model accuracy (%), correctly classified share (Section 5; test set implied)"
_GAIN = "accuracy gain (points) over aggregation A, averaged over the profiles in an unstated way"
REPORTED = [
    Reported(claim=f"{exp} {quantity}", value=value, metric=_METRIC if quantity == "no_noise" else _GAIN,
             source="Section 5.2.2" if exp.startswith("iid") else "Section 5.3.2",
             epsilon_unit="per client (its label; see the chapter for the exact guarantee)",
             setting=(("experiment", exp), ("quantity", quantity)))
    for exp, values in [("iid digits", {"no_noise": 88.7, "gain_B": 5.57, "gain_C": 11.28}),
                        ("iid fashion_mnist", {"no_noise": 73.1, "gain_B": 3.04, "gain_C": 3.93}),
                        ("iid covertype", {"no_noise": 49.0, "gain_B": 4.07, "gain_C": 10.90}),
                        ("noniid digits", {"no_noise": 65.2, "gain_C": 6.97}),
                        ("noniid fashion_mnist", {"no_noise": 49.8, "gain_C": 19.85}),
                        ("noniid covertype", {"no_noise": 62.6, "gain_B": None, "gain_C": None})]
    for quantity, value in values.items()
]
#: The paper's experiments as the chapter names them ("iid digits", ...), in the paper's order.
EXPERIMENTS = list(dict.fromkeys(r.where["experiment"] for r in REPORTED))


def reported(experiment: str, quantity: str) -> Reported:
    """The published number for ``experiment`` ("iid digits", ...) and ``quantity`` ("no_noise", "gain_B",
    "gain_C"); KeyError when the paper does not report it."""
    for r in REPORTED:
        if r.where == {"experiment": experiment, "quantity": quantity}:
            return r
    raise KeyError(f"Wu et al. report no {quantity!r} for {experiment!r}")


# ------------------------------------------------------------------------ σ and the client side
#: Readings of the IID noise formula of Section 3.1, whose operators were lost in the text we have
#: ("σ i = 4 q 2 R 1 q ( 2 ϵ i 2 l o g 1 δ i + 1 ϵ i )"); see :func:`paper_gaussian_sigma`.
SIGMA_READINGS = ("sqrt_all", "bracket_outside")


def paper_gaussian_sigma(epsilon: float, *, delta: float, q: float, rounds: int, reading: str = "sqrt_all") -> float:
    """σ_i of Wu et al. (2023), Section 3.1 (after Abadi et al., CCS 2016), in one of two readings.

    ``"sqrt_all"`` (adopted):  σ = 4 q sqrt( 2R / (1 - q) · (2 ln(1/δ) / ε² + 1/ε) ).
    ``"bracket_outside"``:     σ = 4 q sqrt( 2R / (1 - q) ) · (2 ln(1/δ) / ε² + 1/ε).

    Why the first: Abadi et al.'s moment bound for the sampled Gaussian mechanism (Lemma 3,
    α(λ) <= q² λ(λ+1) / ((1 - q) σ²) per step), summed over R steps and combined with the tail bound
    at λ = 2 ln(1/δ)/ε, requires σ² >= (2 R q² / (1 - q)) (2 ln(1/δ)/ε² + 1/ε): exactly the tokens of
    the formula under one square root, up to the leading constant 4, which we keep as printed. The
    second reading keeps the same tokens with the bracket outside the root (σ grows like 1/ε²).
    Note that neither contains the clipping bound c: the formula is for unit sensitivity.
    """
    eps = real(epsilon, "epsilon", positive=True)
    dl = real(delta, "delta", positive=True)
    qq = real(q, "q", positive=True)
    if not (0 < dl < 1):
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    if not (0 < qq < 1):
        raise ValueError(f"q must be in (0, 1) for this formula (it divides by 1 - q), got {q}")
    r = pos_int(rounds, "rounds")
    bracket = 2.0 * math.log(1.0 / dl) / eps ** 2 + 1.0 / eps
    if reading == "sqrt_all":
        return 4.0 * qq * math.sqrt(2.0 * r / (1.0 - qq) * bracket)
    if reading == "bracket_outside":
        return 4.0 * qq * math.sqrt(2.0 * r / (1.0 - qq)) * bracket
    raise ValueError(f"unknown reading {reading!r}; known: {SIGMA_READINGS}")


# ------------------------------------------------------------------------------------- the data
@dataclass
class Experiment:
    """Data of one (protocol, dataset) experiment: a fixed train/test split and a partition per seed."""

    name: str
    protocol: str  # "iid" or "noniid"
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    setting: Mapping[str, Any]
    dirichlet_alpha: float = 0.5
    notes: list = field(default_factory=list)
    data_seed: int = 0

    def partition(self, seed: int) -> list[torch.Tensor]:
        n = int(self.setting["n_clients"])
        if self.protocol == "iid":
            return _p.iid(len(self.y_train), n, seed=seed)
        return _p.dirichlet(self.y_train, n, alpha=self.dirichlet_alpha, seed=seed, num_classes=self.num_classes)

    @property
    def key(self) -> str:
        """The experiment's name in tables: "<protocol> <dataset>", e.g. "iid digits"."""
        return f"{self.protocol} {self.name}"


def load_experiment(dataset: str, protocol: str, setting: Mapping[str, Any], *, train_size: Optional[int] = None,
                    test_size: Optional[int] = None, dirichlet_alpha: float = 0.5, data_seed: int = 0) -> Experiment:
    """The data of Wu et al.'s experiment on ``dataset`` ("digits", "fashion_mnist", "covertype", or
    "mnist" = real MNIST under the digits protocol, our extension), split once with ``data_seed``.

    Feature scales (the paper does not state them; c and σ are in weight units, so they matter):
    digits keep scikit-learn's raw pixel values 0..16; Fashion-MNIST uses pixel / 255; MNIST uses
    pixel / 255 * 16 (the digits' range, so the digits protocol means the same thing); Covertype uses
    our loader's standardised numeric columns and 0/1 indicator columns; "covertype_raw" is the same
    split with the 10 numeric columns as UCI ships them (metres, degrees, index values; a check of
    how much the unstated scaling matters). Sizes: IID train = N / δ
    (one client holds 1/δ samples, as δ_i = 1/|D_i|) unless ``train_size``; non-IID train = 4 x test
    (not given by the paper: ours) unless ``train_size``.
    """
    one_of(protocol, "protocol", PROTOCOLS)
    s = dict(setting)
    notes = []
    n_test = int(test_size or s["test_size"])
    g = generator(data_seed, "wu", "covertype" if dataset == "covertype_raw" else dataset, protocol, "split")
    if dataset == "digits":
        x, y = _d.load_digits_raw()
        x = _d.flattened(x, 16.0)  # the loader's pixel / 16 back to the raw 0..16
        if n_test >= len(y):
            notes.append(f"the paper's test set of {n_test} exceeds the 1,797 digits; we use 300 (as in the IID runs)")
            n_test = 300
        tr, te = _d.split_indices(len(y), n_test, g, n_train=train_size)
        xtr, ytr, xte, yte, k = x[tr], y[tr], x[te], y[te], 10
    elif dataset in ("fashion_mnist", "mnist"):
        ds = _d.load_dataset(dataset, normalize=False)  # pixel / 255
        scale = 16.0 if dataset == "mnist" else 1.0
        n_tr = train_size or (int(s["n_clients"] * round(1 / s["delta"])) if protocol == "iid" else 4 * n_test)
        xtr, ytr = _d.subsample(ds.x_train, ds.y_train, n_tr, g)
        xte, yte = _d.subsample(ds.x_test, ds.y_test, n_test, g)
        xtr, xte, k = _d.flattened(xtr, scale), _d.flattened(xte, scale), ds.num_classes
    elif dataset in ("covertype", "covertype_raw"):
        ds = _d.load_dataset("covertype")
        x, y = _d.joined(ds)
        if dataset == "covertype_raw":  # the 10 numeric columns in UCI's units (integers)
            x = _d.unstandardised(x, ds.info)
        n_tr = train_size or int(s.get("train_size", 500_000))
        tr, te = _d.split_indices(len(y), n_test, g, n_train=n_tr)
        xtr, ytr, xte, yte, k = x[tr], y[tr], x[te], y[te], ds.num_classes
    else:
        raise ValueError(f"unknown dataset {dataset!r} for Wu et al.; known: digits, fashion_mnist, covertype, "
                         "covertype_raw, mnist")
    return Experiment(name=dataset, protocol=protocol, x_train=xtr.double(), y_train=ytr, x_test=xte.double(),
                      y_test=yte, num_classes=k, setting=s, dirichlet_alpha=dirichlet_alpha, notes=notes,
                      data_seed=data_seed)


@functools.lru_cache(maxsize=256)
def _client_mechanism(e: float, protocol: str, delta: float, q: Optional[float], rounds: Optional[int], clip: float,
                      l2: Optional[float], reading: str) -> Mechanism:
    """One client's mechanism (:func:`client_mechanisms`), built once per distinct setting: a grid of runs (and the
    hundreds of stored runs a page loads) shares a few dozen; the mechanisms hold no state that sampling changes."""
    if protocol == "iid":
        sig = paper_gaussian_sigma(e, delta=delta, q=q, rounds=rounds, reading=reading)
        return Gaussian.with_sigma(sigma=sig, delta=delta, radius=clip)
    return LdpSign(epsilon=e, delta=delta, l2_sensitivity=l2, radius=clip)


def client_mechanisms(epsilons: Sequence[Optional[float]], protocol: str, setting: Mapping[str, Any], *,
                      reading: str = "sqrt_all") -> list:
    """One mechanism per client: IID Gaussian with the paper's σ_i (``reading``), non-IID LdpSign; None = no noise.
    Clients with the same ε share one (immutable) mechanism object."""
    iid = protocol == "iid"
    key = (setting["delta"], setting["q"] if iid else None, setting["rounds"] if iid else None, setting["clip"],
           None if iid else setting["l2"], reading if iid else "")
    return [None if e is None else _client_mechanism(e, protocol, *key) for e in epsilons]


def grid_scenarios(setting: Mapping[str, Any], *, aggregations: Sequence[str] = AGGREGATIONS) -> list[tuple]:
    """The paper's grid as (scenario, label, ε per client, aggregation): no noise and every client at each ε
    of ``setting["epsilons"]`` with A (non-personalized), then every profile with each aggregation."""
    n = int(setting["n_clients"])
    scenarios = [("non-personalized", "no noise", [None] * n, "A")]
    scenarios += [("non-personalized", f"all ε = {e:g}", [e] * n, "A") for e in setting["epsilons"]]
    scenarios += [("personalized", name, list(prof), a) for name, prof in setting["profiles"].items() for a in aggregations]
    return scenarios


# ------------------------------------------------------------------------------------- typed runs
@dataclass(frozen=True, kw_only=True)
class WuConfig(RunConfig):
    """One run of Wu et al.'s grid: an experiment (protocol, data set and its split), one privacy profile
    (``epsilons``: ε_i per client, None = no noise) and one aggregation (A, B or C).

    ``delta``, ``q`` (IID sampling probability; 1 for non-IID), ``clip`` (c) and ``l2`` (Δ2, non-IID) are
    the paper's setting; ``reading`` the reading of the IID σ formula; ``on_empty`` what C does when no
    client passes, ``c_reading`` C's reading (:data:`C_READINGS`; only C runs take another); ``n_train`` / ``n_test`` / ``data_seed`` / ``dirichlet_alpha`` fix the data split
    (:func:`load_experiment`); ``local_passes`` and ``alpha`` the local per-sample SGD.
    """

    #: The kind and ``paper`` name the paper by its citation key ("wu2023"), not by this module, which is named after
    #: its chapter: both are in every stored record's key, so they stay what the stored runs say.
    kind: ClassVar[str] = "wu2023"

    protocol: str
    scenario: str
    profile: str
    epsilons: tuple[Optional[float], ...]
    aggregation: str
    delta: float
    clip: float
    n_train: int
    n_test: int
    q: float = 1.0
    l2: Optional[float] = None
    reading: str = "sqrt_all"
    on_empty: str = "keep"
    data_seed: int = 0
    dirichlet_alpha: Optional[float] = None
    local_passes: int = 1
    alpha: float = 1e-4
    c_reading: str = "sum/round"

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of(self.protocol, "protocol", PROTOCOLS)
        one_of(self.c_reading, "c_reading", C_READINGS)
        one_of(self.scenario, "scenario", ("non-personalized", "personalized"))
        one_of(self.aggregation, "aggregation", AGGREGATIONS)
        one_of(self.reading, "reading", SIGMA_READINGS)
        one_of(self.on_empty, "on_empty", ON_EMPTY)
        if len(self.epsilons) != self.n_clients:
            raise ValueError(f"epsilons must hold one ε per client ({self.n_clients}), got {len(self.epsilons)}")
        if self.protocol == "noniid" and (self.l2 is None or self.dirichlet_alpha is None):
            raise ValueError("the non-IID protocol needs l2 (Δ2 of ldpsign) and dirichlet_alpha")
        self.mechanisms()  # validates every ε with its mechanism's checks

    @property
    def experiment(self) -> str:
        return f"{self.protocol} {self.dataset}"

    def setting(self) -> dict:
        """What :func:`client_mechanisms` and :func:`load_experiment` read."""
        return {"n_clients": self.n_clients, "rounds": self.rounds, "delta": self.delta, "q": self.q,
                "clip": self.clip, "l2": self.l2, "test_size": self.n_test}

    def mechanisms(self) -> list:
        return client_mechanisms(self.epsilons, self.protocol, self.setting(), reading=self.reading)

    def mechanism_names(self) -> list:
        """The mechanisms' names (:data:`ldptut.mechanisms.MECHANISMS`): Gaussian for IID clients, LdpSign else; none
        for a run without noise (every client's ε None)."""
        if all(e is None for e in self.epsilons):
            return []
        return ["gaussian" if self.protocol == "iid" else "ldpsign"]

    def aggregator(self, mechs: Optional[list] = None) -> Any:
        """A (plain mean), B or C over the clients' σ_i (``mechs``: this run's :meth:`mechanisms`, if built)."""
        mechs = self.mechanisms() if mechs is None else mechs
        if self.aggregation == "A":
            agg = mean_aggregator
        elif self.aggregation == "B":
            agg = WeightedBySigma([m.sigma for m in mechs])
        else:
            agg = ProbabilitySelection([m.sigma for m in mechs], on_empty=self.on_empty, reading=self.c_reading)
        return SignOf(agg) if self.protocol == "noniid" else agg

    def labels(self) -> dict:
        """The run's labels in a history: experiment, kind, profile, aggregation, seed, reading."""
        return {"experiment": self.experiment, "kind": self.scenario, "profile": self.profile,
                "aggregation": self.aggregation, "seed": self.seed, "reading": self.reading,
                "c_reading": self.c_reading if self.aggregation == "C" else None}

    def group_key(self) -> Any:
        """Every run of one experiment (all profiles, aggregations and seeds) is trained together."""
        return self.replace(scenario="non-personalized", profile="", epsilons=(None,) * self.n_clients,
                            aggregation="A", seed=0)

    def load_data(self) -> "Experiment":
        return load_experiment(self.dataset, self.protocol, self.setting(), train_size=self.n_train,
                               test_size=self.n_test, dirichlet_alpha=self.dirichlet_alpha or 0.5,
                               data_seed=self.data_seed)

    @classmethod
    def train_group(cls, configs: Sequence["WuConfig"], *, env: TrainingEnv) -> list[pd.DataFrame]:
        first = configs[0]
        exp = env.memo(("wu2023", first.group_key()), first.load_data)
        if (len(exp.y_train), len(exp.y_test)) != (first.n_train, first.n_test):
            raise ValueError(f"{first.experiment}: the data split has {len(exp.y_train)} / {len(exp.y_test)} samples, "
                             f"the runs say {first.n_train} / {first.n_test}")
        dim = exp.x_train.reshape(len(exp.x_train), -1).shape[1]
        model = LogisticRegression(input_shape=(dim,), num_classes=exp.num_classes).double()
        zeros = torch.zeros(exp.num_classes * (dim + 1), dtype=torch.float64)  # the global model starts at 0 (Section 3)
        runs = []
        for c in configs:
            mechs = c.mechanisms()
            runs.append(Run(seed=c.seed, partition=exp.partition(c.seed), initial=zeros, aggregator=c.aggregator(mechs),
                            privatizer=PersonalizedPerturbation(mechs, clip=c.clip, sign=c.protocol == "noniid")))
        config = FLConfig(rounds=first.rounds, trainer=PerSampleSGD(passes=first.local_passes, alpha=first.alpha,
                                                                   q=first.q if first.protocol == "iid" else 1.0),
                          client_fraction=1.0, send="weights", device=env.device, progress=env.progress,
                          desc=first.experiment, divergence_factor=None)
        res = simulate(config, runs, model=model, x_train=exp.x_train.reshape(len(exp.x_train), -1),
                       y_train=exp.y_train, x_test=exp.x_test.reshape(len(exp.x_test), -1), y_test=exp.y_test)
        return [h.drop(columns="run").dropna(axis=1, how="all").reset_index(drop=True)  # ε columns: noisy runs only
                for _, h in res.history.groupby("run", sort=True)]


def configs(exp: "Experiment", seeds: Sequence[int], *, reading: str = "sqrt_all", on_empty: str = "keep",
            local_passes: int = 1, alpha: float = 1e-4, rounds: Optional[int] = None,
            aggregations: Sequence[str] = AGGREGATIONS, c_reading: str = "sum/round") -> list[WuConfig]:
    """The paper's grid for one experiment (:func:`grid_scenarios`), for every seed, as typed runs (C in the
    reading ``c_reading``)."""
    s = exp.setting
    out = []
    for seed in seeds:
        for scenario, label, eps, agg in grid_scenarios(s, aggregations=aggregations):
            out.append(WuConfig(
                paper="wu2023", dataset=exp.name, model="ovr_logreg", n_clients=int(s["n_clients"]),
                rounds=int(rounds if rounds is not None else s["rounds"]), seed=seed, protocol=exp.protocol,
                scenario=scenario, profile=label, epsilons=tuple(eps), aggregation=agg, delta=s["delta"],
                clip=s["clip"], n_train=len(exp.y_train), n_test=len(exp.y_test),
                q=float(s.get("q", 1.0)) if exp.protocol == "iid" else 1.0,
                l2=s.get("l2") if exp.protocol == "noniid" else None, reading=reading, on_empty=on_empty,
                data_seed=exp.data_seed, dirichlet_alpha=exp.dirichlet_alpha if exp.protocol == "noniid" else None,
                local_passes=local_passes, alpha=alpha, c_reading=c_reading if agg == "C" else "sum/round"))
    return out


def histories(records: Sequence[RunRecord]) -> pd.DataFrame:
    """The per-round histories of Wu runs, with their labels (:meth:`WuConfig.labels`), the run's n_train,
    n_test, rounds, local_passes, on_empty, and the record's commit, date, training seconds and ``code``:
    :func:`ldptut.provenance.numerics_flag` of its numerics version ("current", or "older code" for a run that the
    present code would re-train to other numbers). The labels are joined once to the concatenated histories (a
    page loads hundreds of records)."""
    frames, labels = [], []
    for rec in records:
        c = rec.config
        if not isinstance(c, WuConfig):
            raise ValueError(f"{rec.path or c} is not a Wu et al. run")
        prov = rec.provenance
        labels.append({**c.labels(), "n_train": c.n_train, "n_test": c.n_test, "rounds": c.rounds,
                       "local_passes": c.local_passes, "on_empty": c.on_empty, "commit": prov.get("commit"),
                       "date": prov.get("date"), "train_seconds": prov.get("seconds"),
                       "code": numerics_flag(prov.get("numerics"), run_mechanisms(c))})
        overlap = [k for k in labels[-1] if k in rec.history.columns]
        frames.append(rec.history.drop(columns=overlap) if overlap else rec.history)
    if not frames:
        return pd.DataFrame()
    hist = pd.concat(frames, ignore_index=True)
    which = np.repeat(np.arange(len(frames)), [len(f) for f in frames])
    lab = pd.DataFrame(labels).iloc[which].reset_index(drop=True)
    return pd.concat([hist, lab], axis=1)


def run_experiment(runner: Any, exp: "Experiment", seeds: Sequence[int], **kw: Any) -> pd.DataFrame:
    """Train (or load, through the runner's cache) the paper's grid for ``exp`` and every seed; the labelled
    history (:func:`histories`), in grid order. ``kw`` goes to :func:`configs`."""
    return histories(runner.run_all(configs(exp, seeds, **kw)))


#: The other reading of the IID σ formula (the chapter re-runs its ``compare_reading`` experiments under it).
OTHER_READING = {"sqrt_all": "bracket_outside", "bracket_outside": "sqrt_all"}

_EXPERIMENT_KEYS = ("iid digits", "iid fashion_mnist", "iid covertype", "noniid digits", "noniid fashion_mnist",
                    "noniid covertype")

#: Our extension to real MNIST (:func:`chapter_experiment`): the IID digits protocol, and the paper's non-IID "MNIST"
#: settings (10 clients, 9,600 training images: the most expensive grid after Covertype's).
MNIST_EXTENSION = ("iid mnist", "noniid mnist")

#: The chapter's parameters and their checks (:func:`ldptut.notebooks.setup` checks them; the notebook's parameters
#: cell holds the defaults, ``book/params/personalized_ldp_fl-paper.yaml`` the paper-scale values).
@chapter_params
class Params(ChapterParams):
    """The chapter's parameters (``book/personalized_ldp_fl.ipynb``'s parameters cell: the same names, defaults and order),
    each with its check; a parameter file gives other values for some."""

    seeds: list[int] = param(P.list_of(P.nonneg_int), [0, 1, 2])
    experiments: list[str] = param(
        P.list_of(P.choice(*_EXPERIMENT_KEYS)),
        ["iid digits", "iid fashion_mnist", "noniid digits", "noniid fashion_mnist"])
    covertype_train_size: int = param(P.pos_int, 500000)
    mnist_extension: list[str] = param(P.list_of(P.choice(*MNIST_EXTENSION)), [])
    sigma_reading: str = param(P.choice(*SIGMA_READINGS), "sqrt_all")
    compare_reading: list[str] = param(
        P.list_of(P.choice(*[k for k in _EXPERIMENT_KEYS if k.startswith("iid")])),
        ["iid digits"])
    compare_c_reading: list[str] = param(P.list_of(P.choice(*_EXPERIMENT_KEYS)), ["iid digits", "noniid digits"])
    dirichlet_alpha: float = param(P.pos_float, 0.5)
    on_empty: str = param(P.choice(*ON_EMPTY), "keep")
    local_passes: int = param(P.pos_int, 1)
    alpha: float = param(P.pos_float, 0.0001)
    device: str = param(P.device, "auto")
    run_cache: Optional[str] = param(P.optional(P.string), None)
    paper_runs_dir: Optional[str] = param(P.optional(P.string), "runs/cache/personalized_ldp_fl")




def chapter_experiment(key: str, p: Mapping[str, Any]) -> Experiment:
    """The data of the chapter's experiment ``key`` at its parameters ``p`` (the notebook's names): one of the
    paper's ("iid digits", ... at the paper's setting, Covertype with ``covertype_train_size`` training samples,
    non-IID with ``dirichlet_alpha``), "iid mnist" (our extension: real MNIST under the digits protocol, 2,000 test
    images), "noniid mnist" (real MNIST at the paper's non-IID "MNIST" settings: 10 clients, 10 rounds, 2,400 test
    images, 9,600 training images) or "iid covertype_raw" (Covertype's no-noise run on the raw numeric columns)."""
    protocol, name = key.split()
    if key == "iid mnist":
        return load_experiment("mnist", "iid", SETTINGS["iid"]["digits"], test_size=2000)
    if key == "noniid mnist":  # the paper's non-IID "MNIST" settings (N = 10, R = 10, 2,400 test) on real MNIST
        return load_experiment("mnist", "noniid", SETTINGS["noniid"]["digits"], dirichlet_alpha=p["dirichlet_alpha"])
    if key == "iid covertype_raw":
        no_noise_only = {**SETTINGS["iid"]["covertype"], "epsilons": [], "profiles": {}}  # grid = the no-noise run
        return load_experiment("covertype_raw", "iid", no_noise_only, train_size=p["covertype_train_size"])
    one_of(key, "experiment", _EXPERIMENT_KEYS)
    return load_experiment(name, protocol, SETTINGS[protocol][name], dirichlet_alpha=p["dirichlet_alpha"],
                           train_size=p["covertype_train_size"] if name == "covertype" else None)


def c_readings_table(final: pd.DataFrame) -> pd.DataFrame:
    """Final accuracy (%) of the personalized profiles, mean over seeds, per experiment and profile: A, B and C in
    each reading of :data:`C_READINGS` (``final``: :func:`final_rounds` of the runs, ``c_reading`` labelled), with
    the mean over profiles as the last row of each experiment and the ranking of the columns there."""
    pers = final[final["kind"] == "personalized"].copy()
    pers["column"] = [a if a != "C" else f"C {cr}" for a, cr in zip(pers["aggregation"], pers["c_reading"])]
    t = pers.groupby(["experiment", "profile", "column"], sort=False)["accuracy"].mean().mul(100).unstack("column")
    cols = [c for c in ["A", "B"] + [f"C {r}" for r in C_READINGS] if c in t.columns]
    t = t[cols]
    rows = []
    for exp, g in t.groupby(level="experiment", sort=False):
        mean = g.mean()
        rows.append(g.round(1).assign(ranking=""))
        rows.append(pd.DataFrame([mean.round(1).tolist() + [" > ".join(mean.sort_values(ascending=False).index)]],
                                 columns=cols + ["ranking"],
                                 index=pd.MultiIndex.from_tuples([(exp, "mean over profiles")], names=t.index.names)))
    return pd.concat(rows)


def grid(p: Mapping[str, Any], *, loaded: Optional[dict] = None) -> list[tuple[str, WuConfig]]:
    """The chapter's runs from its parameters ``p`` (the notebook's names, e.g. a parameter file over the defaults),
    as (experiment, run) pairs in the notebook's order: the paper's grid (:func:`configs`) for every experiment of
    ``experiments`` under ``sigma_reading`` (labelled with the experiment's key, "iid digits"); with "iid covertype",
    its no-noise run on the raw numeric columns ("iid covertype_raw"); the IID experiments of ``compare_reading``
    under the other reading ("iid digits (other reading)"); the real-MNIST experiments of ``mnist_extension`` ("iid
    mnist", "noniid mnist"); the experiments of ``compare_c_reading`` with aggregation C in its other readings (:data:`C_READINGS`,
    "iid digits (C max/round)", C runs only).

    A run's configuration holds its data split's sizes, so this loads each experiment's data (seconds;
    :func:`chapter_experiment`); training needs only the configuration (:meth:`WuConfig.train_group` reloads the
    data). The chapter and ``python -m ldptut.sweep personalized_ldp_fl`` both build their runs here. ``loaded``: a
    dict that keeps the loaded data by experiment key (filled here, reused when given again), so that the chapter
    loads each data set once."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    seeds = list(p["seeds"])
    opts = {"on_empty": p["on_empty"], "local_passes": p["local_passes"], "alpha": p["alpha"]}
    loaded = {} if loaded is None else loaded

    def data(key: str) -> Experiment:
        if key not in loaded:
            loaded[key] = chapter_experiment(key, p)
        return loaded[key]

    out: list[tuple[str, WuConfig]] = []
    for key in p["experiments"]:
        out += [(key, c) for c in configs(data(key), seeds, reading=p["sigma_reading"], **opts)]
    if "iid covertype" in p["experiments"]:  # no noise: the reading changes nothing but the key; the default's
        out += [("iid covertype_raw", c) for c in configs(data("iid covertype_raw"), seeds, **opts)]
    for key in [k for k in p["compare_reading"] if k.startswith("iid")]:
        out += [(f"{key} (other reading)", c)
                for c in configs(data(key), seeds, reading=OTHER_READING[p["sigma_reading"]], **opts)]
    for key in [k for k in MNIST_EXTENSION if k in p["mnist_extension"]]:
        out += [(key, c) for c in configs(data(key), seeds, reading=p["sigma_reading"], **opts)]
    for key in p.get("compare_c_reading", []):
        for cr in C_READINGS[1:]:
            out += [(f"{key} (C {cr})", c) for c in configs(data(key), seeds, reading=p["sigma_reading"], c_reading=cr,
                                                             **opts) if c.aggregation == "C"]
    return out


def load_runs(directory: Any) -> pd.DataFrame:
    """Every Wu et al. run stored in ``directory``: :func:`histories` of the records (file order)."""
    records = load_records(directory)
    if not records:
        raise FileNotFoundError(f"no stored runs in {directory}; make reproduce CHAPTER=personalized_ldp_fl writes them")
    return histories(records)


def final_rounds(history: pd.DataFrame) -> pd.DataFrame:
    """The last round of every run of a history: the rows whose round is the largest of their experiment
    (of the whole history without that column)."""
    if "experiment" in history:
        last = history.groupby("experiment")["round"].transform("max")
    else:
        last = history["round"].max()
    return history[history["round"] == last].reset_index(drop=True)


# ------------------------------------------------------------------------------------- paper vs ours
def paired_t_interval(diffs: pd.Series, *, level: float = 0.95) -> Optional[tuple[float, float]]:
    """Student's t confidence interval for the mean of paired differences (one per seed):
    :func:`ldptut.papers.t_interval` of the differences; None with fewer than two values."""
    return t_interval(diffs, level=level)


def majority_rate(y_test: torch.Tensor) -> float:
    """The no-skill accuracy of a test set: the share of its most frequent class, max_k |{y = k}| / n (what a model
    that always predicts one class scores at best)."""
    if y_test.numel() == 0:
        raise ValueError("y_test is empty: the no-skill rate of an empty test set is undefined")
    return torch.bincount(y_test.long().flatten()).max().item() / y_test.numel()


def no_skill_rates(keys: Sequence[str], p: Mapping[str, Any], *, loaded: Optional[dict] = None) -> dict[str, float]:
    """:func:`majority_rate` of the test set of each experiment in ``keys`` at the chapter's parameters ``p``
    (:func:`chapter_experiment`; the split does not depend on the seed), for :func:`compare`'s ``no_skill``.
    ``loaded``: data already loaded, by experiment key (:func:`grid`'s), used where it holds the key."""
    loaded = loaded or {}
    return {key: majority_rate((loaded[key] if key in loaded else chapter_experiment(key, p)).y_test) for key in keys}


def compare(runs: pd.DataFrame, *, no_skill: Optional[Mapping[str, float]] = None) -> pd.DataFrame:
    """Wu et al.'s reported no-noise accuracy and gains of B and C over A next to ours, per experiment.

    ``runs``: the last round of every run (:func:`final_rounds`) (columns experiment "iid digits" etc., kind, profile,
    aggregation, seed, accuracy in [0, 1]). The paper does not say how it averages a gain over
    profiles; ours is the **paired** difference B - A (C - A) of runs with the same seed and profile,
    averaged over the profiles, then mean ± sample std over seeds; "paired 95 % CI" is the t interval of that
    mean over seeds (:func:`paired_t_interval`; "1 seed" when there is one) and "test" says whether it excludes 0
    ("gain" / "loss") or not ("no evidence"). The paper's gains are read as percentage points (the paper writes
    "5.57 %"; read as relative to A they would be smaller). Rows follow :data:`EXPERIMENTS`.

    ``no_skill`` (experiment -> accuracy in [0, 1] of always predicting the test set's majority class,
    :func:`no_skill_rates`): a gain of B (C) over A is "not testable" when the mean final accuracy over seeds of every
    personalized profile aggregated with A and with B (C) is at or below it: the noisy models are noise, and their
    difference says nothing about the aggregation, whatever its interval. Experiments it does not name are tested as
    above. Runs of C in another reading than the adopted ``"sum/round"`` (a ``c_reading`` column, as stored records
    of the chapter's ``compare_c_reading`` have) are left out: the paper's C is the adopted one.
    """
    no_skill = dict(no_skill or {})
    for key, rate in no_skill.items():
        if not 0.0 <= real(rate, f"no_skill[{key!r}]") <= 1.0:
            raise ValueError(f"no_skill[{key!r}] must be an accuracy in [0, 1] (a fraction, not %), got {rate!r}")
    need = {"experiment", "kind", "profile", "aggregation", "seed", "accuracy"}
    if not need <= set(runs.columns):
        raise ValueError(f"runs lacks the columns {sorted(need - set(runs.columns))}")
    if "c_reading" in runs.columns:  # C in another reading than the adopted one (section 6) is not the paper's C
        runs = runs[(runs["aggregation"] != "C") | runs["c_reading"].isin([C_READINGS[0]])]
    present = set(runs["experiment"])
    unknown = sorted(present - set(EXPERIMENTS))
    if unknown:
        raise ValueError(f"no reported numbers for experiment(s) {unknown}; known: {EXPERIMENTS}")
    rows = []
    for key in [k for k in EXPERIMENTS if k in present]:  # the paper's order, whatever the order of the runs
        rep = {r.where["quantity"]: r for r in REPORTED if r.where["experiment"] == key}
        f = runs[runs["experiment"] == key]
        nn = 100 * f[f["profile"] == "no noise"]["accuracy"]
        rows.append({"experiment": key, "quantity": "no-noise accuracy (%)", "paper": rep["no_noise"].value,
                     "ours": mean_std(nn, count=False), "paired 95 % CI": "", "test": ""})
        pers = f[f["kind"] == "personalized"].pivot_table(index=["profile", "seed"], columns="aggregation",
                                                           values="accuracy")
        for agg in ("B", "C"):
            stated = rep.get(f"gain_{agg}")
            claim = "not reported" if stated is None else ("none (no gain)" if stated.value is None else stated.value)
            if agg not in pers or "A" not in pers:
                rows.append({"experiment": key, "quantity": f"gain of {agg} over A (points)", "paper": claim,
                             "ours": "not run", "paired 95 % CI": "", "test": ""})
                continue
            gain = 100 * (pers[agg] - pers["A"]).groupby("seed").mean()  # averaged over profiles, per seed
            ci = paired_t_interval(gain)
            test = "" if ci is None else ("gain" if ci[0] > 0 else "loss" if ci[1] < 0 else "no evidence")
            if key in no_skill:  # best profile mean (over seeds) of A and of this aggregation
                best = pers[["A", agg]].groupby("profile").mean().max().max()
                if best <= no_skill[key]:
                    test = "not testable"
            rows.append({"experiment": key, "quantity": f"gain of {agg} over A (points)", "paper": claim,
                         "ours": mean_std(gain, fmt="+.1f", count=False),
                         "paired 95 % CI": "1 seed" if ci is None else f"[{ci[0]:+.1f}, {ci[1]:+.1f}]",
                         "test": test})
    return pd.DataFrame(rows)



# ------------------------------------------------------------------------------- the chapter's tables and figures
#: (features D, classes K) of each data set's one-vs-rest linear model: d = K (D + 1) weights.
FEATURES = {**{name: (math.prod(_d.IMAGE_SHAPES[name][0]), _d.IMAGE_SHAPES[name][1])
               for name in ("digits", "fashion_mnist", "mnist")},
            "covertype": (54, 7)}   # the loader's 10 standardised numeric and 44 indicator columns, 7 cover types


def model_size(dataset: str) -> int:
    """d = K (D + 1), the weights of the one-vs-rest logistic regression on ``dataset`` (W (K x D) and b (K))."""
    features, classes = FEATURES[dataset]
    return classes * (features + 1)


def _certified(eps: float, digits: int) -> Any:
    return "none" if eps == math.inf else round(eps, digits)


def privacy_tables(sigma_reading: str = "sqrt_all") -> dict[str, Any]:
    """The privacy the paper's noise really gives, at every setting of :data:`SETTINGS` (chapter, section 2).

    Returns ``"gaussian"``: IID, the exact (ε, δ_i) of the real-valued Gaussian with the paper's σ_i (``sigma_reading``;
    the other reading's σ_i next to it) for sensitivity 2c per weight, per coordinate per round, per model per round
    (d weights) and over R rounds (μ-GDP composition); ``"sampled"``: the ε the grid law as sampled certifies at δ_i
    ("none": no finite ε) and its total variation η per report; ``"ldpsign"``: non-IID, the exact pure ε* of the sign
    report, composed by basic composition; ``"mu"``: {(dataset, ε_i): μ of the sampled IID law}; ``"reachable"``:
    {(dataset, ε_i): the probability that a report of w = c is also possible under w = -c}, for digits at ε_i = 10.
    Values are rounded as the chapter prints them."""
    from ..audits import exact_delta_audit

    other = OTHER_READING[sigma_reading]
    gauss, sampled, sign, mu, reachable = [], [], [], {}, {}
    for name, s in SETTINGS["iid"].items():
        d = model_size(name)
        for e in s["epsilons"]:
            sig = {r: paper_gaussian_sigma(e, delta=s["delta"], q=s["q"], rounds=s["rounds"], reading=r)
                   for r in SIGMA_READINGS}
            m = Gaussian.with_sigma(sigma=sig[sigma_reading], delta=s["delta"], radius=s["clip"])
            g, got = m.ideal_guarantee, m.guarantee  # exact for the real-valued law (Δ = 2c); certified as sampled
            delta = f"1/{round(1 / s['delta']):,}"  # δ_i = 1/|D_i| (Section 3.1)
            gauss.append({"data": name, "ε_i (paper)": e, "δ_i": delta, "c": s["clip"],
                          "σ_i (adopted)": round(sig[sigma_reading], 1), "σ_i (other)": round(sig[other], 1),
                          "ε per coord per round": round(g.epsilon, 2),
                          "ε per model per round": round(g.compose(d=d).epsilon, 1),
                          "ε per model, R rounds": round(g.compose(d=d, rounds=s["rounds"]).epsilon, 1),
                          "d": d, "R": s["rounds"]})
            sampled.append({"data": name, "ε_i (paper)": e, "δ_i": delta,
                            "per coord per round": _certified(got.epsilon, 2),
                            "per model per round": _certified(got.compose(d=d).epsilon, 1),
                            "per model, R rounds": _certified(got.compose(d=d, rounds=s["rounds"]).epsilon, 1),
                            "η per report": f"{m.tv:.1e}"})
            mu[name, e] = got.mu
            if name == "digits" and e == 10.0:
                audit = exact_delta_audit(m, [-s["clip"], s["clip"]])
                reachable[name, e] = 1.0 - audit.details["unreachable"]
    for name, s in SETTINGS["noniid"].items():
        d = model_size(name)
        for e in s["epsilons"]:
            m = LdpSign(epsilon=e, delta=s["delta"], l2_sensitivity=s["l2"], radius=s["clip"])
            g = m.guarantee  # exact pure ε per coordinate per round
            sign.append({"data": name, "ε_i (paper, δ=1e-5)": e, "σ_i": round(m.sigma, 2), "c": s["clip"],
                         "exact pure ε per coord per round": round(g.epsilon, 3),
                         "per model per round (d ε*)": round(g.compose(d=d).epsilon, 1),
                         "per model, R rounds": round(g.compose(d=d, rounds=s["rounds"]).epsilon, 1), "d": d})
    return {"gaussian": pd.DataFrame(gauss), "sampled": pd.DataFrame(sampled), "ldpsign": pd.DataFrame(sign),
            "mu": mu, "reachable": reachable}


def selection_table(sigma_reading: str = "sqrt_all") -> pd.DataFrame:
    """Per setting and personalized profile: the P_i of aggregation C (= the weights α_i of B), the probability that
    no client is selected in a round (1 - max_i P_i) and the expected number selected (Σ_i P_i = 1)."""
    rows = []
    for proto in PROTOCOLS:
        for name, s in SETTINGS[proto].items():
            for label, prof in s["profiles"].items():
                mechs = client_mechanisms(prof, proto, s, reading=sigma_reading)
                p = selection_probabilities([m.sigma for m in mechs])
                rows.append({"protocol": proto, "data": name, "profile": label,
                             "P_i (C) = α_i (B)": " ".join(f"{v:.3f}" for v in p.tolist()),
                             "P(no client selected)": round(1 - p.max().item(), 3),
                             "E[clients selected]": round(sum(p.tolist()), 3)})
    return pd.DataFrame(rows)


def lemma_table() -> pd.DataFrame:
    """Abadi et al.'s Lemma 3, on which the σ_i formula rests, needs q < 1 / (16 σ): checked at every IID setting of
    :data:`SETTINGS` under both readings, at the smallest σ_i of the grid (the most favourable)."""
    rows = []
    for name, s in SETTINGS["iid"].items():
        for reading in SIGMA_READINGS:
            sig = min(paper_gaussian_sigma(e, delta=s["delta"], q=s["q"], rounds=s["rounds"], reading=reading)
                      for e in s["epsilons"])
            rows.append({"data": name, "reading": reading, "q": s["q"], "smallest sigma": round(sig, 1),
                         "1 / (16 sigma)": f"{1 / (16 * sig):.2g}", "q < 1 / (16 sigma)": s["q"] < 1 / (16 * sig)})
    return pd.DataFrame(rows)


def blank_repeats(df: pd.DataFrame, columns: Sequence[str]) -> pd.DataFrame:
    """``df`` with a value of ``columns`` left blank where it repeats the row above's (for a table grouped by those
    columns; the groups' first rows keep it)."""
    out = df.copy()
    for col in columns:
        out[col] = out[col].astype(object)
        rep = out[col].eq(df[col].shift())
        out.loc[rep, col] = ""
    return out


def _mean_std(a: pd.Series) -> str:
    return f"{100 * a.mean():.1f} ± {100 * a.std():.1f}"


def _setting_of(experiment: str) -> Optional[Mapping[str, Any]]:
    """The :data:`SETTINGS` entry an experiment key runs under ("iid mnist": the digits protocol), or None."""
    protocol, _, name = experiment.partition(" ")
    name = {"mnist": "digits", "covertype_raw": "covertype"}.get(name, name)
    return SETTINGS.get(protocol, {}).get(name)


def scenario_order(final: pd.DataFrame) -> pd.DataFrame:
    """``final`` (rows with experiment, profile, aggregation) sorted stably into the paper's grid order within each
    experiment (:func:`grid_scenarios`: no noise, all clients at each ε, the profiles; A, B, C), the experiments in
    order of first appearance: stored records come in file order, a table should not."""
    exp_rank = {e: i for i, e in enumerate(dict.fromkeys(final["experiment"]))}

    def rank(row: Any) -> tuple:
        s = _setting_of(row.experiment)
        labels = [] if s is None else list(dict.fromkeys(label for _, label, _, _ in grid_scenarios(s)))
        pos = labels.index(row.profile) if row.profile in labels else len(labels)
        agg = AGGREGATIONS.index(row.aggregation) if row.aggregation in AGGREGATIONS else len(AGGREGATIONS)
        return exp_rank[row.experiment], pos, agg

    keys = [rank(r) for r in final[["experiment", "profile", "aggregation"]].itertuples(index=False)]
    order = sorted(range(len(final)), key=lambda i: keys[i])
    return final.iloc[order].reset_index(drop=True)


def accuracy_table(final: pd.DataFrame) -> pd.DataFrame:
    """Final test accuracy (%) as "mean ± std" over seeds per experiment and profile (rows, in the paper's grid
    order: :func:`scenario_order`) and aggregation (columns A, B, C; blank where a scenario has no such run)."""
    final = scenario_order(final)
    order = final[["experiment", "profile"]].drop_duplicates()
    t = (final.groupby(["experiment", "profile", "aggregation"], sort=False)["accuracy"].agg(_mean_std)
         .unstack("aggregation"))
    t = t.reindex(pd.MultiIndex.from_frame(order))
    t = t[[a for a in AGGREGATIONS if a in t.columns]].fillna("")
    t.columns.name = None
    return t.reset_index()


def plot_experiment(hist: pd.DataFrame, key: str):
    """Test accuracy (%) per round of the experiment ``key`` (mean ± std over seeds as a band): the
    non-personalized runs (A) in the first panel, then one panel per personalized profile with A, B and C; two
    panels per row (:func:`ldptut.display.figure`). Returns the figure."""
    from ..display import figure, integer_rounds

    df = hist[hist["experiment"] == key]
    profiles = list(df.loc[df["kind"] == "personalized", "profile"].drop_duplicates())
    panels = 1 + len(profiles)
    fig, axes = figure(2, math.ceil(panels / 2), sharey=True, squeeze=False)
    axes = list(axes.flat)
    seeds = df["seed"].nunique()
    parts = [(df[df["kind"] == "non-personalized"], "non-personalized (A)")]
    parts += [(df[df["profile"] == p], f"profile {p}") for p in profiles]
    for ax, (part, title) in zip(axes, parts):
        for (profile, agg), g in part.groupby(["profile", "aggregation"], sort=False):
            m = g.groupby("round")["accuracy"].agg(["mean", "std"]).fillna(0.0)
            label = profile if part["kind"].iloc[0] == "non-personalized" else agg
            ax.plot(m.index, 100 * m["mean"], marker=".", label=label, ls="--" if profile == "no noise" else "-")
            ax.fill_between(m.index, 100 * (m["mean"] - m["std"]), 100 * (m["mean"] + m["std"]), alpha=0.15)
        ax.set_title(title, fontsize=10)
        ax.set_ylim(0, 100)
        ax.set_xlabel("communication round")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for i, ax in enumerate(axes):
        if i >= panels:
            ax.remove()
        elif i % 2 == 0:
            ax.set_ylabel("test accuracy (%)")
    integer_rounds(axes[:panels])
    fig.suptitle(f"{key}: mean ± std over {seeds} seed{'s' if seeds != 1 else ''}", fontsize=10)
    return fig


def sigma_readings_tables(both: pd.DataFrame, sigma_reading: str) -> dict[str, Any]:
    """The IID runs under both readings of σ_i (``both``: :func:`final_rounds` of the runs, ``reading`` labelled).

    ``"accuracy"``: final accuracy (%), mean over seeds, per (experiment, profile, aggregation) of the noisy runs,
    one column per reading; ``"ranking"``: the mean over the personalized profiles per (experiment, reading), A, B,
    C and their ranking; ``"c_beats_b"``: the "<experiment> <profile>" where C beats B under the other reading."""
    noisy = both[both["profile"] != "no noise"]
    acc = (noisy.groupby(["experiment", "profile", "aggregation", "reading"], sort=False)["accuracy"]
           .mean().mul(100).round(1).unstack("reading"))
    order = noisy[["experiment", "profile", "aggregation"]].drop_duplicates()
    acc = acc.reindex(pd.MultiIndex.from_frame(order))  # run order (unstack sorts labels shared across data sets)
    acc = acc[[r for r in (sigma_reading, OTHER_READING[sigma_reading]) if r in acc.columns]]
    acc.columns.name = None
    pers = both[both["kind"] == "personalized"]
    rank = (pers.groupby(["experiment", "reading", "aggregation"])["accuracy"].mean().mul(100).round(1)
            .unstack("aggregation"))
    rank["ranking"] = rank.apply(lambda r: " > ".join(r.sort_values(ascending=False).index), axis=1)
    rank.columns.name = None
    wide = pers.groupby(["experiment", "reading", "profile", "aggregation"])["accuracy"].mean().unstack()
    c_over_b = [f"{e} {p}" for (e, r, p), v in wide.iterrows() if r != sigma_reading and v["C"] > v["B"]]
    return {"accuracy": acc.reset_index(), "ranking": rank.reset_index(), "c_beats_b": c_over_b}


def gains_text(table: pd.DataFrame) -> str:
    """The gains of :func:`compare`'s table whose paired interval excludes 0, as prose ("none" if no interval does)."""
    rows = table[table["test"].isin(["gain", "loss"])] if len(table) else table
    text = "; ".join(f"{r.quantity.split(' (')[0]} on {r.experiment} ({r.ours.split(' ±')[0]} points, "
                     f"{r['paired 95 % CI']}; the paper: {r.paper})" for _, r in rows.iterrows())
    return text or "none"


def accuracy_range(final: pd.DataFrame, experiment: str) -> str:
    """The range "lo to hi" of the mean final accuracy (%, over seeds) of the noisy (profile, aggregation) cells of
    ``experiment`` ("(not run)" when it has none)."""
    f = final[(final["experiment"] == experiment) & (final["profile"] != "no noise")]
    m = f.groupby(["profile", "aggregation"])["accuracy"].mean().mul(100)
    return f"{m.min():.1f} to {m.max():.1f}" if len(m) else "(not run)"


def noise_versus_no_noise(final: pd.DataFrame, experiment: str) -> str:
    """Prose: where the noisy runs of ``experiment`` end against its no-noise run (means over seeds, %): the range of
    the noisy scenarios aggregated with A or B and whether every one is above (below) the no-noise mean, C's range,
    and the spread (standard deviation over seeds) of the A/B and no-noise cells. "(not run)" without the runs."""
    f = final[final["experiment"] == experiment]
    if f.empty or not (f["profile"] == "no noise").any():
        return "(not run)"
    g = f.groupby(["profile", "aggregation"])["accuracy"]
    m, sd = g.mean().mul(100), g.std().mul(100)
    nn = m[("no noise", "A")]
    ab = [k for k in m.index if k[0] != "no noise" and k[1] in ("A", "B")]
    c = [k for k in m.index if k[0] != "no noise" and k[1] == "C"]
    lo, hi = m[ab].min(), m[ab].max()
    where = "every one above" if lo > nn else "every one below" if hi < nn else "some above and some below"
    text = f"the noisy runs aggregated with A or B end at {lo:.1f} to {hi:.1f} % ({where} the no-noise run's {nn:.1f} %)"
    if c:
        text += f", with C at {m[c].min():.1f} to {m[c].max():.1f} %"
    spread = sd[ab + [("no noise", "A")]]
    return text + (f" (means over {f['seed'].nunique()} seeds; standard deviations {spread.min():.0f} to "
                   f"{spread.max():.0f} points)")


def paper_scale_report(stored: pd.DataFrame, p: Mapping[str, Any], *, loaded: Optional[dict] = None
                       ) -> dict[str, Any]:
    """What the chapter shows of the stored paper-scale runs (``stored``: :func:`load_runs`; ``p``: the chapter's
    parameters).

    ``"provenance"``: lines on the records (count, hours of training, commits, code version, sizes and seeds per
    experiment); ``"no_skill"``: :func:`no_skill_rates` of its experiments; ``"table"``: :func:`compare` of the
    paper's experiments under ``p["sigma_reading"]``; ``"final"``: every run's last round; ``"numbers"``: the figures the
    chapter's prose quotes (no-noise and majority rates on Covertype, the best noisy Covertype run, the raw-column
    check, the Covertype readings' largest difference, C's readings on non-IID digits, non-IID MNIST)."""
    last = final_rounds(stored)
    reading = p["sigma_reading"]
    done = last[(last["reading"] == reading) & last["experiment"].isin(EXPERIMENTS)]  # not our extensions
    grids = last.drop_duplicates(["experiment", "reading", "seed"])  # one grid: one experiment, reading and seed
    lines = [f"{len(last)} runs in {len(grids)} grids ({last['train_seconds'].sum() / 3600:.1f} h of training), "
             f"commits {', '.join(sorted(set(last['commit'].dropna())))}",
             "code of the runs: " + ", ".join(f"{n} {flag}" for flag, n in last["code"].value_counts().items())]
    sizes = done.drop_duplicates("experiment").set_index("experiment")
    sizes = sizes.reindex([k for k in EXPERIMENTS if k in sizes.index])  # the paper's order
    for key, row in sizes.iterrows():
        lines.append(f"{key}: {row['n_train']:,} train / {row['n_test']:,} test, {row['rounds']} rounds, "
                     f"seeds {sorted(set(done[done.experiment == key]['seed']))}")
    no_skill = no_skill_rates(list(sizes.index), p, loaded=loaded)  # the same test splits (data_seed 0)
    numbers: dict[str, Any] = {}
    cov = last[last["experiment"].isin(["iid covertype", "noniid covertype"]) & (last["profile"] != "no noise")]
    if len(cov):
        numbers["covertype_noisy_best"] = 100 * cov["accuracy"].max()
        numbers["covertype_noisy_runs"] = len(cov)
        by_reading = (cov[cov["experiment"] == "iid covertype"].groupby(["profile", "aggregation", "reading"])
                      ["accuracy"].mean().mul(100).unstack("reading"))
        if by_reading.shape[1] == 2:
            numbers["covertype_readings_max_diff"] = (by_reading.iloc[:, 0] - by_reading.iloc[:, 1]).abs().max()
    for key in ("iid covertype", "noniid covertype"):
        nn = done[(done["experiment"] == key) & (done["profile"] == "no noise")]["accuracy"]
        if len(nn):
            numbers[f"{key} no noise"] = (100 * nn.mean(), 100 * nn.std())
    raw = last[last["experiment"] == "iid covertype_raw"]["accuracy"]
    if len(raw):
        numbers["iid covertype raw"] = (100 * raw.mean(), 100 * raw.std(), len(raw))
    creads = last[(last["experiment"] == "noniid digits") & (last["reading"] == reading)]
    if len(creads):
        c = c_readings_table(creads)
        mean = c.loc[("noniid digits", "mean over profiles")]
        numbers["noniid digits readings"] = {k: mean[k] for k in mean.index if k != "ranking"}
        numbers["noniid digits seeds"] = creads["seed"].nunique()
    nm = last[last["experiment"] == "noniid mnist"]
    if len(nm):
        numbers["noniid mnist"] = nm
    return {"provenance": lines, "no_skill": no_skill, "table": compare(done, no_skill=no_skill), "final": done,
            "last": last, "numbers": {k: _rounded(v) for k, v in numbers.items()}}


def _rounded(v: Any, digits: int = 2) -> Any:
    """Floats (also inside tuples and dicts) as Python floats rounded to ``digits`` decimals: stable printed text."""
    if isinstance(v, dict):
        return {k: _rounded(x, digits) for k, x in v.items()}
    if isinstance(v, tuple):
        return tuple(_rounded(x, digits) for x in v)
    if isinstance(v, (float, np.floating)):
        return round(float(v), digits)
    if isinstance(v, np.integer):
        return int(v)
    return v


def covertype_check(final: pd.DataFrame, raw: pd.DataFrame, *, majority: float) -> Optional[pd.DataFrame]:
    """Covertype's no-noise final test accuracy (%): the "iid covertype" no-noise runs of ``final`` (the loader's
    standardised numeric columns) and the "iid covertype_raw" runs of ``raw`` (the raw columns as UCI ships them;
    :func:`final_rounds` frames, one row per seed), next to always predicting the test set's majority class
    (``majority``, in [0, 1]) and the paper's number (Section 5.2.2). None when either run is missing."""
    std = final[(final["experiment"] == "iid covertype") & (final["profile"] == "no noise")]["accuracy"]
    unscaled = raw[raw["experiment"] == "iid covertype_raw"]["accuracy"]
    if std.empty or unscaled.empty:
        return None

    def ms(a: pd.Series) -> str:
        return f"{100 * a.mean():.1f} ± {100 * a.std():.1f}" if len(a) > 1 else f"{100 * a.mean():.1f}"

    return pd.DataFrame([
        {"model": "ours, standardised numeric columns", "accuracy (%)": ms(std), "seeds": len(std)},
        {"model": "ours, raw numeric columns (as UCI ships them)", "accuracy (%)": ms(unscaled), "seeds": len(unscaled)},
        {"model": "always the majority class (test set)", "accuracy (%)": f"{100 * majority:.1f}", "seeds": ""},
        {"model": "the paper (Section 5.2.2)", "accuracy (%)": f"{reported('iid covertype', 'no_noise').value:.1f}",
         "seeds": ""}])


# ------------------------------------------------------------------------ the chapter's tables as shown on its page
def _shown(df: pd.DataFrame, caption: str, *, blank: Sequence[str] = (), **kw: Any):
    from ..display import table

    return table(blank_repeats(df, blank) if blank else df, caption=caption, **kw)


_PRIVACY_SHOWN = {
    "gaussian": ("IID, Gaussian, the real-valued mechanism: the exact ε at δ_i of the noise the paper adds (sensitivity "
                 "2c per weight; μ-GDP composition over d weights and R rounds)",
                 {"ε_i (paper)": "g", "c": "g", "σ_i (adopted)": ",.1f", "σ_i (other)": ",.1f",
                  "ε per coord per round": ".2f", "ε per model per round": ",.1f", "ε per model, R rounds": ",.1f"}),
    "sampled": ("IID, Gaussian as sampled (grid law): the ε certified at δ_i (none: no finite ε)", {"ε_i (paper)": "g"}),
    "ldpsign": ("Non-IID, ldpsign: the exact pure ε* of the sign report per coordinate per round, composed by basic "
                "composition", {"ε_i (paper, δ=1e-5)": "g", "c": "g", "σ_i": ".2f",
                                "exact pure ε per coord per round": ".3f", "per model per round (d ε*)": ",.1f",
                                "per model, R rounds": ",.1f"}),
}


def privacy_shown(priv: Mapping[str, Any], which: str):
    """:func:`privacy_tables`' table ``which`` ("gaussian", "sampled", "ldpsign") as shown on the page."""
    caption, fmt = _PRIVACY_SHOWN[which]
    return _shown(priv[which], caption, number_format=fmt)


def selection_shown(selection: pd.DataFrame):
    """:func:`selection_table` as shown on the page."""
    return _shown(selection, "The weights of B and the selection probabilities of C per personalized profile",
                  number_format={"P(no client selected)": ".3f", "E[clients selected]": ".3f"},
                  headers={"P(no client selected)": "P(no client selected) per round",
                           "E[clients selected]": "E[clients selected] per round"})


def accuracy_shown(accuracy: pd.DataFrame, caption: str):
    """:func:`accuracy_table` as shown on the page (each experiment named once)."""
    return _shown(accuracy, caption, blank=["experiment"])


def compare_shown(table: pd.DataFrame, no_skill: Mapping[str, float], caption: str):
    """:func:`compare`'s table as shown on the page, the no-skill rates (%) in the caption."""
    rates = ", ".join(f"{k} {100 * v:.1f}" for k, v in no_skill.items())
    return _shown(table, f"{caption}. No-skill rate (%): {rates}", blank=["experiment"],
                  headers={"paired 95 % CI": "paired 95 % CI (points)"})


def readings_shown(readings: Mapping[str, Any], seeds: int):
    """:func:`sigma_readings_tables`' two tables as shown on the page."""
    return (_shown(readings["accuracy"], f"Final accuracy (%), mean over {seeds} seeds, under both readings of σ_i",
                   blank=["experiment", "profile"], number_format=".1f"),
            _shown(readings["ranking"], "Mean over the personalized profiles (%) and the aggregations' ranking, per "
                   "reading (the paper's: C > B > A)", number_format=".1f"))


def lemma_shown():
    """:func:`lemma_table` as shown on the page."""
    return _shown(lemma_table(), "Abadi et al.'s Lemma 3 condition at the paper's IID settings (smallest σ_i of the "
                  "grid)", number_format={"q": "g", "smallest sigma": ",.1f"})


def c_readings_shown(c_table: pd.DataFrame, seeds: int):
    """:func:`c_readings_table` as shown on the page."""
    return _shown(c_table.reset_index(), f"Final accuracy (%), personalized profiles, mean over {seeds} seeds; C in "
                  "each reading (normalisation/draw; sum/round is the adopted one)", blank=["experiment"],
                  number_format=".1f")

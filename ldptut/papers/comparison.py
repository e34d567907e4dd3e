"""Which mechanism, when? Every mechanism of the book on one benchmark, at one privacy scale.

The book's last chapter. Its "paper" is the book: the mechanisms of the five papers re-run in the previous chapters,
each through the round engine (no copy of any), on the same clients, rounds, local computation and seeds, beside
non-private FedAvg and central DP-FedAvg (the trusted-server reference, :mod:`ldptut.central`).

**One scale.** A grid point is an ε **per weight per round** (the unit of LDP-FL, CoQ-FL and PD-LDPFL), ε_w. Each
method is run at the privacy that grid point stands for:

* the per-weight mechanisms (two-point with a fixed or an adaptive range, Laplace, Piecewise, Hybrid, Gaussian, the
  correlated pairs) at ε_w per weight per round; the Gaussian at (ε_w, δ) per weight per round;
* FedSel's two-stage report, which sends one coordinate of the whole model, at the same ε **per model per round**
  that the per-weight mechanisms spend: d ε_w (basic composition over the d weights), split ε1 = μ d ε_w for the
  selection and ε2 = (1 - μ) d ε_w for the value (FedSel's μ);
* central DP-FedAvg at the same ε **per client over the training** as the per-weight mechanisms' pure guarantee
  composes to (:func:`ldptut.scales.privacy_scales`: the smaller of basic and advanced composition at δ), with
  replace-one neighbours (LDP's "any two inputs"), its noise multiplier from
  :func:`ldptut.central.central_noise_multiplier`.

PD-LDPFL's scaled Piecewise with a **public** bound is Piecewise on a fixed range (the bound is the range), so it is the
Piecewise row; its published, data-dependent scale is not LDP (the PD-LDPFL chapter) and is in the attack table, not
here. LdpSign (the stochastic sign of Jin et al. 2020, Wu et al.'s non-IID mechanism) sends one sign per coordinate of
the client's update, calibrated **exactly** to ε_w per weight per round (σ from its pure ε*, not the paper's Gaussian
(ε, δ) formula), and the server moves the model by a step η in the sign of the mean (signSGD's majority vote); on
weights, as in Wu et al.'s Algorithm 2, the model itself would be a sign vector.

**Tuning** (the chapter's paper-scale pages). On a validation split, never the test set, each method's step (the
clients' learning rate; the majority vote's server step η) and its range (the fixed range r of the per-weight mechanisms and of
the clipping control, the update range of FedSel and LdpSign, central DP-FedAvg's clipping norm C) are chosen per grid
point from the task's value times factors (``lr_factors``, ``range_factors``); the test runs use the choice. The
two-point majority vote is the control for LdpSign: the same updates, range and server rule with the two-point report.

Each run's configuration is a :class:`ComparisonConfig` (a FedAvg run with its report: "each" coordinate perturbed,
correlated "pairs", FedSel's one "select"-ed coordinate, or "central" clipping with the server's noise), and every
run records the grid point it stands for (``scale_epsilon``), so the tables line the methods up at equal privacy.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Mapping, Optional, Sequence

import pandas as pd
import torch

from .._validate import delta as _delta, epsilon as _epsilon, fraction, one_of
from ..accounting import Guarantee, Unit
from ..central import ClipUpdate, NoisyMean, central_epsilon, central_noise_multiplier
from ..experiments import FedAvgConfig
from ..fl import (FixedRange, GlobalModelRange, LocalPerturbation, PairedPerturbation, SelectThenPerturb, SignOf,
                  make_aggregator)
from ..mechanisms import MECHANISMS
from ..models import build_model, count_parameters
from ..params import ChapterParams, P, chapter_params, param
from ..scales import privacy_scales
from . import Paper, Reported, interval_cell
from . import corbin as _corbin, ldp_fl as _ldp_fl, pd_ldpfl as _pd_ldpfl

__all__ = ["PAPER", "SETTINGS", "METHODS", "REPORTS", "REPORTED", "ComparisonConfig", "method_config", "configs",
           "Params", "grid", "compare", "dimension", "scale_row", "scales_frame", "accuracy_table",
           "constant_accuracy", "base_config", "CONTROLS", "tuning", "choose", "choice", "scaled", "tuned_range",
           "followup", "experiment_names", "tuning_table", "at_edge", "audit_table", "D_AUDIT", "LOCAL", "decision_table",
           "plot_accuracy", "seconds_per_round", "cost_table", "ATTACK_MODEL", "ATTACK_RADIUS", "attack_reports",
           "client_weights", "leak_table"]

PAPER = Paper(
    key="comparison",
    citation="This book: the mechanisms of Sun et al. (IJCAI 2021), Wu et al. (2023), CoQ-FL / CorBin-FL, Liu et al. "
             "(DASFAA 2020) and Wang et al. (2024) side by side, with central DP-FedAvg (McMahan et al., ICLR 2018) "
             "as the trusted-server reference",
    chapter="book/comparison",
    intro="**Which mechanism, when?** Every mechanism of the book on one benchmark (Adult with logistic regression, "
          "MNIST with a small CNN), at one privacy scale (per weight per round, per model per round, over the "
          "training), beside central DP-FedAvg: accuracy against ε with intervals over seeds, what each report costs, "
          "and a decision table.",
)

#: The benchmark's tasks: the same clients, rounds and local computation for every method. ``radius``: the fixed range
#: of the per-weight mechanisms (weights in [-r, r]); ``update_radius``: FedSel's value range (one update coordinate,
#: the largest in magnitude); ``clip``: central DP-FedAvg's L2 clipping norm of a client's update. The three were read
#: off one non-private pilot run (seed 0): about the 99th percentile of |weight|, the largest |update coordinate| and
#: the median update norm; tuned per method and grid point on validation when ``range_factors`` has more than one
#: value. ``sign_step``: LdpSign's server step η per round (a fifth of the update range; tuned with ``lr_factors``).
SETTINGS: dict[str, dict[str, Any]] = {
    "adult": {"dataset": "adult", "model": "logreg", "n_clients": 50, "rounds": 20, "local_epochs": 1,
              "batch_size": 32, "optimizer": "sgd", "lr": 0.1, "n_train": None, "n_test": None,
              "radius": 0.5, "update_radius": 0.05, "clip": 0.1, "sign_step": 0.01},
    "mnist": {"dataset": "mnist", "model": "cnn_small", "n_clients": 20, "rounds": 10, "local_epochs": 1,
              "batch_size": 32, "optimizer": "sgd", "lr": 0.05, "n_train": 6000, "n_test": 2000,
              "radius": 0.15, "update_radius": 0.05, "clip": 0.3, "sign_step": 0.01},
}

#: The methods, in the tables' order: name -> (shown name, where it comes from).
METHODS: dict[str, tuple[str, str]] = {
    "fedavg": ("FedAvg (no privacy)", "McMahan et al. 2017"),
    "clip": ("Clipped to the range, no noise (not private)", "control: clipping without noise"),
    "two_point": ("Two-point, fixed range", "LDP-FL (Sun et al. 2021), Eq. 2"),
    "two_point_adaptive": ("Two-point, adaptive range", "LDP-FL's adaptive range (Sun et al. 2021, Sec. 4)"),
    "laplace": ("Laplace", "the textbook baseline (Dwork et al. 2006)"),
    "piecewise": ("Piecewise (= PD-LDPFL with a public bound)", "Wang et al. 2019; PD-LDPFL (Wang et al. 2024)"),
    "hybrid": ("Hybrid", "Wang et al. 2019; FedSel's HM"),
    "gaussian": ("Gaussian (ε, δ)", "Wu et al. 2023 (IID clients), analytic calibration"),
    "ldpsign": ("LdpSign: signs of updates, majority vote", "Jin et al. 2020; Wu et al. 2023 (non-IID clients)"),
    "two_point_sign": ("Two-point on updates, majority vote", "control: LdpSign's server rule, LDP-FL's report"),
    "pairs": ("Two-point, correlated pairs", "CoQ-FL / CorBin-FL, Algorithm 1"),
    "fedsel": ("FedSel: one coordinate (EXP + Piecewise)", "Liu et al. 2020, Algorithm 1"),
    "central": ("Central DP-FedAvg (trusted server)", "McMahan et al. 2018, Algorithm 1"),
    "clip_updates": ("Clipped updates, no noise (not private)", "control: central DP-FedAvg's clipping without noise"),
}
#: The runs without privacy (once per seed, no grid point): no noise, and the two clipping controls.
CONTROLS = ("fedavg", "clip", "clip_updates")

#: The model size the audit table's FedSel rows use (Adult's logistic regression, :func:`dimension`).
D_AUDIT = 218

#: ``ComparisonConfig.report``: how a client's vector becomes what it sends.
REPORTS = ("each", "pairs", "select", "central")


def _reported(source: Reported, *, method: str, note: str) -> Reported:
    """A row of another chapter's :data:`REPORTED`, re-keyed to this chapter's method (the value is the paper's, in its
    own setting; the comparison table says ours is on the benchmark)."""
    import dataclasses

    return dataclasses.replace(source, claim=f"{source.claim} ({note})",
                               setting=(("dataset", "mnist"), ("method", method), ("epsilon", source.epsilon)))


#: Each paper's own number for its mechanism on MNIST (its setting, its model), beside ours on the benchmark's MNIST at
#: the same ε per weight per round: the rows come from the paper modules, not copied.
REPORTED: tuple[Reported, ...] = (
    _reported(_ldp_fl.REPORTED[0], method="two_point", note="LDP-FL, 100 clients, its CNN"),
    _reported(next(r for r in _corbin.REPORTED if r.where.get("method") == "coq_fl" and r.epsilon == 1.0
                   and r.where.get("dataset") == "mnist"), method="pairs", note="CoQ-FL, its CNN"),
    _reported(next(r for r in _pd_ldpfl.REPORTED if r.where.get("method") == "pd_ldpfl"
                   and r.where.get("dataset") == "mnist"), method="piecewise", note="PD-LDPFL, 5 clients"),
)


# ------------------------------------------------------------------------------------ one run
@dataclass(frozen=True, kw_only=True)
class ComparisonConfig(FedAvgConfig):
    """A FedAvg run of the benchmark with one method's report (:data:`METHODS`).

    ``report``: "each" (every coordinate clipped to ``range`` and perturbed by ``mechanism`` at ``epsilon`` per weight
    per round; the Gaussian also takes ``delta``), "pairs" (the two-point mechanism on correlated client pairs,
    :class:`~ldptut.fl.PairedPerturbation`), "select" (FedSel's one coordinate, :class:`~ldptut.fl.SelectThenPerturb`:
    ``epsilon_select`` for the choice, ``epsilon`` for the value by ``mechanism`` within ``range``; sends updates) or
    "central" (:class:`~ldptut.central.ClipUpdate` at ``clip``, the server's :class:`~ldptut.central.NoisyMean` at
    ``noise_multiplier``; sends updates). ``scale_epsilon``: the grid point, ε per weight per round, this run is
    calibrated to (the module docstring says how each method is; None for the non-private runs). ``server_step``:
    the majority vote's step η (the server moves each weight by η in the sign of the mean report): needed by LdpSign,
    allowed for any perturbed report of updates (the two-point control); None for the plain mean."""

    kind: ClassVar[str] = "comparison"

    report: str = "each"
    delta: Optional[float] = None
    epsilon_select: Optional[float] = None
    clip: Optional[float] = None
    noise_multiplier: Optional[float] = None
    scale_epsilon: Optional[float] = None
    server_step: Optional[float] = None

    def __post_init__(self) -> None:
        one_of(self.report, "report", REPORTS)
        if (self.mechanism == "gaussian") != (self.delta is not None):
            raise ValueError("delta is needed exactly when mechanism='gaussian' (its δ per weight per round)")
        if self.delta is not None:
            _delta(self.delta)
        if self.report == "pairs" and self.mechanism != "two_point":
            raise ValueError(f"correlated pairs perturb with the two-point mechanism; got mechanism={self.mechanism!r}")
        if (self.report == "select") != (self.epsilon_select is not None):
            raise ValueError("epsilon_select is needed exactly when report='select' (FedSel's selection budget)")
        if (self.report == "central") != (self.clip is not None and self.noise_multiplier is not None):
            raise ValueError("clip and noise_multiplier are needed exactly when report='central'")
        if self.report == "central" and self.mechanism is not None:
            raise ValueError("report='central' adds the server's noise: set no mechanism")
        if self.report in ("select", "central") and self.send != "updates":
            raise ValueError(f"report={self.report!r} sends updates: set send='updates'")
        if self.scale_epsilon is not None:
            _epsilon(self.scale_epsilon, "scale_epsilon")
        if self.mechanism == "ldpsign" and self.server_step is None:
            raise ValueError("server_step is needed when mechanism='ldpsign' (the server's sign step η)")
        if self.server_step is not None:
            _epsilon(self.server_step, "server_step")
            if self.report != "each" or self.send != "updates" or self.mechanism in (None, "clip"):
                raise ValueError("server_step (the majority vote's step) is for perturbed updates: report='each', "
                                 "send='updates' and a mechanism")
        super().__post_init__()

    @property
    def method(self) -> str:
        """The :data:`METHODS` key this run is."""
        if self.report == "central":
            return "central" if self.noise_multiplier > 0 else "clip_updates"
        if self.report == "select":
            return "fedsel"
        if self.report == "pairs":
            return "pairs"
        if self.mechanism is None:
            return "fedavg"
        if self.mechanism == "two_point" and isinstance(self.range, GlobalModelRange):
            return "two_point_adaptive"
        if self.mechanism == "two_point" and self.server_step is not None:
            return "two_point_sign"
        return self.mechanism

    def privatizer(self):
        if self.report == "pairs":
            return PairedPerturbation(epsilon=self.epsilon, range=self.range)
        if self.report == "select":
            return SelectThenPerturb(epsilon_select=self.epsilon_select, epsilon_value=self.epsilon,
                                     mechanism=MECHANISMS[self.mechanism], range=self.range)
        if self.report == "central":
            return ClipUpdate(clip=self.clip)
        if self.mechanism == "gaussian":
            return LocalPerturbation(mechanism=MECHANISMS["gaussian"], epsilon=self.epsilon, range=self.range,
                                     delta=self.delta)
        return super().privatizer()

    def server_rule(self):
        if self.report == "central":
            return NoisyMean(clip=self.clip, noise_multiplier=self.noise_multiplier)
        if self.server_step is not None:
            return SignOf(make_aggregator(self.aggregator), step=self.server_step)
        return self.aggregator

    def guarantee(self, d: int) -> Optional[Guarantee]:
        """The client's local guarantee of one round: per weight for "each" and "pairs" (each client's own report),
        per model (d weights) for "select"; None for "central" (no local guarantee: :meth:`central_epsilon`) and the
        non-private runs."""
        if self.report == "central" or self.mechanism is None or self.mechanism == "clip":
            return None   # central: no local guarantee (central_epsilon); the rest: no privacy
        if self.report == "select":
            return Guarantee(self.epsilon_select + self.epsilon, unit=Unit(coordinates=d, whole_model=True),
                             note="selection + value")
        return self.privatizer()._unit.guarantee

    def central_epsilon(self, d: int, delta: float) -> float:
        """Central DP-FedAvg's ε per client over the training at ``delta`` (replace-one neighbours), for "central"."""
        if self.method != "central":
            raise ValueError(f"central_epsilon is for central DP-FedAvg (report='central', noise_multiplier > 0), "
                             f"not {self.method!r}")
        return central_epsilon(noise_multiplier=self.noise_multiplier, rounds=self.rounds, delta=delta, dimension=d,
                               neighbours="replace")

    def label(self) -> str:
        name = METHODS[self.method][0]
        at = "" if self.scale_epsilon is None else f" at ε = {self.scale_epsilon:g} per weight per round"
        return f"{name}{at}, {self.dataset}, {self.partition}, seed {self.seed}"


# ------------------------------------------------------------------------------------ the grid
def dimension(task: str) -> int:
    """d, the number of weights of ``task``'s model (:data:`SETTINGS`)."""
    s = SETTINGS[one_of(task, "task", tuple(SETTINGS))]
    shapes = {"adult": ((108,), 2), "mnist": ((1, 28, 28), 10)}
    shape, classes = shapes[task]
    return count_parameters(build_model(s["model"], input_shape=shape, num_classes=classes))


def base_config(task: str, *, seed: int = 0, partition: str = "iid", dirichlet_alpha: Optional[float] = None,
                rounds: Optional[int] = None, n_clients: Optional[int] = None) -> ComparisonConfig:
    """The non-private run of ``task`` (:data:`SETTINGS`), ``rounds`` and ``n_clients`` overridable."""
    s = SETTINGS[one_of(task, "task", tuple(SETTINGS))]
    return ComparisonConfig(paper="comparison", dataset=s["dataset"], model=s["model"],
                            n_clients=n_clients or s["n_clients"], rounds=rounds or s["rounds"], seed=seed,
                            partition=partition, dirichlet_alpha=dirichlet_alpha if partition == "dirichlet" else None,
                            local_epochs=s["local_epochs"], batch_size=s["batch_size"], optimizer=s["optimizer"],
                            lr=s["lr"], n_train=s["n_train"], n_test=s["n_test"])


def method_config(method: str, *, base: ComparisonConfig, task: str, epsilon: Optional[float] = None,
                  delta: float = 1e-5, mu: float = 0.1, d: Optional[int] = None) -> ComparisonConfig:
    """``base`` (non-private) as ``method`` at the grid point ``epsilon`` (ε per weight per round; none for "fedavg"
    and "clip"), calibrated as the module docstring says: δ is the Gaussian's per weight per round and central's over
    the training; ``mu`` FedSel's share of the budget for the selection; ``d`` the model's weights (computed when
    None)."""
    one_of(method, "method", tuple(METHODS))
    s = SETTINGS[task]
    fixed = FixedRange(0.0, s["radius"])
    if method == "fedavg":
        return base
    if method == "clip":
        return base.replace(mechanism="clip", range=fixed)
    if method == "clip_updates":
        return base.replace(report="central", send="updates", clip=s["clip"], noise_multiplier=0.0)
    e = _epsilon(epsilon, "epsilon")
    d = d or dimension(task)
    common = dict(scale_epsilon=e)
    if method in ("two_point", "laplace", "piecewise", "hybrid"):
        return base.replace(mechanism=method, epsilon=e, range=fixed, **common)
    if method == "two_point_adaptive":
        return base.replace(mechanism="two_point", epsilon=e, range=GlobalModelRange(), **common)
    if method == "gaussian":
        return base.replace(mechanism="gaussian", epsilon=e, delta=_delta(delta), range=fixed, **common)
    if method in ("ldpsign", "two_point_sign"):
        return base.replace(mechanism="ldpsign" if method == "ldpsign" else "two_point",
                            epsilon=e, range=FixedRange(0.0, s["update_radius"]), send="updates",
                            server_step=s["sign_step"], **common)
    if method == "pairs":
        return base.replace(mechanism="two_point", epsilon=e, range=fixed, report="pairs", **common)
    if method == "fedsel":
        total = d * e
        m = fraction(mu, "mu")
        if not m < 1:
            raise ValueError(f"mu must be below 1 (the value needs a budget too), got {mu!r}")
        return base.replace(mechanism="piecewise", epsilon=(1 - m) * total, epsilon_select=m * total,
                            range=FixedRange(0.0, s["update_radius"]), report="select", send="updates", **common)
    # central: the per-weight mechanisms' over-training ε at this grid point, replace-one neighbours
    target = privacy_scales(Guarantee(e), d=d, rounds=base.rounds, delta_slack=delta)["over_training"]
    z = central_noise_multiplier(epsilon=target, rounds=base.rounds, delta=delta, dimension=d, neighbours="replace")
    return base.replace(report="central", send="updates", clip=s["clip"], noise_multiplier=z, **common)


def configs(task: str, *, methods: Sequence[str], epsilons: Sequence[float], seeds: Sequence[int],
            partition: str = "iid", dirichlet_alpha: Optional[float] = None, rounds: Optional[int] = None,
            n_clients: Optional[int] = None, delta: float = 1e-5, mu: float = 0.1) -> list[ComparisonConfig]:
    """Every method of ``methods`` at every grid point of ``epsilons`` (per weight per round) and seed; the controls
    (:data:`CONTROLS`) once per seed."""
    d = dimension(task)
    out = []
    for seed in seeds:
        base = base_config(task, seed=seed, partition=partition, dirichlet_alpha=dirichlet_alpha, rounds=rounds,
                           n_clients=n_clients)
        for method in methods:
            if method in CONTROLS:
                out.append(method_config(method, base=base, task=task))
                continue
            out += [method_config(method, base=base, task=task, epsilon=e, delta=delta, mu=mu, d=d) for e in epsilons]
    return out


@chapter_params
class Params(ChapterParams):
    """The chapter's parameters (``book/comparison.ipynb``'s parameters cell: the same names, defaults and order)."""

    tasks: list[str] = param(P.list_of(P.choice(*SETTINGS)), ["adult"])
    partitions: list[str] = param(P.list_of(P.choice("iid", "dirichlet")), ["iid"])
    dirichlet_alpha: float = param(P.pos_float, 0.5)
    methods: list[str] = param(P.list_of(P.choice(*METHODS)), list(METHODS))
    epsilons: list[float] = param(P.list_of(P.pos_float), [0.03, 0.3, 3.0])
    seeds: list[int] = param(P.list_of(P.nonneg_int), [0, 1, 2])
    rounds: Optional[int] = param(P.optional(P.pos_int), 10)
    n_clients: Optional[int] = param(P.optional(P.pos_int), None)
    delta: float = param(P.fraction, 1e-5)
    fedsel_mu: float = param(P.fraction, 0.1)
    lr_factors: list[float] = param(P.list_of(P.pos_float), [1.0])
    range_factors: list[float] = param(P.list_of(P.pos_float), [1.0])
    validation: int = param(P.pos_int, 2000)
    tuning_seeds: list[int] = param(P.list_of(P.nonneg_int), [0])
    attack_epsilons: list[float] = param(P.list_of(P.pos_float), [1.0, 10.0])
    attack_images: int = param(P.pos_int, 2)
    attack_steps: int = param(P.pos_int, 20)
    audit_epsilon: float = param(P.pos_float, 1.0)

    def check(self) -> None:
        """FedSel's value needs a budget too: ``fedsel_mu`` < 1."""
        if not self.fedsel_mu < 1:
            raise ValueError(f"fedsel_mu must be below 1 (the value needs a budget too), got {self.fedsel_mu!r}")
    device: str = param(P.device, "auto")
    run_cache: Optional[str] = param(P.optional(P.string), None)
    paper_runs_dir: Optional[str] = param(P.optional(P.string), "runs/cache/comparison")


def _experiments(p: Mapping[str, Any]):
    """(task, partition, Dirichlet α or None, experiment name) of every setting of ``p``."""
    for task in p["tasks"]:
        for partition in p["partitions"]:
            yield task, partition, (p["dirichlet_alpha"] if partition == "dirichlet" else None), f"{task} {partition}"


def _configs(p: Mapping[str, Any], task: str, partition: str, alpha: Optional[float], seeds: Sequence[int]):
    return configs(task, methods=p["methods"], epsilons=p["epsilons"], seeds=seeds, partition=partition,
                   dirichlet_alpha=alpha, rounds=p["rounds"], n_clients=p["n_clients"], delta=p["delta"],
                   mu=p["fedsel_mu"])


def experiment_names(p: Mapping[str, Any]) -> list[str]:
    """The test runs' experiment names of ``p``, "<task> <partition>" (the tuning runs' are "tune " and the same)."""
    return [name for *_, name in _experiments(p)]


def tuning(p: Mapping[str, Any]) -> bool:
    """Whether ``p`` tunes (more than one of ``lr_factors`` or of ``range_factors``)."""
    return len(set(p["lr_factors"])) > 1 or len(set(p["range_factors"])) > 1


def tuned_range(c: ComparisonConfig) -> Optional[float]:
    """The range the tuning scales in run ``c``: central DP-FedAvg's clipping norm C (and its control's), the radius of
    a fixed range (the per-weight mechanisms', the clipping control's, FedSel's and LdpSign's update range); None where
    the method has none (FedAvg, the adaptive range)."""
    if c.report == "central":
        return c.clip
    return c.range.radius if isinstance(c.range, FixedRange) else None


def _with_range(c: ComparisonConfig, value: float) -> ComparisonConfig:
    if c.report == "central":
        return c.replace(clip=value)   # the noise multiplier, hence ε, does not depend on C
    return c.replace(range=FixedRange(c.range.center, value))


def scaled(c: ComparisonConfig, *, step: float = 1.0, range: float = 1.0) -> ComparisonConfig:
    """``c`` with its step times ``step`` (the clients' learning rate; LdpSign's server step η, the clients' rate only
    scaling an update whose sign is all that is sent) and its range (:func:`tuned_range`) times ``range``."""
    out = c.replace(server_step=c.server_step * step) if c.server_step is not None else c.replace(lr=c.lr * step)
    r = tuned_range(c)
    return out if r is None or range == 1.0 else _with_range(out, r * range)


def choice(c: ComparisonConfig) -> tuple:
    """What tuning chooses in run ``c``: (learning rate, LdpSign's server step or None, :func:`tuned_range` or
    None)."""
    return (c.lr, c.server_step, tuned_range(c))


def _apply(c: ComparisonConfig, chosen: tuple) -> ComparisonConfig:
    lr, step, r = chosen
    out = c.replace(lr=lr, server_step=step)
    return out if r is None else _with_range(out, r)


def grid(p: Mapping[str, Any]) -> list[tuple[str, ComparisonConfig]]:
    """The chapter's runs that its parameters ``p`` fix before any training. Without tuning (one value in each of
    ``lr_factors`` and ``range_factors``): every task, partition, method, grid point and seed (:func:`configs`) with
    its step and range scaled by those factors (:func:`scaled`), each named "<task> <partition>". With tuning: the
    "tune <task> <partition>" runs, every method at every grid point, step factor and range factor (methods without a
    range once per step), seeds ``tuning_seeds``, trained on the training set less ``validation`` held-out examples
    and evaluated on those (never on the test set); the test runs at each method's best choice are
    :func:`followup`'s."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    out = []
    for task, partition, alpha, name in _experiments(p):
        if not tuning(p):
            f, g = p["lr_factors"][0], p["range_factors"][0]
            out += [(name, scaled(c, step=f, range=g)) for c in _configs(p, task, partition, alpha, p["seeds"])]
            continue
        val = [c.replace(validation=p["validation"], n_test=None) for c in
               _configs(p, task, partition, alpha, p["tuning_seeds"])]
        seen = set()
        for f in sorted(set(p["lr_factors"])):
            for g in sorted(set(p["range_factors"])):
                for c in val:
                    t = scaled(c, step=f, range=g)
                    if t.key() not in seen:   # a method without a range: once per step
                        seen.add(t.key())
                        out.append((f"tune {name}", t))
    return out


def _setting(c: ComparisonConfig) -> tuple:
    return (c.dataset, c.partition, c.method, c.scale_epsilon)


def _scores(g: pd.DataFrame) -> dict:
    """{choice: mean final validation accuracy over the tuning seeds} of the choices none of whose runs diverged."""
    ch = g["config"].map(choice)
    return {k: float(h["accuracy"].mean()) for k, h in g.groupby(ch, sort=False, dropna=False)
            if not h["diverged"].any()}


def _rank(k: tuple, score: float) -> tuple:
    lr, step, r = k
    return (score, -(step if step is not None else lr), -(r if r is not None else 0.0))


def choose(tune: pd.DataFrame) -> dict[tuple, Optional[tuple]]:
    """Each (data set, partition, method, grid point)'s :func:`choice` from the tuning runs (validation split): the
    one whose runs have the highest mean final validation accuracy over the tuning seeds, among those none of whose
    runs diverged; ties go to the smaller step, then the smaller range. None where every choice diverged on some seed.
    Never reads the test set (``ValueError`` if a row was evaluated on it)."""
    if not len(tune):
        return {}
    if tune["config"].map(lambda c: c.validation is None).any():
        raise ValueError("choose takes the tuning runs only (evaluated on the validation split); some rows were "
                         "evaluated on the test set")
    out: dict[tuple, Optional[tuple]] = {}
    for k, g in tune.groupby(tune["config"].map(_setting), sort=False):
        score = _scores(g)
        out[k] = max(score, key=lambda c: _rank(c, score[c])) if score else None
    return out


def followup(p: Mapping[str, Any], tune: pd.DataFrame) -> list[tuple[str, ComparisonConfig]]:
    """The test runs of a tuned grid: every method at every grid point and seed of ``seeds`` with the step and range
    :func:`choose` picks from ``tune`` (the stored "tune ..." runs of ``grid(p)``; rows of other experiments are
    ignored when it has an ``experiment`` column); a setting whose every choice diverged on validation runs at the
    task's step and range (its test runs then show how it fares, diverged or not). Nothing without tuning (the grid
    holds the test runs then)."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    if not tuning(p):
        return []
    if "experiment" in tune:
        tune = tune[tune["experiment"].str.startswith("tune ")]
    best = choose(tune)
    out = []
    for task, partition, alpha, name in _experiments(p):
        for c in _configs(p, task, partition, alpha, p["seeds"]):
            chosen = best.get(_setting(c))
            out.append((name, c if chosen is None else _apply(c, chosen)))
    return out


def tuning_table(tune: pd.DataFrame, *, task_choice: bool = True) -> pd.DataFrame:
    """Per setting, method and grid point (rows): the chosen step (learning rate, or LdpSign's server step η) and
    range (r, or C), the mean final validation accuracy (%) of that choice and of the task's own step and range
    (``task_choice``; "diverged" where a run did), and how many of the choices tried diverged."""
    if not len(tune):
        return pd.DataFrame()
    best = choose(tune)
    rows = {}
    for k, g in tune.groupby(tune["config"].map(_setting), sort=False):
        ds, part, m, e = k
        label = (f"{ds} {part}", METHODS[m][0], "—" if e is None else f"{e:g}")
        score = _scores(g)
        chosen = best.get(k)
        tried = set(g["config"].map(choice))
        row = {"step chosen": "—" if chosen is None else f"{chosen[1] if chosen[1] is not None else chosen[0]:g}"
               + (" (η)" if chosen is not None and chosen[1] is not None else ""),
               "range chosen": "—" if chosen is None or chosen[2] is None else f"{chosen[2]:g}",
               "validation accuracy (%)": "diverged" if chosen is None else f"{score[chosen]:.1f}"}
        if task_choice:
            home = choice(_apply(g["config"].iloc[0], _task_choice(g["config"].iloc[0])))
            row["at the task's step and range (%)"] = (f"{score[home]:.1f}" if home in score else
                                                       "diverged" if home in tried else "not tried")
        row["choices diverged"] = f"{len(tried) - len(score)} of {len(tried)}"
        rows[label] = row
    out = pd.DataFrame.from_dict(rows, orient="index")
    out.index = pd.MultiIndex.from_tuples(out.index, names=["setting", "method", "ε per weight per round"])
    return out


def at_edge(tune: pd.DataFrame, p: Mapping[str, Any]) -> tuple[int, int]:
    """(how many, of how many) settings' :func:`choose` choices lie at an end of the factors ``p`` tried (the step's
    ``lr_factors`` or the range's ``range_factors``, where more than one was tried): for those the best may lie beyond
    the grid."""
    best = choose(tune)
    steps, ranges = sorted(set(p["lr_factors"])), sorted(set(p["range_factors"]))
    first = {_setting(c): c for c in tune["config"]}
    n = edge = 0
    for k, chosen in best.items():
        if chosen is None:
            continue
        n += 1
        lr0, step0, r0 = _task_choice(first[k])
        f_step = chosen[1] / step0 if chosen[1] is not None else chosen[0] / lr0
        ends = [(f_step, steps)] + ([(chosen[2] / r0, ranges)] if chosen[2] is not None else [])
        edge += any(len(fs) > 1 and (math.isclose(f, fs[0], rel_tol=1e-9) or math.isclose(f, fs[-1], rel_tol=1e-9))
                    for f, fs in ends)
    return edge, n


def _task_choice(c: ComparisonConfig) -> tuple:
    """The task's own (learning rate, server step, range) for ``c``'s method (:data:`SETTINGS`)."""
    s = SETTINGS[c.dataset]
    r = tuned_range(c)
    if r is not None:
        if c.report == "central":
            r = s["clip"]
        elif c.report == "select" or c.server_step is not None:
            r = s["update_radius"]
        else:
            r = s["radius"]
    return (s["lr"], s["sign_step"] if c.server_step is not None else None, r)


# ------------------------------------------------------------------------------------ the scale and the tables
def scale_row(config: ComparisonConfig, *, d: int, delta: float = 1e-5) -> dict:
    """One method's privacy at the chapter's three levels, from its configuration: ε per weight per round, ε per model
    per round, ε over the training (and how it was obtained), with their units; central's is over the training only.
    Beside them, for a pure per-weight guarantee, what shuffling the n clients' reports of each weight would give per
    weight per round (Feldman, McMillan, Talwar 2021, where its condition on ε and n holds; None otherwise): an
    amplification that needs each weight's reports unlinkable from the others', which the LDP-FL chapter shows a
    server can undo by timing."""
    g = config.guarantee(d)
    row = {"method": METHODS[config.method][0], "grid point (ε per weight per round)": config.scale_epsilon}
    if config.method == "central":
        per_round = central_epsilon(noise_multiplier=config.noise_multiplier, rounds=1, delta=delta, dimension=d,
                                    neighbours="replace")
        row.update({"ε per weight per round": None, "ε per model per round": per_round,
                    "ε over training": config.central_epsilon(d, delta), "δ over training": delta,
                    "how": f"central, zCDP, z = {config.noise_multiplier:.3g} (trusted server)"})
        return row
    if g is None:
        row.update({"ε per weight per round": math.inf if config.method in ("clip", "clip_updates") else None,
                    "ε per model per round": None, "ε over training": None, "δ over training": None,
                    "how": "no privacy" if config.method == "fedavg" else "not private"})
        return row
    s = privacy_scales(g, d=d, rounds=config.rounds, delta_slack=delta, clients=config.n_clients)
    row.update({"ε per weight per round": s["per_weight_round"], "ε per model per round": s["per_model_round"],
                "ε over training": s["over_training"], "δ over training": s["over_training_delta"],
                "how": s["over_training_how"], "ε per weight per round if shuffled": s["shuffled_per_weight_round"]})
    return row


def scales_frame(task: str, *, epsilon: float, rounds: Optional[int] = None, delta: float = 1e-5,
                 mu: float = 0.1, methods: Sequence[str] = tuple(METHODS)) -> pd.DataFrame:
    """:func:`scale_row` of every private method of ``methods`` at the grid point ``epsilon`` for ``task``."""
    d = dimension(task)
    base = base_config(task, rounds=rounds)
    rows = [scale_row(method_config(m, base=base, task=task, epsilon=epsilon, delta=delta, mu=mu, d=d), d=d,
                      delta=delta) for m in methods if m not in CONTROLS]
    return pd.DataFrame(rows).set_index("method")


def accuracy_table(runs: pd.DataFrame, *, experiment: Optional[str] = None) -> pd.DataFrame:
    """Final test accuracy (%), "mean [95 % interval]" over seeds (diverged runs counted apart), one row per method
    (:data:`METHODS` order) and one column per grid point (ε per weight per round); the non-private runs in the column
    "—". ``experiment`` selects one "<task> <partition>"."""
    if experiment is not None and "experiment" in runs:
        runs = runs[runs["experiment"] == experiment]
    if not len(runs):
        return pd.DataFrame()
    method = runs["config"].map(lambda c: c.method)
    point = runs["config"].map(lambda c: "—" if c.scale_epsilon is None else f"{c.scale_epsilon:g}")
    acc = runs["accuracy"].where(~runs["diverged"])
    cells = acc.groupby([method, point]).apply(interval_cell).unstack()
    order = [m for m in METHODS if m in cells.index]
    cols = (["—"] if "—" in cells.columns else []) + sorted((c for c in cells.columns if c != "—"), key=float)
    out = cells.loc[order, cols].fillna("")
    out.index = [METHODS[m][0] for m in order]
    out.columns = ["no ε" if c == "—" else f"ε = {c}" for c in cols]
    return out


def compare(runs: pd.DataFrame) -> pd.DataFrame:
    """Each paper's own MNIST number for its mechanism (its model and clients) beside ours on the benchmark's MNIST
    (small CNN, :data:`SETTINGS`) at the same ε per weight per round: final test accuracy (%), mean [95 % interval] over
    seeds. The settings differ (said in the columns); the point is the order of magnitude, not a replication."""
    rows = []
    for claim in REPORTED:
        where = claim.where
        sel = runs
        if len(runs):
            sel = runs[runs["config"].map(lambda c: c.dataset == "mnist" and c.method == where["method"]
                                          and c.scale_epsilon == where["epsilon"] and c.partition == "iid")]
        ours = interval_cell(sel["accuracy"].where(~sel["diverged"])) if len(sel) else "not run"
        rows.append({"paper's claim": claim.claim, "ε": f"{claim.epsilon:g} {claim.epsilon_unit}",
                     "paper (%)": claim.value, "ours on the benchmark (%)": ours,
                     "our setting": "small CNN (26,698 weights), 20 clients, 6,000 images" if len(sel) else ""})
    return pd.DataFrame(rows)


def constant_accuracy(labels) -> float:
    """The constant classifier's accuracy (%) on ``labels``: the share of the most frequent class (the control any
    accuracy of a private run is read against)."""
    import torch

    counts = torch.bincount(torch.as_tensor(labels).long().flatten())
    return 100.0 * float(counts.max()) / float(counts.sum())


# ------------------------------------------------------------------------------------ the audits
class _Realised:
    """A mechanism seen through the law its sampler realises (``realized_distribution``), for the exact audit."""

    def __init__(self, mechanism: Any) -> None:
        self.mechanism = mechanism
        self.guarantee = mechanism.guarantee
        self.center, self.radius = mechanism.center, mechanism.radius

    def output_distribution(self, x: Any):
        return self.mechanism.realized_distribution(x)


def audit_table(epsilon: float, *, delta: float = 1e-5, inputs: int = 21, d: int = D_AUDIT,
                partner: float = 0.5, float_check: bool = True) -> pd.DataFrame:
    """Each mechanism's realised privacy at ``epsilon`` per weight per round (one coordinate, range [-1, 1]), one row
    each: the claimed guarantee, what the audit finds and how.

    * Two-point, Laplace, Piecewise, Hybrid, LdpSign (exact calibration): exact, the largest P[y | x] / P[y | x']
      over ``inputs`` evenly spaced inputs and every output (:func:`ldptut.audits.exact_ldp_audit`), of the law the
      sampler realises where the mechanism states it (the grid laws' counts of 2^24 uniforms; LdpSign's less likely
      report rounded up to 2^-24), else of its exact output law.
    * Gaussian: the exact δ at the claimed ε of the realised grid law between the ends of the range
      (:func:`ldptut.audits.exact_delta_audit`).
    * Correlated pairs: a client's own report (exact, its marginal is the two-point law) and the **joint view** of the
      pair when the server knows the partner's input ``partner`` (:func:`ldptut.papers.corbin.joint_view_loss`).
    * FedSel: the exponential selection's exact loss over the whole model's ranking
      (:meth:`~ldptut.selection.ExponentialSelection.privacy_loss`, d = ``d``) at its share μ = 0.1 of d ε, and
      perturbed encoding's (PE, the paper's other selector) exact loss against its stated ε1 (the excess).
    * Floating point (``float_check``): the textbook float32 Laplace sampler against ours, over all 2^24 uniforms
      (:func:`ldptut.attacks.floating_point_attack`): the share of reports of x = -1 that x' = 1 can never give.
    """
    from ..attacks import floating_point_attack, textbook_laplace
    from ..audits import exact_delta_audit, exact_ldp_audit
    from ..mechanisms import CorrelatedTwoPoint, Gaussian, Hybrid, Laplace, LdpSign, Piecewise, TwoPoint
    from ..selection import ExponentialSelection, PerturbedEncoding

    e = _epsilon(epsilon)
    xs = torch.linspace(-1.0, 1.0, inputs, dtype=torch.float64)
    rows = []
    unit = "per weight per round"
    for name, mech in (("two_point", TwoPoint(epsilon=e)), ("laplace", Laplace(epsilon=e)),
                       ("piecewise", Piecewise(epsilon=e)), ("hybrid", Hybrid(epsilon=e)),
                       ("ldpsign", LdpSign(epsilon=e))):
        realised = hasattr(mech, "realized_distribution")
        a = exact_ldp_audit(_Realised(mech) if realised else mech, xs)
        rows.append({"method": METHODS[name][0], "claimed": f"ε = {e:g} {unit}",
                     "found": f"ε = {a.epsilon_observed:.4g}", "holds": a.passed,
                     "how": "exact, realised law (2^24 uniforms)" if realised else "exact, output law"})
    g = Gaussian(epsilon=e, delta=delta)
    a = exact_delta_audit(g, [-1.0, 1.0])
    rows.append({"method": METHODS["gaussian"][0], "claimed": f"(ε, δ) = ({e:g}, {delta:g}) {unit}",
                 "found": f"δ(ε) = {a.details['delta']:.3g}", "holds": a.passed,
                 "how": "exact δ at ε of the realised law (2^53 uniforms)"})
    own = exact_ldp_audit(TwoPoint(epsilon=e), xs)
    pair = CorrelatedTwoPoint(epsilon=e, center=0.0, radius=1.0)
    joint = _corbin.joint_view_loss(pair, partner, grid=inputs)
    rows.append({"method": METHODS["pairs"][0] + ": own report", "claimed": f"ε = {e:g} {unit}",
                 "found": f"ε = {own.epsilon_observed:.4g}", "holds": own.passed, "how": "exact (its marginal)"})
    loss = joint["max privacy loss"]
    rows.append({"method": METHODS["pairs"][0] + ": the pair's joint view", "claimed": "(not claimed)",
                 "found": (f"ε = {loss:.4g}" if math.isfinite(loss) else "ε = ∞") + f", δ(ε) = {joint['δ at ε']:.3g}",
                 "holds": bool(loss <= e * (1 + 1e-9)),
                 "how": f"exact, partner's input {partner:g} known to the server"})
    total = d * e
    sel = ExponentialSelection(epsilon=0.1 * total).privacy_loss(d)
    rows.append({"method": METHODS["fedsel"][0] + ": selection (EXP)", "claimed": f"ε1 = {0.1 * total:.4g} per model per round",
                 "found": f"ε = {sel:.4g}", "holds": bool(sel <= 0.1 * total * (1 + 1e-9)),
                 "how": f"exact over the ranking, d = {d:,}"})
    pe_e1 = 1.0
    pe = PerturbedEncoding(epsilon=pe_e1, k=max(1, round(0.1 * d))).privacy_loss(d)
    rows.append({"method": "FedSel's PE selector (not in the grid)", "claimed": f"ε1 = {pe_e1:g} per model per round",
                 "found": f"ε = {pe:.4g}", "holds": bool(pe <= pe_e1 * (1 + 1e-9)),
                 "how": f"exact, k = {max(1, round(0.1 * d))} of d = {d:,}"})
    if float_check:
        text = floating_point_attack(lambda w, u: textbook_laplace(w, u, epsilon=e), -1.0, 1.0)
        ours = Laplace(epsilon=e)
        grid_attack = floating_point_attack(lambda w, u: ours._sample(w.to(torch.float64), u).to(w.dtype), -1.0, 1.0)
        rows.append({"method": "Laplace, textbook float32 sampler", "claimed": f"ε = {e:g} {unit}",
                     "found": f"{100 * text.ruled_out:.3g} % of reports of -1 impossible for +1",
                     "holds": bool(text.ruled_out == 0 and text.epsilon_observed <= e * (1 + 1e-9)),
                     "how": "all 2^24 uniforms enumerated"})
        rows.append({"method": "Laplace, this book's grid sampler", "claimed": f"ε = {e:g} {unit}",
                     "found": f"ε = {grid_attack.epsilon_observed:.4g}",
                     "holds": bool(grid_attack.ruled_out == 0 and grid_attack.epsilon_observed <= e * (1 + 1e-9)),
                     "how": "all 2^24 uniforms enumerated"})
    return pd.DataFrame(rows).set_index("method")


# ------------------------------------------------------------------------------------ the decision and the figure
#: The local methods (the client trusts no one): what the decision table chooses among.
LOCAL = ("two_point", "two_point_adaptive", "laplace", "piecewise", "hybrid", "gaussian", "ldpsign", "two_point_sign",
         "pairs", "fedsel")


def _mean_ci(values: pd.Series) -> tuple[float, float, float]:
    from ..intervals import t_interval

    v = values.dropna()
    if not len(v):
        return math.nan, math.nan, math.nan
    ci = t_interval(v)
    return float(v.mean()), *(ci if ci is not None else (math.nan, math.nan))


def decision_table(runs: pd.DataFrame, *, experiment: Optional[str] = None, constant: Optional[float] = None,
                   d: Optional[int] = None) -> pd.DataFrame:
    """Per grid point (ε per weight per round): the best local method by mean final test accuracy over seeds (%), its
    95 % interval, whether that interval lies above the constant classifier's accuracy ``constant`` (the control: a
    model that learned nothing), central DP-FedAvg at the same privacy over the training with its interval, non-private
    FedAvg, and which of the best local method and central DP-FedAvg is ahead ("level" where their intervals
    overlap).
    Diverged runs count as failures (their accuracy is missing, the mean is over the others, said in "diverged")."""
    if experiment is not None and "experiment" in runs:
        runs = runs[runs["experiment"] == experiment]
    method = runs["config"].map(lambda c: c.method)
    acc = runs["accuracy"].where(~runs["diverged"])
    fedavg = _mean_ci(acc[method == "fedavg"])[0]
    rows = []
    points = sorted({c.scale_epsilon for c in runs["config"] if c.scale_epsilon is not None})
    for e in points:
        at = runs["config"].map(lambda c: c.scale_epsilon == e)
        best = None
        for m in LOCAL:
            sel = at & (method == m)
            if not sel.any():
                continue
            mean, lo, hi = _mean_ci(acc[sel])
            if math.isfinite(mean) and (best is None or mean > best[1]):
                best = (m, mean, lo, hi, int(runs["diverged"][sel].sum()), int(sel.sum()))
        cen = _mean_ci(acc[at & (method == "central")])
        row = {"ε per weight per round": e}
        if d is not None:
            row["ε per model per round"] = d * e
        if best is not None:
            m, mean, lo, hi, div, n = best
            row.update({"best local method": METHODS[m][0], "its accuracy (%)": mean,
                        "95 % interval": "" if math.isnan(lo) else f"[{lo:.1f}, {hi:.1f}]",
                        "above the constant classifier": (None if constant is None or math.isnan(lo)
                                                          else bool(lo > constant))})
        row.update({"central DP-FedAvg (%)": cen[0],
                    "central's interval": "" if math.isnan(cen[1]) else f"[{cen[1]:.1f}, {cen[2]:.1f}]",
                    "non-private FedAvg (%)": fedavg})
        if best is not None:
            # which is ahead where the two intervals do not overlap; "level" where they do (or either has none)
            ahead = "level"
            if not (math.isnan(best[2]) or math.isnan(cen[1])):
                ahead = "central" if cen[1] > best[3] else ("local" if best[2] > cen[2] else "level")
            row["ahead"] = ahead
        rows.append(row)
    return pd.DataFrame(rows)


def plot_accuracy(runs: pd.DataFrame, *, experiment: str, d: int, constant: Optional[float] = None,
                  methods: Sequence[str] = tuple(METHODS), ax=None):
    """Final test accuracy (%, mean over seeds with its 95 % t-interval) against ε per weight per round (log axis;
    the top axis is the same privacy per model per round, d ε), one line per method; non-private FedAvg and the
    constant classifier as horizontal lines. Returns the figure."""
    import matplotlib.pyplot as plt

    runs = runs[runs["experiment"] == experiment] if "experiment" in runs else runs
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 5.2))
    else:
        fig = ax.figure
    method = runs["config"].map(lambda c: c.method)
    acc = runs["accuracy"].where(~runs["diverged"])
    markers = "osD^v<>pP*X"
    shown = [x for x in methods if x not in CONTROLS]
    palette = plt.get_cmap("tab20").colors
    colours = [palette[(2 * i) % 20 + (2 * i) // 20] for i in range(len(shown))]   # dark shades first, then light
    for i, m in enumerate(shown):
        sel = method == m
        if not sel.any():
            continue
        pts = sorted({c.scale_epsilon for c in runs["config"][sel]})
        stats = [_mean_ci(acc[sel & runs["config"].map(lambda c, e=e: c.scale_epsilon == e)]) for e in pts]
        mean = [s[0] for s in stats]
        err = [[s[0] - s[1] if math.isfinite(s[1]) else 0 for s in stats],
               [s[2] - s[0] if math.isfinite(s[2]) else 0 for s in stats]]
        style = "--" if m == "central" else "-"
        dodge = 1.0 + 0.035 * (i - (len(shown) - 1) / 2)   # side by side at each grid point (log axis)
        ax.errorbar([p * dodge for p in pts], mean, yerr=err, marker=markers[i % len(markers)], linestyle=style,
                    capsize=3, ms=4, label=METHODS[m][0], lw=1.2,
                    color="black" if m == "central" else colours[i])
    fed = _mean_ci(acc[method == "fedavg"])[0]
    if math.isfinite(fed):
        ax.axhline(fed, color="black", lw=1, label="FedAvg, no privacy")
    if constant is not None:
        ax.axhline(constant, color="grey", lw=1, ls=":", label="constant classifier (majority class)")
    ax.set_xscale("log")
    ax.set_xlabel("ε per weight per round (log scale)")
    ax.set_ylabel("final test accuracy (%)")
    top = ax.secondary_xaxis("top", functions=(lambda x: x * d, lambda x: x / d))
    top.set_xlabel(f"ε per model per round (d = {d:,} weights)")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    ax.set_title(f"{experiment}: mean over seeds, bars 95 % t-intervals (cut at 0 and 100 %)", fontsize=9)
    fig.tight_layout()
    return fig


def seconds_per_round(runs: pd.DataFrame) -> pd.DataFrame:
    """Mean wall-clock seconds per round of each method's runs (training, privatizing, aggregating and evaluating
    together; one process, the device of the runs), from the runs' provenance."""
    method = runs["config"].map(lambda c: c.method)
    per_round = runs["seconds"] / runs["config"].map(lambda c: c.rounds)
    out = per_round.groupby(method).mean()
    order = [m for m in METHODS if m in out.index]
    return pd.DataFrame({"seconds per round": out.loc[order].values}, index=[METHODS[m][0] for m in order])


def cost_table(epsilons: Sequence[float], *, delta: float = 1e-5, draws: int = 200_000, seed: int = 0) -> pd.DataFrame:
    """What one perturbed weight costs, per mechanism and ε (per weight per round), on the range [-1, 1] at x = 0:
    the variance of the report (the law the package samples, closed form), the same measured from ``draws`` seeded
    draws, the ideal continuous mechanism's variance where it differs, and the bits one report takes
    (⌈log2 K⌉ for K possible reports). The correlated pairs report like the two-point mechanism (their gain is in the
    pair's mean), FedSel sends one index and one value for the whole model, central DP-FedAvg the clear update.
    LdpSign's ±1 is read as σ √(π/2) y (unbiased to first order at 0, E[y | w] = 2Φ(w/σ) - 1 ≈ w / (σ √(π/2))); its
    row is that reading's variance, π σ² / 2."""
    import math as _m

    from ..mechanisms import Gaussian, Hybrid, Laplace, LdpSign, Piecewise, TwoPoint
    from ..rng import generator

    rows = []
    x = torch.zeros(draws, dtype=torch.float64)
    for e in epsilons:
        for name, mech in (("two_point", TwoPoint(epsilon=e)), ("laplace", Laplace(epsilon=e)),
                           ("piecewise", Piecewise(epsilon=e)), ("hybrid", Hybrid(epsilon=e)),
                           ("gaussian", Gaussian(epsilon=e, delta=delta)), ("ldpsign", LdpSign(epsilon=e))):
            values, _ = mech.output_distribution(torch.zeros(1, dtype=torch.float64))
            read = mech.sigma * _m.sqrt(_m.pi / 2) if name == "ldpsign" else 1.0   # the server's reading of ±1
            y = read * mech.privatize(x, generator(seed, f"cost {name} {e}"))
            ideal = getattr(mech, "ideal_variance", None)
            rows.append({"mechanism": METHODS[name][0], "ε per weight per round": e,
                         "variance (sampled law)": read ** 2 * float(mech.variance(torch.tensor(0.0, dtype=torch.float64))),
                         f"variance measured ({draws:,} draws)": float(y.var()),
                         "variance (ideal mechanism)": float(ideal(torch.tensor(0.0, dtype=torch.float64)))
                         if ideal is not None else float("nan"),
                         "bits per report": int(_m.ceil(_m.log2(values.shape[-1])))})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ the attack suite's reports
#: The attack suite's model: an MLP 784-16-10 with sigmoid activations (12,730 weights; iDLG with L-BFGS inverts its
#: clear single-image gradient exactly, where logistic regression's saturating softmax stalls the optimiser).
ATTACK_MODEL = ("mlp", {"hidden": (16,), "activation": "sigmoid"})
#: The range [-r, r] every gradient coordinate is clipped to before a per-coordinate mechanism (a client's gradient
#: coordinates of one image are mostly far below it).
ATTACK_RADIUS = 0.1


def attack_reports(epsilon: float, *, d: int, methods: Sequence[str] = tuple(METHODS), delta: float = 1e-5,
                   mu: float = 0.1) -> dict:
    """The report each method sends of one single-image gradient at the grid point ``epsilon`` (per weight per
    round), as :class:`ldptut.attack_suite.Report` s, calibrated as the grid is (FedSel at d ε per model per round,
    μ of it for the selection; the correlated pairs' own report is the two-point law, so they share its row; central
    DP-FedAvg's server sees the clear update). Keys are the methods' shown names."""
    from ..attack_suite import Report

    e = _epsilon(epsilon)
    out = {}
    for m in methods:
        if m in CONTROLS + ("two_point_adaptive", "pairs", "two_point_sign"):
            continue   # no privacy, or the same report law as a row below (a range or server rule)
        name = METHODS[m][0]
        if m == "central":
            out[name] = Report("central")
        elif m == "fedsel":
            out[name] = Report("fedsel", epsilon=(1 - mu) * d * e, epsilon_select=mu * d * e, radius=ATTACK_RADIUS)
        elif m == "gaussian":
            out[name] = Report("gaussian", epsilon=e, delta=delta, radius=ATTACK_RADIUS)
        elif m == "ldpsign":
            out[name] = Report("ldpsign", epsilon=e, radius=ATTACK_RADIUS)   # exact calibration, as in the grid
        else:
            out[name] = Report(m, epsilon=e, radius=ATTACK_RADIUS)
    return out


# ------------------------------------------------------------------------------------ the range and scale leaks
def client_weights(task: str, *, rounds: int = 1, n_clients: Optional[int] = None, seed: int = 0,
                   device: Any = "cpu") -> torch.Tensor:
    """The weights each client sends after its local training in round ``rounds`` of non-private FedAvg on ``task``
    (rows: clients, columns: the d weights), what the leak table perturbs."""
    from .. import data as _data
    from ..fl import RecordPayloads

    base = base_config(task, seed=seed, rounds=rounds, n_clients=n_clients)
    rec = RecordPayloads()
    base.simulate(_data.load_dataset(base.dataset, device=device), device=device, progress=False, privatizer=rec)
    return rec.raw.to("cpu", torch.float64)


def leak_table(weights: torch.Tensor, *, epsilon: float, radius: float, seed: int = 0) -> pd.DataFrame:
    """What the server reads off the support of the reports, per rule, at ``epsilon`` per weight per round, for the
    clients' weight vectors ``weights`` (one row per client): a range each client takes from its own weights (LDP-FL's
    adaptive range read per client, :func:`ldptut.attacks.range_leak`) against the public fixed range [-r, r], and
    PD-LDPFL's scale t = max θ (Algorithm 2, :func:`ldptut.attacks.piecewise_scale_leak`) against a public bound r.
    Columns: the share of clients whose private range (exactly) or largest weight (to 0.1 %) the server recovers, and
    the median relative error of what it recovers against the client's own extreme weights."""
    from ..attacks import piecewise_scale_leak, range_leak
    from ..rng import generator

    e = _epsilon(epsilon)
    rows = []
    for name, public in (("Two-point, each client's own range (not LDP)", None),
                         ("Two-point, public fixed range", (0.0, radius))):
        t = range_leak(weights, epsilon=e, public_range=public, generator=generator(seed, "leak", name))
        rows.append({"rule": name, "the server recovers": "the client's [min, max] weight" if public is None else
                     "the public range only", "clients leaked (%)": 100.0 * float(t["leaked"].mean()),
                     "median relative error": float(t["rel_error"].median())})
    for name, bound in (("Piecewise scaled by t = max θ (PD-LDPFL, Algorithm 2; not LDP)", None),
                        ("Piecewise with a public bound", radius)):
        t = piecewise_scale_leak(weights, epsilon=e, public_bound=bound, generator=generator(seed, "leak", name))
        # leaked: the server's t̂ is the client's own largest weight to 0.1 %
        rows.append({"rule": name, "the server recovers": "the client's largest weight" if bound is None else
                     "the public bound", "clients leaked (%)": 100.0 * float((t["max_error"] < 1e-3).mean()),
                     "median relative error": float(t["max_error"].median())})
    return pd.DataFrame(rows).set_index("rule")

"""LDP-FL (Sun, Qian, Chen, "LDP-FL: Practical Private Aggregation in Federated Learning with Local
Differential Privacy", IJCAI 2021): settings, published numbers, experiment grid, paper vs ours.

The method's pieces are generic and live in the package: the two-point mechanism
(:class:`ldptut.mechanisms.TwoPoint`, Eq. 2 / Algorithm 2), the fixed and adaptive range rules
(:class:`ldptut.fl.FixedRange`, :class:`ldptut.fl.GlobalModelRange`, Section 3.2), parameter shuffling
(:mod:`ldptut.shuffling`, Algorithm 3), the client-chosen-range leak (:mod:`ldptut.attacks`, Section 4),
and the round engine (:mod:`ldptut.fl`, Algorithm 1). Every ε here is **per weight per round**.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Optional, Sequence

import pandas as pd
import torch

from .._validate import pos_int
from ..data import Dataset
from ..experiments import CLIP_ONLY, FedAvgConfig
from ..fl import RANGE_RULES, FixedRange, GlobalModelRange
from ..params import ChapterParams, P, chapter_params, param
from ..rng import generator
from . import Paper, Reported, format_interval, mean_std, welch_interval

__all__ = ["PAPER", "SETTINGS", "REPORTED", "EPSILON_UNIT", "FIXED_RANGE", "N_CLIENTS", "ValidationConfig", "chapter_config",
           "configs", "Params", "grid", "compare", "privacy_cost", "reported_at", "steps_table", "LOCAL_KEYS",
           "check_local", "check_sensitivity_setting", "pick_rule", "local_label", "local_table", "local_of",
           "range_label", "run_label", "search_summary", "chosen_local", "chosen_settings", "chosen_configs",
           "sensitivity_panels", "paper_view", "compare_view", "view_cell", "plot_curves", "plot_sensitivity",
           "plot_search", "plot_grids", "plot_linking"]

PAPER = Paper(
    key="ldp_fl",
    citation="L. Sun, J. Qian, X. Chen. LDP-FL: Practical private aggregation in federated learning with local "
             "differential privacy. IJCAI 2021.",
    chapter="book/ldp_fl",
    intro="**LDP-FL** (Sun et al., IJCAI 2021): two-point perturbation with fixed and adaptive ranges, "
          "parameter shuffling and what a server can still link, and a client-chosen range that leaks.",
)

EPSILON_UNIT = "per weight per round"

#: Section 5 as printed. Local epochs, batch size and the architectures ("two-layer CNN", "small VGG")
#: are not given; ``model`` is ours (ldptut.models). FMNIST's rounds are stated as both 10 and 15.
SETTINGS = {
    "mnist": {"n_clients": 100, "rounds": 10, "lr": 0.03, "model": "cnn2", "fixed_range": (0.0, 0.075),
              "epsilons": [0.1, 0.3, 0.5, 1.0], "table1_epsilons": [5.0, 10.0]},
    "fashion_mnist": {"n_clients": 200, "rounds": 10, "lr": 0.03, "model": "cnn2", "fixed_range": (0.0, 0.015),
                      "epsilons": [1.0, 2.0, 4.0, 8.0, 10.0], "table1_epsilons": [5.0, 10.0]},
    "cifar10": {"n_clients": 500, "rounds": 15, "lr": 0.015, "model": "small_vgg", "fixed_range": (0.0, 1.0),
                "epsilons": [], "table1_epsilons": [5.0, 10.0]},
}

#: The fixed range (c, r) per data set (Section 5; CIFAR-10's (0, 1) from Section 5.4, Table 1's text).
FIXED_RANGE = {name: s["fixed_range"] for name, s in SETTINGS.items()}
#: Clients n per data set (Table 1 uses the headline settings' n).
N_CLIENTS = {name: s["n_clients"] for name, s in SETTINGS.items()}

_TRAINING = "training accuracy (%) (Fig. 5 caption: 'Effect of ε on training accuracy'); Section 5.3 text"
_TABLE1 = "accuracy (%); Table 1 does not say training or test (the paper's figures plot training accuracy)"

#: Published numbers: the Section 5.3 headline claims (read off Fig. 5, whose caption says training
#: accuracy) and Table 1 (fixed vs adaptive range). Each carries its setting for :func:`compare`.
REPORTED = [
    Reported(claim=f"{name} ε={eps:g} n={N_CLIENTS[name]} {label}", value=value, metric=_TRAINING,
             source=f"Section 5.3, Fig. 5({fig})", epsilon=eps, epsilon_unit=EPSILON_UNIT,
             setting=(("dataset", name), ("n_clients", N_CLIENTS[name]), ("rule", label.split()[0])))
    for name, eps, label, value, fig in [("mnist", 1.0, "fixed (0, 0.075)", 96.24, "a"),
                                         ("fashion_mnist", 4.0, "fixed (0, 0.015)", 86.26, "b"),
                                         ("cifar10", 10.0, "adaptive", 61.46, "c")]
] + [
    Reported(claim=f"Table 1 {name} ε={eps:g} {rule}", value=value, metric=_TABLE1, source="Table 1 (Section 5.4)",
             epsilon=eps, epsilon_unit=EPSILON_UNIT,
             setting=(("dataset", name), ("n_clients", N_CLIENTS[name]), ("rule", rule)))
    for name, eps, fixed, adaptive in [("mnist", 5.0, 96.34, 96.06), ("mnist", 10.0, 96.39, 96.11),
                                       ("fashion_mnist", 5.0, 85.95, 87.54), ("fashion_mnist", 10.0, 86.10, 87.57),
                                       ("cifar10", 5.0, 13.54, 58.89), ("cifar10", 10.0, 14.28, 60.37)]
    for rule, value in (("fixed", fixed), ("adaptive", adaptive))
]


@dataclass(frozen=True, kw_only=True)
class ValidationConfig(FedAvgConfig):
    """A :class:`~ldptut.experiments.FedAvgConfig` trained without ``validation`` examples of the training set and
    evaluated on them instead of the test set: for choosing the local computation the paper leaves unstated
    (Section 5 gives lr and rounds only), never on test. The held-out examples are the last ``validation`` of a
    fixed shuffle of the training set (seed 0, the same for every run seed); the clients' IID shards come from the
    rest, so each client holds ``(N - validation) / n_clients`` examples. Its history's "accuracy" and "loss" are on
    the validation split."""

    kind: ClassVar[str] = "ldp_fl_validation"

    validation: int

    def __post_init__(self) -> None:
        super().__post_init__()
        pos_int(self.validation, "validation")

    def data(self, ds: Dataset) -> Dataset:
        ds = self.check_dataset(ds)  # its own subsets and shuffles, not the base's
        n = ds.x_train.shape[0]
        if self.validation >= n:
            raise ValueError(f"validation = {self.validation} leaves no training data: {ds.name} has {n} training "
                             f"examples; hold out fewer")
        perm = torch.randperm(n, generator=generator(0, "ldp-fl-validation-split")).to(ds.x_train.device)
        train, val = perm[: n - self.validation], perm[n - self.validation:]
        return dataclasses.replace(ds, x_train=ds.x_train[train], y_train=ds.y_train[train],
                                   x_test=ds.x_train[val], y_test=ds.y_train[val])

    def label(self) -> str:
        return f"{super().label()}, {local_label(self)}, on validation"


#: The local-computation settings a search may vary (:func:`configs`' ``search``), all fields of FedAvgConfig.
LOCAL_KEYS = ("local_epochs", "batch_size", "optimizer", "lr", "momentum")


def check_local(setting: Any) -> None:
    """A search setting: a dict over :data:`LOCAL_KEYS` (e.g. ``{"batch_size": 10, "momentum": 0.9}``)."""
    if not isinstance(setting, Mapping):
        raise ValueError(f"a search setting must be a dict over {list(LOCAL_KEYS)}, got {setting!r}")
    unknown = sorted(set(setting) - set(LOCAL_KEYS))
    if unknown:
        raise ValueError(f"search settings may vary {list(LOCAL_KEYS)} only; got {unknown} in {dict(setting)}")


def check_sensitivity_setting(setting: Any) -> tuple[dict[str, Any], list[int], list[int]]:
    """A sensitivity setting: a search setting (:func:`check_local`), optionally with ``seeds``, a list of seeds run in
    addition to the chapter's for both the setting's non-private and private runs (so that every added seed is a
    pair), and ``private_seeds``, seeds added to its private run only (e.g. ``{"batch_size": 10, "local_epochs": 5,
    "seeds": [1, 2]}``). Returns the three parts: (local computation, seeds, private seeds)."""
    if not isinstance(setting, Mapping):
        check_local(setting)  # raises: not a dict
    extra = {}
    for name in ("seeds", "private_seeds"):
        seeds = setting.get(name, [])
        if not isinstance(seeds, (list, tuple)) or not all(
                isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in seeds):
            raise ValueError(f"{name} must be a list of seeds (integers >= 0), got {seeds!r} in {dict(setting)}")
        extra[name] = list(seeds)
    local = {k: v for k, v in setting.items() if k not in extra}
    check_local(local)
    return local, extra["seeds"], extra["private_seeds"]


def pick_rule(name: str, *, fixed: FixedRange, adaptive: GlobalModelRange,
              what: str = "rule") -> FixedRange | GlobalModelRange:
    """The range rule called ``name`` ("fixed": ``fixed``, "adaptive": ``adaptive``); ``what`` names the parameter
    in the error for any other name."""
    if name not in RANGE_RULES:
        raise ValueError(f"{what} must be one of {sorted(RANGE_RULES)}, got {name!r}")
    return {"fixed": fixed, "adaptive": adaptive}[name]


def local_label(run: FedAvgConfig) -> str:
    """"batch 10, 1 local epoch(s), sgd lr 0.015 momentum 0.9": a run's local computation."""
    mom = f" momentum {run.momentum:g}" if run.momentum else ""
    return f"batch {run.batch_size}, {run.local_epochs} local epoch(s), {run.optimizer} lr {run.lr:g}{mom}"


def chapter_config(*, dataset: str, model: str, n_clients: int, rounds: int, lr: float, client_fraction: float = 1.0,
                local_epochs: int = 1, batch_size: int = 32, seed: int = 0) -> FedAvgConfig:
    """The chapter's non-private run (Algorithm 1 without perturbation: IID shards, weights sent, server mean)."""
    return FedAvgConfig(paper="ldp_fl", dataset=dataset, model=model, n_clients=n_clients, rounds=rounds, lr=lr,
                     client_fraction=client_fraction, local_epochs=local_epochs, batch_size=batch_size, seed=seed,
                     partition="iid", send="weights", aggregator="mean")


def private(run: FedAvgConfig, epsilon: float, rule: FixedRange | GlobalModelRange) -> FedAvgConfig:
    """``run`` with the two-point mechanism at ``epsilon`` per weight per round and range rule ``rule``."""
    return run.replace(mechanism="two_point", epsilon=epsilon, range=rule)


def configs(base: FedAvgConfig, *, seeds: Sequence[int], fixed: FixedRange, adaptive: GlobalModelRange,
            epsilons: Iterable[float] = (), table1_epsilons: Iterable[float] = (), headline_seeds: Sequence[int] = (),
            sensitivity_epsilon: float = 1.0, sensitivity_range: str = "fixed",
            sensitivity_batch_sizes: Iterable[int] = (), sensitivity_local_epochs: Iterable[int] = (),
            sensitivity_settings: Sequence[Mapping[str, Any]] = (), clients_grid: Iterable[int] = (),
            fraction_grid: Iterable[float] = (), steps_rounds: Optional[int] = None,
            search: Sequence[Mapping[str, Any]] = (), validation: int = 5000, search_private: bool = True,
            parts: Optional[Sequence[str]] = None) -> list[tuple[str, FedAvgConfig]]:
    """The chapter's experiment grid as (experiment, run) pairs, every run for every seed of ``seeds``.

    * "vs epsilon" (Fig. 5): non-private and every ε of ``epsilons`` with the fixed range; the
      non-private run and ε = ``sensitivity_epsilon`` also for ``headline_seeds``;
    * "table 1" (Table 1): every ε of ``table1_epsilons``, fixed and adaptive range;
    * "sensitivity" (what the paper leaves unstated): non-private and ``sensitivity_epsilon`` with the
      ``sensitivity_range`` rule, per batch size (at the base's local epochs), per local epochs (at
      the base's batch size) and per setting of ``sensitivity_settings`` (dicts over :data:`LOCAL_KEYS`, e.g.
      batch 10 with 2 local epochs; ``seeds`` adds seeds to both of the setting's runs, ``private_seeds`` to its
      private run only, :func:`check_sensitivity_setting`);
    * "clients" (Fig. 3) and "fraction" (Fig. 4): the same pair per number of clients / fraction;
    * "steps" (reproduction steps, when ``steps_rounds`` is given): ``steps_rounds`` rounds with training accuracy
      recorded (``train_eval``: after every gcd of the base's rounds and ``steps_rounds``, so at both), non-private,
      ``sensitivity_epsilon`` with the fixed range, and clipping to the fixed range without noise
      (:data:`~ldptut.experiments.CLIP_ONLY`, the ablation of "clipping, not noise");
    * "search" (the local computation the paper leaves unstated, chosen on a validation split, never on test):
      per setting of ``search`` (a dict over :data:`LOCAL_KEYS` that replaces the base's values), a
      :class:`ValidationConfig` holding out ``validation`` training examples, non-private and, with ``search_private``,
      ``sensitivity_epsilon`` with the ``sensitivity_range`` rule. The runs on test at the chosen setting depend on
      these results: :func:`chosen_configs`.

    ``parts`` selects experiments by name (default: all).
    """
    sensitivity_rule = pick_rule(sensitivity_range, fixed=fixed, adaptive=adaptive, what="sensitivity_range")
    seeds = list(seeds)
    extra = [s for s in headline_seeds if s not in seeds]
    out: list[tuple[str, FedAvgConfig]] = []

    def add(experiment: str, run: FedAvgConfig, *, more_seeds: Sequence[int] = ()) -> None:
        out.extend((experiment, run.replace(seed=s)) for s in seeds + list(more_seeds))

    def pair(experiment: str, run: FedAvgConfig) -> None:
        add(experiment, run)
        add(experiment, private(run, sensitivity_epsilon, sensitivity_rule))

    add("vs epsilon", base, more_seeds=extra)
    for eps in epsilons:
        add("vs epsilon", private(base, eps, fixed), more_seeds=extra if eps == sensitivity_epsilon else ())
    for eps in table1_epsilons:
        for rule in (fixed, adaptive):
            add("table 1", private(base, eps, rule))
    for b in sensitivity_batch_sizes:
        pair("sensitivity", base.replace(batch_size=b))
    for e in sensitivity_local_epochs:
        pair("sensitivity", base.replace(local_epochs=e))
    for setting in sensitivity_settings:
        local, pair_seeds, private_seeds = check_sensitivity_setting(setting)
        run = base.replace(**local)
        both = list(dict.fromkeys(s for s in pair_seeds if s not in seeds))
        add("sensitivity", run, more_seeds=both)
        add("sensitivity", private(run, sensitivity_epsilon, sensitivity_rule),
            more_seeds=both + [s for s in dict.fromkeys(private_seeds) if s not in seeds and s not in both])
    for n in clients_grid:
        pair("clients", base.replace(n_clients=n))
    for f in fraction_grid:
        pair("fraction", base.replace(client_fraction=f))
    if steps_rounds is not None:
        every = math.gcd(base.rounds, steps_rounds)  # training accuracy at the chapter's rounds and the last
        longer = base.replace(rounds=steps_rounds, train_eval=True, train_eval_every=every)
        add("steps", longer)
        add("steps", private(longer, sensitivity_epsilon, fixed))
        add("steps", longer.replace(mechanism=CLIP_ONLY, range=fixed))
    for setting in search:
        check_local(setting)
        held = ValidationConfig(**{f.name: getattr(base, f.name) for f in dataclasses.fields(FedAvgConfig)
                                   if f.name != "validation"}, validation=validation).replace(**setting)
        if search_private:
            pair("search", held)
        else:
            add("search", held)
    return [(e, c) for e, c in out if parts is None or e in parts]


#: The chapter's parameters and their checks (:func:`ldptut.notebooks.setup` checks them; the notebook's parameters
#: cell holds the defaults, ``book/params/ldp_fl-*-paper.yaml`` the paper-scale values).
@chapter_params
class Params(ChapterParams):
    """The chapter's parameters (``book/ldp_fl.ipynb``'s parameters cell: the same names, defaults and order),
    each with its check; a parameter file gives other values for some."""

    seed: int = param(P.nonneg_int, 0)
    seeds: list[int] = param(P.list_of(P.nonneg_int), [0])
    headline_seeds: list[int] = param(P.list_of(P.nonneg_int), [])
    dataset: str = param(P.choice("mnist", "fashion_mnist", "cifar10"), "mnist")
    model_name: str = param(P.choice("mlp", "cnn2", "cnn_fedavg", "small_vgg", "logreg"), "mlp")
    n_clients: int = param(P.pos_int, 100)
    rounds: int = param(P.pos_int, 3)
    client_fraction: float = param(P.fraction, 1.0)
    local_epochs: int = param(P.pos_int, 1)
    batch_size: int = param(P.pos_int, 32)
    lr: float = param(P.pos_float, 0.03)
    epsilons: list[float] = param(P.list_of(P.pos_float), [0.1, 0.5, 1.0])
    table1_epsilons: list[float] = param(P.list_of(P.pos_float), [10.0])
    fixed_center: float = param(P.real, 0.0)
    fixed_radius: float = param(P.pos_float, 0.075)
    adaptive_margin: float = param(P.pos_float, 1.0)
    sensitivity_epsilon: float = param(P.pos_float, 1.0)
    sensitivity_range: str = param(P.choice("fixed", "adaptive"), "fixed")
    sensitivity_batch_sizes: list[int] = param(P.list_of(P.pos_int), [10, 32])
    sensitivity_local_epochs: list[int] = param(P.list_of(P.pos_int), [1])
    sensitivity_settings: list[Any] = param(P.list_of(check_sensitivity_setting), [])
    clients_grid: list[int] = param(P.list_of(P.pos_int), [])
    fraction_grid: list[float] = param(P.list_of(P.fraction), [])
    shuffle_coords: int = param(P.pos_int, 2000)
    shuffle_T_values: list[float] = param(P.list_of(P.pos_float), [0.01, 0.1, 1.0, 10.0, 100.0])
    shuffle_start_spread: float = param(P.pos_float, 10.0)
    shuffle_sync_error: float = param(P.pos_float, 1.0)
    leak_clients: int = param(P.pos_int, 10)
    steps_rounds: Optional[int] = param(P.optional(P.pos_int), 3)
    search: list[Any] = param(P.list_of(check_local), [])
    validation: int = param(P.pos_int, 10000)
    search_private: bool = param(P.boolean, False)
    chosen_epsilons: list[float] = param(P.list_of(P.pos_float), [])
    chosen_table1_epsilons: list[float] = param(P.list_of(P.pos_float), [])
    cache_dir: Optional[str] = param(P.optional(P.string), None)
    paper_runs_dirs: list[str] = param(
        P.list_of(P.string),
        ["runs/cache/ldp_fl-mnist", "runs/cache/ldp_fl-fmnist", "runs/cache/ldp_fl-cifar10", "runs/cache/ldp_fl-mnist-fedavgcnn"])
    device: str = param(P.device, "auto")




def grid(p: Mapping[str, Any]) -> list[tuple[str, FedAvgConfig]]:
    """The chapter's whole experiment grid (:func:`configs`) from its parameters ``p`` (the notebook's names, e.g. a
    parameter file over the defaults). The chapter and ``python -m ldptut.sweep ldp_fl`` both build their runs here."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    base = chapter_config(dataset=p["dataset"], model=p["model_name"], n_clients=p["n_clients"], rounds=p["rounds"],
                       lr=p["lr"], client_fraction=p["client_fraction"], local_epochs=p["local_epochs"],
                       batch_size=p["batch_size"], seed=p["seed"])
    return configs(base, seeds=p["seeds"], headline_seeds=p["headline_seeds"],
                   fixed=FixedRange(p["fixed_center"], p["fixed_radius"]),
                   adaptive=GlobalModelRange(margin=p["adaptive_margin"]), epsilons=p["epsilons"],
                   table1_epsilons=p["table1_epsilons"], sensitivity_epsilon=p["sensitivity_epsilon"],
                   sensitivity_range=p["sensitivity_range"], sensitivity_batch_sizes=p["sensitivity_batch_sizes"],
                   sensitivity_local_epochs=p["sensitivity_local_epochs"],
                   sensitivity_settings=p.get("sensitivity_settings", ()), clients_grid=p["clients_grid"],
                   fraction_grid=p["fraction_grid"], steps_rounds=p.get("steps_rounds"), search=p.get("search", ()),
                   validation=p.get("validation", 5000), search_private=p.get("search_private", True))


def _on_test_with(c: Any, optimizer: str, lr: Optional[float], momentum: float) -> bool:
    """A run :func:`compare` may match: scored on test (no :class:`ValidationConfig`, no training-accuracy repeat),
    with this optimizer and momentum, and this lr unless ``lr`` is None."""
    return (not isinstance(c, ValidationConfig) and not getattr(c, "train_eval", False)
            and getattr(c, "optimizer", "sgd") == optimizer and float(getattr(c, "momentum", 0.0)) == momentum
            and (lr is None or getattr(c, "lr", None) == lr))


def _claim_runs(runs: pd.DataFrame, claim: Reported, *, batch_size: int, local_epochs: int, client_fraction: float,
                optimizer: str, lr: Optional[float], momentum: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(same, claimed): the runs at the claim's data set and number of clients with this local computation and
    fraction of clients, scored on test (:func:`_on_test_with`); and those of them at the claim's ε and range rule."""
    data, n, rule, eps = claim.where["dataset"], claim.where["n_clients"], claim.where["rule"], claim.epsilon
    same = runs[(runs["dataset"] == data) & (runs["n_clients"] == n) & (runs["batch_size"] == batch_size)
                & (runs["local_epochs"] == local_epochs) & (runs["client_fraction"] == client_fraction)
                & runs["config"].map(lambda c: _on_test_with(c, optimizer, lr, momentum)).astype(bool)]
    if rule == "fixed":
        target = FixedRange(*FIXED_RANGE[data])
        matches = same["config"].map(lambda c: getattr(c, "range", None) == target)
    else:
        matches = same["config"].map(lambda c: isinstance(getattr(c, "range", None), GlobalModelRange))
    return same, same[(same["epsilon"] == eps) & matches.astype(bool)]


def cost_gap(runs: pd.DataFrame, models: tuple[str, str], *, dataset: str = "mnist", batch_size: int = 32,
             local_epochs: int = 1, client_fraction: float = 1.0, optimizer: str = "sgd", lr: Optional[float] = None,
             momentum: float = 0.0) -> str:
    """How many points more privacy costs ``models[0]`` than ``models[1]`` at the data set's headline claim (its first
    :data:`REPORTED` number) and this local computation (as in :func:`compare`): each model's costs are paired by
    seed (non-private minus private accuracy, :func:`privacy_cost`), and the two models' costs, independent runs, are
    compared by Welch's t interval (:func:`ldptut.papers.welch_interval`). "2.3 points, Welch 95 % interval [0.6, 4.0]
    (4 and 10 pairs)"; "" when a model has fewer than two pairs."""
    claim = next((c for c in REPORTED if c.where["dataset"] == dataset), None)
    if claim is None:
        raise ValueError(f"dataset={dataset!r} has no claim of the paper; use one of "
                         f"{sorted({c.where['dataset'] for c in REPORTED})}")
    same, claimed = _claim_runs(runs, claim, batch_size=batch_size, local_epochs=local_epochs,
                                client_fraction=client_fraction, optimizer=optimizer, lr=lr, momentum=momentum)
    costs = []
    for m in models:
        ours = claimed[claimed["model"] == m]
        nonpriv = same[same["mechanism"].isna() & (same["model"] == m)]
        both = _pairs(ours, nonpriv, by=("seed", "lr"))
        costs.append(both["accuracy_np"] - both["accuracy_p"])
    w = welch_interval(costs[0], costs[1])
    if w is None:
        return ""
    pairs = f"{len(costs[0])} and {len(costs[1])} pairs"
    return f"{w[0]:.1f} points, Welch 95 % interval [{w[1]:.1f}, {w[2]:.1f}] ({pairs})"


def compare(runs: pd.DataFrame, *, batch_size: int = 32, local_epochs: int = 1, client_fraction: float = 1.0,
            optimizer: str = "sgd", lr: Optional[float] = None, momentum: float = 0.0,
            dataset: Optional[str] = None, model: Optional[str] = None, fmt: str = ".1f") -> pd.DataFrame:
    """LDP-FL's reported accuracies next to ours from runs (``ldptut.runcache.load_runs`` or a Runner table).

    For each claim (Section 5.3 headline numbers and Table 1) the runs of the same data set, number of
    clients, ε (per weight per round) and range rule are selected, at the given local computation (which
    the paper does not state: batch, local epochs, optimizer and momentum, and ``lr`` unless None) and fraction of
    clients; "ours" is their final test accuracy, mean ± std over seeds (sample std), "95 % CI" the Student t
    interval of that mean over seeds (:func:`ldptut.papers.t_interval`; empty with one seed), and "non-private" the
    same for the non-private runs with identical settings and the same seeds; "privacy cost" is
    :func:`privacy_cost` (non-private minus private, paired by seed and lr, with its t interval). Runs of the "steps"
    experiment (``train_eval``, which repeat a training with more evaluation, or run longer) and the search's runs on a
    validation split (:class:`ValidationConfig`) are left out; the default local computation is plain SGD (the
    search's choices, e.g. Adam, are compared with ``optimizer="adam", lr=...``). "fixed" is the paper's fixed range
    for the data set (:data:`FIXED_RANGE`), "adaptive" our rule (:class:`~ldptut.fl.GlobalModelRange`). The
    paper's numbers are training accuracy (``REPORTED``). With ``dataset``, only the claims on that data set.

    Models are never pooled: a claim with runs of several models (the paper's "two-layer CNN" has two readings)
    gets one row per model, the data set's model of :data:`SETTINGS` first; ``model`` keeps one model's runs only.
    ``fmt`` formats our accuracies, intervals and costs (".2f": two decimals, as the paper prints its numbers).
    """
    _check_fmt(fmt)
    need = {"dataset", "n_clients", "epsilon", "config", "mechanism", "batch_size", "local_epochs",
            "client_fraction", "accuracy", "seed", "model", "rounds", "lr"}
    if runs.empty:
        runs = pd.DataFrame(columns=sorted(need))
    if not need <= set(runs.columns):
        raise ValueError(f"runs lacks the columns {sorted(need - set(runs.columns))}; use runcache.load_runs")
    if model is not None:
        runs = runs[runs["model"] == model]
    rows = []
    for claim in (c for c in REPORTED if dataset is None or c.where["dataset"] == dataset):
        same, claimed = _claim_runs(runs, claim, batch_size=batch_size, local_epochs=local_epochs,
                                    client_fraction=client_fraction, optimizer=optimizer, lr=lr, momentum=momentum)
        data = claim.where["dataset"]
        models = sorted(set(claimed["model"]), key=lambda m: (m != SETTINGS[data]["model"], m)) or [None]
        for m in models:
            ours = claimed[claimed["model"] == m]
            nonpriv = same[same["mechanism"].isna() & (same["model"] == m) & same["seed"].isin(ours["seed"])]
            settings = ""
            if len(ours):
                first = ours.iloc[0]
                mom = f" momentum {momentum:g}" if momentum else ""
                settings = (f"{m}, {first['rounds']} rounds, {optimizer} lr {first['lr']:g}{mom}, "
                            f"batch {batch_size}, {local_epochs} local epoch(s)")
            def stat(r: pd.DataFrame) -> str:  # lr=None may pool learning rates at one seed: then count runs
                return mean_std(r["accuracy"], unit="seed" if r["seed"].is_unique else "run", fmt=fmt)

            rows.append({"claim": claim.claim, "paper (%)": claim.value, "ours (%)": stat(ours),
                         "95 % CI": format_interval(ours["accuracy"], fmt=fmt),
                         "ours non-private (%)": stat(nonpriv) if len(ours) else "",
                         "privacy cost (points, paired)": privacy_cost(ours, nonpriv, by=("seed", "lr"), fmt=fmt),
                         "settings": settings})
    return pd.DataFrame(rows)


def privacy_cost(private: pd.DataFrame, non_private: pd.DataFrame, *, by: Sequence[str] = ("seed",),
                 fmt: str = ".1f") -> str:
    """What perturbation costs, paired by seed: d_s = acc(non-private, seed s) - acc(private, seed s) in points, over
    the seeds run both ways (same initial model, partition and client sampling); "mean ± std (n seeds) [lo, hi]" with
    the Student t 95 % interval of the mean difference (:func:`ldptut.papers.format_interval`; none with one pair),
    "" when no seed was run both ways. Columns ``accuracy`` (%) and those of ``by`` (the pairing key: the seed, and
    any setting the runs may differ in, e.g. ``lr`` when :func:`compare` pools learning rates), one run per key;
    ``fmt`` formats the numbers (".1f": one decimal)."""
    _check_fmt(fmt)
    both = _pairs(private, non_private, by=by)
    if both.empty:
        return ""
    diffs = both["accuracy_np"] - both["accuracy_p"]
    ci = format_interval(diffs, fmt=fmt)
    unit = "seed" if "seed" in both and both["seed"].is_unique else "pair"  # a seed may pair at several lrs
    return mean_std(diffs, unit=unit, fmt=fmt) + (f" {ci}" if ci else "")


def _check_fmt(fmt: str) -> None:
    """Raises unless ``fmt`` is a fixed-point format of a number, e.g. ".1f" or ".2f"."""
    if not (isinstance(fmt, str) and fmt.startswith(".") and fmt.endswith("f") and fmt[1:-1].isdigit()):
        raise ValueError(f"fmt must be a fixed-point format such as '.1f' or '.2f' (decimals, then f), got {fmt!r}")


def _pairs(private: pd.DataFrame, non_private: pd.DataFrame, *, by: Sequence[str]) -> pd.DataFrame:
    """The runs of both frames with the same ``by`` key, side by side (``accuracy_np``, ``accuracy_p``); raises when a
    key has several runs in one frame."""
    key = list(by)
    for name, runs in (("private", private), ("non_private", non_private)):
        dup = runs.duplicated(subset=key)
        if dup.any():
            raise ValueError(f"{name} has several runs with the same {'/'.join(key)} "
                             f"({runs.loc[dup, key].to_dict('records')}); a paired difference needs one run per key: "
                             "pass the setting they differ in through by=")
    return pd.merge(non_private[key + ["accuracy"]], private[key + ["accuracy"]], on=key, suffixes=("_np", "_p"))


def reported_at(dataset: str, *, epsilon: float, rule: str, n_clients: int) -> Optional[Reported]:
    """The paper's number for runs of ``dataset`` with ``n_clients`` clients at ``epsilon`` per weight per round with
    the range rule named ``rule`` ("fixed", "adaptive"): the first such claim of :data:`REPORTED` (the Section 5.3
    headline before Table 1), or None where the paper reports none (e.g. at our default, smaller n)."""
    want = {"dataset": dataset, "n_clients": n_clients, "rule": rule}
    return next((c for c in REPORTED if c.epsilon == epsilon and c.where == want), None)


def steps_table(records: Iterable[Any], *, rounds: Optional[int] = None) -> pd.DataFrame:
    """Runs with training accuracy recorded (the "steps" of :func:`configs`; run records) as a table: per data set,
    model, run (:func:`run_label`: non-private, private with its range, clipping only) and round (``rounds``,
    default the paper's for the data set, and the runs' last), the test accuracy, the global model's accuracy on the
    whole training set, and the clients' local models' accuracy on their own data (all %, mean over seeds; ``seeds``
    counts them). The paper's headline numbers are "training accuracy" (Fig. 5 caption); this shows both."""
    out = []
    for rec in records:
        c, h = rec.config, rec.history.set_index("round")
        if "train_accuracy" not in h:
            continue
        kind = run_label(c)
        at = SETTINGS.get(c.dataset, {}).get("rounds", c.rounds) if rounds is None else rounds
        for r in sorted({min(at, c.rounds), c.rounds}):
            out.append({"data": c.dataset, "model": c.model, "run": kind, "round": r, "seed": c.seed,
                        "test": 100 * h.loc[r, "accuracy"],
                        "train (global model, all training data)": 100 * h.loc[r, "train_accuracy"],
                        "train (local models, own data)": 100 * h.loc[r, "client_train_accuracy"]})
    if not out:
        return pd.DataFrame(columns=["data", "model", "run", "round", "seeds"])
    t = pd.DataFrame(out)
    keys = ["data", "model", "run", "round"]  # models are never pooled
    cols = [c for c in t.columns if c not in keys + ["seed"]]
    agg = t.groupby(keys, sort=False)[cols].mean().round(1)
    agg["seeds"] = t.groupby(keys, sort=False)["seed"].nunique()
    return agg.reset_index()


def range_label(run: FedAvgConfig) -> str:
    """"fixed range (0, 1)", "adaptive range", or "" for a run without a range (non-private)."""
    if run.range is None:
        return ""
    return (f"fixed range ({run.range.center:g}, {run.range.radius:g})" if isinstance(run.range, FixedRange)
            else "adaptive range")


def run_label(run: FedAvgConfig) -> str:
    """"non-private", or "ε = 10 per weight per round, adaptive range" / "..., fixed range (0, 1)"."""
    if run.mechanism is None:
        return "non-private"
    rng = range_label(run)
    if run.mechanism == CLIP_ONLY:
        return f"clipping to the {rng} only (no noise)"
    return f"ε = {run.epsilon:g} per weight per round, {rng}"


def local_of(run: FedAvgConfig) -> dict[str, Any]:
    """The local computation of ``run``: its values of :data:`LOCAL_KEYS` (the keys a search setting may vary)."""
    return {k: getattr(run, k) for k in LOCAL_KEYS}


def sensitivity_panels(sens: pd.DataFrame, *, base: FedAvgConfig) -> list[tuple[tuple[str, float, float], str, str, int]]:
    """The curves the sensitivity runs ``sens`` (columns optimizer, lr, momentum, batch_size, local_epochs) can draw,
    one panel each, per optimizer setting (optimizer, lr, momentum; the base's first, then in order of appearance):
    the batch size varied at the base's local epochs, and the local epochs varied at every batch size run with more
    than one; a setting with a single value has no curve. Each panel is (optimizer setting, varied column, fixed
    column, fixed value), e.g. (("adam", 0.001, 0.0), "local_epochs", "batch_size", 10)."""
    opts = list(zip(sens["optimizer"], sens["lr"].astype(float), sens["momentum"].astype(float)))
    own = (base.optimizer, float(base.lr), float(base.momentum))
    panels = []
    for opt in sorted(dict.fromkeys(opts), key=lambda o: o != own):  # stable: the base's setting first
        g = sens[[o == opt for o in opts]]
        if g.loc[g["local_epochs"] == base.local_epochs, "batch_size"].nunique() > 1:
            panels.append((opt, "batch_size", "local_epochs", base.local_epochs))
        panels += [(opt, "local_epochs", "batch_size", int(b)) for b in sorted(g["batch_size"].unique())
                   if g.loc[g["batch_size"] == b, "local_epochs"].nunique() > 1]
    return panels


def local_table(records: Iterable[Any]) -> pd.DataFrame:
    """Runs by local computation (the search's :class:`ValidationConfig` records, and runs on test) as a table: per
    local computation, data the accuracy is measured on ("validation (N held out)" or "test") and run
    (:func:`run_label`: non-private, or ε per weight per round and range), the final accuracy (%, mean and sample std
    over seeds), the best round's, and the runs that diverged; rows in the order of ``records``."""
    rows = []
    for rec in records:
        c = rec.config
        acc = 100 * rec.history["accuracy"]
        diverged = "diverged" in rec.history and bool(rec.history["diverged"].fillna(False).astype(bool).any())
        rows.append({"local computation": local_label(c),
                     "on": f"validation ({c.validation} held out)" if isinstance(c, ValidationConfig) else "test",
                     "run": run_label(c),
                     "seed": c.seed, "rounds": c.rounds, "final": float(acc.iloc[-1]), "best round": float(acc.max()),
                     "diverged": diverged})
    if not rows:
        return pd.DataFrame(columns=["local computation", "on", "run", "accuracy (%)", "seeds"])
    t = pd.DataFrame(rows)
    g = t.groupby(["local computation", "on", "run"], sort=False)
    out = g[["rounds"]].first()
    out["accuracy (%)"] = g["final"].mean().round(1)
    out["std"] = g["final"].std().round(1).astype(object).where(g["seed"].nunique() > 1, "")  # "" for one seed
    out["best round (%)"] = g["best round"].mean().round(1)
    out["seeds"] = g["seed"].nunique()
    out["diverged"] = g["diverged"].sum()
    return out.reset_index()


def chosen_local(records: Iterable[Any]) -> Optional[dict[str, Any]]:
    """The local computation of the search (:class:`ValidationConfig` records) whose non-private runs end with the
    highest mean validation accuracy (the first of equals; a diverged run counts as -inf); None without search
    runs. Test data never enter."""
    scores: dict[tuple, list[float]] = {}
    for rec in records:
        c = rec.config
        if isinstance(c, ValidationConfig) and c.mechanism is None:
            final = float(rec.history["accuracy"].iloc[-1])
            scores.setdefault(tuple(local_of(c).items()), []).append(-math.inf if math.isnan(final) else final)
    if not scores:
        return None
    best = max(scores, key=lambda k: sum(scores[k]) / len(scores[k]))  # max keeps the first of equals
    return dict(best)


def chosen_settings(records: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Per data set with search runs (:class:`ValidationConfig` records) among ``records``: the local computation
    :func:`chosen_local` picks from that data set's search, in the order the data sets first appear."""
    searched: dict[str, list[Any]] = {}
    for rec in records:
        if isinstance(rec.config, ValidationConfig):
            searched.setdefault(rec.config.dataset, []).append(rec)
    return {name: chosen_local(recs) for name, recs in searched.items()}


def search_summary(records: Iterable[Any]) -> pd.DataFrame:
    """Per data set with search runs among ``records`` (stored runs of any kind): the search on validation and the
    runs on test at the setting :func:`chosen_local` picks (same data set, clients and rounds), as
    :func:`local_table` rows with a "data" column, sorted by local computation (optimizer, lr, momentum, batch, local
    epochs), then non-private first, ε and range (not by the order the runs were stored in). The paper-vs-ours table
    for a page whose local computation was chosen."""
    def order(rec: Any) -> tuple:  # local computation, then non-private first, then ε, range and seed
        c = rec.config
        return (c.optimizer, c.lr, c.momentum, c.batch_size, c.local_epochs, c.mechanism is not None,
                c.epsilon or 0.0, range_label(c), c.seed)

    records = sorted(records, key=order)
    out = []
    for name, local in chosen_settings(records).items():
        searched = [r for r in records if isinstance(r.config, ValidationConfig) and r.config.dataset == name]
        ref = searched[0].config
        tested = [r for r in records if type(r.config) is not ValidationConfig and r.config.dataset == name
                  and not getattr(r.config, "train_eval", False) and r.config.n_clients == ref.n_clients
                  and r.config.rounds == ref.rounds and local_of(r.config) == local]
        out.append(local_table(searched + tested).assign(data=name))
    if not out:
        return pd.DataFrame(columns=["data", "local computation", "on", "run", "accuracy (%)", "seeds"])
    t = pd.concat(out, ignore_index=True)
    return t[["data"] + [c for c in t.columns if c != "data"]]


def chosen_configs(base: FedAvgConfig, local: Mapping[str, Any], *, seeds: Sequence[int], epsilon: float,
                   fixed: FixedRange, adaptive: GlobalModelRange, rule: str = "adaptive",
                   epsilons: Iterable[float] = (),
                   table1_epsilons: Iterable[float] = ()) -> list[tuple[str, FedAvgConfig]]:
    """The runs on test at the chosen local computation ``local`` (:func:`chosen_local`): non-private and ``epsilon``
    per weight per round with the range rule named ``rule`` ("fixed": ``fixed``, "adaptive": ``adaptive``), the ε
    grid there (every ε of ``epsilons`` with that rule: Fig. 5's "effect of ε", e.g. Fig. 5c on CIFAR-10 with the
    adaptive range), and Table 1 there (every ε of ``table1_epsilons`` with both rules), per seed, as ("chosen", run)
    pairs without repeats."""
    check_local(local)
    run = base.replace(**local)
    chosen_rule = pick_rule(rule, fixed=fixed, adaptive=adaptive)
    runs = [run, private(run, epsilon, chosen_rule)] + [private(run, eps, chosen_rule) for eps in epsilons]
    runs += [private(run, eps, r) for eps in table1_epsilons for r in (fixed, adaptive)]
    out = [("chosen", r.replace(seed=s)) for s in seeds for r in runs]
    return list({c.key(): (e, c) for e, c in out}.values())


# ------------------------------------------------------------------------- the chapter's tables and figures
_VIEW_HEADERS = {"ours non-private (%)": "non-private (%)", "privacy cost (points, paired)": "privacy cost (points)",
                 "95 % CI": "95 % CI of ours (%)"}


def _short_local(settings: str) -> str:
    """compare()'s "cnn2, 10 rounds, sgd lr 0.03, batch 32, 1 local epoch(s)" -> "batch 32, 1 epoch, sgd lr 0.03"."""
    parts = [p.strip() for p in settings.split(",")]
    if len(parts) < 5:
        return settings
    epochs = parts[4].replace(" local epoch(s)", "")
    return f"{parts[3]}, {epochs} epoch{'' if epochs == '1' else 's'}, {parts[2]}"


def paper_view(runs: pd.DataFrame, records: Iterable[Any], dataset: str, model: str) -> pd.DataFrame:
    """The paper's claims on ``dataset`` against our stored runs of ``model`` (:func:`compare` rows that were run):
    at batch 32 with one local epoch (plain SGD), at batch 10 with 1, 2 and 5 local epochs (5: two decimals, as
    the paper prints its numbers), and at the local computation chosen on a validation split (:func:`chosen_settings`)
    where the data set was searched; rows in that order."""
    parts = [compare(runs, dataset=dataset, model=model)]
    parts += [compare(runs, dataset=dataset, model=model, batch_size=10, local_epochs=e, fmt=".2f" if e == 5 else ".1f")
              for e in (1, 2, 5)]
    chosen = chosen_settings(list(records)).get(dataset)
    if chosen:
        parts.append(compare(runs, dataset=dataset, model=model, **chosen))
    t = pd.concat(parts, ignore_index=True)
    return t[t["ours (%)"] != "not run"].reset_index(drop=True)


def compare_view(df: pd.DataFrame, *, caption: Optional[str] = None):
    """:func:`compare` (or :func:`paper_view`) rows as a table that fits the book's column
    (:func:`ldptut.display.table`): the claim names its model (the two readings of "two-layer CNN" have a row each),
    the local computation has a short column of its own (rounds and model in the claim), and rows not run are
    left out."""
    from ..display import table

    rows = df[df["ours (%)"] != "not run"].copy()
    model = rows["settings"].map(lambda s: s.split(",")[0].strip())
    rounds = rows["settings"].map(lambda s: s.split(",")[1].strip() if s.count(",") >= 1 else "")
    rows["claim"] = rows["claim"] + " (" + model + ", " + rounds + ")"
    rows["local computation"] = rows["settings"].map(_short_local)
    cols = ["claim", "local computation", "paper (%)", "ours (%)", "95 % CI", "ours non-private (%)",
            "privacy cost (points, paired)"]
    return table(rows[cols], caption=caption, number_format={"paper (%)": ".2f"}, headers=_VIEW_HEADERS)


def view_cell(df: pd.DataFrame, claim: str, column: str, *, local: Optional[str] = None, model: Optional[str] = None) -> str:
    """One cell of :func:`paper_view`'s rows: the row whose claim is ``claim``, at the local computation whose short
    label (:func:`compare_view`'s column) starts with ``local`` and, with ``model``, of that model; ``column`` one
    of compare()'s columns. "not run" where no such row exists (a page without those stored runs)."""
    hit = df[df["claim"] == claim]
    if local is not None:
        hit = hit[hit["settings"].map(_short_local).str.startswith(local)]
    if model is not None:
        hit = hit[hit["settings"].str.startswith(model + ",")]
    return str(hit.iloc[0][column]) if len(hit) else "not run"


def plot_curves(curves: Mapping[str, pd.DataFrame], *, reference: str):
    """Test accuracy (%) of the global model per round, one line per run (``curves``: label -> history with columns
    round and accuracy); ``reference`` (the non-private run) dashed black; the legend below the panel."""
    from ..display import figure, integer_rounds

    fig, ax = figure(1, height=4.2)
    for i, (label, h) in enumerate(curves.items()):
        style = dict(color="k", ls="--") if label == reference else dict(color=f"C{i}", marker="o", ms=3)
        ax.plot(h["round"], 100 * h["accuracy"], label=label, **style)
    ax.set(xlabel="communication round", ylabel="test accuracy (%)")
    integer_rounds(ax)
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", ncol=2, fontsize="small")
    return fig


def plot_sensitivity(sens: pd.DataFrame, panels: Sequence[tuple], *, base: FedAvgConfig, paper: Optional[Reported] = None,
                     epsilon: float = 1.0):
    """Final test accuracy (%) against the batch size or the local epochs (one panel per :func:`sensitivity_panels`
    entry, at most two per row), non-private dashed black, private red, mean ± std over seeds; ``paper``: the
    paper's number at this setting as a dotted line (its metric in the legend)."""
    from ..display import figure

    ncols = min(2, len(panels))
    fig, axes = figure(ncols, math.ceil(len(panels) / ncols), sharey=True, squeeze=False)
    axes = list(axes.flat)
    for ax in axes[len(panels):]:
        ax.set_visible(False)
    own = (base.optimizer, float(base.lr), float(base.momentum))
    for ax, (opt, col, fixed_col, fixed_val) in zip(axes, panels):
        sub = sens[[o == opt and v == fixed_val for o, v in zip(
            zip(sens["optimizer"], sens["lr"].astype(float), sens["momentum"].astype(float)), sens[fixed_col])]]
        for label, g in sub.groupby("run"):
            m = g.groupby(col)["accuracy"].agg(["mean", "std"]).reset_index()
            np_ = label == "non-private"
            ax.errorbar(m[col], m["mean"], yerr=m["std"].fillna(0), marker="o", capsize=3, label=label,
                        color="k" if np_ else "C3", ls="--" if np_ else "-")
        if paper is not None:
            what = "training accuracy" if paper.metric.startswith("training") else "train or test not stated"
            ax.axhline(paper.value, color="C0", ls=":", label=f"paper, ε = {epsilon:g}: {paper.value} % ({what})")
        name = f", {opt[0]} lr {opt[1]:g}" + (f" mom. {opt[2]:g}" if opt[2] else "") if opt != own else ""
        ax.set(xlabel=col.replace("_", " "), title=f"{fixed_col.replace('_', ' ')} = {fixed_val}{name}",
               xticks=sorted(sub[col].unique()))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("final test accuracy (%)")
    legend = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", fontsize="small", ncol=1)
    return fig


def plot_search(search_runs: Sequence[Any], on_test: Sequence[Any], *, local: Optional[Mapping[str, Any]],
                base: FedAvgConfig, num_classes: int, validation: int):
    """The local-computation search: accuracy per round on validation and on test (one colour per local computation,
    line style per range rule) and, when the chosen setting has an ε grid, final test accuracy against ε there with
    the paper's points (training accuracy) as crosses; two panels per row."""
    import matplotlib.pyplot as plt
    from ..display import figure, integer_rounds

    settings = list(dict.fromkeys(local_label(r.config) for r in list(search_runs) + list(on_test)))

    def rule(c):
        return range_label(c) or "non-private"

    styles: dict[str, str] = {}
    for r in list(search_runs) + list(on_test):
        styles.setdefault(rule(r.config), {"non-private": "-", "adaptive range": "--"}.get(rule(r.config), "-."))
    at_chosen = [r for r in on_test if local is not None and local_of(r.config) == dict(local)]
    by_eps: dict[str, dict[float, list[float]]] = {}
    for r in at_chosen:
        if r.config.mechanism is not None:
            by_eps.setdefault(rule(r.config), {}).setdefault(r.config.epsilon, []).append(
                100 * float(r.history["accuracy"].iloc[-1]))
    show_eps = any(len(points) > 1 for points in by_eps.values())
    fig, axes = figure(2, 2 if show_eps else 1, height=6.4 if show_eps else 3.4, squeeze=False)
    axes = list(axes.flat)
    for ax, recs, where in ((axes[0], search_runs, f"validation ({validation:,} held out)"), (axes[1], on_test, "test")):
        for rec in recs:
            c = rec.config
            ax.plot(rec.history["round"], 100 * rec.history["accuracy"], marker="o", ms=3,
                    color=f"C{settings.index(local_label(c))}", ls=styles[rule(c)])
        ax.axhline(100 / num_classes, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="round", title=f"on {where}")
        integer_rounds(ax)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("accuracy (%)")
    if show_eps:
        ax = axes[2]
        colour = f"C{settings.index(local_label(base.replace(**local)))}"
        for name, points in by_eps.items():
            xs = sorted(points)
            ax.plot(xs, [sum(points[x]) / len(points[x]) for x in xs], marker="o", color=colour, ls=styles[name])
        nonpriv = [100 * float(r.history["accuracy"].iloc[-1]) for r in at_chosen if r.config.mechanism is None]
        if nonpriv:
            ax.axhline(sum(nonpriv) / len(nonpriv), color=colour, lw=1)
        for c in (c for c in REPORTED if c.where["dataset"] == base.dataset and c.where["n_clients"] == base.n_clients):
            ax.plot(c.epsilon, c.value, marker="x" if c.where["rule"] == "adaptive" else "+", color="k", ms=8, ls="")
        ax.axhline(100 / num_classes, color="grey", lw=0.8, ls=":")
        ax.set(xlabel="ε per weight per round", ylabel="final test accuracy (%)", title="at the chosen setting",
               xticks=sorted({e for points in by_eps.values() for e in points}))
        ax.grid(alpha=0.3)
        axes[3].set_visible(False)
    handles = [plt.Line2D([], [], color=f"C{i}", label=s) for i, s in enumerate(settings)] + [
        plt.Line2D([], [], color="k", ls=ls, label=name) for name, ls in styles.items()] + [
        plt.Line2D([], [], color="grey", ls=":", label="chance")] + ([
        plt.Line2D([], [], color="k", marker="x", ls="", label="paper, adaptive range (training accuracy)"),
        plt.Line2D([], [], color="k", marker="+", ls="", label="paper, fixed range (training accuracy)")]
        if show_eps else [])
    if show_eps:  # the empty fourth panel's place holds the legend
        fig.legend(handles=handles, loc="center", bbox_to_anchor=(0.75, 0.27), fontsize="x-small", frameon=False)
    else:
        fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize="x-small", frameon=False)
    return fig


def plot_grids(tables: Sequence[tuple[str, pd.DataFrame]]):
    """Fig. 3 / Fig. 4 grids: final test accuracy (%) against the number of clients and against the fraction of
    clients per round (``tables``: (column, runs with a ``run`` column) pairs, one panel each)."""
    from ..display import figure

    fig, axes = figure(len(tables), squeeze=False)
    for ax, (col, df) in zip(axes[0], tables):
        for label, g in df.groupby("run"):
            m = g.groupby(col)["accuracy"].agg(["mean", "std"]).reset_index()
            ax.errorbar(m[col], m["mean"], yerr=m["std"].fillna(0), marker="o", capsize=3, label=label,
                        color="k" if label == "non-private" else "C3", ls="--" if label == "non-private" else "-")
        ax.set(xlabel={"n_clients": "number of clients n", "client_fraction": "fraction of clients per round"}[col],
               ylabel="final test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    return fig


def plot_linking(curve: pd.DataFrame):
    """Shuffling's linking success (% of a client's reports re-linked) against the delay window T (log axis), without
    and with the waiting time T_W (exact, or with a synchronisation error), chance dotted."""
    from ..display import figure

    fig, ax = figure(1, height=3.8)
    for (wc, se), g in curve.groupby(["waiting_correction", "sync_error"]):
        label = "no waiting time" if not wc else (f"with T_W, sync error {se:g} s" if se else "with T_W (exact)")
        ax.errorbar(g["T"], 100 * g["success_mean"], yerr=100 * g["success_std"], marker="o", capsize=3, label=label)
    ax.axhline(100 * curve["chance"].mean(), color="k", ls=":", label="chance (random arrival order)")
    ax.set(xscale="log", xlabel="maximum random delay T (s)", ylabel="linking success (%)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return fig

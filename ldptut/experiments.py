"""Experiments as typed run configurations, and the runner chapters use to train, load and tabulate them.

* :class:`FedAvgConfig` -- a FedAvg run on a named data set and model, with an optional per-coordinate LDP
  mechanism and weight-range rule (Foundations, LDP-FL; the generic kind later chapters extend). Its
  fields are all it takes to rebuild the run: the partition, the model's initial weights and every
  random draw derive from ``seed``.
* :class:`Runner` -- trains the runs a chapter asks for (or loads them from a :class:`~ldptut.runcache.RunCache`),
  trains the runs of one group together (e.g. a whole grid of Wu et al.'s privacy profiles), and keeps
  the chapter's table: which experiment each run belongs to, its final accuracy and where it came from.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, ClassVar, Hashable, Iterable, Optional, Sequence

import pandas as pd
import torch

from . import data as _data
from . import models as _models
from . import partition as _partition
from ._validate import boolean, one_of, pos_int
from .fl import (ClipToRange, FixedRange, FLConfig, FLResult, GlobalModelRange, InitialModelRange, LocalPerturbation,
                 Run, simulate)
from .mechanisms import MECHANISMS
from .provenance import numerics_flag, run_mechanisms
from .rng import generator
from .provenance import provenance as _provenance
from .runcache import RunCache, RunCacheError, RunRecord, records_table
from .runconfig import RunConfig, TrainingEnv, config_value, group_indices
from .training import LocalSGD, OptimizerSpec

__all__ = ["FedAvgConfig", "Runner", "CLIP_ONLY", "LOAD_ONLY_ENV"]

# The weight-range rules a run configuration holds, under the names its stored record gives them. Registered here, with
# the kind that stores them: the round engine (ldptut.fl) knows nothing of the cache key.
for _name, _rule in (("fixed", FixedRange), ("adaptive", GlobalModelRange), ("initial", InitialModelRange)):
    config_value(_name)(_rule)

#: The environment variable that turns training off (``1``): a run the cache lacks is then an error, so re-rendering a
#: paper-scale page from stored runs can never start hours of training (``make reproduce LOAD_ONLY=1`` sets it).
LOAD_ONLY_ENV = "LDPTUT_RUNS_LOAD_ONLY"

#: The keys of the fixed shuffles :meth:`FedAvgConfig.data` cuts subsets from (seed 0). Named after the chapter that
#: introduced them (CoQ-FL); kept so that its stored runs keep their data.
TRAIN_SHUFFLE, TEST_SHUFFLE = "corbin-train-shuffle", "corbin-test-shuffle"

#: ``FedAvgConfig.mechanism`` of the clipping-only ablation (clip to the range, no noise; not private).
CLIP_ONLY = "clip"


@dataclass(frozen=True, kw_only=True)
class FedAvgConfig(RunConfig):
    """FedAvg with local mini-batch training and an optional LDP mechanism on every sent coordinate.

    ``mechanism``: a name of :data:`ldptut.mechanisms.MECHANISMS` (e.g. "two_point") or None (non-private);
    ``epsilon`` is then per coordinate per round and ``range`` the clipping range rule (:class:`FixedRange`
    or :class:`GlobalModelRange`, or :class:`InitialModelRange`). ``mechanism="clip"`` (with a ``range``, no ``epsilon``) is the ablation that
    clips to the range and adds no noise (:class:`~ldptut.fl.ClipToRange`; not private). ``train_eval``: also
    record training accuracy every ``train_eval_every`` rounds and at the last (:class:`~ldptut.fl.FLConfig`; both
    left out of the cache key at their defaults). ``partition``: "iid" (equal shards) or "dirichlet" (label skew with
    ``dirichlet_alpha``). Local training: ``local_epochs`` passes at ``batch_size`` with ``optimizer``.
    ``n_train`` / ``n_test``: use the first n of a fixed shuffle of the training / test set (None: all); ``validation``:
    hold out this many training examples (the last of the same shuffle) and evaluate on them instead of the test set
    (for tuning, never on test). All three are left out of the cache key at their default (None).
    """

    kind: ClassVar[str] = "fedavg"
    #: what the engine does with a diverging run (:class:`~ldptut.fl.FLConfig`): "stop" records it, its history
    #: ending with the round it blew up in, marked ``diverged`` (a result, e.g. of noise too large for the model, that
    #: a grid shows and the cache keeps, not an error that stops the grid); "raise" would raise instead
    on_divergence: ClassVar[str] = "stop"

    partition: str = "iid"
    dirichlet_alpha: Optional[float] = None
    client_fraction: float = 1.0
    local_epochs: int = 1
    batch_size: int = 32
    optimizer: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    send: str = "weights"
    aggregator: str = "mean"
    mechanism: Optional[str] = None
    epsilon: Optional[float] = None
    range: Optional[FixedRange | GlobalModelRange | InitialModelRange] = None
    train_eval: bool = False
    train_eval_every: int = 1
    n_train: Optional[int] = None
    n_test: Optional[int] = None
    validation: Optional[int] = None

    def __post_init__(self) -> None:
        super().__post_init__()
        one_of(self.partition, "partition", ("iid", "dirichlet"))
        for name in ("n_train", "n_test", "validation"):
            if getattr(self, name) is not None:
                pos_int(getattr(self, name), name)
        if (self.partition == "dirichlet") != (self.dirichlet_alpha is not None):
            raise ValueError("dirichlet_alpha is needed exactly when partition='dirichlet'")
        boolean(self.train_eval, "train_eval")
        if self.mechanism == CLIP_ONLY:
            if self.range is None or self.epsilon is not None:
                raise ValueError(f"mechanism={CLIP_ONLY!r} (clipping, no noise) needs a range and no epsilon")
        elif self.mechanism is not None:
            one_of(self.mechanism, "mechanism", sorted(MECHANISMS))
            if self.epsilon is None or self.range is None:
                raise ValueError(f"mechanism={self.mechanism!r} needs epsilon and range")
        elif self.epsilon is not None or self.range is not None:
            raise ValueError("epsilon and range belong to a mechanism; set mechanism too (or neither)")
        self.trainer()  # validates the local-training settings
        self.privatizer()  # validates epsilon with the mechanism's own checks
        FLConfig(rounds=self.rounds, client_fraction=self.client_fraction, send=self.send)

    # ---- pieces of the simulator call -----------------------------------------------------------
    def privatizer(self) -> Optional[LocalPerturbation | ClipToRange]:
        """The clients' :class:`~ldptut.fl.LocalPerturbation` (:class:`~ldptut.fl.ClipToRange` for "clip"), or None
        for a non-private run."""
        if self.mechanism is None:
            return None
        if self.mechanism == CLIP_ONLY:
            return ClipToRange(range=self.range)
        return LocalPerturbation(mechanism=MECHANISMS[self.mechanism], epsilon=self.epsilon, range=self.range)

    def trainer(self, *, vectorize: bool | str = "auto", client_chunk: Optional[int] = None) -> LocalSGD:
        opt = OptimizerSpec(name=self.optimizer, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        return LocalSGD(local_epochs=self.local_epochs, batch_size=self.batch_size, optimizer=opt,
                        vectorize=vectorize, client_chunk=client_chunk)

    def server_rule(self) -> Any:
        """The aggregator the server applies (``aggregator`` by name; kinds may build their own rule)."""
        return self.aggregator

    def check_dataset(self, ds: _data.Dataset) -> _data.Dataset:
        """``ds`` itself when it is the data set this run names (``ValueError`` otherwise). Kinds that cut their data
        their own way (their own subset fields and shuffles: PD-LDPFL's, LDP-FL's validation runs) start from this,
        not from :meth:`data`, so the base's subsets are not applied twice."""
        if ds.name != self.dataset:
            raise ValueError(f"this run is on {self.dataset!r}, got the data set {ds.name!r}")
        return ds

    def data(self, ds: _data.Dataset) -> _data.Dataset:
        """The data this run trains and evaluates on: ``ds`` cut to this run's sizes (``n_train``, ``n_test``,
        ``validation``; a fixed shuffle of seed 0, the same for every run), the validation split as its test set;
        ``ds`` itself when all three are None."""
        ds = self.check_dataset(ds)
        if self.n_train is None and self.n_test is None and self.validation is None:
            return ds
        n_tr = ds.x_train.shape[0]
        perm = torch.randperm(n_tr, generator=generator(0, TRAIN_SHUFFLE)).to(ds.x_train.device)
        hold = self.validation or 0
        need = (self.n_train or n_tr - hold) + hold
        if need > n_tr:
            raise ValueError(f"n_train + validation = {need} exceeds the {n_tr} training examples of {ds.name}")
        train = perm[: need - hold]
        if hold:
            val = perm[n_tr - hold:]
            x_te, y_te = ds.x_train[val], ds.y_train[val]
        else:
            x_te, y_te = ds.x_test, ds.y_test
            if self.n_test is not None:
                if self.n_test > x_te.shape[0]:
                    raise ValueError(f"n_test = {self.n_test} exceeds the {x_te.shape[0]} test examples of {ds.name}")
                pt = torch.randperm(x_te.shape[0], generator=generator(0, TEST_SHUFFLE))[: self.n_test]
                x_te, y_te = x_te[pt.to(x_te.device)], y_te[pt.to(y_te.device)]
        return dataclasses.replace(ds, x_train=ds.x_train[train], y_train=ds.y_train[train], x_test=x_te, y_test=y_te)

    def client_partition(self, labels: torch.Tensor, num_classes: Optional[int] = None) -> list[torch.Tensor]:
        if self.partition == "iid":
            return _partition.iid(labels, self.n_clients, seed=self.seed)
        return _partition.dirichlet(labels, self.n_clients, alpha=self.dirichlet_alpha, seed=self.seed,
                                    num_classes=num_classes)

    def build_model(self, ds: _data.Dataset) -> torch.nn.Module:
        return _models.build_model(self.model, input_shape=ds.input_shape, num_classes=ds.num_classes, seed=self.seed)

    def engine_call(self, ds: _data.Dataset, *, device: Any = "cpu", progress: bool = True,
                    desc: Optional[str] = None, privatizer: Any = None, vectorize: bool | str = "auto"
                    ) -> tuple[FLConfig, Run, dict[str, Any]]:
        """What :meth:`simulate` hands the round engine: ``(config, run, inputs)`` for
        ``ldptut.fl.simulate(config, [run], **inputs)`` (inputs: the model and this run's data cut from ``ds``); a
        Flower federation of the same run takes the same three (``ldptut.flower.simulate(config, run, **inputs)``)."""
        ds = self.data(ds)
        run = Run(seed=self.seed, partition=self.client_partition(ds.y_train, ds.num_classes),
                  privatizer=self.privatizer() if privatizer is None else privatizer, aggregator=self.server_rule())
        config = FLConfig(rounds=self.rounds, trainer=self.trainer(vectorize=vectorize),
                          client_fraction=self.client_fraction, send=self.send, device=device, progress=progress,
                          desc=desc or self.label(), on_divergence=self.on_divergence, train_eval=self.train_eval,
                          train_eval_every=self.train_eval_every)
        return config, run, dict(model=self.build_model(ds), x_train=ds.x_train, y_train=ds.y_train,
                                 x_test=ds.x_test, y_test=ds.y_test)

    def simulate(self, ds: _data.Dataset, *, device: Any = "cpu", progress: bool = True, desc: Optional[str] = None,
                 privatizer: Any = None, vectorize: bool | str = "auto") -> FLResult:
        """Train this run on ``ds`` (the data set named by ``dataset``). ``privatizer`` replaces the
        configuration's (e.g. a :class:`~ldptut.fl.RecordPayloads` around it, to inspect what is sent)."""
        config, run, inputs = self.engine_call(ds, device=device, progress=progress, desc=desc, privatizer=privatizer,
                                               vectorize=vectorize)
        return simulate(config, [run], **inputs)

    @classmethod
    def train_group(cls, configs: Sequence["FedAvgConfig"], *, env: TrainingEnv) -> list[pd.DataFrame]:
        out = []
        for c in configs:
            res = c.simulate(env.dataset(c.dataset), device=env.device, progress=env.progress)
            out.append(res.history.drop(columns="run"))
        return out

    def label(self) -> str:
        """Short description: "non-private" or "two_point ε=1 per coordinate per round, fixed (0, 0.075)"."""
        if self.mechanism is None:
            return f"non-private, seed {self.seed}"
        rng = (f"fixed ({self.range.center:g}, {self.range.radius:g})" if isinstance(self.range, FixedRange)
               else f"adaptive (margin {self.range.margin:g})")
        if self.mechanism == CLIP_ONLY:
            return f"clipped to {rng}, no noise (not private), seed {self.seed}"
        return f"{self.mechanism} ε={self.epsilon:g} per coordinate per round, {rng}, seed {self.seed}"


def diverged_note(runs: pd.DataFrame) -> str:
    """"" when none of ``runs`` (rows of a Runner table or of ``runcache.load_runs``) diverged, else "k of n diverged
    (round r1, r2)": how many of the n runs blew up, and the round each blew up in (its last round), in order."""
    gone = runs["diverged"].astype(bool) if "diverged" in runs else pd.Series(False, index=runs.index)
    if not gone.any():
        return ""
    rounds = ", ".join(str(int(r)) for r in sorted(runs.loc[gone, "last_round"]))
    return f"{int(gone.sum())} of {len(runs)} diverged (round {rounds})"


class Runner:
    """Trains or loads the runs a chapter asks for and keeps the chapter's table of them.

    The one place where runs are trained: for each group of runs (configurations sharing a
    :meth:`~ldptut.runconfig.RunConfig.group_key`) it loads what ``cache`` holds, trains the rest together (the kind's
    ``train_group``, given a :class:`~ldptut.runconfig.TrainingEnv`), attaches provenance and stores them.
    ``cache``: a :class:`~ldptut.runcache.RunCache`, a directory for one, or None (in memory: a run asked
    for twice is trained once). ``train=False`` (default: off when the environment variable
    ``LDPTUT_RUNS_LOAD_ONLY=1``) raises for a run that is not stored instead of training it. ``progress`` is the
    default of each call's own ``progress``.
    """

    def __init__(self, cache: RunCache | str | Path | None = None, *, device: Any = "cpu", progress: bool = True,
                 train: Optional[bool] = None):
        self.cache = cache if isinstance(cache, RunCache) else RunCache(cache)
        self.device = device
        self.progress = progress
        self.train = (os.environ.get(LOAD_ONLY_ENV, "") not in ("1", "true", "yes")) if train is None else bool(train)
        self._memo: dict[Hashable, Any] = {}
        self._rows: list[tuple[str, RunRecord]] = []

    # ---- data -----------------------------------------------------------------------------------
    def memo(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """``make()`` once per ``key`` (loaded data sets, a paper's experiment data)."""
        if key not in self._memo:
            self._memo[key] = make()
        return self._memo[key]

    def env(self, *, progress: Optional[bool] = None) -> TrainingEnv:
        """What a run kind's training is given: this runner's device and memo, and ``progress`` (default: the
        runner's)."""
        return TrainingEnv(device=self.device, progress=self.progress if progress is None else bool(progress),
                           memo=self.memo)

    def dataset(self, name: str) -> _data.Dataset:
        return self.env().dataset(name)

    # ---- runs -----------------------------------------------------------------------------------
    def run_all(self, configs: Sequence[RunConfig], *, progress: Optional[bool] = None) -> list[RunRecord]:
        """The records of ``configs`` in order: stored ones loaded, the others trained, one group at a time."""
        configs = list(configs)
        env = self.env(progress=progress)
        out: dict[int, RunRecord] = {}
        for idx in group_indices(configs):
            group = [configs[i] for i in idx]
            cls = type(group[0])
            out.update(zip(idx, self.load_or_train(group, lambda todo: cls.train_group(todo, env=env))))
        return [out[i] for i in range(len(configs))]

    def load_or_train(self, configs: Sequence[RunConfig],
                      train: Callable[[list[RunConfig]], list[pd.DataFrame]]) -> list[RunRecord]:
        """Records of ``configs``: the stored ones loaded, the others trained together by ``train(missing)`` (one
        history per configuration, in order) and stored, each with provenance (its share of the wall time and how
        many runs were trained together). The cache directory is checked writable before anything is trained."""
        records: dict[str, RunRecord] = {}
        missing: dict[str, RunConfig] = {}  # one training per distinct configuration
        for c in configs:
            key = c.key()
            if key in records or key in missing:
                continue
            rec = self.cache.load(c)
            if rec is None:
                missing[key] = c
            else:
                records[key] = rec
        if missing:
            todo = list(missing.values())
            if not self.train:
                where = self.cache.directory if self.cache.directory is not None else "memory"
                raise RunCacheError(f"{len(todo)} run(s) are not stored in {where} and training is off "
                                    f"({LOAD_ONLY_ENV}=1 or train=False); the first: {todo[0]}")
            self.cache.check_writable(len(todo))
            t0 = time.perf_counter()
            histories = train(todo)
            seconds = time.perf_counter() - t0
            if len(histories) != len(todo):
                raise ValueError(f"train returned {len(histories)} histories for {len(todo)} configurations")
            pairs = []
            for c, h in zip(todo, histories):
                prov = _provenance(device=self.device, seconds=seconds / len(todo))
                if len(todo) > 1:
                    prov["trained_together"] = len(todo)
                pairs.append((c, h, prov))
            for rec in self.cache.store_all(pairs):
                records[rec.config.key()] = rec
        return [records[c.key()] for c in configs]

    def run(self, config: RunConfig, *, progress: Optional[bool] = None) -> RunRecord:
        return self.run_all([config], progress=progress)[0]

    def record(self, experiment: str, config: RunConfig, *, progress: Optional[bool] = None) -> RunRecord:
        """Run ``config`` (or reuse it) and list it under ``experiment`` (once per experiment)."""
        return self.record_all([(experiment, config)], progress=progress)[0]

    def record_all(self, items: Iterable[tuple[str, RunConfig]], *,
                   progress: Optional[bool] = None) -> list[RunRecord]:
        items = list(items)
        records = self.run_all([c for _, c in items], progress=progress)
        seen = {(e, r.config) for e, r in self._rows}
        for (experiment, _), rec in zip(items, records):
            if (experiment, rec.config) not in seen:
                self._rows.append((experiment, rec))
                seen.add((experiment, rec.config))
        return records

    # ---- tables ---------------------------------------------------------------------------------
    def table(self, experiment: str | Sequence[str] | None = None) -> pd.DataFrame:
        """One row per recorded (experiment, run): ``experiment``, the configuration's fields, ``config``,
        ``accuracy`` (final, %), provenance and ``source`` (stored / trained); see
        :func:`ldptut.runcache.records_table`. ``record`` holds the :class:`RunRecord`."""
        wanted = None if experiment is None else ({experiment} if isinstance(experiment, str) else set(experiment))
        rows = [(e, r) for e, r in self._rows if wanted is None or e in wanted]
        if not rows:
            return pd.DataFrame(columns=["experiment", "config", "accuracy", "record"])
        t = records_table(r for _, r in rows)
        t.insert(0, "experiment", [e for e, _ in rows])
        t["record"] = [r for _, r in rows]
        return t

    def summary(self, experiment: str, by: str | Sequence[str]) -> pd.DataFrame:
        """Mean, sample std and count of the final accuracy (%) of an experiment's runs, grouped by
        configuration fields; ``epsilon`` None (non-private) reads "non-private" and sorts last. Mean, std and count
        skip a final accuracy that is NaN (a run whose weights blew up), so ``count`` is of the runs that did not
        diverge; when a run diverged, ``diverged`` reads as :func:`diverged_note` ("1 of 3 diverged (round 2)")."""
        df = self.table(experiment)
        df["epsilon"] = df["epsilon"].astype(float)
        if "range" in df:
            df["range"] = df["range"].fillna("none")
        groups = df.groupby(by, dropna=False)
        out = groups["accuracy"].agg(["mean", "std", "count"]).reset_index()
        if "diverged" in df and df["diverged"].astype(bool).any():
            out["diverged"] = [diverged_note(g) for _, g in groups]
        if "epsilon" in out:
            out["epsilon"] = out["epsilon"].map(lambda e: "non-private" if pd.isna(e) else f"{e:g}")
        return out

    def provenance(self) -> pd.DataFrame:
        """Every recorded run: its experiment, the configuration fields that differ between the recorded runs
        (seed always), where it came from (stored in the cache or trained in this execution), the commit and
        date of its training, the device and its minutes of training, and ``code``: "current", or "older code" for a
        run trained by older numerics whose changes since touch its mechanisms (:data:`ldptut.provenance.NUMERICS`,
        :data:`~ldptut.provenance.NUMERICS_CHANGES`; such a run would be re-trained differently now)."""
        t = self.table()
        if t.empty:
            return pd.DataFrame(columns=["experiment", "seed", "source", "commit", "trained", "device", "minutes", "code"])
        fields = [k for k in t["config"].iloc[0].to_dict() if k in t and k != "kind"]
        varying = [k for k in fields if k == "seed" or t[k].astype(str).nunique(dropna=False) > 1]
        out = t[["experiment"] + varying].copy()
        out["source"] = t["source"].map({"stored": "cache", "trained": "this execution"})
        out["commit"] = t["commit"]
        out["trained"] = t["date"].fillna("").str[:10]
        out["device"] = t["device"]
        out["minutes"] = (t["seconds"].astype(float) / 60).round(1)
        numerics = t["numerics"] if "numerics" in t else pd.Series([None] * len(t), index=t.index)
        out["code"] = [numerics_flag(v, run_mechanisms(c)) for v, c in zip(numerics, t["config"])]
        return out

"""The round engine: federated averaging with pluggable local training, privatizers and aggregation.

One round (McMahan et al. 2017, FedAvg; LDP-FL, Sun et al. 2021, Algorithm 1; Wu et al. 2023,
Algorithms 1-2), in :func:`next_round`, the package's one round of federated training:

1. the server samples a fraction of the clients (:func:`sample_clients`);
2. each sampled client starts from the global model and trains locally -- a pluggable trainer of
   :mod:`ldptut.training` (mini-batch SGD/Adam vectorised over clients, sequential, or scikit-learn's
   per-sample SGD vectorised across runs); trainers may keep client state from round to round;
3. each client flattens its weights (``send="weights"``) or its update ``local - global``
   (``send="updates"``) into one vector of d scalars and applies the run's privatizer to it (per-layer
   slices are in :class:`ParamLayout` for layer-wise ranges);
4. the server aggregates the m privatized vectors into the new global model (an aggregator returns the
   vector and its metrics, e.g. how many clients it used) and evaluates it on the test set.

:func:`simulate` trains a batch of :class:`Run` s at once (one run, or a whole grid of privacy profiles
and seeds that share data, model and trainer). The round's :class:`RoundContext` hands privatizers and
aggregators their random streams: one generator per client, one for the server, and a common one per
client pair (:meth:`RoundContext.pair_generator`). Every draw comes from :mod:`ldptut.rng`, keyed by
(seed, round, client or pair, purpose), so a run is identical whatever the execution order or path.

Privacy accounting: a privatizer that states its guarantee (``guarantee(context)``, one per client,
per coordinate) has it composed over the d coordinates and over the rounds each client took part in
(:class:`ldptut.accounting.Guarantee`); the history records, per round, the largest ε a client spent
in that round (``epsilon_round``, per model per round) and in total so far (``epsilon_total`` with
``delta``; ``epsilon_unit`` says what it covers, e.g. "per model (d = 159,010 coordinates) over 10 rounds").

:func:`simulate` is FedJAX's algorithm face (``init`` / ``apply``) for a batch of runs: :func:`start` makes the
:class:`SimulationState` before round 1, :func:`next_round` advances it one round and returns the round's history rows,
:func:`finish` turns it into an :class:`FLResult`; :func:`simulate` loops over them, and a reader can step through
the rounds (look at the global models between rounds) with the same three calls. :func:`run_fedavg` is the
convenience wrapper for one run with keyword arguments.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from .._validate import all_finite
from ..accounting import ClientAccountant
from ..rng import client_generator, generator, round_generator
from ..training import LocalSGD, OptimizerSpec, TrainingSession, batch_schedule
from .layout import ParamLayout, load_vector
from .context import Aggregator, Privatizer, RoundContext
from .aggregators import make_aggregator
from .spec import FLConfig, FLResult, Run
from .checks import _check_inputs, checked_aggregate, checked_privatize


# ------------------------------------------------------------------------------------ scheduling
def sample_clients(n_clients: int, fraction: float, *, seed: int, round: int,
                   device: str | torch.device = "cpu") -> torch.Tensor:
    """Sorted ids of max(1, round(fraction * n)) clients drawn without replacement for ``round``."""
    m = max(1, math.floor(fraction * n_clients + 0.5))  # round half up
    if m >= n_clients:
        return torch.arange(n_clients, device=device)
    g = round_generator(seed, round, "client-sampling")
    return torch.randperm(n_clients, generator=g)[:m].sort().values.to(device)


# ------------------------------------------------------------------------------------ evaluation
@torch.no_grad()
def evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, *, batch_size: int = 4096) -> tuple[float, float]:
    """(accuracy in [0, 1], mean cross-entropy loss) of ``model`` on (x, y)."""
    model.eval()
    correct, loss = 0, 0.0
    for i in range(0, x.shape[0], batch_size):
        out = model(x[i:i + batch_size])
        yb = y[i:i + batch_size]
        loss += F.cross_entropy(out, yb, reduction="sum").item()
        correct += (out.argmax(1) == yb).sum().item()
    model.train()
    n = x.shape[0]
    return correct / n, loss / n


# ------------------------------------------------------------------------------------ simulation

def _stated_guarantees(privatizer: Optional[Privatizer], ctx: RoundContext) -> Optional[list]:
    """The per-coordinate guarantee of each sampled client's release this round, as the privatizer states it
    (``guarantee(context)``); None when it states none (no privatizer, or clipping alone)."""
    stated = getattr(privatizer, "guarantee", None)
    return None if stated is None else stated(ctx)


#: A test loss above this many times that of predicting every class equally likely (ln C) is divergence whatever its
#: trend (a run whose loss is huge from round 1 never "rises"; the stored runs' largest is under 3000 times).
HUGE_LOSS = 1e6


def _diverged(losses: list[float], factor: Optional[float], chance: float = math.inf) -> bool:
    """Rising three rounds in a row to more than ``factor`` times the lowest loss, or above :data:`HUGE_LOSS` times the
    loss of a uniform prediction (``chance`` = ln C), whatever the trend."""
    if factor is None or not losses:
        return False
    if losses[-1] > HUGE_LOSS * chance:
        return True
    if len(losses) < 4:
        return False
    a, b, c, d = losses[-4:]
    return a < b < c < d and d > factor * min(losses)


def _clients_accuracy(model: nn.Module, layout: ParamLayout, local: torch.Tensor, parts: Sequence[torch.Tensor],
                      x_train: torch.Tensor, y_train: torch.Tensor, batch_size: int) -> float:
    """Sample-weighted mean accuracy of each client's local model (row i of ``local``) on its own data ``parts[i]``:
    the training accuracy the clients themselves would report."""
    correct = total = 0
    for vec, idx in zip(local, parts):
        idx = idx.to(x_train.device)
        acc, _ = evaluate(load_vector(model, layout, vec), x_train[idx], y_train[idx], batch_size=batch_size)
        correct += acc * len(idx)
        total += len(idx)
    return correct / total if total else math.nan


@dataclass(eq=False)
class SimulationState:
    """Where a batch of runs stands between rounds (FedJAX's algorithm state, for a batch of runs): made by
    :func:`start`, advanced by :func:`next_round`, turned into an :class:`FLResult` by :func:`finish`.

    ``global_vectors`` (runs, d): each run's global model after ``round`` rounds (row a is run a's); ``stopped``: the
    runs that diverged (with ``on_divergence="stop"``), frozen at their last finite model; ``history``: the rows of the
    rounds so far. The rest is fixed at :func:`start`: the model (architecture) on the device, its layout, the data on
    the device, each run's initial vector, aggregator, client sizes and accountant, the trainer's session."""

    config: FLConfig
    runs: Sequence[Run]
    model: nn.Module
    layout: ParamLayout
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    global_vectors: torch.Tensor
    initial_vectors: torch.Tensor
    aggregators: list
    sizes: list[torch.Tensor]
    accountants: list[ClientAccountant]
    session: TrainingSession
    chance: float
    round: int = 0
    losses: list[list[float]] = field(default_factory=list)
    stopped: set[int] = field(default_factory=set)
    history: list[dict] = field(default_factory=list)

    @property
    def done(self) -> bool:
        """Every round of ``config.rounds`` is done, or every run has stopped."""
        return self.round >= self.config.rounds or len(self.stopped) == len(self.runs)


def start(config: FLConfig, runs: Sequence[Run], *, model: nn.Module, x_train: torch.Tensor, y_train: torch.Tensor,
          x_test: torch.Tensor, y_test: torch.Tensor) -> SimulationState:
    """The state before round 1 (FedJAX's ``init``): inputs checked (shapes, labels, partition indices) and moved to
    ``config.device``; ``model`` is copied, not modified; each run starts from ``run.initial`` or ``model``'s weights."""
    device = torch.device(config.device)
    model = copy.deepcopy(model).to(device)
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_test, y_test = x_test.to(device), y_test.to(device)
    _check_inputs(model, runs, x_train, y_train, x_test, y_test)
    layout = ParamLayout.from_model(model)
    init = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    glob = torch.stack([init if r.initial is None else r.initial.to(device=device, dtype=init.dtype) for r in runs])
    session = config.trainer.start(model=model, layout=layout, runs=runs, x_train=x_train, y_train=y_train)
    if not isinstance(session, TrainingSession):
        raise TypeError(f"{type(config.trainer).__name__}.start must return a ldptut.training.TrainingSession, got "
                        f"{type(session).__name__}")
    return SimulationState(
        config=config, runs=runs, model=model, layout=layout, x_train=x_train, y_train=y_train, x_test=x_test,
        y_test=y_test, global_vectors=glob,
        initial_vectors=glob.clone(),  # each run's initial global model, for range rules fixed at it (InitialModelRange)
        aggregators=[make_aggregator(r.aggregator) for r in runs],
        sizes=[torch.tensor([len(p) for p in r.partition], dtype=torch.float32) for r in runs],
        accountants=[ClientAccountant(d=layout.numel) for _ in runs], session=session,
        chance=math.log(max(2, int(max(y_train.max(), y_test.max())) + 1)),  # cross-entropy of a uniform prediction
        losses=[[] for _ in runs])


def _client_updates(state: SimulationState, r: int) -> tuple[list[tuple], Optional[list[float]]]:
    """Steps 1-4 of round ``r`` for every run: sample, train locally, privatize, aggregate. Per run: (its new global
    vector, (clients sampled, the aggregator's metrics, the privacy spent this round or None)), and the clients'
    own accuracy when the round evaluates it."""
    config, runs, device, glob = state.config, state.runs, state.global_vectors.device, state.global_vectors
    n_clients = len(runs[0].partition)
    ids = [sample_clients(n_clients, config.client_fraction, seed=run.seed, round=r) for run in runs]
    trained = state.session.train(round=r, global_vectors=glob, client_ids=ids)
    local_acc = ([_clients_accuracy(state.model, state.layout, trained[a], [run.partition[i] for i in ids[a].tolist()],
                                    state.x_train, state.y_train, config.eval_batch_size) for a, run in enumerate(runs)]
                 if config.train_eval_at(r) else None)
    out = []
    for a, run in enumerate(runs):
        payloads = trained[a] - glob[a] if config.send == "updates" else trained[a]
        cids = ids[a].to(device)
        ctx = RoundContext(
            round=r, client_ids=cids, layout=state.layout, global_vector=glob[a],
            generators=[client_generator(run.seed, r, i, "privatize", device=device) for i in ids[a].tolist()],
            send=config.send, num_samples=state.sizes[a][ids[a]].to(device),
            server_generator=round_generator(run.seed, r, "server", device=device), seed=run.seed,
            initial_vector=state.initial_vectors[a])
        # local training diverged (non-finite weights): nothing to perturb, and no mechanism takes NaN; the round's
        # model is non-finite, which the divergence check records ("stop") or raises
        private = run.privatizer is not None
        lost = private and not all_finite(payloads)
        if private and not lost:
            payloads = checked_privatize(run.privatizer, payloads, ctx)
        spent = state.accountants[a].step(cids, _stated_guarantees(run.privatizer, ctx))
        if lost:
            out.append((torch.full_like(glob[a], math.nan), (len(cids), {}, spent)))
            continue
        vec, metrics = checked_aggregate(state.aggregators[a], payloads, ctx)
        out.append((glob[a] + vec if config.send == "updates" else vec, (len(cids), metrics, spent)))
    return out, local_acc


def next_round(state: SimulationState) -> tuple[SimulationState, list[dict]]:
    """Round ``state.round + 1`` of every run that has not stopped (FedJAX's ``apply`` for one round; see the module
    docstring): returns the state, updated in place, and the round's history rows (one per run still training). A
    diverging run raises (``on_divergence="raise"``) or stops at its last finite model (``"stop"``)."""
    if state.done:
        raise ValueError(f"the simulation is done (round {state.round} of {state.config.rounds}, "
                         f"{len(state.stopped)} of {len(state.runs)} runs stopped)")
    config, runs, model, layout = state.config, state.runs, state.model, state.layout
    r = state.round + 1
    lr = getattr(config.trainer, "lr", None)
    t0 = time.perf_counter()
    updates, local_acc = _client_updates(state, r)
    prev, glob = state.global_vectors, torch.stack([u[0] for u in updates]).detach()
    train_s = time.perf_counter() - t0
    rows = []
    for a, run in enumerate(runs):
        if a in state.stopped:
            glob[a] = prev[a]
            continue
        where = f"round {r}{f', run {a}' if len(runs) > 1 else ''}"
        hint = f" (learning rate {lr:g} too large?)" if lr else ""
        diverged = False
        losses = state.losses[a]
        if not all_finite(glob[a]):
            if config.on_divergence == "raise":
                raise FloatingPointError(f"{where}: the global model has non-finite weights{hint}")
            glob[a], acc, loss, diverged = prev[a], math.nan, math.inf, True
        else:
            acc, loss = evaluate(state.session.load_state(load_vector(model, layout, glob[a]), a), state.x_test,
                                 state.y_test, batch_size=config.eval_batch_size)
            losses.append(loss)
            if not math.isfinite(loss) or _diverged(losses, config.divergence_factor, state.chance):
                if config.on_divergence == "raise":
                    chance = state.chance
                    huge = (f"{loss / chance:.3g} times that of a uniform prediction ({chance:.3g})"
                            if loss > HUGE_LOSS * chance else "")
                    what = (f"the test loss is {loss:.3g}, {huge}" if huge and len(losses) == 1 else
                            f"the test loss rose to {loss:.3g} from {min(losses):.3g}" + (f", {huge}" if huge else ""))
                    raise FloatingPointError(f"{where}: training diverges, {what}{hint}")
                diverged = True
        m, metrics, spent = updates[a][1]
        row = {"run": a, "round": r, "accuracy": acc, "loss": loss, "clients": m,
               "clients_used": int(metrics.get("clients_used", m))}
        if config.train_eval and not config.train_eval_at(r):
            row.update(train_accuracy=math.nan, train_loss=math.nan, client_train_accuracy=math.nan)
        elif config.train_eval:
            train_acc, train_loss = (math.nan, math.inf) if diverged and math.isnan(acc) else evaluate(
                state.session.load_state(load_vector(model, layout, glob[a]), a), state.x_train, state.y_train,
                batch_size=config.eval_batch_size)
            row.update(train_accuracy=train_acc, train_loss=train_loss, client_train_accuracy=local_acc[a])
        if spent is not None:
            total = state.accountants[a].spent()
            row.update(epsilon_round=spent.epsilon, epsilon_total=total.epsilon, delta=total.delta,
                       epsilon_unit=str(total.unit))
        if config.on_divergence == "stop":
            row["diverged"] = diverged
        session_metrics = state.session.metrics(a, global_vector=glob[a], x_test=state.x_test, y_test=state.y_test)
        rows.append({**row, **{k: v for k, v in metrics.items() if k != "clients_used"}, **session_metrics,
                     **dict(run.info)})
        if diverged:
            state.stopped.add(a)
    seconds = time.perf_counter() - t0
    for row in rows:
        row.update(train_seconds=train_s / len(runs), seconds=seconds / len(runs))
    state.global_vectors, state.round = glob, r
    state.history.extend(rows)
    return state, rows


def finish(state: SimulationState) -> FLResult:
    """The :class:`FLResult` of the rounds done so far: the history, each run's global vector, the model (loaded with
    run 0's weights and state) and each run's privacy spent."""
    state.session.load_state(load_vector(state.model, state.layout, state.global_vectors[0]), 0)
    return FLResult(history=pd.DataFrame(state.history), weights=state.global_vectors, layout=state.layout,
                    model=state.model, guarantees=[acc.spent() for acc in state.accountants])


def simulate(config: FLConfig, runs: Sequence[Run], *, model: nn.Module, x_train: torch.Tensor,
             y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor) -> FLResult:
    """Train every run of ``runs`` for ``config.rounds`` rounds (see the module docstring) and evaluate each
    round's global models on (x_test, y_test): :func:`start`, :func:`next_round` until done, :func:`finish`.

    ``model`` gives the architecture (and the initial weights of runs without ``initial``); it is copied,
    not modified. Inputs are checked before any training (shapes, labels, partition indices); a privatizer
    or aggregator returning the wrong shape or type, and a diverging run, raise with the round and names.
    History columns: run, round, accuracy (in [0, 1]), loss (mean cross-entropy), clients (sampled),
    clients_used (aggregated), epsilon_round / epsilon_total / delta / epsilon_unit (when the privatizer
    states its guarantee), train_seconds and seconds (per run: the batch's time divided by the number of runs), the
    trainer session's own per-round metrics (:meth:`ldptut.training.TrainingSession.metrics`, called with the run's
    new global model and the test set; e.g. ``loss_variance`` and ``personal_accuracy`` of
    :class:`ldptut.personal.PersonalizedLocalSGD`), and the run's ``info``.
    """
    from tqdm import tqdm  # plain text bar: works in terminals and notebooks without ipywidgets

    state = start(config, runs, model=model, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    with tqdm(total=config.rounds, desc=config.desc, disable=not config.progress, leave=False,
              mininterval=2.0) as bar:
        while not state.done:
            state, rows = next_round(state)
            bar.update(1)
            bar.set_postfix(acc=f"{rows[-1]['accuracy']:.3f}", refresh=False)
    return finish(state)


def run_fedavg(model: nn.Module, *, x_train: torch.Tensor, y_train: torch.Tensor, partition: Sequence[torch.Tensor],
               x_test: torch.Tensor, y_test: torch.Tensor, rounds: int, client_fraction: float = 1.0,
               local_epochs: int = 1, batch_size: int = 32, optimizer: str = "sgd", lr: float = 0.01,
               momentum: float = 0.0, weight_decay: float = 0.0, send: str = "weights",
               privatizer: Privatizer | None = None, aggregator: str | Aggregator = "weighted_mean",
               seed: int = 0, device: str | torch.device = "cpu", vectorize: bool | str = "auto",
               client_chunk: int | None = None, progress: bool = True, desc: str = "FL rounds") -> FLResult:
    """One run of :func:`simulate` with FedAvg's local mini-batch training (:class:`ldptut.training.LocalSGD`),
    from keyword arguments; the history has no ``run`` column. ``model`` is copied, not modified."""
    trainer = LocalSGD(local_epochs=local_epochs, batch_size=batch_size, vectorize=vectorize, client_chunk=client_chunk,
                       optimizer=OptimizerSpec(name=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay))
    config = FLConfig(rounds=rounds, trainer=trainer, client_fraction=client_fraction, send=send, device=device,
                      progress=progress, desc=desc)
    run = Run(seed=seed, partition=partition, privatizer=privatizer, aggregator=aggregator)
    res = simulate(config, [run], model=model, x_train=x_train, y_train=y_train, x_test=x_test, y_test=y_test)
    res.history = res.history.drop(columns="run")
    return res


def train_centralised(model: nn.Module, *, x_train: torch.Tensor, y_train: torch.Tensor, epochs: int = 1,
                      batch_size: int = 32, optimizer: str = "sgd", lr: float = 0.01, seed: int = 0,
                      device: str | torch.device = "cpu") -> nn.Module:
    """Plain mini-batch training of a copy of ``model`` on all of (x_train, y_train), the non-federated baseline."""
    opt = OptimizerSpec(name=optimizer, lr=lr)
    model = copy.deepcopy(model).to(device)
    x_train, y_train = x_train.to(device), y_train.to(device)
    optim = opt.torch_optimizer(model.parameters())
    sched = batch_schedule(x_train.shape[0], epochs=epochs, batch_size=batch_size,
                           generator=generator(seed, "centralised", "batches"))
    for batch in sched:
        b = batch[batch >= 0].to(device)
        optim.zero_grad(set_to_none=True)
        F.cross_entropy(model(x_train[b]), y_train[b]).backward()
        optim.step()
    return model

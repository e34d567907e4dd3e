"""Local training: the pluggable trainers of the round engine (:func:`ldptut.fl.simulate`).

A trainer is a small frozen settings object with ``start(...)``, which returns a session holding the
data and any **client state that persists across rounds**; the session's ``train(round=,
global_vectors=, client_ids=)`` returns, for every run of the batch, the (m, d) matrix of its sampled
clients' locally trained weight vectors. Per-client work follows FedJAX's init / step / final split and
is vectorised over clients (and, for :class:`PerSampleSGD`, over runs).

* :class:`LocalSGD` -- FedAvg's local step (McMahan et al. 2017): ``local_epochs`` passes of mini-batch
  SGD (momentum, L2) or Adam with torch.optim's exact update rules, either vectorised over clients with
  ``torch.func`` (``functional_call`` + ``vmap`` over stacked parameters) or sequentially with
  ``torch.optim`` (kept for checking and for convolutions on CPU, where vmap is slower). Both paths use
  the same batch schedule and generators, so they agree up to float rounding.
* :class:`PerSampleSGD` -- scikit-learn's ``SGDClassifier(loss="log_loss").partial_fit`` (one-vs-rest
  logistic regression, per-sample SGD with the "optimal" learning-rate schedule; Wu et al. 2023,
  Algorithm 1), vectorised across runs and clients: the loop is over sample positions only. Its client
  state is scikit-learn's sample counter ``t``, carried from round to round.

Randomness: every draw comes from :mod:`ldptut.rng` (batch order: ``client_generator(seed, round, i,
"batches")``; sample order: ``client_generator(seed, round, i, "sample")``), so a run's numbers do not
depend on execution order, on chunking or on which other runs share the batch.
"""
from __future__ import annotations

import copy
import math
import warnings
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from ._validate import fraction, one_of, pos_int, real
from .rng import client_generator

__all__ = ["OptimizerSpec", "batch_schedule", "Trainer", "TrainingSession", "LocalSGD", "PerSampleSGD",
           "optimal_eta0", "optimal_learning_rate", "average_buffers"]


# ------------------------------------------------------------------------------------------ protocol
class TrainingSession:
    """A trainer started on one batch of runs: holds the data and the clients' persistent state.

    ``train`` is the one required method. The engine also calls two named hooks, whose defaults here do nothing:
    ``load_state(model, run)`` loads the run's state the model needs beyond its weight vector (BatchNorm running
    statistics) before the engine evaluates it; ``metrics(run, *, global_vector, x_test, y_test)`` returns the
    session's own per-round metrics of a run for the history (e.g. the variance of its clients' local losses)."""

    def train(self, *, round: int, global_vectors: torch.Tensor, client_ids: Sequence[torch.Tensor]
              ) -> list[torch.Tensor]:
        """For every run of the batch, the (m, d) locally trained weight vectors of its sampled clients."""
        raise NotImplementedError(f"{type(self).__name__} must define train(round=, global_vectors=, client_ids=)")

    def load_state(self, model: nn.Module, run: int) -> nn.Module:
        """``model`` ready to evaluate run ``run``'s weights (default: as it is)."""
        return model

    def metrics(self, run: int, *, global_vector: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor
                ) -> dict[str, float]:
        """The session's own per-round metrics of run ``run`` (default: none)."""
        return {}


class Trainer(Protocol):
    """Local-training settings; ``start`` binds them to a model, the runs and the training data."""

    def start(self, *, model: nn.Module, layout: Any, runs: Sequence[Any], x_train: torch.Tensor,
              y_train: torch.Tensor) -> TrainingSession: ...


# ------------------------------------------------------------------------------------ optimisers
@dataclass(frozen=True)
class OptimizerSpec:
    """SGD or Adam with torch.optim's exact update rules (L2 ``weight_decay`` added to the gradient)."""

    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8

    def __post_init__(self) -> None:
        one_of(self.name, "optimizer", ("sgd", "adam"))
        real(self.lr, "lr", positive=True)
        if not (0 <= real(self.momentum, "momentum") < 1):
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        real(self.weight_decay, "weight_decay", nonneg=True)

    def torch_optimizer(self, params) -> torch.optim.Optimizer:
        if self.name == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        return torch.optim.Adam(params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)


def batch_schedule(n: int, *, epochs: int, batch_size: int, generator: torch.Generator) -> torch.Tensor:
    """Local indices of each mini-batch, shape (epochs * ceil(n / B), B), padded with -1.

    Each epoch is a fresh permutation of the client's n samples; the last batch of an epoch may be short.
    """
    steps = math.ceil(n / batch_size)
    out = torch.full((epochs * steps, batch_size), -1, dtype=torch.long)
    for e in range(epochs):
        perm = torch.randperm(n, generator=generator)
        block = torch.full((steps * batch_size,), -1, dtype=torch.long)
        block[:n] = perm
        out[e * steps:(e + 1) * steps] = block.view(steps, batch_size)
    return out


def _client_init(params: dict[str, torch.Tensor], m: int, opt: OptimizerSpec) -> dict:
    """FedJAX-style init: m copies of the global parameters and zeroed optimiser state."""
    state = {"params": {k: v.detach().unsqueeze(0).repeat(m, *([1] * v.dim())) for k, v in params.items()},
             "step": torch.zeros(m, dtype=torch.float64, device=next(iter(params.values())).device)}
    if opt.name == "adam":
        state["m1"] = {k: torch.zeros_like(v) for k, v in state["params"].items()}
        state["m2"] = {k: torch.zeros_like(v) for k, v in state["params"].items()}
    elif opt.momentum > 0:
        state["buf"] = {k: torch.zeros_like(v) for k, v in state["params"].items()}
    return state


def _client_step(state: dict, grads: dict[str, torch.Tensor], active: torch.Tensor, opt: OptimizerSpec) -> None:
    """FedJAX-style step, vectorised over the m clients; clients with ``active == False`` are unchanged.

    Updates the state tensors in place (they belong to this round's clients only). When every client
    is active (equal shard sizes, the usual case) no masking pass is made.
    """
    all_active = bool(active.all())
    state["step"] += active.to(state["step"].dtype)
    step = state["step"]
    for k, p in state["params"].items():
        shape = (-1,) + (1,) * (p.dim() - 1)
        a = active.view(shape)
        g = grads[k]
        if opt.weight_decay:
            g = g.add_(p, alpha=opt.weight_decay)
        if opt.name == "sgd" and opt.momentum == 0:
            if not all_active:
                g = g.mul_(a)  # a zero gradient leaves an inactive client's weights unchanged
            p.add_(g, alpha=-opt.lr)
        elif opt.name == "sgd":
            buf = state["buf"][k]
            first = (step == 1).view(shape)
            new_buf = torch.where(first, g, opt.momentum * buf + g)
            if not all_active:
                new_buf = torch.where(a, new_buf, buf)
            state["buf"][k] = new_buf
            p.add_(new_buf if all_active else new_buf * a, alpha=-opt.lr)
        else:
            b1, b2 = opt.betas
            m1 = state["m1"][k].mul(b1).add_(g, alpha=1 - b1)
            m2 = state["m2"][k].mul(b2).addcmul_(g, g, value=1 - b2)
            if not all_active:
                m1, m2 = torch.where(a, m1, state["m1"][k]), torch.where(a, m2, state["m2"][k])
            state["m1"][k], state["m2"][k] = m1, m2
            t = step.clamp(min=1).view(shape)  # float64, as torch.optim computes the bias corrections
            bc1 = (1 - b1 ** t).to(p.dtype)
            bc2_sqrt = torch.sqrt(1 - b2 ** t).to(p.dtype)
            delta = (opt.lr / bc1) * m1 / (m2.sqrt() / bc2_sqrt + opt.eps)
            p.sub_(delta if all_active else delta * a)


def _client_final(state: dict, layout: Any) -> torch.Tensor:
    """FedJAX-style final: the (m, d) matrix of trained weights."""
    return layout.flatten(state["params"], batch_dims=1)


def _train_vectorised(model: nn.Module, global_params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                      schedules: list[torch.Tensor], client_index: list[torch.Tensor], opt: OptimizerSpec,
                      layout: Any) -> torch.Tensor:
    m = len(schedules)
    device = x.device
    buffers = {k: v for k, v in model.named_buffers()}
    steps = max(s.shape[0] for s in schedules)
    bsz = schedules[0].shape[1]
    # (m, S, B) global sample indices and masks; padded batches/steps are masked out.
    local = torch.full((m, steps, bsz), -1, dtype=torch.long)
    for i, s in enumerate(schedules):
        local[i, : s.shape[0]] = s
    mask = local >= 0
    glob = torch.zeros_like(local)
    for i, idx in enumerate(client_index):
        glob[i][mask[i]] = idx.cpu()[local[i][mask[i]]]
    glob, mask = glob.to(device), mask.to(device)
    active_steps = mask.any(dim=2)

    def loss_fn(params, xb, yb, wb):
        out = functional_call(model, (params, buffers), (xb,))
        losses = F.cross_entropy(out, yb, reduction="none")
        return (losses * wb).sum() / wb.sum().clamp(min=1.0)

    grad_fn = vmap(grad(loss_fn))
    state = _client_init(global_params, m, opt)
    for s in range(steps):
        idx = glob[:, s]
        wb = mask[:, s].to(x.dtype)
        grads = grad_fn(state["params"], x[idx], y[idx], wb)
        _client_step(state, grads, active_steps[:, s], opt)
    return _client_final(state, layout)


def _batches(sched: torch.Tensor, *, merge_single: bool, client: Any) -> list[torch.Tensor]:
    """The schedule's batches (local indices, padding dropped). With ``merge_single`` (a model with BatchNorm, which
    cannot normalise a batch of one sample in training mode), a one-sample last batch of an epoch joins the batch
    before it, with a warning naming the client; a client with one sample in all trains on nothing (warned)."""
    out = [row[row >= 0] for row in sched]
    if not merge_single or not any(len(b) == 1 for b in out):
        return out
    merged: list[torch.Tensor] = []
    for b in out:
        if len(b) == 1 and merged and len(merged[-1]) > 1:
            merged[-1] = torch.cat([merged[-1], b])
            warnings.warn(f"client {client}: a batch of one sample joins the batch before it (BatchNorm cannot train "
                          "on one sample)", stacklevel=4)
        elif len(b) == 1:
            warnings.warn(f"client {client}: holds one sample, and BatchNorm cannot train on one: its local step is "
                          "skipped (it sends the global model)", stacklevel=4)
        else:
            merged.append(b)
    return merged


def _train_sequential(model: nn.Module, global_params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                      schedules: list[torch.Tensor], client_index: list[torch.Tensor], opt: OptimizerSpec,
                      layout: Any, channels_last: bool = True, buffers: dict[str, torch.Tensor] | None = None,
                      buffers_out: list[dict[str, torch.Tensor]] | None = None,
                      client_ids: Sequence[Any] | None = None) -> torch.Tensor:
    """Each client in turn: copy the model, load the global weights (and ``buffers``, e.g. BatchNorm running
    statistics), run its batches with torch.optim; the clients' weight vectors stacked. Each client's
    buffers after training are appended to ``buffers_out`` when it is given. With BatchNorm, a one-sample batch
    joins the one before it (:func:`_batches`); a batch that fails raises naming the client (``client_ids``)."""
    rows = []
    has_bn = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    names = list(client_ids) if client_ids is not None else list(range(len(schedules)))
    # Image batches in channels-last layout: CNN2's local step is about 1.5x faster on CPU this way
    # (benchmarks/bench_fl.py, row d); the weights are the same numbers in another memory order.
    fmt = torch.channels_last if channels_last and x.dim() == 4 else torch.contiguous_format
    for sched, idx, cid in zip(schedules, client_index, names):
        local_model = copy.deepcopy(model).to(memory_format=fmt)
        with torch.no_grad():
            for k, p in local_model.named_parameters():
                p.copy_(global_params[k])
            for k, b in (local_model.named_buffers() if buffers is not None else ()):
                b.copy_(buffers[k])
        optim = opt.torch_optimizer(local_model.parameters())
        idx = idx.to(x.device)
        for batch in _batches(sched, merge_single=has_bn, client=cid):
            b = idx[batch.to(x.device)]
            optim.zero_grad(set_to_none=True)
            try:
                F.cross_entropy(local_model(x[b].contiguous(memory_format=fmt)), y[b]).backward()
            except (RuntimeError, ValueError) as e:
                raise type(e)(f"client {cid}: local training failed on a batch of {len(b)} sample(s): {e}") from e
            optim.step()
        rows.append(layout.flatten(dict(local_model.named_parameters())).detach())
        if buffers_out is not None:
            buffers_out.append({k: b.detach().clone() for k, b in local_model.named_buffers()})
    return torch.stack(rows)


def average_buffers(states: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """The server's average of the clients' buffers (FedAvg on the state dict, as torch's BatchNorm
    running statistics are averaged by CorBin-FL's code): floating-point buffers by their unweighted mean,
    integer counters (``num_batches_tracked``) by their maximum."""
    out = {}
    for k, first in states[0].items():
        stack = torch.stack([st[k] for st in states])
        out[k] = stack.mean(0) if first.is_floating_point() else stack.max(0).values
    return out


# ------------------------------------------------------------------------------ mini-batch SGD / Adam
@dataclass(frozen=True)
class LocalSGD:
    """FedAvg's local training: ``local_epochs`` passes of mini-batch ``optimizer`` over each client's data.

    ``vectorize``: True (vmap over clients), False (sequential torch.optim loop) or "auto": the vmap path
    for models without convolutions, or for any model off the CPU; on CPU, vmap turns a convolution with
    per-client weights into a grouped convolution that we measured several times slower than looping over
    clients (benchmarks/bench_fl.py). ``client_chunk`` bounds how many clients are trained at once on the
    vectorised path (memory).

    Models with buffers (BatchNorm running statistics) train on the sequential path only. Each run keeps
    its own buffers: the round's clients start from them and the server replaces them with the clients'
    average (:func:`average_buffers`), which the engine loads for evaluation. Those averages reach the
    server **in clear**, outside any privatizer: no ε covers them (CorBin-FL's code does the same).
    """

    local_epochs: int = 1
    batch_size: int = 32
    optimizer: OptimizerSpec = OptimizerSpec()
    vectorize: bool | str = "auto"
    client_chunk: int | None = None

    def __post_init__(self) -> None:
        pos_int(self.local_epochs, "local_epochs")
        pos_int(self.batch_size, "batch_size")
        if self.vectorize not in (True, False, "auto"):
            raise ValueError(f"vectorize must be True, False or 'auto', got {self.vectorize!r}")
        if self.client_chunk is not None:
            pos_int(self.client_chunk, "client_chunk")

    @property
    def lr(self) -> float:
        return self.optimizer.lr

    def start(self, *, model: nn.Module, layout: Any, runs: Sequence[Any], x_train: torch.Tensor,
              y_train: torch.Tensor) -> "_LocalSGDSession":
        device = x_train.device
        has_buffers = any(b.numel() for b in model.buffers())
        if self.vectorize == "auto":
            has_conv = any(isinstance(mod, nn.modules.conv._ConvNd) for mod in model.modules())
            vectorize = not has_buffers and (device.type != "cpu" or not has_conv)
        else:
            vectorize = self.vectorize
        if has_buffers and vectorize:
            raise ValueError("the model has buffers (e.g. BatchNorm running stats); use vectorize=False")
        return _LocalSGDSession(self, model, layout, runs, x_train, y_train, vectorize)


class _LocalSGDSession(TrainingSession):
    def __init__(self, spec: LocalSGD, model, layout, runs, x, y, vectorize: bool):
        self.spec, self.model, self.layout, self.runs, self.x, self.y = spec, model, layout, runs, x, y
        self.fn = _train_vectorised if vectorize else _train_sequential
        # per run: its buffers (BatchNorm running statistics), None for models without any
        has_buffers = any(True for _ in model.buffers())
        self.buffers = [{k: b.detach().clone() for k, b in model.named_buffers()} for _ in runs] if has_buffers else None
        if has_buffers and any(getattr(r, "privatizer", None) is not None for r in runs):
            warnings.warn("the model has buffers (BatchNorm running statistics): the server averages them in clear "
                          "every round, outside the privatizer, so no ε covers them (use GroupNorm for a private run)",
                          stacklevel=3)

    def load_state(self, model: nn.Module, run: int) -> nn.Module:
        """Load run ``run``'s buffers into ``model`` (for evaluation); models without buffers are left as they are."""
        if self.buffers is not None:
            with torch.no_grad():
                for k, b in model.named_buffers():
                    b.copy_(self.buffers[run][k])
        return model

    def train(self, *, round: int, global_vectors: torch.Tensor, client_ids: Sequence[torch.Tensor]
              ) -> list[torch.Tensor]:
        out = []
        for a, (run, glob, ids) in enumerate(zip(self.runs, global_vectors, client_ids)):
            ids = ids.tolist()
            clients_buffers: list[dict[str, torch.Tensor]] = []
            kw = {} if self.buffers is None else dict(buffers=self.buffers[a], buffers_out=clients_buffers)
            schedules = [batch_schedule(len(run.partition[i]), epochs=self.spec.local_epochs,
                                        batch_size=self.spec.batch_size,
                                        generator=client_generator(run.seed, round, i, "batches")) for i in ids]
            index = [run.partition[i] for i in ids]
            params = self.layout.unflatten(glob)
            chunk = self.spec.client_chunk or len(ids)
            named = self.fn is _train_sequential  # the sequential path names a client whose batch fails
            out.append(torch.cat([self.fn(self.model, params, self.x, self.y, schedules[j:j + chunk],
                                          index[j:j + chunk], self.spec.optimizer, self.layout, **kw,
                                          **({"client_ids": ids[j:j + chunk]} if named else {}))
                                  for j in range(0, len(ids), chunk)]))
            if clients_buffers:
                self.buffers[a] = average_buffers(clients_buffers)
        return out


# ------------------------------------------------------------------------ scikit-learn's per-sample SGD
def optimal_eta0(alpha: float) -> float:
    """Initial rate of scikit-learn's "optimal" schedule for the log loss: typw / max(1, |g|) = alpha^(-1/4).

    ``sklearn/linear_model/_sgd_fast.pyx.tp`` (``_plain_sgd``, after L. Bottou's sgd): typw =
    sqrt(1 / sqrt(alpha)); eta0 = typw / max(1, dloss(y=1, p=-typw)); for the (half) binomial loss
    dloss = sigmoid(p) - y lies in (-1, 0), so eta0 = typw.
    """
    a = real(alpha, "alpha", positive=True)
    typw = math.sqrt(1.0 / math.sqrt(a))
    dloss = 1.0 / (1.0 + math.exp(typw)) - 1.0  # sigmoid(-typw) - 1
    return typw / max(1.0, dloss)


def optimal_learning_rate(t: Any, *, alpha: float) -> Any:
    """η_t = 1 / (alpha (t0 + t - 1)), t0 = 1 / (alpha eta0): scikit-learn's ``learning_rate="optimal"``.

    ``t`` counts the samples seen (1 for the first); η_1 = :func:`optimal_eta0` (alpha). Accepts a
    float or a tensor of counts.
    """
    a = real(alpha, "alpha", positive=True)
    t0 = 1.0 / (a * optimal_eta0(a))
    return 1.0 / (a * (t0 + t - 1.0))


def _local_order(part: torch.Tensor, *, q: float, passes: int, g: torch.Generator) -> torch.Tensor:
    """The sample sequence of one client in one round: keep each sample with probability q, then
    ``passes`` shuffled passes over the kept ones (scikit-learn's shuffle=True)."""
    keep = part[torch.rand(len(part), generator=g, dtype=torch.float64) < q] if q < 1 else part
    return torch.cat([keep[torch.randperm(len(keep), generator=g)] for _ in range(passes)])


@dataclass(frozen=True)
class PerSampleSGD:
    """scikit-learn's ``SGDClassifier(loss="log_loss", learning_rate="optimal", alpha=alpha)`` ``partial_fit``,
    one-vs-rest, in torch (Wu, Xu, Zhu, Appl. Sci. 2023, Algorithm 1, local update).

    Per round, client i keeps each of its samples with probability ``q`` (1 = all) and makes ``passes``
    shuffled passes over them; per sample: η_t from :func:`optimal_learning_rate` with t counting the
    client's samples since the start (``partial_fit`` semantics: the persistent client state),
    w <- max(0, 1 - η α) w - η (σ(p) - y) x, b <- b - η (σ(p) - y), for each class against the rest.
    The model is linear: the flattened vector is (W (K, D) row by row, then b (K)), the layout of
    ``ldptut.models.LogisticRegression``. Every client trains every round. Computes in ``dtype``.
    """

    passes: int = 1
    alpha: float = 1e-4
    q: float = 1.0
    dtype: torch.dtype = torch.float64

    def __post_init__(self) -> None:
        pos_int(self.passes, "passes")
        real(self.alpha, "alpha", positive=True)
        fraction(self.q, "q")

    def start(self, *, model: nn.Module, layout: Any, runs: Sequence[Any], x_train: torch.Tensor,
              y_train: torch.Tensor) -> "_PerSampleSession":
        return _PerSampleSession(self, layout, runs, x_train, y_train)


class _PerSampleSession(TrainingSession):
    def __init__(self, spec: PerSampleSGD, layout, runs, x, y):
        self.spec, self.runs = spec, runs
        device = x.device
        self.x = x.reshape(len(x), -1).to(dtype=spec.dtype)
        self.k = layout.shapes[0][0]
        if layout.numel != self.k * (self.x.shape[1] + 1):
            raise ValueError(f"PerSampleSGD trains a linear model of d = K (D + 1) = {self.k * (self.x.shape[1] + 1)} "
                             f"weights; the model has d = {layout.numel} (use models.LogisticRegression)")
        self.y = F.one_hot(y.long(), self.k).to(spec.dtype)  # one-vs-rest targets in {0, 1}
        self.n_clients = len(runs[0].partition)
        self.t0 = 1.0 / (spec.alpha * optimal_eta0(spec.alpha))
        self.t_seen = torch.ones(len(runs), self.n_clients, dtype=spec.dtype, device=device)  # sklearn's t_ starts at 1

    def train(self, *, round: int, global_vectors: torch.Tensor, client_ids: Sequence[torch.Tensor]
              ) -> list[torch.Tensor]:
        spec, x, y, k = self.spec, self.x, self.y, self.k
        n_runs, dim, n_clients = len(self.runs), x.shape[1], self.n_clients
        for ids in client_ids:
            if len(ids) != n_clients:
                raise ValueError("PerSampleSGD trains every client every round (client_fraction = 1)")
        orders = [[_local_order(p.to("cpu"), q=spec.q, passes=spec.passes,
                                g=client_generator(run.seed, round, i, "sample"))
                   for i, p in enumerate(run.partition)] for run in self.runs]
        length = max(len(o) for per_run in orders for o in per_run)
        idx = torch.full((n_runs, n_clients, max(length, 1)), -1, dtype=torch.long)
        for a, per_run in enumerate(orders):
            for i, o in enumerate(per_run):
                idx[a, i, :len(o)] = o
        idx = idx.to(x.device)
        glob = global_vectors.to(spec.dtype)
        w = glob[:, :k * dim].reshape(n_runs, 1, k, dim).expand(n_runs, n_clients, k, dim).clone()
        b = glob[:, k * dim:].reshape(n_runs, 1, k).expand(n_runs, n_clients, k).clone()
        alpha = spec.alpha
        for s in range(length):
            col = idx[:, :, s]
            active = (col >= 0).to(spec.dtype)  # (runs, clients)
            safe = col.clamp(min=0)
            xs, ys = x[safe], y[safe]  # (runs, clients, D), (runs, clients, K)
            g = torch.sigmoid(torch.einsum("ackd,acd->ack", w, xs) + b) - ys
            eta = 1.0 / (alpha * (self.t0 + self.t_seen - 1.0)) * active  # 0 where the client has no sample left
            shrink = torch.clamp(1.0 - eta * alpha, min=0.0)
            eg = eta.unsqueeze(-1) * g
            w.mul_(shrink[..., None, None])
            w.view(-1, k, dim).baddbmm_(eg.reshape(-1, k, 1), xs.reshape(-1, 1, dim), alpha=-1.0)  # w -= eg ⊗ x
            b.sub_(eg)
            self.t_seen += active
        local = torch.cat([w.reshape(n_runs, n_clients, -1), b], dim=-1)  # (runs, clients, d)
        return list(local.to(global_vectors.dtype))

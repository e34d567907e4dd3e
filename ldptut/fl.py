"""A federated-averaging simulator with pluggable client-side privatizers and server aggregation.

One round (McMahan et al. 2017, FedAvg; LDP-FL, Sun et al. 2021, Algorithm 1):

1. the server samples a fraction of the clients;
2. each sampled client starts from the global model and trains locally (``local_epochs`` passes of
   mini-batch SGD or Adam over its own data);
3. each client flattens its weights (``send="weights"``) or its update ``local - global``
   (``send="updates"``) into one vector of d scalars and applies the privatizer to it (per-layer
   slices are available in :class:`ParamLayout` for layer-wise ranges);
4. the server aggregates the m privatized vectors into the new global model and evaluates it.

Local training follows FedJAX's init / step / final split and is vectorised across clients with
``torch.func`` (``functional_call`` + ``vmap`` over stacked parameters). A sequential path with
``torch.optim`` is kept for checking: both consume the same batch schedule and the same generators,
so they agree up to float rounding.

Randomness: every draw comes from :func:`ldptut.rng.generator` keyed by (seed, round, client,
purpose), so a run is identical whatever the execution order or path.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from ._validate import pos_int
from .rng import generator

__all__ = [
    "ParamLayout", "RoundContext", "Privatizer", "Aggregator", "FixedRange", "GlobalModelRange",
    "LocalPerturbation", "RecordPayloads", "mean_aggregator", "weighted_mean_aggregator", "AGGREGATORS", "make_aggregator",
    "batch_schedule", "sample_clients", "evaluate", "run_fedavg", "train_centralised", "FLResult",
]


# ----------------------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class ParamLayout:
    """Where each parameter tensor sits in the flattened vector of d scalars."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    slices: tuple[slice, ...]

    @classmethod
    def from_model(cls, model: nn.Module) -> "ParamLayout":
        names, shapes, slices, start = [], [], [], 0
        for name, p in model.named_parameters():
            names.append(name)
            shapes.append(p.shape)
            slices.append(slice(start, start + p.numel()))
            start += p.numel()
        return cls(tuple(names), tuple(shapes), tuple(slices))

    @property
    def numel(self) -> int:
        """d, the number of scalars a client sends."""
        return self.slices[-1].stop if self.slices else 0

    def layer_slices(self) -> dict[str, slice]:
        return dict(zip(self.names, self.slices))

    def layer_index(self, device: str | torch.device = "cpu") -> torch.Tensor:
        """Tensor of length d giving, for each scalar, the index of the parameter tensor it belongs to."""
        sizes = torch.tensor([s.stop - s.start for s in self.slices], device=device)
        return torch.repeat_interleave(torch.arange(len(self.slices), device=device), sizes)

    def flatten(self, params: Mapping[str, torch.Tensor], batch_dims: int = 0) -> torch.Tensor:
        """Concatenate ``params`` into (*batch, d); ``batch_dims`` leading dims are kept (stacked clients)."""
        parts = [params[n].reshape(*params[n].shape[:batch_dims], -1) for n in self.names]
        return torch.cat(parts, dim=batch_dims)

    def unflatten(self, vec: torch.Tensor) -> dict[str, torch.Tensor]:
        """Inverse of :meth:`flatten`; ``vec`` has shape (*batch, d)."""
        batch = vec.shape[:-1]
        return {n: vec[..., s].reshape(*batch, *shape) for n, s, shape in zip(self.names, self.slices, self.shapes)}


# ------------------------------------------------------------------------------ privatize/aggregate
@dataclass
class RoundContext:
    """What a privatizer or aggregator may look at in one round (all public to the server)."""

    round: int
    client_ids: torch.Tensor
    layout: ParamLayout
    global_vector: torch.Tensor
    generators: list[torch.Generator]
    send: str
    num_samples: torch.Tensor  # samples per sampled client, float
    server_generator: torch.Generator | None = None


class Privatizer(Protocol):
    """Client-side randomizer applied to each sampled client's flattened vector (row i uses generators[i])."""

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor: ...


class Aggregator(Protocol):
    """Server rule mapping the (m, d) privatized payloads to one d-vector."""

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor: ...


@dataclass(frozen=True)
class FixedRange:
    """A public range [center - radius, center + radius] for every coordinate (e.g. LDP-FL's (0, 0.075))."""

    center: float = 0.0
    radius: float = 1.0

    def __post_init__(self) -> None:
        if not math.isfinite(self.center):
            raise ValueError(f"center must be finite, got {self.center}")
        if not (math.isfinite(self.radius) and self.radius > 0):
            raise ValueError(f"radius must be finite and > 0, got {self.radius}")

    def __call__(self, context: RoundContext) -> tuple[float, float]:
        return self.center, self.radius


@dataclass(frozen=True)
class GlobalModelRange:
    """Per-layer range computed by the server from the current global model only (public data).

    For each parameter tensor l: c_l = (max + min) / 2, r_l = margin * (max - min) / 2 (+ ``min_radius``).
    LDP-FL (Sun et al. 2021, Section 3.2) gives no formula for its adaptive range; this rule is the
    one used by CorBin-FL's baseline code and is our choice. Returns per-coordinate tensors.
    """

    margin: float = 1.0
    min_radius: float = 1e-6

    def __post_init__(self) -> None:
        if not (math.isfinite(self.margin) and self.margin > 0):
            raise ValueError(f"margin must be finite and > 0, got {self.margin}")
        if not (math.isfinite(self.min_radius) and self.min_radius > 0):
            raise ValueError(f"min_radius must be finite and > 0, got {self.min_radius}")

    def __call__(self, context: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        g = context.global_vector
        if context.send == "updates":
            raise ValueError("GlobalModelRange bounds weights; use send='weights' (LDP-FL perturbs weights)")
        centers, radii = [], []
        for s in context.layout.slices:
            lo, hi = g[s].min(), g[s].max()
            centers.append((hi + lo) / 2)
            radii.append(self.margin * (hi - lo) / 2 + self.min_radius)
        idx = context.layout.layer_index(g.device)
        return torch.stack(centers)[idx], torch.stack(radii)[idx]


class LocalPerturbation:
    """Clip each client's vector to a range and perturb every coordinate with an LDP mechanism.

    ``mechanism`` is a class from :mod:`ldptut.mechanisms` taking ``epsilon``, ``center``, ``radius``
    (e.g. ``TwoPoint``, ``Piecewise``, ``Laplace``). The guarantee is ``epsilon`` per coordinate per
    round; a vector of d coordinates composes to d * epsilon per round (see :mod:`ldptut.privacy`).
    """

    def __init__(self, *, mechanism: type, epsilon: float, range: Callable[[RoundContext], tuple] = FixedRange(),
                 **mechanism_kwargs):
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.range = range
        self.mechanism_kwargs = mechanism_kwargs
        # Validate epsilon and kwargs now, with a unit range, so a bad parameter fails before training.
        mechanism(epsilon=epsilon, center=0.0, radius=1.0, **mechanism_kwargs)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        center, radius = self.range(context)
        mech = self.mechanism(epsilon=self.epsilon, center=center, radius=radius, **self.mechanism_kwargs)
        out = torch.empty_like(payloads)
        for i, g in enumerate(context.generators):  # one vectorised call per client (its own generator)
            out[i] = mech.privatize(payloads[i], generator=g)
        return out

    def __repr__(self) -> str:
        return f"LocalPerturbation({self.mechanism.__name__}, epsilon={self.epsilon}, range={self.range})"


class RecordPayloads:
    """Wrap a privatizer (or none) and keep the last round's payloads before and after it, for inspection.

    Used by chapters to look at what clients send (e.g. a client's own weights in the range-leak check).
    """

    def __init__(self, privatizer: Privatizer | None = None):
        self.privatizer = privatizer
        self.raw: torch.Tensor | None = None
        self.sent: torch.Tensor | None = None
        self.context: RoundContext | None = None

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        self.raw, self.context = payloads.detach().clone(), context
        out = payloads if self.privatizer is None else self.privatizer(payloads, context=context)
        self.sent = out.detach().clone()
        return out

    def __repr__(self) -> str:
        return f"RecordPayloads({self.privatizer!r})"


def mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
    """Arithmetic mean of the clients' vectors (LDP-FL Algorithm 1, line "average")."""
    return payloads.mean(dim=0)


def weighted_mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
    """FedAvg's mean weighted by the clients' sample counts n_i / sum n_j (McMahan et al. 2017)."""
    w = context.num_samples.to(payloads.dtype)
    return (w / w.sum()) @ payloads


AGGREGATORS: dict[str, Aggregator] = {"mean": mean_aggregator, "weighted_mean": weighted_mean_aggregator}


def make_aggregator(agg: str | Aggregator) -> Aggregator:
    if callable(agg):
        return agg
    if agg not in AGGREGATORS:
        raise ValueError(f"unknown aggregator {agg!r}; known: {sorted(AGGREGATORS)} or pass a callable")
    return AGGREGATORS[agg]


# ------------------------------------------------------------------------------------ scheduling
def sample_clients(n_clients: int, fraction: float, *, seed: int, round: int,
                   device: str | torch.device = "cpu") -> torch.Tensor:
    """Sorted ids of max(1, round(fraction * n)) clients drawn without replacement for ``round``."""
    m = max(1, math.floor(fraction * n_clients + 0.5))  # round half up
    if m >= n_clients:
        return torch.arange(n_clients, device=device)
    g = generator(seed, "round", round, "client-sampling")
    return torch.randperm(n_clients, generator=g)[:m].sort().values.to(device)


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
        if self.name not in ("sgd", "adam"):
            raise ValueError(f"optimizer must be 'sgd' or 'adam', got {self.name!r}")
        if not (math.isfinite(self.lr) and self.lr > 0):
            raise ValueError(f"lr must be finite and > 0, got {self.lr}")
        if not (0 <= self.momentum < 1):
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
        if not (self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")

    def torch_optimizer(self, params) -> torch.optim.Optimizer:
        if self.name == "sgd":
            return torch.optim.SGD(params, lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay)
        return torch.optim.Adam(params, lr=self.lr, betas=self.betas, eps=self.eps, weight_decay=self.weight_decay)


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


def _client_final(state: dict, layout: ParamLayout) -> torch.Tensor:
    """FedJAX-style final: the (m, d) matrix of trained weights."""
    return layout.flatten(state["params"], batch_dims=1)


def _train_vectorised(model: nn.Module, global_params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                      schedules: list[torch.Tensor], client_index: list[torch.Tensor], opt: OptimizerSpec,
                      layout: ParamLayout) -> torch.Tensor:
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


def _train_sequential(model: nn.Module, global_params: dict[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor,
                      schedules: list[torch.Tensor], client_index: list[torch.Tensor], opt: OptimizerSpec,
                      layout: ParamLayout, channels_last: bool = True) -> torch.Tensor:
    rows = []
    # Image batches in channels-last layout: CNN2's local step is about 1.5x faster on CPU this way
    # (benchmarks/bench_fl.py, row d); the weights are the same numbers in another memory order.
    fmt = torch.channels_last if channels_last and x.dim() == 4 else torch.contiguous_format
    for sched, idx in zip(schedules, client_index):
        local_model = copy.deepcopy(model).to(memory_format=fmt)
        with torch.no_grad():
            for k, p in local_model.named_parameters():
                p.copy_(global_params[k])
        optim = opt.torch_optimizer(local_model.parameters())
        idx = idx.to(x.device)
        for batch in sched:
            b = idx[batch[batch >= 0].to(x.device)]
            optim.zero_grad(set_to_none=True)
            F.cross_entropy(local_model(x[b].contiguous(memory_format=fmt)), y[b]).backward()
            optim.step()
        rows.append(layout.flatten(dict(local_model.named_parameters())).detach())
    return torch.stack(rows)


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
@dataclass
class FLResult:
    """History (one row per round: accuracy in [0, 1], loss, seconds) and the final global model."""

    history: pd.DataFrame
    model: nn.Module
    layout: ParamLayout
    config: dict = field(default_factory=dict)

    @property
    def final_accuracy(self) -> float:
        return float(self.history["accuracy"].iloc[-1])


def run_fedavg(model: nn.Module, *, x_train: torch.Tensor, y_train: torch.Tensor, partition: Sequence[torch.Tensor],
               x_test: torch.Tensor, y_test: torch.Tensor, rounds: int, client_fraction: float = 1.0,
               local_epochs: int = 1, batch_size: int = 32, optimizer: str = "sgd", lr: float = 0.01,
               momentum: float = 0.0, weight_decay: float = 0.0, send: str = "weights",
               privatizer: Privatizer | None = None, aggregator: str | Aggregator = "weighted_mean",
               seed: int = 0, device: str | torch.device = "cpu", vectorize: bool | str = "auto",
               client_chunk: int | None = None, progress: bool = True, desc: str = "FL rounds") -> FLResult:
    """Simulate ``rounds`` rounds of FedAvg with optional local perturbation; see the module docstring.

    ``model`` gives the architecture and the initial global weights (it is copied, not modified).
    ``partition`` is a list of index tensors into ``x_train`` (one per client). ``client_chunk``
    bounds how many clients are trained at once on the vectorised path (memory).
    ``vectorize="auto"`` uses the vmap path for models without convolutions and the sequential path
    otherwise: on CPU, vmap turns a convolution with per-client weights into a grouped convolution that
    we measured several times slower than looping over clients (benchmarks/bench_fl.py).
    """
    pos_int(rounds, "rounds")
    pos_int(local_epochs, "local_epochs")
    pos_int(batch_size, "batch_size")
    if not (0 < client_fraction <= 1) or math.isnan(client_fraction):
        raise ValueError(f"client_fraction must be in (0, 1], got {client_fraction}")
    if send not in ("weights", "updates"):
        raise ValueError(f"send must be 'weights' or 'updates', got {send!r}")
    if len(partition) < 1:
        raise ValueError("partition must hold at least one client")
    if any(len(p) == 0 for p in partition):
        raise ValueError("partition has a client with no samples; every client needs at least one")
    opt = OptimizerSpec(name=optimizer, lr=lr, momentum=momentum, weight_decay=weight_decay)
    agg = make_aggregator(aggregator)
    device = torch.device(device)
    if vectorize == "auto":
        has_conv = any(isinstance(mod, nn.modules.conv._ConvNd) for mod in model.modules())
        has_buffers = any(b.numel() for b in model.buffers())
        vectorize = not has_buffers and (device.type != "cpu" or not has_conv)
    elif not isinstance(vectorize, bool):
        raise ValueError(f"vectorize must be True, False or 'auto', got {vectorize!r}")
    if any(b.numel() for b in model.buffers()) and vectorize:
        raise ValueError("the model has buffers (e.g. BatchNorm running stats); use vectorize=False")

    model = copy.deepcopy(model).to(device)
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_test, y_test = x_test.to(device), y_test.to(device)
    layout = ParamLayout.from_model(model)
    global_vec = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    n_clients = len(partition)
    sizes = torch.tensor([len(p) for p in partition], dtype=torch.float32)
    train = _train_vectorised if vectorize else _train_sequential
    chunk = client_chunk or n_clients

    rows = []
    from tqdm import tqdm  # plain text bar: works in terminals and notebooks without ipywidgets

    bar = tqdm(range(1, rounds + 1), desc=desc, disable=not progress, leave=False, mininterval=2.0)
    for r in bar:
        t0 = time.perf_counter()
        ids = sample_clients(n_clients, client_fraction, seed=seed, round=r)
        global_params = layout.unflatten(global_vec)
        schedules = [batch_schedule(len(partition[i]), epochs=local_epochs, batch_size=batch_size,
                                    generator=generator(seed, "round", r, "client", int(i), "batches"))
                     for i in ids.tolist()]
        index = [partition[i] for i in ids.tolist()]
        trained = torch.cat([train(model, global_params, x_train, y_train, schedules[j:j + chunk], index[j:j + chunk],
                                   opt, layout) for j in range(0, len(ids), chunk)])
        payloads = trained - global_vec if send == "updates" else trained
        ctx = RoundContext(
            round=r, client_ids=ids, layout=layout, global_vector=global_vec,
            generators=[generator(seed, "round", r, "client", int(i), "privatize", device=device)
                        for i in ids.tolist()],
            send=send, num_samples=sizes[ids].to(device),
            server_generator=generator(seed, "round", r, "server", device=device))
        if privatizer is not None:
            payloads = privatizer(payloads, context=ctx)
        aggregate = agg(payloads, context=ctx)
        global_vec = (global_vec + aggregate if send == "updates" else aggregate).detach()
        if not torch.isfinite(global_vec).all():
            raise FloatingPointError(f"round {r}: the global model has non-finite weights (lr={lr} too large?)")
        new_params = layout.unflatten(global_vec)
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(new_params[k])
        train_s = time.perf_counter() - t0
        acc, loss = evaluate(model, x_test, y_test)
        rows.append({"round": r, "accuracy": acc, "loss": loss, "clients": len(ids),
                     "train_seconds": train_s, "seconds": time.perf_counter() - t0})
        bar.set_postfix(acc=f"{acc:.3f}", refresh=False)
    config = dict(rounds=rounds, client_fraction=client_fraction, local_epochs=local_epochs, batch_size=batch_size,
                  optimizer=optimizer, lr=lr, send=send, privatizer=repr(privatizer), seed=seed,
                  n_clients=n_clients, d=layout.numel)
    return FLResult(history=pd.DataFrame(rows), model=model, layout=layout, config=config)


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

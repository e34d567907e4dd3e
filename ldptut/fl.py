"""The round engine: federated averaging with pluggable local training, privatizers and aggregation.

One round (McMahan et al. 2017, FedAvg; LDP-FL, Sun et al. 2021, Algorithm 1; Wu et al. 2023,
Algorithms 1-2), in :func:`simulate`, the only round loop of the package:

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

:func:`run_fedavg` is the convenience wrapper for one run with keyword arguments.
"""
from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Optional, Protocol, Sequence

import pandas as pd
import torch
import torch.nn.functional as F
from torch import nn

from ._validate import all_finite, finite_rows, fraction, one_of, pos_int, real
from .accounting import Guarantee
from .rng import client_generator, generator, pair_generator, round_generator
from .training import LocalSGD, OptimizerSpec, Trainer, batch_schedule

__all__ = [
    "ParamLayout", "RoundContext", "Privatizer", "Aggregator", "FixedRange", "GlobalModelRange", "InitialModelRange", "RANGE_RULES",
    "LocalPerturbation", "ClipToRange", "PairedPerturbation", "RecordPayloads", "mean_aggregator", "weighted_mean_aggregator", "AGGREGATORS",
    "make_aggregator", "sample_clients", "evaluate", "load_vector", "Run", "FLConfig", "FLResult", "simulate",
    "run_fedavg", "train_centralised",
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
    """What a privatizer or aggregator may look at in one round of one run (all public to the server),
    and the random streams it may draw from."""

    round: int
    client_ids: torch.Tensor
    layout: ParamLayout
    global_vector: torch.Tensor
    generators: list[torch.Generator]  # row i: client client_ids[i]'s "privatize" stream
    send: str
    num_samples: torch.Tensor  # samples per sampled client, float
    server_generator: torch.Generator | None = None
    seed: int = 0
    initial_vector: torch.Tensor | None = None  # the run's global model before round 1 (public: no client data)

    @property
    def device(self) -> torch.device:
        return self.global_vector.device

    def client_generator(self, client: int, purpose: str) -> torch.Generator:
        """Another stream of one client in this round (``purpose`` names it)."""
        return client_generator(self.seed, self.round, client, purpose, device=self.device)

    def pair_generator(self, a: int, b: int, purpose: str = "shared") -> torch.Generator:
        """The common randomness of clients ``a`` and ``b`` in this round (same stream for (a, b) and (b, a))."""
        return pair_generator(self.seed, self.round, a, b, purpose, device=self.device)


class Privatizer(Protocol):
    """Client-side randomizer applied to each sampled client's flattened vector (row i uses generators[i]).

    It returns a tensor of the payloads' shape and dtype. It may also define ``guarantee(context)``: one
    :class:`~ldptut.accounting.Guarantee` per row, per coordinate (None for a client it does not protect),
    which the engine composes and records.
    """

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor: ...


class Aggregator(Protocol):
    """Server rule mapping the (m, d) privatized payloads to one d-vector and a dict of metrics
    (``clients_used``: how many clients it averaged, when not all)."""

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]: ...


@dataclass(frozen=True)
class FixedRange:
    """A public range [center - radius, center + radius] for every coordinate (e.g. LDP-FL's (0, 0.075))."""

    center: float = 0.0
    radius: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "center", real(self.center, "center"))
        object.__setattr__(self, "radius", real(self.radius, "radius", positive=True))

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
        object.__setattr__(self, "margin", real(self.margin, "margin", positive=True))
        object.__setattr__(self, "min_radius", real(self.min_radius, "min_radius", positive=True))

    def __call__(self, context: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        if context.send == "updates":
            raise ValueError(f"{type(self).__name__} bounds weights; use send='weights' (LDP-FL perturbs weights)")
        return _layer_ranges(self._model(context), context.layout, margin=self.margin, min_radius=self.min_radius)

    def _model(self, context: RoundContext) -> torch.Tensor:
        return context.global_vector


def _layer_ranges(g: torch.Tensor, layout: ParamLayout, *, margin: float,
                  min_radius: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-coordinate (centre, radius) of the layer-wise range of ``g``: c_l = (max + min) / 2,
    r_l = margin (max - min) / 2 + min_radius over each parameter tensor l."""
    centers, radii = [], []
    for s in layout.slices:
        lo, hi = g[s].min(), g[s].max()
        centers.append((hi + lo) / 2)
        radii.append(margin * (hi - lo) / 2 + min_radius)
    idx = layout.layer_index(g.device)
    return torch.stack(centers)[idx], torch.stack(radii)[idx]


@dataclass(frozen=True)
class InitialModelRange(GlobalModelRange):
    """:class:`GlobalModelRange`'s per-layer rule applied to the run's **initial** global model (round 0, public),
    so the range is fixed for the whole run: the ablation that removes the adaptive range's feedback (a range
    recomputed from a noisy model, whose noise is scaled by that range). Weights that outgrow it are clipped."""

    def _model(self, context: RoundContext) -> torch.Tensor:
        if context.initial_vector is None:
            raise ValueError("InitialModelRange needs the round context's initial_vector (set by fl.simulate)")
        return context.initial_vector


#: The range rules by name ("fixed": a public constant range, "adaptive": from the global model).
RANGE_RULES = {"fixed": FixedRange, "adaptive": GlobalModelRange}


class LocalPerturbation:
    """Clip each client's vector to a range and perturb every coordinate with an LDP mechanism.

    ``mechanism`` is a class from :mod:`ldptut.mechanisms` taking ``epsilon``, ``center``, ``radius``
    (e.g. ``TwoPoint``, ``Piecewise``, ``Laplace``). :meth:`guarantee` is the mechanism's, ``epsilon``
    per coordinate per round; the engine composes it over the d coordinates and the rounds.
    """

    def __init__(self, *, mechanism: type, epsilon: float, range: Callable[[RoundContext], tuple] = FixedRange(),
                 **mechanism_kwargs):
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.range = range
        self.mechanism_kwargs = mechanism_kwargs
        # Validate epsilon and kwargs now, with a unit range, so a bad parameter fails before training.
        self._unit = mechanism(epsilon=epsilon, center=0.0, radius=1.0, **mechanism_kwargs)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        center, radius = self.range(context)
        mech = self.mechanism(epsilon=self.epsilon, center=center, radius=radius, **self.mechanism_kwargs)
        if payloads.is_cuda and payloads.ndim == 2:
            from . import kernels  # imports Triton: only on CUDA

            if kernels.usable(mech, payloads):
                # the whole (clients x d) matrix in one fused kernel, row i keyed by a seed from client i's
                # generator: the same reports as the loop below gives on CUDA (each call draws its seed so)
                mech._check_range_shape(payloads[0])
                seeds = kernels.seeds_from(context.generators, payloads.device)
                return kernels.privatize_rows(mech, payloads, seeds)
        out = torch.empty_like(payloads)
        for i, g in enumerate(context.generators):  # one vectorised call per client (its own generator)
            out[i] = mech.privatize(payloads[i], generator=g)
        return out

    def guarantee(self, context: RoundContext) -> list[Guarantee]:
        """The mechanism's guarantee (per coordinate per round) for every sampled client."""
        return [self._unit.guarantee] * len(context.client_ids)

    def __repr__(self) -> str:
        return f"LocalPerturbation({self.mechanism.__name__}, epsilon={self.epsilon}, range={self.range})"


class ClipToRange:
    """Clip each client's vector to a range and send it without noise: **not private** (no guarantee).

    The ablation that separates clipping from noise (e.g. LDP-FL's fixed range with the two-point mechanism
    removed): the server receives exactly what :class:`LocalPerturbation` clips, unperturbed.
    """

    def __init__(self, *, range: Callable[[RoundContext], tuple] = FixedRange()):
        self.range = range

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        center, radius = self.range(context)
        lo, hi = center - radius, center + radius
        if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
            lo, hi = (torch.as_tensor(v, dtype=payloads.dtype, device=payloads.device) for v in (lo, hi))
        return torch.clamp(payloads, lo, hi)

    def guarantee(self, context: RoundContext) -> list[None]:
        """No privacy: None for every client (the engine records the run as unprotected)."""
        return [None] * len(context.client_ids)

    def __repr__(self) -> str:
        return f"ClipToRange(range={self.range})"


class PairedPerturbation:
    """Clip to a range and perturb with LDP-FL's two-point mechanism, the sampled clients paired at random
    each round and each pair negatively correlated (CoQ-FL / CorBin-FL, Algorithm 1).

    The server pairs the round's clients by a random permutation (its "pairing" stream, on the CPU so
    the pairs do not depend on the device); in each pair the first is the leader, the second the
    follower of :class:`~ldptut.mechanisms.CorrelatedTwoPoint`. An odd client out uses the plain
    two-point mechanism with its own "privatize" stream. Two uniforms per pair and weight, as for two
    independent clients: the leaders' points (the shared codebook cell and the leader's coin in it, one
    uniform: the same law) in one call from the round's "pair-shared" stream (row k belongs to pair k
    alone; in a deployment the two clients derive the cell from a seed they share,
    :meth:`RoundContext.pair_generator`), the followers' own coins in one call from "pair-local": no
    Python loop over pairs or weights.

    :meth:`guarantee`: ε per coordinate per round for each client's **own** report (its marginal is
    exactly the two-point mechanism). The server also sees the partner's report; that joint view is
    not ε-LDP for either client (the CorBin chapter computes its privacy loss).
    """

    def __init__(self, *, epsilon: float, range: Callable[[RoundContext], tuple] = FixedRange(),
                 num_rand: int = 5, p_x: float = 0.5):
        from .mechanisms import CorrelatedTwoPoint

        self.epsilon, self.range, self.num_rand, self.p_x = epsilon, range, num_rand, p_x
        self._unit = CorrelatedTwoPoint(epsilon=epsilon, num_rand=num_rand, p_x=p_x)  # validates now

    def mechanism(self, context: RoundContext):
        from .mechanisms import CorrelatedTwoPoint

        center, radius = self.range(context)
        return CorrelatedTwoPoint(epsilon=self.epsilon, center=center, radius=radius, num_rand=self.num_rand,
                                  p_x=self.p_x)

    @staticmethod
    def pairs(context: RoundContext) -> tuple[torch.Tensor, torch.Tensor, Optional[int]]:
        """(leader rows, follower rows, the odd row or None): rows of this round's payloads, paired at random."""
        m = len(context.client_ids)
        perm = torch.randperm(m, generator=round_generator(context.seed, context.round, "pairing"))
        k = m // 2
        return perm[0:2 * k:2], perm[1:2 * k:2], (int(perm[-1]) if m % 2 else None)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        mech = self.mechanism(context)
        leaders, followers, odd = self.pairs(context)
        leaders, followers = leaders.to(payloads.device), followers.to(payloads.device)
        out = torch.empty_like(payloads)
        if len(leaders):
            dev = context.device
            shared = round_generator(context.seed, context.round, "pair-shared", device=dev)
            local = round_generator(context.seed, context.round, "pair-local", device=dev)
            out[leaders], out[followers] = mech.privatize_pairs(payloads[leaders], payloads[followers],
                                                                shared=shared, local=local)
        if odd is not None:
            out[odd] = mech.privatize(payloads[odd], generator=context.generators[odd])
        return out

    def guarantee(self, context: RoundContext) -> list[Guarantee]:
        """Each client's own report: ε per coordinate per round (the joint view of a pair is not covered)."""
        g = replace(self._unit.guarantee, note="each client's own report (a pair's joint view is not ε-LDP)")
        return [g] * len(context.client_ids)

    def __repr__(self) -> str:
        return (f"PairedPerturbation(CorrelatedTwoPoint, epsilon={self.epsilon}, range={self.range}, "
                f"num_rand={self.num_rand}, p_x={self.p_x})")


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

    def guarantee(self, context: RoundContext) -> Optional[list]:
        inner = getattr(self.privatizer, "guarantee", None)
        return None if inner is None else inner(context)

    def __repr__(self) -> str:
        return f"RecordPayloads({self.privatizer!r})"


def mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
    """Arithmetic mean of the clients' vectors (LDP-FL Algorithm 1, line "average")."""
    return payloads.mean(dim=0), {}


def weighted_mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
    """FedAvg's mean weighted by the clients' sample counts n_i / sum n_j (McMahan et al. 2017)."""
    w = context.num_samples.to(payloads.dtype)
    return (w / w.sum()) @ payloads, {}


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


@torch.no_grad()
def load_vector(model: nn.Module, layout: ParamLayout, vector: torch.Tensor) -> nn.Module:
    """Copy the flattened weights ``vector`` into ``model``'s parameters (in place); returns the model."""
    for (k, p), v in zip(model.named_parameters(), layout.unflatten(vector).values()):
        p.copy_(v)
    return model


# ------------------------------------------------------------------------------------ simulation
@dataclass
class Run:
    """One run of a batch trained by :func:`simulate`: what differs between runs trained together.

    ``partition``: one index tensor into ``x_train`` per client. ``initial``: the starting global vector
    (default: the model's weights). ``info``: labels copied into every history row of the run.
    """

    seed: int
    partition: Sequence[torch.Tensor]
    privatizer: Optional[Privatizer] = None
    aggregator: str | Aggregator = "weighted_mean"
    initial: Optional[torch.Tensor] = None
    info: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class FLConfig:
    """The round loop's settings (shared by every run of a batch).

    ``train_eval``: also record training accuracy each round (papers such as LDP-FL plot it): ``train_accuracy`` /
    ``train_loss``, the new global model on the whole training set (``x_train``), and ``client_train_accuracy``, the
    round's clients' local models (after local training, before any perturbation) each on its own data, averaged
    with weights the clients' sample counts; after every ``train_eval_every``-th round and the last (NaN in the
    other rounds: on the whole training set this evaluation can cost as much as a round of local training).

    ``divergence_factor``: a run diverges when its test loss has risen three rounds in a row to more than
    this factor times its smallest value so far (``None``: never), when it exceeds :data:`HUGE_LOSS` times the loss
    of a uniform prediction, or when the loss or the weights stop being finite. ``on_divergence``: "raise" (``FloatingPointError`` naming the round) or "stop": the run's
    history ends with the diverging round, marked ``diverged`` (accuracy NaN when its weights were no
    longer finite), and the other runs of the batch go on. A diverged run is a result (e.g. a noise
    feedback the method cannot absorb), not only an error.
    """

    rounds: int
    trainer: Trainer = LocalSGD()
    client_fraction: float = 1.0
    send: str = "weights"
    device: str | torch.device = "cpu"
    eval_batch_size: int = 4096
    divergence_factor: Optional[float] = 1e3
    on_divergence: str = "raise"
    progress: bool = True
    desc: str = "FL rounds"
    train_eval: bool = False
    train_eval_every: int = 1

    def __post_init__(self) -> None:
        pos_int(self.rounds, "rounds")
        if not isinstance(self.train_eval, bool):
            raise ValueError(f"train_eval must be True or False, got {self.train_eval!r}")
        pos_int(self.train_eval_every, "train_eval_every")
        fraction(self.client_fraction, "client_fraction")
        one_of(self.send, "send", ("weights", "updates"))
        pos_int(self.eval_batch_size, "eval_batch_size")
        one_of(self.on_divergence, "on_divergence", ("raise", "stop"))
        if self.divergence_factor is not None and real(self.divergence_factor, "divergence_factor") <= 1:
            raise ValueError(f"divergence_factor must be > 1 or None, got {self.divergence_factor}")

    def train_eval_at(self, round: int) -> bool:
        """Whether training accuracy is recorded after ``round``: every ``train_eval_every`` rounds and the last."""
        return self.train_eval and (round % self.train_eval_every == 0 or round == self.rounds)


@dataclass
class FLResult:
    """History (one row per run and round: accuracy in [0, 1], loss, clients, seconds, ε spent) and the
    final global models (``weights``: (runs, d)). ``model``: the final global model of the first run.
    ``guarantees``: per run, the total guarantee of the client that spent the most (None: no privatizer
    or one that states none)."""

    history: pd.DataFrame
    weights: torch.Tensor
    layout: ParamLayout
    model: nn.Module
    guarantees: list[Optional[Guarantee]] = field(default_factory=list)

    @property
    def final_accuracy(self) -> float:
        return float(self.history["accuracy"].iloc[-1])


def _check_labels(y: torch.Tensor, name: str, k: int) -> None:
    if y.dtype.is_floating_point or y.dtype == torch.bool or y.dtype.is_complex:
        raise ValueError(f"{name} must hold integer class labels, got dtype {y.dtype}")
    if y.dtype != torch.int64:  # cross-entropy and gather() index with int64 only
        raise ValueError(f"{name} must be int64 class indices (torch.long), got {y.dtype}: pass {name}.long()")
    if y.numel() and (int(y.min()) < 0 or int(y.max()) >= k):
        bad = int(y.min()) if int(y.min()) < 0 else int(y.max())
        raise ValueError(f"{name} holds label {bad}, outside 0..{k - 1} (the model outputs {k} classes)")


def _check_inputs(model: nn.Module, runs: Sequence[Run], x_train: torch.Tensor, y_train: torch.Tensor,
                  x_test: torch.Tensor, y_test: torch.Tensor) -> None:
    """Everything that would otherwise fail late (after a round of training) or silently, named."""
    if not runs:
        raise ValueError("runs must hold at least one Run")
    for name, x, y in (("train", x_train, y_train), ("test", x_test, y_test)):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            raise TypeError(f"x_{name} and y_{name} must be tensors")
        if x.shape[0] != y.shape[0]:
            raise ValueError(f"x_{name} has {x.shape[0]} samples but y_{name} has {y.shape[0]} labels")
    if x_test.shape[0] == 0:
        raise ValueError("x_test is empty: the global model is evaluated on the test set after every round")
    dtype = next((p.dtype for p in model.parameters()), None)
    for name, x in (("x_train", x_train), ("x_test", x_test)):
        if not x.dtype.is_floating_point:
            raise ValueError(f"{name} must hold floating-point features, got {x.dtype}")
        if dtype is not None and x.dtype != dtype:
            raise ValueError(f"{name} is {x.dtype} but the model's weights are {dtype}: pass {name}.to({dtype})")
        bad = ~finite_rows(x) if x.numel() else torch.zeros(0, dtype=torch.bool)
        if bool(bad.any()):
            raise ValueError(f"{name} holds NaN or inf (in {int(bad.sum())} sample(s), the first is sample "
                             f"{int(bad.nonzero()[0, 0])}): clean the data before training")
    was_training = model.training
    try:
        with torch.no_grad():  # eval: BatchNorm neither fails on one sample nor updates stats
            for name, x in (("x_test", x_test), ("x_train", x_train)):
                try:
                    k = model.eval()(x[:1]).shape[-1]
                except Exception as e:
                    raise ValueError(f"the model cannot take the samples of {name} ({name}[:1] has shape "
                                     f"{tuple(x[:1].shape)}): {type(e).__name__}: {e}") from e
    finally:
        model.train(was_training)
    _check_labels(y_train, "y_train", k)
    _check_labels(y_test, "y_test", k)
    n = x_train.shape[0]
    n_clients = len(runs[0].partition)
    d = ParamLayout.from_model(model).numel
    for a, run in enumerate(runs):
        where = f"run {a}: " if len(runs) > 1 else ""
        if isinstance(run.seed, bool) or not isinstance(run.seed, int) or run.seed < 0:
            raise ValueError(f"{where}seed must be a non-negative integer, got {run.seed!r}")
        if len(run.partition) < 1:
            raise ValueError(f"{where}partition must hold at least one client")
        if len(run.partition) != n_clients:
            raise ValueError(f"{where}every run of a batch needs the same number of clients ({n_clients}), "
                             f"got {len(run.partition)}")
        for i, p in enumerate(run.partition):
            if not isinstance(p, torch.Tensor) or p.dim() != 1 or p.dtype.is_floating_point or p.dtype == torch.bool:
                raise ValueError(f"{where}partition[{i}] must be a 1-D integer tensor of sample indices")
            if p.numel() == 0:
                raise ValueError(f"{where}partition[{i}] has no samples; every client needs at least one")
            lo, hi = int(p.min()), int(p.max())
            if lo < 0 or hi >= n:
                bad = lo if lo < 0 else hi
                raise ValueError(f"{where}partition[{i}] holds sample index {bad}, outside 0..{n - 1} of x_train "
                                 "(negative indices would wrap around silently)")
        if run.initial is not None and run.initial.shape != (d,):
            raise ValueError(f"{where}initial must be a vector of the model's {d} weights, "
                             f"got shape {tuple(run.initial.shape)}")


def _privatize(privatizer: Privatizer, payloads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
    out = privatizer(payloads, context=ctx)
    if not isinstance(out, torch.Tensor) or out.shape != payloads.shape or out.dtype != payloads.dtype \
            or out.device != payloads.device:
        got = f"shape {tuple(out.shape)}, {out.dtype} on {out.device}" if isinstance(out, torch.Tensor) else repr(out)
        raise ValueError(f"privatizer {privatizer!r} returned {got}; it must return the payloads' shape "
                         f"{tuple(payloads.shape)}, dtype {payloads.dtype} and device {payloads.device}")
    if not all_finite(out):  # its input was finite (checked by the caller)
        raise FloatingPointError(f"round {ctx.round}: privatizer {privatizer!r} returned NaN or inf from finite payloads")
    return out


def _aggregate(aggregator: Aggregator, payloads: torch.Tensor, ctx: RoundContext) -> tuple[torch.Tensor, dict]:
    result = aggregator(payloads, context=ctx)
    if not (isinstance(result, tuple) and len(result) == 2 and isinstance(result[0], torch.Tensor)
            and isinstance(result[1], dict)):
        raise TypeError(f"aggregator {aggregator!r} must return (vector, metrics dict), got {type(result).__name__}")
    vec, metrics = result
    if vec.shape != payloads.shape[1:]:
        raise ValueError(f"aggregator {aggregator!r} returned shape {tuple(vec.shape)}, not ({payloads.shape[1]},)")
    if not all_finite(vec) and all_finite(payloads):
        raise FloatingPointError(f"round {ctx.round}: aggregator {aggregator!r} returned NaN or inf from finite payloads")
    return vec, metrics


class _Accountant:
    """Per-client totals of one run's guarantees, composed over d coordinates and rounds."""

    def __init__(self, d: int):
        self.d = d
        self.totals: dict[int, Guarantee] = {}
        self.unprotected = False

    def add(self, privatizer: Optional[Privatizer], ctx: RoundContext) -> Optional[Guarantee]:
        """Account one round; returns the largest per-round guarantee of a client (None: not stated)."""
        stated = getattr(privatizer, "guarantee", None)
        per_row = None if stated is None else stated(ctx)
        if per_row is None or any(g is None for g in per_row):
            self.unprotected = True
            return None
        worst = None
        cache: dict[Guarantee, Guarantee] = {}
        for cid, g in zip(ctx.client_ids.tolist(), per_row):
            if g not in cache:
                cache[g] = g.compose(d=self.d)
            per_round = cache[g]
            self.totals[cid] = per_round if cid not in self.totals else self.totals[cid] + per_round
            if worst is None or per_round.epsilon > worst.epsilon:
                worst = per_round
        return worst

    def worst_total(self) -> Optional[Guarantee]:
        if self.unprotected or not self.totals:
            return None
        return max(self.totals.values(), key=lambda g: (g.epsilon, g.delta))


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


def simulate(config: FLConfig, runs: Sequence[Run], *, model: nn.Module, x_train: torch.Tensor,
             y_train: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor) -> FLResult:
    """Train every run of ``runs`` for ``config.rounds`` rounds (see the module docstring) and evaluate each
    round's global models on (x_test, y_test).

    ``model`` gives the architecture (and the initial weights of runs without ``initial``); it is copied,
    not modified. Inputs are checked before any training (shapes, labels, partition indices); a privatizer
    or aggregator returning the wrong shape or type, and a diverging run, raise with the round and names.
    History columns: run, round, accuracy (in [0, 1]), loss (mean cross-entropy), clients (sampled),
    clients_used (aggregated), epsilon_round / epsilon_total / delta / epsilon_unit (when the privatizer
    states its guarantee), train_seconds and seconds (per run: the batch's time divided by the number of runs), the
    trainer session's own per-round metrics if it has ``metrics(run, *, global_vector, x_test, y_test)`` (called
    with the run's new global model and the test set; e.g. ``loss_variance`` and ``personal_accuracy`` of
    :class:`ldptut.personal.PersonalizedLocalSGD`), and the run's ``info``.
    """
    from tqdm import tqdm  # plain text bar: works in terminals and notebooks without ipywidgets

    device = torch.device(config.device)
    model = copy.deepcopy(model).to(device)
    x_train, y_train = x_train.to(device), y_train.to(device)
    x_test, y_test = x_test.to(device), y_test.to(device)
    _check_inputs(model, runs, x_train, y_train, x_test, y_test)
    layout = ParamLayout.from_model(model)
    init = layout.flatten({k: v.detach() for k, v in model.named_parameters()})
    glob = torch.stack([init if r.initial is None else r.initial.to(device=device, dtype=init.dtype) for r in runs])
    start = glob.clone()  # each run's initial global model, for range rules fixed at it (InitialModelRange)
    n_clients = len(runs[0].partition)
    aggregators = [make_aggregator(r.aggregator) for r in runs]
    sizes = [torch.tensor([len(p) for p in r.partition], dtype=torch.float32) for r in runs]
    accountants = [_Accountant(layout.numel) for _ in runs]
    losses: list[list[float]] = [[] for _ in runs]
    session = config.trainer.start(model=model, layout=layout, runs=runs, x_train=x_train, y_train=y_train)
    lr = getattr(config.trainer, "lr", None)
    chance = math.log(max(2, int(max(y_train.max(), y_test.max())) + 1))  # cross-entropy of a uniform prediction
    # the run's other state the model needs for evaluation (BatchNorm running statistics), if the trainer keeps any
    load_state = getattr(session, "load_state", lambda m, a: m)
    # the trainer's own per-round metrics of a run (e.g. the variance of its clients' local losses, its clients'
    # personal models on the test set), if any: metrics(run, global_vector=..., x_test=..., y_test=...)
    _metrics = getattr(session, "metrics", None)

    def session_metrics(a: int) -> dict:
        return {} if _metrics is None else _metrics(a, global_vector=glob[a], x_test=x_test, y_test=y_test)
    rows = []
    bar = tqdm(range(1, config.rounds + 1), desc=config.desc, disable=not config.progress, leave=False, mininterval=2.0)
    stopped: set[int] = set()  # runs that diverged (on_divergence="stop")
    for r in bar:
        t0 = time.perf_counter()
        ids = [sample_clients(n_clients, config.client_fraction, seed=run.seed, round=r) for run in runs]
        trained = session.train(round=r, global_vectors=glob, client_ids=ids)
        new, stats = [], []
        local_acc = ([_clients_accuracy(model, layout, trained[a], [run.partition[i] for i in ids[a].tolist()], x_train,
                                        y_train, config.eval_batch_size) for a, run in enumerate(runs)]
                     if config.train_eval_at(r) else None)
        for a, run in enumerate(runs):
            payloads = trained[a] - glob[a] if config.send == "updates" else trained[a]
            cids = ids[a].to(device)
            ctx = RoundContext(
                round=r, client_ids=cids, layout=layout, global_vector=glob[a],
                generators=[client_generator(run.seed, r, i, "privatize", device=device) for i in ids[a].tolist()],
                send=config.send, num_samples=sizes[a][ids[a]].to(device),
                server_generator=round_generator(run.seed, r, "server", device=device), seed=run.seed,
                initial_vector=start[a])
            # local training diverged (non-finite weights): nothing to perturb, and no mechanism takes NaN; the round's
            # model is non-finite, which the divergence check below records ("stop") or raises
            private = run.privatizer is not None
            lost = private and not all_finite(payloads)
            if private and not lost:
                payloads = _privatize(run.privatizer, payloads, ctx)
            spent = accountants[a].add(run.privatizer, ctx)
            if lost:
                new.append(torch.full_like(glob[a], math.nan))
                stats.append((len(cids), {}, spent))
                continue
            vec, metrics = _aggregate(aggregators[a], payloads, ctx)
            new.append(glob[a] + vec if config.send == "updates" else vec)
            stats.append((len(cids), metrics, spent))
        prev, glob = glob, torch.stack(new).detach()
        train_s = time.perf_counter() - t0
        first_row = len(rows)
        for a, run in enumerate(runs):
            if a in stopped:
                glob[a] = prev[a]
                continue
            where = f"round {r}{f', run {a}' if len(runs) > 1 else ''}"
            hint = f" (learning rate {lr:g} too large?)" if lr else ""
            diverged = False
            if not all_finite(glob[a]):
                if config.on_divergence == "raise":
                    raise FloatingPointError(f"{where}: the global model has non-finite weights{hint}")
                glob[a], acc, loss, diverged = prev[a], math.nan, math.inf, True
            else:
                acc, loss = evaluate(load_state(load_vector(model, layout, glob[a]), a), x_test, y_test,
                                     batch_size=config.eval_batch_size)
                losses[a].append(loss)
                if not math.isfinite(loss) or _diverged(losses[a], config.divergence_factor, chance):
                    if config.on_divergence == "raise":
                        huge = (f"{loss / chance:.3g} times that of a uniform prediction ({chance:.3g})"
                                if loss > HUGE_LOSS * chance else "")
                        what = (f"the test loss is {loss:.3g}, {huge}" if huge and len(losses[a]) == 1 else
                                f"the test loss rose to {loss:.3g} from {min(losses[a]):.3g}" + (f", {huge}" if huge else ""))
                        raise FloatingPointError(f"{where}: training diverges, {what}{hint}")
                    diverged = True
            m, metrics, spent = stats[a]
            row = {"run": a, "round": r, "accuracy": acc, "loss": loss, "clients": m,
                   "clients_used": int(metrics.get("clients_used", m))}
            if config.train_eval and not config.train_eval_at(r):
                row.update(train_accuracy=math.nan, train_loss=math.nan, client_train_accuracy=math.nan)
            elif config.train_eval:
                train_acc, train_loss = (math.nan, math.inf) if diverged and math.isnan(acc) else evaluate(
                    load_state(load_vector(model, layout, glob[a]), a), x_train, y_train,
                    batch_size=config.eval_batch_size)
                row.update(train_accuracy=train_acc, train_loss=train_loss, client_train_accuracy=local_acc[a])
            if spent is not None:
                total = accountants[a].worst_total()
                row.update(epsilon_round=spent.epsilon, epsilon_total=total.epsilon, delta=total.delta,
                           epsilon_unit=str(total.unit))
            if config.on_divergence == "stop":
                row["diverged"] = diverged
            rows.append({**row, **{k: v for k, v in metrics.items() if k != "clients_used"}, **session_metrics(a),
                         **dict(run.info)})
            if diverged:
                stopped.add(a)
        seconds = time.perf_counter() - t0
        for row in rows[first_row:]:
            row.update(train_seconds=train_s / len(runs), seconds=seconds / len(runs))
        bar.set_postfix(acc=f"{rows[-1]['accuracy']:.3f}", refresh=False)
        if len(stopped) == len(runs):
            break
    load_state(load_vector(model, layout, glob[0]), 0)
    return FLResult(history=pd.DataFrame(rows), weights=glob, layout=layout, model=model,
                    guarantees=[acc.worst_total() for acc in accountants])


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

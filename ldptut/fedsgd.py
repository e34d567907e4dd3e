"""Federated SGD with one-record users and one sparse report each: FedSel's framework and its baselines.

Liu, Cao, Yoshikawa, Chen, "FedSel: Federated SGD under Local Differential Privacy with Top-k Dimension
Selection", DASFAA 2020, Algorithm 1. Every user holds one record; each iteration a batch of m users
computes its gradient g at the global weights, adds it to its accumulator (line 15, r <- r + g), and
sends **one** coordinate (a *reporter* decides which and how); the server averages the m reports and
steps w <- w - alpha mean (line 11). After sending coordinate j a user resets r_j (line 18).

Reporters (what one user sends, vectorised over runs and users; all draw from an explicit generator):

* :class:`FullGradient` -- the whole vector, in clear (the non-private baseline "NP");
* :class:`RandomCoordinate` -- one uniformly drawn coordinate, scaled by d so that the mean is unbiased,
  optionally perturbed (NP-RS, and the *flat* solutions PM / HM / Duchi of Wang et al., ICDE 2019); being
  unbiased for the whole vector, it keeps nothing back (``keeps_residual`` False: accumulators reset);
* :class:`SelectedCoordinate` -- the coordinate a selector picks from |r| (the top one, or FedSel's
  private EXP / PE / PS of :mod:`ldptut.selection`), its value r_j + eta r_j(prev) (line 17), optionally
  perturbed (line 18), *not* rescaled;
* :class:`ProjectedCoordinate` -- the *compressed* solution (Shin et al., TKDE 2018): s Phi with a public
  Gaussian Phi (d x q, entries N(0, 1/q)), one random coordinate of the q, scaled by q and perturbed; the
  server recovers the mean with the pseudo-inverse of Phi.

A value perturbation is a :class:`ldptut.mechanisms.Mechanism` on [-1, 1] (the input clipped first, as in
the paper's Section 3.3). :func:`train` runs R independent runs at once (e.g. the folds of a
cross-validation): weights (R, d), batches (R, m, d), no Python loop over users or coordinates.

Why this is a second loop beside the round engine (:func:`ldptut.fl.simulate`): the engine's unit is a client that
trains a model locally and sends its whole weight vector, which a privatizer perturbs coordinate by coordinate. Here a
user holds one record, computes one gradient, keeps an accumulator across iterations and sends *one* coordinate chosen
by a (private) selector; a batch of m such users per iteration, R runs at once, on closed-form linear-model
gradients (:mod:`ldptut.linear`), not on an ``nn.Module``. Expressed as engine clients it would be one client per
record, with a trainer that does no training and a privatizer that selects. Both have the same face where it matters to the chapters: a run kind
(:class:`ldptut.papers.fedsel.FedSelConfig`) trained through the :class:`~ldptut.experiments.Runner` and its run cache,
every draw from the explicit generator the caller passes (one stream for the R runs; the engine instead keys one per
client and round), and a per-iteration history (``iteration``, accuracy, loss) renamed to the engine's ``round``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Optional, Protocol, Union

import pandas as pd
import torch
from torch import Tensor

from . import linear
from ._validate import one_of, pos_int, real
from .mechanisms import Mechanism
from .selection import EMPTY, ExponentialSelection, PerturbedEncoding, PerturbedSampling

__all__ = ["cross_validation", "Reporter", "FullGradient", "RandomCoordinate", "SelectedCoordinate", "ProjectedCoordinate", "TopOne",
           "projection_matrix", "sparse_mean", "train", "TrainResult", "ACCUMULATE"]

Selector = Union["TopOne", ExponentialSelection, PerturbedEncoding, PerturbedSampling]

#: What a user adds to its accumulator: "g" (FedSel's adaptation, Section 3.3) or "alpha_g" (the original
#: accumulation of Sun et al. [19], the "-O" variant of Fig. 3: r <- r + alpha g, and the server adds the
#: mean without alpha).
ACCUMULATE = ("g", "alpha_g")


class Reporter(Protocol):
    """``report(r, s, generator)`` with r the accumulated vectors (selection input) and s = r + eta r(prev)
    (the values), both (R, m, d): returns the server's mean of the m reports (R, d) and the coordinate each
    user sent, (R, m) int64 (``EMPTY`` where it sent nothing), or None when every coordinate was sent.
    ``keeps_residual``: whether a user keeps the coordinates it did not send in its accumulator (FedSel's
    selection) or resets it entirely (the unbiased reporters, whose report stands for the whole vector)."""

    keeps_residual: bool

    def report(self, r: Tensor, s: Tensor, generator: Optional[torch.Generator]) -> tuple[Tensor, Optional[Tensor]]:
        ...


def cross_validation(n: int, *, folds: int, repeats: int, seed_generator: Optional[torch.Generator] = None,
                     device: Any = "cpu", holdout: str = "test") -> tuple[Tensor, Tensor]:
    """``repeats`` x ``folds``-fold cross-validation of n rows as R = repeats * folds runs: ``train_idx``
    (R, n_train) and the mask of the rows each run is evaluated on (R, n). Each repetition shuffles the rows and
    cuts them into ``folds`` equal parts (the n mod folds rows left over are in no part, in neither split).

    ``holdout="test"``: run (i, f) tests on part f and trains on the others. ``holdout="validation"`` (for tuning,
    never touching a test part): run (i, f) is evaluated on part f + 1 (mod ``folds``), which run (i, f) trains on
    in the test setting, and trains on the remaining ``folds`` - 2 parts; so part f stays unseen (needs
    ``folds`` >= 3)."""
    n, folds, repeats = pos_int(n, "n"), pos_int(folds, "folds"), pos_int(repeats, "repeats")
    one_of(holdout, "holdout", ("test", "validation"))
    need = 3 if holdout == "validation" else 2
    if folds < need:
        raise ValueError(f"folds must be >= {need} for holdout={holdout!r}, got {folds}")
    size = n // folds
    train, test = [], torch.zeros(repeats * folds, n, dtype=torch.bool, device=device)
    for i in range(repeats):
        parts = torch.randperm(n, generator=seed_generator)[: size * folds].view(folds, size).to(device)
        for f in range(folds):
            held = f if holdout == "test" else (f + 1) % folds
            train.append(torch.cat([parts[g] for g in range(folds) if g not in (f, held)]))
            test[i * folds + f, parts[held]] = True
    return torch.stack(train), test


def sparse_mean(index: Tensor, value: Tensor, d: int) -> Tensor:
    """(1/m) sum_i value_i e_{index_i} per run, (R, d); ``EMPTY`` indices contribute nothing."""
    sent = index != EMPTY
    out = torch.zeros(index.shape[0], d, dtype=value.dtype, device=value.device)
    out.scatter_add_(1, index.clamp(min=0), torch.where(sent, value, torch.zeros_like(value)))
    return out.div_(index.shape[1])


def _perturb(mechanism: Optional[Mechanism], v: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    return v if mechanism is None else mechanism.privatize(v, generator)


def _check_mechanism(mechanism: Optional[Mechanism]) -> Optional[Mechanism]:
    if mechanism is not None:
        if not isinstance(mechanism, Mechanism):
            raise TypeError(f"perturbation must be an ldptut.mechanisms.Mechanism or None, got {type(mechanism).__name__}")
        lo, hi = mechanism.input_range()
        if float(lo) != -1.0 or float(hi) != 1.0:
            raise ValueError(f"the value perturbation must take inputs in [-1, 1] (center 0, radius 1), got [{lo}, {hi}]")
    return mechanism


def _gather(s: Tensor, j: Tensor) -> Tensor:
    return s.gather(-1, j.clamp(min=0).unsqueeze(-1)).squeeze(-1)


class TopOne:
    """The non-private top-1 selector (NP-K with k = 1): the coordinate of the largest |r_j|, ties by index as
    in :func:`ldptut.selection.top_k_status` (of equal |r_j| the last index), so it is ``top_k_status(v, 1)``."""

    def select(self, v: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        d = v.shape[-1]
        return d - 1 - v.abs().flip(-1).argmax(-1)  # argmax returns the first maximum: the last one of v


class UniformIndex:
    """A data-independent selector: one coordinate uniformly at random (no privacy cost). Inside
    :class:`SelectedCoordinate` it is the control for FedSel's selections: the same two-stage report (value not
    rescaled by d, accumulator kept), with an index that carries no information about the gradient."""

    def select(self, v: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        return torch.randint(v.shape[-1], v.shape[:-1], generator=generator, device=v.device)


@dataclass(frozen=True)
class FullGradient:
    """NP: every user sends its whole vector s in clear; the server's mean is exact."""

    keeps_residual: ClassVar[bool] = False

    def report(self, r: Tensor, s: Tensor, generator: Optional[torch.Generator]) -> tuple[Tensor, None]:
        return s.mean(1), None


@dataclass(frozen=True)
class RandomCoordinate:
    """One coordinate J ~ U[d] per user, reported as d * M(s_J) e_J (M the perturbation, or the identity):
    unbiased, E = s (the flat solution, Wang et al. ICDE 2019, with one sampled dimension; their rule
    k = max(1, min(d, floor(eps / 2.5))) gives one for eps < 5)."""

    keeps_residual: ClassVar[bool] = False

    perturbation: Optional[Mechanism] = None

    def __post_init__(self) -> None:
        _check_mechanism(self.perturbation)

    def report(self, r: Tensor, s: Tensor, generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
        d = s.shape[-1]
        j = torch.randint(d, s.shape[:-1], generator=generator, device=s.device)
        v = _perturb(self.perturbation, _gather(s, j), generator) * d
        return sparse_mean(j, v, d), j


@dataclass(frozen=True)
class SelectedCoordinate:
    """FedSel's two stages (Algorithm 1, lines 16-18): j = selector(r), report M(s_j) e_j, not rescaled
    (a biased, top-k-like sparsification; the accumulator keeps what was not sent)."""

    keeps_residual: ClassVar[bool] = True

    selector: Any
    perturbation: Optional[Mechanism] = None

    def __post_init__(self) -> None:
        if not hasattr(self.selector, "select"):
            raise TypeError(f"selector must have select(v, generator), got {type(self.selector).__name__}")
        _check_mechanism(self.perturbation)

    def report(self, r: Tensor, s: Tensor, generator: Optional[torch.Generator]) -> tuple[Tensor, Tensor]:
        j = self.selector.select(r, generator)
        v = _perturb(self.perturbation, _gather(s, j), generator)
        return sparse_mean(j, v, s.shape[-1]), j


def projection_matrix(d: int, q: int, generator: Optional[torch.Generator] = None, *, device: Any = "cpu",
                      dtype: torch.dtype = torch.float32) -> Tensor:
    """Phi, d x q with entries N(0, 1/q) (Shin et al., TKDE 2018; FedSel Section 3.1)."""
    return torch.randn(pos_int(d, "d"), pos_int(q, "q"), generator=generator, device=device, dtype=dtype) / math.sqrt(q)


class ProjectedCoordinate:
    """The compressed solution: y = s Phi (q dims), one coordinate J ~ U[q], q * M(y_J) e_J; the server
    averages in the q-space and recovers the mean with the pseudo-inverse: mean(y*) pinv(Phi), the
    least-norm x with x Phi = mean(y*) (an estimate of the projection of the mean onto Phi's column space)."""

    keeps_residual: ClassVar[bool] = False

    def __init__(self, phi: Tensor, perturbation: Optional[Mechanism] = None) -> None:
        if phi.dim() != 2 or phi.shape[1] > phi.shape[0]:
            raise ValueError(f"phi must be d x q with q <= d, got shape {tuple(phi.shape)}")
        self.phi = phi
        self.pinv = torch.linalg.pinv(phi.double()).to(phi.dtype)  # q x d
        self.perturbation = _check_mechanism(perturbation)
        self.inner = RandomCoordinate(perturbation)

    def report(self, r: Tensor, s: Tensor, generator: Optional[torch.Generator]) -> tuple[Tensor, None]:
        y = s @ self.phi.to(s.dtype)
        mean_y, _ = self.inner.report(y, y, generator)  # the mean of q * M(y_J) e_J over users
        return mean_y @ self.pinv.to(s.dtype), None


@dataclass
class TrainResult:
    """Per evaluation: ``history`` (iteration, epoch, accuracy mean / std / min / max over the R runs, in
    [0, 1]; the last row also ``accuracy_runs``, the list of the R runs' accuracies, for paired comparisons);
    ``final`` each run's final accuracy (R,); ``weights`` the final (R, d)."""

    history: pd.DataFrame
    final: Tensor
    weights: Tensor


def train(x: Tensor, y: Tensor, train_idx: Tensor, test_mask: Tensor, *, reporter: Reporter, model: str,
          lr: float, l2: float = 1e-4, batch_size: int, epochs: int = 1, eta: float = 0.0,
          accumulate: str = "g", generator: Optional[torch.Generator] = None, eval_every: int = 10,
          progress: bool = True, desc: str = "FedSel iterations") -> TrainResult:
    """Run Algorithm 1 for R runs at once.

    ``x`` (n, d) features, ``y`` (n,) labels in {-1, +1}; ``train_idx`` (R, n_train) the rows each run's users
    hold (one record each); ``test_mask`` (R, n) each run's test rows. Each epoch every run visits its users
    in a fresh random order in batches of ``batch_size`` (the last partial batch is dropped); each iteration
    the batch's users compute their gradients (:func:`ldptut.linear.per_example_gradients`), accumulate
    (``accumulate``), build s = r + eta r(prev) and report (``reporter``); the sent coordinates of r are
    reset. The accumulators exist only when ``epochs`` > 1 (with one epoch every user reports once, from
    r = g). Evaluated every ``eval_every`` iterations and at the end.
    """
    if x.dim() != 2 or y.shape != x.shape[:1]:
        raise ValueError(f"x must be (n, d) and y (n,), got {tuple(x.shape)} and {tuple(y.shape)}")
    if not bool(((y == 1) | (y == -1)).all()):
        raise ValueError("labels y must be -1 or +1")
    if train_idx.dim() != 2 or test_mask.shape != (train_idx.shape[0], x.shape[0]):
        raise ValueError(f"train_idx must be (R, n_train) and test_mask (R, n) = ({train_idx.shape[0]}, {x.shape[0]}), "
                         f"got {tuple(train_idx.shape)} and {tuple(test_mask.shape)}")
    one_of(accumulate, "accumulate", ACCUMULATE)
    lr, eta = real(lr, "lr", positive=True), real(eta, "eta", nonneg=True)
    m, epochs, eval_every = pos_int(batch_size, "batch_size"), pos_int(epochs, "epochs"), pos_int(eval_every, "eval_every")
    R, n_train = train_idx.shape
    d = x.shape[1]
    if m > n_train:
        raise ValueError(f"batch_size = {m} exceeds the {n_train} users of a run")
    per_epoch = n_train // m
    total = per_epoch * epochs
    dev = x.device
    w = torch.zeros(R, d, dtype=x.dtype, device=dev)
    acc_scale, server_lr = (lr, 1.0) if accumulate == "alpha_g" else (1.0, lr)
    state = torch.zeros(R, n_train, d, dtype=x.dtype, device=dev) if epochs > 1 else None
    rows_r = torch.arange(R, device=dev).unsqueeze(1)
    history, it = [], 0

    from tqdm import tqdm  # plain text bar, as the FL engine's

    bar = tqdm(total=total, desc=desc, disable=not progress, leave=False, mininterval=2.0)

    def evaluate(epoch: int) -> Tensor:
        acc = linear.accuracy(w, x, y, test_mask)
        history.append({"iteration": it, "epoch": epoch, "accuracy": float(acc.mean()),
                        "accuracy_std": float(acc.std()) if R > 1 else 0.0,
                        "accuracy_min": float(acc.min()), "accuracy_max": float(acc.max())})
        return acc

    for epoch in range(1, epochs + 1):
        order = torch.argsort(torch.rand(R, n_train, generator=generator, device=dev), dim=1)
        for b in range(per_epoch):
            pos = order[:, b * m:(b + 1) * m]                        # (R, m) positions in train_idx
            rows = train_idx.gather(1, pos)
            g = linear.per_example_gradients(w, x[rows], y[rows], model=model, l2=l2)
            if acc_scale != 1.0:
                g.mul_(acc_scale)
            if state is None:
                r, s = g, g
            else:
                prev = state[rows_r, pos]                             # r(prev): (R, m, d)
                r = prev + g
                s = r + eta * prev if eta else r
            mean, sent = reporter.report(r, s, generator)
            w.sub_(mean, alpha=server_lr)
            if state is not None:
                # line 18: r_j <- 0 for the sent j (EMPTY matches no coordinate: nothing was sent)
                if sent is None or not getattr(reporter, "keeps_residual", True):
                    state[rows_r, pos] = 0.0
                else:
                    state[rows_r, pos] = torch.where(torch.arange(d, device=dev) == sent.unsqueeze(-1), 0.0, r)
            it += 1
            bar.update(1)
            if it % eval_every == 0 and it < total:
                evaluate(epoch)
        if not bool(torch.isfinite(w).all()):
            raise FloatingPointError(f"the weights are not finite after epoch {epoch}; lower lr ({lr})")
    bar.close()
    final = evaluate(epochs)
    history[-1]["accuracy_runs"] = [float(a) for a in final.tolist()]
    return TrainResult(history=pd.DataFrame(history), final=final, weights=w)

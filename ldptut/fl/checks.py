"""The round engine's checks: its inputs before the first round (shapes, labels, partitions, finiteness), and what a
privatizer or an aggregator returns in each round.
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from .._validate import all_finite, finite_rows
from .layout import ParamLayout
from .context import Aggregator, Privatizer, RoundContext
from .spec import Run


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


def checked_privatize(privatizer: Privatizer, payloads: torch.Tensor, ctx: RoundContext) -> torch.Tensor:
    """``privatizer(payloads, context=ctx)``, refused unless it returns the payloads' shape, dtype and device, finite
    (the engine's step 3; a Flower client's too, :class:`ldptut.flower.PrivatizerMod`)."""
    out = privatizer(payloads, context=ctx)
    if not isinstance(out, torch.Tensor) or out.shape != payloads.shape or out.dtype != payloads.dtype \
            or out.device != payloads.device:
        got = f"shape {tuple(out.shape)}, {out.dtype} on {out.device}" if isinstance(out, torch.Tensor) else repr(out)
        raise ValueError(f"privatizer {privatizer!r} returned {got}; it must return the payloads' shape "
                         f"{tuple(payloads.shape)}, dtype {payloads.dtype} and device {payloads.device}")
    if not all_finite(out):  # its input was finite (checked by the caller)
        raise FloatingPointError(f"round {ctx.round}: privatizer {privatizer!r} returned NaN or inf from finite payloads")
    return out


def checked_aggregate(aggregator: Aggregator, payloads: torch.Tensor, ctx: RoundContext) -> tuple[torch.Tensor, dict]:
    """``aggregator(payloads, context=ctx)``, refused unless it returns (a vector of d finite values, a metrics dict)
    (the engine's step 4; a Flower server's too, :class:`ldptut.flower.ServerRule`)."""
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

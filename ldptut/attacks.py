"""Attacks a server can run on what clients send, used by the chapters' claim checks:

* LDP-FL's client-chosen range leaks through the two-point outputs (:func:`range_leak`, below);
* PD-LDPFL's private scale t = max(θ) leaks through the Piecewise Mechanism's support
  (:func:`recover_piecewise_scale`, :func:`piecewise_scale_leak`);
* deep leakage from gradients, DLG (Zhu, Liu, Han, NeurIPS 2019): :func:`dlg_attack`;
* the floating-point attack on textbook samplers (Mironov, CCS 2012): :func:`floating_point_attack` enumerates
  every uniform a sampler can draw and finds the reports one input can give and another never can
  (:func:`textbook_laplace`, :func:`textbook_piecewise`, :func:`textbook_hybrid`: the float samplers the
  grid laws of :mod:`ldptut.fpsafe` replace).

Checking LDP-FL's claim that a client may choose its own weight range and stay ε-LDP.

LDP-FL (Sun, Qian, Chen, IJCAI 2021), Sec. 4, "Adaptive Range Setting": "clients may choose
different c, r to bound their weights ... In such cases, LDP is still satisfied because the noise
is applied to each weight separately." The two-point mechanism (Eq. (2), Algorithm 2) outputs
only the two values c ± r a, a = (e^ε + 1) / (e^ε - 1), and ε is public. So as soon as a client's
reports of one layer contain both values, the server reads off

    c = (hi + lo) / 2,    r = (hi - lo) / (2 a)

exactly. If the client picked (c, r) from its own weights, e.g. c = (max + min) / 2,
r = (max - min) / 2 (:func:`client_range`), the server learns the client's private minimum and
maximum weight, with no noise at all: two clients with different ranges have disjoint output
supports, so the likelihood ratio is unbounded and the mechanism is not ε-LDP with respect to the
weights. With a public range (agreed before the round, e.g. computed by the server from the
previous global model, as in LDP-FL's Algorithm 1) the recovered range is the public one and
nothing leaks. :func:`range_leak` runs both cases side by side.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.func import functional_call

from ._validate import delta as _check_delta
from ._validate import epsilon as _check_epsilon
from ._validate import pos_int as _check_pos_int
from ._validate import real as _check_real
from .mechanisms import Piecewise, TwoPoint, two_point_a

__all__ = ["recover_two_point_range", "client_range", "range_leak"]


def _float_tensor(x: Any, name: str, *, min_last: int) -> Tensor:
    if not isinstance(x, Tensor):
        raise ValueError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim < 1 or x.shape[-1] < min_last:
        raise ValueError(f"{name} must have at least {min_last} values along its last dimension, got shape {tuple(x.shape)}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating-point tensor, got {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains NaN or inf")
    return x.detach().to(torch.float64)


def _two_values(reports: Tensor, rtol: float) -> Tuple[Tensor, Tensor, Tensor]:
    """(lo, hi, ok) along the last dim; ok: exactly two distinct values up to ``rtol``."""
    hi = reports.amax(-1)
    lo = reports.amin(-1)
    tol = rtol * torch.maximum(hi.abs(), lo.abs()).clamp(min=torch.finfo(torch.float64).tiny)
    near = ((reports - lo.unsqueeze(-1)).abs() <= tol.unsqueeze(-1)) | ((reports - hi.unsqueeze(-1)).abs() <= tol.unsqueeze(-1))
    ok = near.all(-1) & (hi - lo > tol)
    return lo, hi, ok


def recover_two_point_range(reports: Tensor, epsilon: float, *, rtol: float = 1e-6) -> Tuple[Tensor, Tensor]:
    """The server's recovery of (c, r) from the two-point reports of one layer.

    Reports of LDP-FL's mechanism (Eq. (2) / Algorithm 2) take the values c ± r a with
    a = (e^ε + 1) / (e^ε - 1), ε public. From their maximum hi and minimum lo:
    c = (hi + lo) / 2, r = (hi - lo) / (2 a) — exact up to float rounding.

    ``reports``: (..., k), one layer per row (the last dimension), k >= 2; returns float64 tensors
    c, r of shape ``reports.shape[:-1]`` (0-d for a single layer). Raises ``ValueError`` if a row
    does not take exactly two distinct values (relative tolerance ``rtol``): with a single value
    the server learns only one endpoint c + r a or c - r a, not (c, r); more than two values mean
    the reports are not two-point outputs with one range.
    """
    eps = _check_epsilon(epsilon)
    if isinstance(rtol, bool) or not isinstance(rtol, numbers.Real) or not 0 <= rtol < 1:
        raise ValueError(f"rtol must be a real number in [0, 1), got {rtol!r}")
    y = _float_tensor(reports, "reports", min_last=2)
    lo, hi, ok = _two_values(y, float(rtol))
    if not bool(ok.all()):
        bad = int((~ok).reshape(-1).nonzero()[0])
        row = y.reshape(-1, y.shape[-1])[bad]
        n_distinct = torch.unique(row).numel()
        raise ValueError(
            f"reports (row {bad}) must take exactly 2 distinct values, got {n_distinct}"
            + (": with one value the server learns only one endpoint c ± r a" if n_distinct == 1 else "")
        )
    a = two_point_a(eps)
    return (hi + lo) / 2.0, (hi - lo) / (2.0 * a)


def client_range(weights: Tensor) -> Tuple[Tensor, Tensor]:
    """A client-chosen range from its own weights: c = (max + min) / 2, r = (max - min) / 2.

    What LDP-FL's Sec. 4 ("Adaptive Range Setting") allows a client to do. Reduces over the last
    dimension (one layer per row); returns float64 tensors of shape ``weights.shape[:-1]``.
    ``ValueError`` if a row is constant (r = 0 is not a valid two-point range).
    """
    w = _float_tensor(weights, "weights", min_last=1)
    hi, lo = w.amax(-1), w.amin(-1)
    if bool((hi <= lo).any()):
        raise ValueError("weights: a row has all weights equal, so its radius (max - min) / 2 would be 0")
    return (hi + lo) / 2.0, (hi - lo) / 2.0


def range_leak(
    weights_per_client: Tensor,
    *,
    epsilon: float,
    public_range: Optional[Tuple[float, float]],
    generator: Optional[torch.Generator],
):
    """Does the server learn something about a client's weights from the support of its reports?

    Every client perturbs its k weights (one layer) with :class:`~ldptut.mechanisms.TwoPoint`,
    using its own range from :func:`client_range` (``public_range=None``) or the public
    ``public_range = (center, radius)``; the server recovers each client's (c, r) with
    :func:`recover_two_point_range` and reports [c - r, c + r].

    Returns a ``pandas.DataFrame``, one row per client, columns client, true_min, true_max,
    recovered_min, recovered_max, leaked, rel_error. ``leaked``: the recovered range is not the
    public range (relative tolerance 1e-6), i.e. the server learned a range that was not public —
    always True with own ranges (nothing about them is public), and then recovered_min / max equal
    the client's private min / max weight (``rel_error`` = max endpoint error / (true_max -
    true_min): about 1e-15 in float64, of order 1e-7 · (a + |c| / r) in float32). With a public range, recovered = public
    and ``leaked`` is False for every client. A client whose reports take a single value (all k
    coins equal, negligible for k in the tens) gets NaN recovered values; it then leaks one
    endpoint c ± r a, so ``leaked`` is True with own ranges and False with a public one.
    """
    import pandas as pd

    eps = _check_epsilon(epsilon)
    if not isinstance(weights_per_client, Tensor) or weights_per_client.ndim != 2:
        shape = tuple(weights_per_client.shape) if isinstance(weights_per_client, Tensor) else type(weights_per_client).__name__
        raise ValueError(f"weights_per_client must be a tensor of shape (m, k), got {shape}")
    w64 = _float_tensor(weights_per_client, "weights_per_client", min_last=2)
    w = weights_per_client.detach()
    if public_range is None:
        c, r = client_range(w64)
        mech = TwoPoint(epsilon=eps, center=c.unsqueeze(1), radius=r.unsqueeze(1))
    else:
        if (
            not isinstance(public_range, (tuple, list))
            or len(public_range) != 2
            or not all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in public_range)
        ):
            raise ValueError(f"public_range must be None or a (center, radius) pair of real numbers, got {public_range!r}")
        mech = TwoPoint(epsilon=eps, center=public_range[0], radius=public_range[1])
    reports = mech.privatize(w, generator).to(torch.float64)

    # float32 reports are rounded to ~6e-8 relative; tolerate that when grouping the two values
    rtol = 1e-6 if w.dtype != torch.float64 else 1e-9
    lo, hi, ok = _two_values(reports, rtol)
    a = mech.a
    c_hat = torch.where(ok, (hi + lo) / 2.0, torch.nan)
    r_hat = torch.where(ok, (hi - lo) / (2.0 * a), torch.nan)
    rec_min, rec_max = c_hat - r_hat, c_hat + r_hat
    true_min, true_max = w64.amin(1), w64.amax(1)

    if public_range is None:
        leaked = torch.ones_like(ok)
    else:
        pc, pr = float(mech.center), float(mech.radius)
        pmin, pmax = pc - pr, pc + pr
        scale = max(abs(pmin), abs(pmax), pr)
        differs = ((rec_min - pmin).abs() > 1e-6 * scale) | ((rec_max - pmax).abs() > 1e-6 * scale)
        leaked = ok & differs
    width = (true_max - true_min).clamp(min=torch.finfo(torch.float64).tiny)
    rel_error = torch.maximum((rec_min - true_min).abs(), (rec_max - true_max).abs()) / width
    return pd.DataFrame(
        {
            "client": range(w.shape[0]),
            "true_min": true_min.cpu().numpy(),
            "true_max": true_max.cpu().numpy(),
            "recovered_min": rec_min.cpu().numpy(),
            "recovered_max": rec_max.cpu().numpy(),
            "leaked": leaked.cpu().numpy(),
            "rel_error": rel_error.cpu().numpy(),
        }
    )


# ==== PD-LDPFL: the private scale of Algorithm 2 leaks through PM's support ========================
# Wang, Yang, Wei (2024), PD-LDPFL, Algorithm 2 "DataPerturbation": t = max(θ), θ <- θ / t, the
# Piecewise Mechanism (PM, Wang et al., ICDE 2019) with ε on every value, θ* = θ* · t. PM's output
# on an input in [-1, 1] covers [-C, C], C = (e^{ε/2} + 1) / (e^{ε/2} - 1), with density at least
# p_low = e^{-ε/2} / (2C) everywhere, so after the multiplication the reports fill [-C|t|, C|t|]
# and their largest magnitude, divided by the public C, tends to the client's private scale |t|.
# Our PM reports on a grid of [-C_d, C_d] (:class:`~ldptut.mechanisms.Piecewise`, the design ε_d <= ε):
# the attack divides by C_d, public as well, and the grid's step enters the tolerance.

__all__ += ["recover_piecewise_scale", "piecewise_scale_tolerance", "piecewise_scale_leak"]


def recover_piecewise_scale(reports: Tensor, epsilon: float, *, dim: Optional[int] = -1) -> Tensor:
    """The server's estimate of a client's private PM scale: t̂ = max_i |y_i| / C_d.

    Reports y_i = t · T*_i of PD-LDPFL's Algorithm 2 (Wang, Yang, Wei 2024), T*_i the Piecewise
    Mechanism's output on v_i = θ_i / t (clipped to [-1, 1]), lie in [-C|t|, C|t|] with
    C = (e^{ε/2} + 1) / (e^{ε/2} - 1) (Wang et al., ICDE 2019, Sec. III-B); our PM reports on a grid of
    [-C_d, C_d] (its design ε_d <= ε, :class:`~ldptut.mechanisms.Piecewise`), so t̂ <= |t| always.

    Exact law (the n reports are independent): with F_v the CDF of T* on input v
    (:meth:`~ldptut.mechanisms.Piecewise.cdf`), for s in [0, 1]

        P(t̂ <= s |t|) = prod_i [F_{v_i}(sC) - F_{v_i}(-sC)].

    For the continuous PM: its density is at least p_low = e^{-ε/2} / (2C) on all of [-C, C], so each
    factor is at most 1 - (1 - s) e^{-ε/2}: with x = 1 - t̂ / |t| the relative error,

        P(x > a) <= (1 - a e^{-ε/2})^n <= exp(-n a e^{-ε/2}),
        E[x] <= e^{ε/2} (1 - (1 - e^{-ε/2})^{n+1}) / (n + 1) <= e^{ε/2} / (n + 1),

    with equality in the first line when every v_i = 0 and a <= (C + 1) / (2C) (the tails of
    [-C, C] then lie in PM's low-density pieces). The grid law (ε_d, C_d, step g) rounds each report
    by less than g, which adds less than g / C_d to x. So with probability >= 1 - δ,
    |t| ∈ [t̂, t̂ / (1 - a_δ)], a_δ = e^{ε_d/2} (1 - δ^{1/n}) + g / C_d
    (:func:`piecewise_scale_tolerance`): a one-sided confidence interval of relative width
    O(e^{ε/2} / n) plus one grid step. Inputs at ±1 (the largest weight, v = 1 under t = max θ) only shrink x.

    ``reports``: a floating-point tensor; ``dim``: the dimension holding one client's layer (default
    the last; ``None``: all elements are one layer). Returns float64, shape of ``reports`` without
    ``dim`` (0-d for one layer). The sign of t is not identifiable from the support: t̂ estimates |t|.
    """
    eps = _check_epsilon(epsilon)
    if not isinstance(reports, Tensor):
        raise ValueError(f"reports must be a torch.Tensor, got {type(reports).__name__}")
    if dim is not None and (isinstance(dim, bool) or not isinstance(dim, numbers.Integral)):
        raise ValueError(f"dim must be None or an integer, got {dim!r}")
    y = reports.detach().reshape(-1) if dim is None else reports.detach()
    if y.ndim == 0:
        raise ValueError("reports must have at least one dimension, got a 0-d tensor")
    d = -1 if dim is None else int(dim)
    if not -y.ndim <= d < y.ndim:
        raise ValueError(f"dim must be in [-{y.ndim}, {y.ndim - 1}] for reports of shape {tuple(reports.shape)}, got {dim}")
    y = _float_tensor(y.movedim(d, -1), "reports", min_last=1)
    C = Piecewise(epsilon=eps).law.C  # the largest report on t = 1 (the grid law's C_d, public)
    return y.abs().amax(-1) / C


def piecewise_scale_tolerance(*, n: int, epsilon: float, delta: float) -> float:
    """a_δ = e^{ε_d/2} (1 - δ^{1/n}) + g / C_d (capped at 1): P(1 - t̂ / |t| > a_δ) <= δ for n PM reports.

    From P(1 - t̂/|t| > a) <= (1 - a e^{-ε/2})^n for the continuous PM (:func:`recover_piecewise_scale`), for
    every input in [-1, 1], at the grid law's design ε_d (:class:`~ldptut.mechanisms.Piecewise`): the grid's
    randomized rounding moves a report by less than its step g, so the grid report's relative error exceeds the
    continuous one's by less than g / C_d. e^{ε_d/2} (1 - δ^{1/n}) <= e^{ε_d/2} ln(1/δ) / n.
    """
    n = _check_pos_int(n, "n")
    eps = _check_epsilon(epsilon)
    dl = _check_delta(delta)
    law = Piecewise(epsilon=eps).law
    # e^{ε_d/2} · (-expm1(ln δ / n)), without overflow
    return min(1.0, math.exp(min(law.epsilon_design / 2.0, 700.0)) * -math.expm1(math.log(dl) / n) + law.g / law.C)


def _scale_perturb(w: Tensor, t: float, eps: float, generator: Optional[torch.Generator]) -> Tensor:
    """Algorithm 2 of PD-LDPFL with scale t: PM(θ / t) · t, PM clipping θ / t to [-1, 1]."""
    return Piecewise(epsilon=eps).privatize(w / t, generator) * t


def piecewise_scale_leak(
    weights_per_client: Any,
    *,
    epsilon: float,
    public_bound: Optional[float],
    generator: Optional[torch.Generator],
):
    """Does the server learn a client's private scale t = max(θ) from its PD-LDPFL reports?

    Every client runs PD-LDPFL's Algorithm 2 (Wang, Yang, Wei 2024) on its weights θ (one layer,
    as in the authors' code; the paper's text takes the maximum over the whole model): t = max(θ)
    (``public_bound=None``) or the public t = ``public_bound`` (agreed before the round), θ / t,
    the Piecewise Mechanism with ε per value, times t. The server computes
    t̂ = max |report| / C (:func:`recover_piecewise_scale`).

    As in the paper, t = max(θ), not max|θ|: when min(θ) < -max(θ), the values θ / t below -1 are
    clipped to -1 by PM (:class:`~ldptut.mechanisms.Piecewise` clips its input), which biases those
    weights towards -t (column ``clipped``: how many). If max(θ) < 0, θ / t >= 1 everywhere and all
    values clip to 1 (the reports then estimate t, sign included, but t̂ recovers |t|); max(θ) = 0
    divides by zero and raises ``ValueError``.

    ``weights_per_client``: a (m, n) tensor (one client per row) or a list of m tensors (each
    flattened; sizes may differ). Returns a ``pandas.DataFrame``, one row per client, columns
    client, n, true_scale (the t used: max θ, or the public bound), true_max_abs (max|θ|),
    recovered_scale (t̂), rel_error (1 - t̂ / |t|, in [0, 1); at most
    :func:`piecewise_scale_tolerance` (n, ε, δ) with probability >= 1 - δ), clipped, and max_error
    (measured: |t̂ - max θ| / |max θ|, how far the server's t̂ is from the client's own largest weight;
    near 0 when Algorithm 2 scales by it, the public bound's distance from it otherwise).
    """
    import pandas as pd

    eps = _check_epsilon(epsilon)
    if public_bound is not None:
        public_bound = _check_real(public_bound, "public_bound", positive=True)
    if isinstance(weights_per_client, Tensor):
        if weights_per_client.ndim != 2:
            raise ValueError(f"weights_per_client must be a tensor of shape (m, n) or a list of tensors, got shape {tuple(weights_per_client.shape)}")
        rows = list(weights_per_client.unbind(0))
    elif isinstance(weights_per_client, (list, tuple)) and len(weights_per_client) > 0:
        rows = list(weights_per_client)
    else:
        raise ValueError(f"weights_per_client must be a (m, n) tensor or a non-empty list of tensors, got {type(weights_per_client).__name__}")
    out = {k: [] for k in ("client", "n", "true_scale", "true_max_abs", "recovered_scale", "rel_error", "clipped", "max_error")}
    for i, w in enumerate(rows):
        if not isinstance(w, Tensor):
            raise ValueError(f"weights_per_client[{i}] must be a torch.Tensor, got {type(w).__name__}")
        w = _float_tensor(w.detach().reshape(-1), f"weights_per_client[{i}]", min_last=1).to(w.dtype)
        t = float(w.max()) if public_bound is None else public_bound
        if t == 0.0:
            raise ValueError(f"weights_per_client[{i}]: max(θ) = 0, so Algorithm 2's θ / max(θ) divides by zero")
        v = w.double() / t
        reports = _scale_perturb(w, t, eps, generator)
        t_hat = float(recover_piecewise_scale(reports, eps))
        out["client"].append(i)
        out["n"].append(w.numel())
        out["true_scale"].append(t)
        out["true_max_abs"].append(float(w.abs().max()))
        out["recovered_scale"].append(t_hat)
        out["rel_error"].append(1.0 - t_hat / abs(t))
        out["clipped"].append(int(((v < -1.0) | (v > 1.0)).sum()))
        own = float(w.max())
        out["max_error"].append(abs(t_hat - own) / abs(own) if own != 0.0 else math.inf)
    return pd.DataFrame(out)


# ==== DLG: Deep Leakage from Gradients (Zhu, Liu, Han, NeurIPS 2019) =============================
# PD-LDPFL (Wang, Yang, Wei 2024, Sec. 4.2, Figs. 3-4) claims that parameter decoupling resists
# DLG "naturally"; the functions below let a chapter rerun DLG against a gradient or a weight
# difference (divided by the learning rate) with the model that actually produced it.

__all__ += ["DLGResult", "observed_gradient", "dlg_attack", "dlg_mse", "mean_image_mse"]


@dataclass
class DLGResult:
    """What :func:`dlg_attack` returns: reconstructed ``inputs`` (batch_size, *input_shape), hard
    ``labels`` (argmax of the soft labels), ``soft_labels`` (softmax of the dummy logits),
    ``loss_history`` (the gradient distance after each L-BFGS step, as floats), ``converged``
    (False if the distance became NaN / inf; the last finite iterate is returned then) and, for the adaptive
    attacker (``output_transform="affine"``), ``output_scale`` and ``output_shift``: its final a, b (None otherwise;
    not an estimate of the client's: the dummy soft label absorbs part of them)."""

    inputs: Tensor
    labels: Tensor
    soft_labels: Tensor
    loss_history: List[float]
    converged: bool
    output_scale: Optional[Tensor] = None
    output_shift: Optional[Tensor] = None


def _trainable(model: nn.Module) -> Dict[str, Tensor]:
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    params = {k: p for k, p in model.named_parameters() if p.requires_grad}
    if not params:
        raise ValueError("model has no parameters that require grad")
    return params


def observed_gradient(model: nn.Module, x: Tensor, y: Tensor) -> Dict[str, Tensor]:
    """The gradient the client would share: ∇_θ mean_i CE(model(x)_i, y_i), for the parameters that
    require grad, keyed like ``model.named_parameters()`` (detached; the model is not modified).

    ``x``: a batch of inputs; ``y``: integer class labels (batch,) or soft labels (batch, classes)
    (the loss is then Σ_c -y_c log softmax(model(x))_c, averaged over the batch, as in DLG).
    """
    params = _trainable(model)
    if not isinstance(x, Tensor) or not isinstance(y, Tensor):
        raise ValueError("x and y must be torch.Tensors")
    names = list(params)
    leaves = {k: p.detach().requires_grad_(True) for k, p in params.items()}
    buffers = dict(model.named_buffers())
    logits = functional_call(model, {**buffers, **leaves}, (x,))
    if y.dtype.is_floating_point:
        loss = torch.sum(-y * F.log_softmax(logits, dim=-1), dim=-1).mean()
    else:
        loss = F.cross_entropy(logits, y)
    grads = torch.autograd.grad(loss, [leaves[k] for k in names])
    return {k: g.detach() for k, g in zip(names, grads)}


def _as_target(target: Any, params: Dict[str, Tensor]) -> List[Tensor]:
    """The target gradient as a list in ``params`` order (float, detached, checked)."""
    if isinstance(target, Tensor):
        total = sum(p.numel() for p in params.values())
        if target.ndim != 1 or target.numel() != total:
            raise ValueError(f"target: a flat tensor must have the model's {total} trainable parameters, got shape {tuple(target.shape)}")
        parts, i = [], 0
        for p in params.values():
            parts.append(target[i:i + p.numel()].reshape(p.shape))
            i += p.numel()
    elif isinstance(target, dict):
        missing = [k for k in params if k not in target]
        extra = [k for k in target if k not in params]
        if missing or extra:
            raise ValueError(f"target: keys must be the model's trainable parameters; missing {missing}, unexpected {extra}")
        parts = []
        for k, p in params.items():
            v = target[k]
            if not isinstance(v, Tensor) or v.shape != p.shape:
                raise ValueError(f"target[{k!r}] must be a tensor of shape {tuple(p.shape)}, got {getattr(v, 'shape', type(v).__name__)}")
            parts.append(v)
    else:
        raise ValueError(f"target must be a dict of tensors or a flat tensor, got {type(target).__name__}")
    out = []
    for k, (v, p) in zip(params, zip(parts, params.values())):
        if not v.dtype.is_floating_point or not bool(torch.isfinite(v).all()):
            raise ValueError(f"target[{k!r}] must be a finite floating-point tensor")
        out.append(v.detach().to(device=p.device, dtype=p.dtype))
    return out


def dlg_attack(
    model: nn.Module,
    target: Any,
    *,
    input_shape: Sequence[int],
    num_classes: int,
    batch_size: int = 1,
    steps: int = 300,
    lr: float = 1.0,
    generator: Optional[torch.Generator],
    device: Union[str, torch.device] = "cpu",
    line_search_fn: Optional[str] = None,
    output_transform: Optional[str] = None,
) -> DLGResult:
    """Deep Leakage from Gradients (Zhu, Liu, Han, NeurIPS 2019, Algorithm 1).

    Dummy inputs x' ~ N(0, 1) (batch_size, *input_shape) and dummy logits y' ~ N(0, 1)
    (batch_size, num_classes), both drawn from ``generator``, are optimised with
    ``torch.optim.LBFGS`` (learning rate ``lr``, ``steps`` calls of ``step``, 20 iterations each by
    default, no line search, as in the authors' code; ``line_search_fn="strong_wolfe"`` is often
    more robust with tanh / ReLU networks) to minimise DLG's objective

        D(x', y') = || ∇_θ L(F(x'; θ), softmax(y')) - ∇W ||²,

    L the soft-label cross-entropy Σ_c -p_c log softmax(F)_c averaged over the batch (what
    :func:`observed_gradient` computes) and ∇W the observed ``target``: a dict keyed like the
    model's trainable parameters or their flat concatenation (in ``named_parameters()`` order),
    e.g. a shared gradient or a weight difference (θ_old - θ_new) / lr of one local SGD step.
    θ are the weights of ``model`` as given (the attacker must use the model that produced the
    gradient); the model is not modified (parameters enter via ``torch.func.functional_call``).
    The model runs in the mode it is in (``model.eval()`` first if it has dropout or batch norm
    and the client's gradient came from eval mode). ``generator``: a CPU generator (the dummies
    are drawn on CPU, then moved to ``device``, which must hold the model). Returns a
    :class:`DLGResult` (tensors on ``device``). Deterministic for a given generator state on CPU.
    Stops early when L-BFGS makes no more progress (two equal distances in a row).

    ``output_transform="affine"``: the adaptive attacker against a personal output transform (PD-LDPFL, Eq. 3):
    the client's logits are a F(x; θ) + b with a (a scalar) and b (num_classes) the client's own, unknown to the
    server; the attacker adds them to the unknowns, started at the identity (a = 1, b = 0), and matches the
    gradient of L(a F(x'; θ) + b, softmax(y')) with respect to θ. (A personal affine input transform needs no
    unknowns: DLG's dummy input then stands for T_in(x) = a_in x + b_in.)
    """
    params = _trainable(model)
    if not isinstance(input_shape, (tuple, list, torch.Size)) or len(input_shape) == 0:
        raise ValueError(f"input_shape must be a non-empty sequence of positive integers, got {input_shape!r}")
    shape = tuple(_check_pos_int(s, "input_shape entries") for s in input_shape)
    num_classes = _check_pos_int(num_classes, "num_classes")
    batch_size = _check_pos_int(batch_size, "batch_size")
    steps = _check_pos_int(steps, "steps")
    lr = _check_real(lr, "lr", positive=True)
    if line_search_fn not in (None, "strong_wolfe"):
        raise ValueError(f"line_search_fn must be None or 'strong_wolfe', got {line_search_fn!r}")
    if output_transform not in (None, "affine"):
        raise ValueError(f"output_transform must be None or 'affine', got {output_transform!r}")
    dev = torch.device(device)
    if any(p.device.type != dev.type or (dev.index is not None and p.device.index != dev.index) for p in params.values()):
        raise ValueError(f"device {dev} must be the device of the model's parameters")
    goal = _as_target(target, params)
    dtype = next(iter(params.values())).dtype
    leaves = {k: p.detach().clone().requires_grad_(True) for k, p in params.items()}  # θ, fixed
    buffers = dict(model.named_buffers())
    names = list(leaves)

    x = torch.randn((batch_size, *shape), generator=generator, dtype=dtype).to(dev).requires_grad_(True)
    y = torch.randn((batch_size, num_classes), generator=generator, dtype=dtype).to(dev).requires_grad_(True)
    unknowns = [x, y]
    if output_transform == "affine":  # the adaptive attacker: the client's output transform, from the identity
        a = torch.ones(1, dtype=dtype, device=dev, requires_grad=True)
        b = torch.zeros(num_classes, dtype=dtype, device=dev, requires_grad=True)
        unknowns += [a, b]
    opt = torch.optim.LBFGS(unknowns, lr=lr, line_search_fn=line_search_fn)

    def distance() -> Tensor:
        logits = functional_call(model, {**buffers, **leaves}, (x,))
        if output_transform == "affine":
            logits = a * logits + b
        loss = torch.sum(-F.softmax(y, dim=-1) * F.log_softmax(logits, dim=-1), dim=-1).mean()
        grads = torch.autograd.grad(loss, [leaves[k] for k in names], create_graph=True)
        return sum(((g - t) ** 2).sum() for g, t in zip(grads, goal))

    def closure() -> Tensor:
        d = distance()
        grads = torch.autograd.grad(d, unknowns)  # not into θ: it stays fixed
        for u, g in zip(unknowns, grads):
            u.grad = g
        return d.detach()

    def snapshot() -> tuple:
        return tuple(u.detach().clone() for u in unknowns)

    history: List[float] = []
    last = snapshot()  # the last iterate with a finite distance
    converged = True
    for _ in range(steps):
        opt.step(closure)
        with torch.enable_grad():
            d = float(distance().detach())
        if not math.isfinite(d):
            converged = False
            break
        history.append(d)
        last = snapshot()
        if len(history) >= 2 and history[-1] == history[-2]:
            break  # L-BFGS made no progress (its own tolerances hit)
    xs, ys = last[:2]
    soft = F.softmax(ys, dim=-1)
    return DLGResult(inputs=xs, labels=soft.argmax(-1), soft_labels=soft, loss_history=history, converged=converged,
                     output_scale=last[2] if len(last) > 2 else None, output_shift=last[3] if len(last) > 2 else None)


def dlg_mse(reconstructed: Tensor, true: Tensor) -> Tensor:
    """Per-sample mean squared error between DLG's reconstruction and the true inputs (batch,).

    DLG recovers a batch up to a permutation of its samples; for batch_size > 1 the samples are
    matched to minimise the total error (Hungarian algorithm, ``scipy.optimize.linear_sum_assignment``)
    and the errors are returned in the order of ``true``.
    """
    if not isinstance(reconstructed, Tensor) or not isinstance(true, Tensor):
        raise ValueError("reconstructed and true must be torch.Tensors")
    if reconstructed.shape != true.shape or reconstructed.ndim < 1:
        raise ValueError(f"reconstructed {tuple(reconstructed.shape)} and true {tuple(true.shape)} must have one shape (batch, ...)")
    a = reconstructed.detach().to(torch.float64).reshape(reconstructed.shape[0], -1).cpu()
    b = true.detach().to(torch.float64).reshape(true.shape[0], -1).cpu()
    cost = ((a.unsqueeze(0) - b.unsqueeze(1)) ** 2).mean(-1)  # cost[i, j]: true i vs reconstructed j
    if cost.shape[0] == 1:
        return cost[0]
    from scipy.optimize import linear_sum_assignment

    rows, cols = linear_sum_assignment(cost.numpy())
    return cost[torch.as_tensor(rows), torch.as_tensor(cols)]


def mean_image_mse(true: Tensor, pool: Tensor) -> Tensor:
    """The trivial guess an attack must beat: per-sample mean squared error (batch,) between ``true`` and the
    mean of ``pool`` (e.g. the training images), which any attacker can output without seeing a gradient."""
    if not isinstance(true, Tensor) or not isinstance(pool, Tensor) or pool.ndim < 1 or len(pool) == 0:
        raise ValueError("true and pool must be tensors, pool a non-empty batch")
    if pool.shape[1:] != true.shape[1:]:
        raise ValueError(f"pool samples {tuple(pool.shape[1:])} and true samples {tuple(true.shape[1:])} differ in shape")
    guess = pool.detach().to(torch.float64).mean(0, keepdim=True).expand_as(true.to(torch.float64))
    return dlg_mse(guess.contiguous(), true)


# ==== Floating-point attack on textbook samplers (Mironov, CCS 2012) ===============================
__all__ += ["textbook_laplace", "textbook_piecewise", "textbook_hybrid", "FloatAttack", "floating_point_attack",
            "unreachable_by_float_noise"]


def textbook_laplace(w: Tensor, u: Tensor, *, epsilon: float, radius: float = 1.0) -> Tensor:
    """The textbook float sampler of the Laplace mechanism: w + b sign(v) |log(1 - 2|v|)|, v = u - 1/2 + 2^-25
    (inverse CDF of one uniform, b = 2 r / ε), computed in w's dtype. What ldptut sampled before its grid laws."""
    delta = torch.finfo(w.dtype).eps / 4
    v = u.to(w.dtype) - (0.5 - delta)
    noise = v.abs().mul(-2.0).add(1.0).log().copysign(v)
    return w + noise * (2.0 * radius / epsilon)


def textbook_piecewise(w: Tensor, u: Tensor, *, epsilon: float) -> Tensor:
    """The textbook float sampler of the Piecewise Mechanism on [-1, 1] (Wang et al., ICDE 2019, Algorithm 2, by the
    inverse CDF of one uniform), computed in w's dtype."""
    half = epsilon / 2.0
    C = 1.0 / math.tanh(half / 2.0)
    q, q_out = 1.0 / (1.0 + math.exp(-half)), 1.0 / (1.0 + math.exp(half))
    u = u.to(w.dtype)
    d = u - (w + 1.0) * (q_out / 2.0)
    inner = d.clamp(0.0, q)
    outer = d.clamp(max=0.0) + (d - q).clamp(min=0.0)
    l = w * ((C + 1.0) / 2.0) - (C - 1.0) / 2.0
    return (l + inner * ((C - 1.0) / q) + outer * ((C + 1.0) / q_out)).clamp(-C, C)


def textbook_hybrid(w: Tensor, u: Tensor, *, epsilon: float) -> Tensor:
    """The textbook float sampler of the Hybrid Mechanism on [-1, 1]: u < β: :func:`textbook_piecewise` with u / β,
    else Duchi's two-point mechanism with (u - β) / (1 - β)."""
    beta = -math.expm1(-epsilon / 2.0) if epsilon > 0.61 else 0.0
    a = two_point_a(epsilon)
    u = u.to(w.dtype)
    p_plus = w / (2.0 * a) + 0.5
    u2 = ((u - beta) / (1.0 - beta)).clamp(0.0, 1.0)
    duchi = torch.where(u2 < p_plus, a, -a).to(w.dtype)
    return duchi if beta == 0.0 else torch.where(u < beta, textbook_piecewise(w, u / beta, epsilon=epsilon), duchi)


@dataclass(frozen=True)
class FloatAttack:
    """What one report tells apart, over all 2^24 uniforms of a float32 sampler: ``ruled_out`` is P[the report under
    x is one x' can never give] (one report then proves the input was not x'); ``ratio_max`` the largest
    P[y | x] / P[y | x'] over reports both can give; ``epsilon_observed`` is infinite when ``ruled_out`` > 0, else
    log(max(ratio_max, reverse ratio)); ``outputs`` how many distinct reports x gives; ``example`` one report of x that
    x' never gives, with the uniform that produced it (``None`` when there is none)."""

    ruled_out: float
    ratio_max: float
    epsilon_observed: float
    outputs: int
    example: Optional[Tuple[float, float]] = None  # (uniform u, report y)


def _in_sorted(values: Tensor, sorted_set: Tensor) -> Tensor:
    """``torch.isin(values, sorted_set)`` for a sorted, duplicate-free ``sorted_set`` (e.g. ``torch.unique``'s output),
    by binary search: equality as ``==`` compares (so -0.0 is 0.0, as in ``torch.unique``)."""
    if sorted_set.numel() == 0:
        return torch.zeros(values.shape, dtype=torch.bool, device=values.device)
    pos = torch.searchsorted(sorted_set, values).clamp_(max=sorted_set.numel() - 1)
    return sorted_set[pos] == values


def floating_point_attack(sampler: Any, x: float, x_prime: float, *, dtype: torch.dtype = torch.float32) -> FloatAttack:
    """Run ``sampler(w, u)`` on every uniform u = J 2^-24, J = 0 .. 2^24 - 1 (the grid of float32 ``torch.rand`` and
    of :func:`ldptut.fpsafe.uniforms`), for w = x and w = x' (tensors of ``dtype``), and compare the two exact output
    laws (counts of uniforms per distinct report). This is Mironov's attack (CCS 2012) made exhaustive."""
    n = 1 << 24
    u = torch.arange(n, dtype=torch.float64).mul_(2.0 ** -24)
    y = sampler(torch.full((n,), float(x), dtype=dtype), u).detach()
    a, inverse, ca = torch.unique(y, return_inverse=True, return_counts=True)
    del y
    b, cb = torch.unique(sampler(torch.full((n,), float(x_prime), dtype=dtype), u).detach(), return_counts=True)
    common_a, common_b = _in_sorted(a, b), _in_sorted(b, a)
    example = None
    out = ~common_a[inverse]  # the uniforms whose report under x is one x' never gives
    if bool(out.any()):
        upper = out[n // 2:].nonzero()  # an example from u >= 1/2 (a report above x), else the first
        j = int(upper[0, 0]) + n // 2 if upper.numel() else int(out.nonzero()[0, 0])
        example = (float(u[j]), float(a[inverse[j]]))
    ruled_out = float(ca[~common_a].sum()) / n
    ratios = ca[common_a].double() / cb[common_b].double()  # both sorted by value: aligned on the common reports
    ratio_max = float(torch.maximum(ratios, 1.0 / ratios).max()) if ratios.numel() else math.inf
    eps = math.inf if ruled_out > 0 or bool((~common_b).any()) else math.log(ratio_max)
    return FloatAttack(ruled_out=ruled_out, ratio_max=ratio_max, epsilon_observed=eps, outputs=int(a.numel()),
                       example=example)


def unreachable_by_float_noise(reports: Tensor, x_prime: float) -> Tensor:
    """For each report y (a float tensor) of a mechanism that adds noise in floating point (y = fl(x + s)), whether
    **no** noise value s of y's dtype gives fl(x' + s) = y: such a report proves the input was not x', whatever the
    generator can draw. (fl(x' + s) is monotone in s, so the s nearest to y - x' and its two neighbours on each side
    decide it.) The share of such reports among a mechanism's samples is a lower bound on P[one report rules x' out]."""
    if not isinstance(reports, Tensor) or not reports.dtype.is_floating_point:
        raise ValueError("reports must be a floating-point tensor")
    y = reports.detach()
    base = (y.double() - float(x_prime)).to(y.dtype)  # nearest noise value in y's dtype
    xp = torch.tensor(float(x_prime), dtype=y.dtype)
    reach = torch.zeros_like(y, dtype=torch.bool)
    up, down = base.clone(), base.clone()
    for _ in range(3):
        reach |= (xp + up) == y
        reach |= (xp + down) == y
        up = torch.nextafter(up, torch.full_like(up, math.inf))
        down = torch.nextafter(down, torch.full_like(down, -math.inf))
    return ~reach

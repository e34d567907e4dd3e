"""Checking LDP-FL's claim that a client may choose its own weight range and stay ε-LDP.

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

import numbers
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from ._validate import epsilon as _check_epsilon
from .mechanisms import TwoPoint, two_point_a

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

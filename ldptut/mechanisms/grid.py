"""The base of the continuous mechanisms: a grid law sampled exactly (:mod:`ldptut.fpsafe`).
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .. import fpsafe
from .base import Mechanism, Param, _as64, _broadcast_shape, _full, _to_input_dtype


# ---- 3-5. Continuous mechanisms, sampled on a grid (ldptut.fpsafe) ------------------------------------
class GridMechanism(Mechanism):
    """Base of the continuous mechanisms (:class:`Laplace`, :class:`Piecewise`, :class:`Hybrid`): a **grid law**.

    The textbook samplers of these mechanisms realise, in floating point, a law whose set of possible outputs
    depends on the input, so one report can rule an input out (Mironov, CCS 2012; :mod:`ldptut.fpsafe`). Here the
    ideal mechanism at a design ε_d <= ε, in units of the range (t = (w - c) / r in [-1, 1]), is rounded without
    bias onto a fixed grid (randomized rounding: post-processing, so still ε_d-LDP, and still unbiased), and
    sampled by the inverse CDF of exact float64 cumulatives with one 2^-24-step uniform. Every output's probability
    is at least the floor of :func:`ldptut.fpsafe.floor_probability` at every input, so **the law the code samples
    is ε-LDP** for the claimed ε (per coordinate per report), on every device and dtype.

    Closed forms of the grid law (float64): :meth:`output_distribution` (values and designed probabilities),
    :meth:`realized_distribution` (what the 2^24 uniforms realise, exactly), :meth:`variance` (a finite sum),
    :meth:`cdf`, :meth:`support`; :meth:`ideal_variance` is the continuous mechanism's at the claimed ε, and
    ``variance / ideal_variance`` is the cost of sampling safely. :attr:`design` says which ε_d and grid were
    chosen (:func:`ldptut.fpsafe.choose_design`). The report is c + r v_k, computed in float64 and rounded to the
    input's dtype (float16 / bfloat16 reports must be representable, see :meth:`privatize`).
    """

    discrete = True
    #: Most cells of the grid (the design takes the finest grid that meets the floor, up to this).
    max_cells = 1024

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon)
        self._set_range(center, radius)
        build = type(self)._build
        self.design = fpsafe.cached_design(type(self).__name__, self._epsilon, build, self.max_cells)
        self.law = build(self.design.epsilon_design, self.design.cells)

    @staticmethod
    def _build(epsilon_design: float, cells: int) -> fpsafe.GridLaw:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- sampler -----------------------------------------------------------------------------
    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Reports of the grid law for every element of ``x`` (same shape, dtype, device).

        ``x`` is clipped to ``[center - radius, center + radius]`` (NaN / inf raise ``ValueError``); one integer
        uniform J in [0, 2^24) per element is drawn from ``generator`` (:func:`ldptut.fpsafe.uniforms`) and mapped
        to the report by :meth:`_sample`. The law, and so the guarantee, is the same on every device and for every
        input dtype; float16 / bfloat16 reports are rounded grid values (a report beyond the dtype's range
        raises)."""
        w = self._clipped_input(x)
        u = fpsafe.uniforms(w.shape, generator, w.device)
        return _to_input_dtype(self._sample(w, u), x.dtype, self, exact=True)

    def _sample(self, w: Tensor, u: Tensor) -> Tensor:
        """Reports from clipped inputs ``w`` and uniforms ``u`` (multiples of 2^-24): c + r v_k with k the smallest
        index whose cumulative probability at t = (w - c) / r exceeds u (float64 arithmetic; w's dtype out)."""
        u64 = u.to(torch.float64)
        c, r = self._range(u64)
        t = ((w.to(torch.float64) - c) / r).clamp_(-1.0, 1.0)
        t, u64 = torch.broadcast_tensors(t, u64)
        k = self.law.index(u64.contiguous(), t.contiguous())
        v = self.law.values.to(w.device)[k]
        return v.mul_(r).add_(c).to(w.dtype)

    # ---- closed forms of the grid law (float64) ---------------------------------------------
    def _t(self, x: Any) -> Tuple[Tensor, Tensor, Tensor]:
        """t = (clip(x) - c) / r in [-1, 1], with c and r expanded to t's shape (float64)."""
        xc = self.clip(x)
        c, r = self._range(xc)
        t = ((xc - c) / r).clamp(-1.0, 1.0)
        return t, _full(c, t.shape, t), _full(r, t.shape, t)

    def _values(self, c: Tensor, r: Tensor) -> Tensor:
        return self.law.values.to(c.device) * r.unsqueeze(-1) + c.unsqueeze(-1)

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (K,)``: the K report values c + r v_k and their designed
        probabilities (float64, exact up to float64 rounding)."""
        t, c, r = self._t(x)
        return self._values(c, r), self.law.probs(t)

    def realized_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs) as the sampler realises them with 2^-24-step uniforms: each probability a count of the
        2^24 uniforms times 2^-24 (within :data:`ldptut.fpsafe.SLACK` of the designed one)."""
        t, c, r = self._t(x)
        return self._values(c, r), self.law.realized_probs(t)

    def variance(self, x: Any) -> Tensor:
        """Var[report | x] of the grid law: r² Σ_k p_k (v_k - t)² (float64)."""
        t, c, r = self._t(x)
        return self.law.variance(t) * r * r

    def variance_bounds(self, x: Any) -> Tuple[Tensor, Tensor]:
        """Closed-form bounds on :meth:`variance`: r² V0 <= Var <= r² (V0 + w g²/4), V0 the variance before the grid's
        rounding (the law at ε_d), g the grid step, w the rounded share (:meth:`ldptut.fpsafe.GridLaw.variance_bounds`)."""
        t, c, r = self._t(x)
        lo, hi = self.law.variance_bounds(t)
        return lo * r * r, hi * r * r

    def ideal_variance(self, x: Any) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def support(self, x: Any) -> Tuple[Tensor, Tensor]:
        """The smallest and largest report value, c + r min v, c + r max v (float64)."""
        x = _as64(x)
        c, r = self._range(x)
        shape = _broadcast_shape(x, c, r)
        v = self.law.values
        lo, hi = float(v.min()), float(v.max())
        return _full(c, shape, x) + lo * _full(r, shape, x), _full(c, shape, x) + hi * _full(r, shape, x)

    def cdf(self, y: Any, x: Any) -> Tensor:
        """P[report <= y | x] of the grid law (float64)."""
        values, probs = self.output_distribution(x)
        y = _as64(y)
        return (probs * (values <= y.unsqueeze(-1)).to(torch.float64)).sum(-1)

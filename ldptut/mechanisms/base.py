"""The base of every mechanism: :class:`Mechanism` (validated keyword-only parameters, ``privatize`` and
``privatize_rows`` with explicit generators, the closed-form law and the guarantee beside the sampler) and the input
checks the mechanisms share.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from .._validate import all_finite, real
from ..accounting import Guarantee


Param = Union[float, Tensor]
# ---- helpers --------------------------------------------------------------------------------------
def _as_param(value: Any, name: str, *, positive: bool) -> Param:
    """A python float, or a float64 tensor (ndim >= 1) checked elementwise."""
    cond = "finite and > 0" if positive else "finite"
    if not isinstance(value, (Tensor, numbers.Real)) and hasattr(value, "__len__"):
        try:
            value = torch.as_tensor(value, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError) as e:
            raise ValueError(f"{name} must be a real number or tensor, got {value!r}") from e
    if isinstance(value, Tensor):
        if value.dtype == torch.bool or value.dtype.is_complex:
            raise ValueError(f"{name} must be a real-valued tensor, got dtype {value.dtype}")
        if value.ndim == 0:
            value = value.item()
        else:
            if value.numel() == 0:
                raise ValueError(f"{name} must not be an empty tensor")
            t = value.detach().to(torch.float64).clone()
            bad = ~torch.isfinite(t) | (t <= 0) if positive else ~torch.isfinite(t)
            if bool(bad.any()):
                raise ValueError(f"{name} must be {cond} (elementwise), got {t[bad][0].item()} among its elements")
            return t
    return real(value, name, positive=positive, tensor=False)  # a scalar: the package's one rule for a finite real


def _check_tensor(x: Any, name: str = "x") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _check_finite(x: Tensor) -> None:
    """Raise on NaN / inf (one read-only pass, :func:`ldptut._validate.all_finite`)."""
    if not all_finite(x):
        raise ValueError("x contains NaN or inf; privatize() needs finite inputs")


def _to_input_dtype(y: Tensor, dtype: torch.dtype, mech: Any, *, exact: bool = False) -> Tensor:
    """Reports computed in float32 / float64, cast back to the input's dtype. Refused with a message naming the cause:
    reports beyond the compute dtype's range (a tiny epsilon or a huge radius), reports the input's dtype cannot hold
    (float16 overflows beyond 65504), and, for a mechanism with fixed report values (``exact``), float16 / bfloat16
    reports that the dtype would round (every report moved the same way: a bias)."""
    if not all_finite(y):
        raise ValueError(f"{mech!r} produced reports beyond the range of {y.dtype} ({_overflow_hint(mech)}); use a "
                         "larger epsilon, a smaller radius, or float64 inputs")
    if y.dtype == dtype:
        return y
    out = y.to(dtype)
    if not all_finite(out):
        big = y.abs().max().item()
        raise ValueError(f"{mech!r} produced reports up to |{big:.4g}|, which {dtype} cannot represent "
                         f"(largest finite {torch.finfo(dtype).max:g}); pass x as float32 or float64")
    if exact and dtype in (torch.float16, torch.bfloat16):
        moved = out.to(y.dtype) != y
        if bool(moved.any()):
            v = y[moved][0].item()
            w = out[moved][0].item()
            raise ValueError(f"{mech!r} reports {v:.6g}, which {dtype} rounds to {w:.6g} (every such report moves the "
                             f"same way: a bias of {w - v:+.3g}); pass x as float32 or float64")
    return out


def _overflow_hint(mech: Any) -> str:
    a = getattr(mech, "a", None)
    if a is not None:
        return f"reports are c ± r a with a = (e^ε + 1)/(e^ε - 1) = {a:.4g} at epsilon={mech.epsilon:g}"
    return f"epsilon={mech.epsilon:g}, radius={mech.radius if isinstance(mech.radius, float) else 'tensor'}"


def _as64(x: Any) -> Tensor:
    if isinstance(x, Tensor):
        return x.detach().to(torch.float64)
    return torch.as_tensor(x, dtype=torch.float64)


def _like(p: Param, t: Tensor) -> Param:
    """A parameter as a float (unchanged) or a tensor with ``t``'s dtype and device."""
    return p if isinstance(p, float) else p.to(dtype=t.dtype, device=t.device)


def _broadcasts_to(shape: torch.Size, target: torch.Size) -> bool:
    return len(shape) <= len(target) and all(a in (1, b) for a, b in zip(shape[::-1], target[::-1]))


def _broadcast_shape(x: Tensor, *params: Param) -> torch.Size:
    return torch.broadcast_shapes(x.shape, *[p.shape for p in params if isinstance(p, Tensor)])


def _full(v: Param, shape: torch.Size, like: Tensor) -> Tensor:
    if isinstance(v, Tensor):
        return v.expand(shape)
    return torch.full(shape, v, dtype=torch.float64, device=like.device)


def _fused_usable(mech: Any, x: Tensor) -> bool:
    """Whether ``x`` (a CUDA tensor) goes through the fused kernel of :mod:`ldptut.kernels`."""
    from .. import kernels

    return kernels.usable(mech, x)


# ---- base class -----------------------------------------------------------------------------------
class Mechanism:
    """Base class: ε-LDP local randomizer for one scalar report per coordinate.

    ``privatize(x, generator)`` randomizes every element of ``x`` independently (same shape, dtype,
    device as ``x``). Inputs outside ``[center - radius, center + radius]`` are clipped first; the
    ε-LDP guarantee holds for the clipped value. NaN / inf in ``x`` raise ``ValueError``. All random
    draws come from ``generator`` (the default generator if ``None``).
    """

    name = "mechanism"
    discrete = False

    def __init__(self, *, epsilon: float) -> None:
        self._epsilon = real(epsilon, "epsilon", positive=True)
        self._center: Param = 0.0
        self._radius: Param = 1.0

    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def center(self) -> Param:
        return self._center

    @property
    def radius(self) -> Param:
        return self._radius

    @property
    def guarantee(self) -> Guarantee:
        """ε-LDP (δ = 0) for one scalar report of one (clipped) coordinate."""
        return Guarantee(epsilon=self._epsilon)

    def _set_range(self, center: Any, radius: Any) -> None:
        self._center = _as_param(center, "center", positive=False)
        self._radius = _as_param(radius, "radius", positive=True)
        try:
            torch.broadcast_shapes(*[p.shape for p in (self._center, self._radius) if isinstance(p, Tensor)])
        except RuntimeError as e:
            raise ValueError(f"center {tuple(self._center.shape)} and radius {tuple(self._radius.shape)} do not broadcast") from e

    def _range(self, like: Tensor) -> Tuple[Param, Param]:
        """(center, radius) as floats, or tensors with ``like``'s dtype and device."""
        return _like(self._center, like), _like(self._radius, like)

    def input_range(self) -> Tuple[Param, Param]:
        """The clipping range ``(center - radius, center + radius)``."""
        return self._center - self._radius, self._center + self._radius

    def __repr__(self) -> str:
        def fmt(p: Param) -> str:
            return f"{p:g}" if isinstance(p, float) else f"tensor{tuple(p.shape)}"

        return f"{type(self).__name__}(epsilon={self._epsilon:g}, center={fmt(self._center)}, radius={fmt(self._radius)})"

    # ---- closed forms (float64) --------------------------------------------------------------
    def clip(self, x: Any) -> Tensor:
        """``x`` clipped to the input range, as float64."""
        x = _as64(x)
        c, r = self._range(x)
        return torch.clamp(x, c - r, c + r)

    def mean(self, x: Any) -> Tensor:
        """E[output | x] (float64). Unbiased mechanisms: the clipped input."""
        xc = self.clip(x)
        return xc.expand(_broadcast_shape(xc, self._center, self._radius)).clone()

    def bias(self, x: Any) -> Tensor:
        """E[output | x] - clip(x) (float64): identically 0 for the unbiased mechanisms (not :class:`LdpSign`)."""
        return self.mean(x) - self.clip(x)

    def variance(self, x: Any) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- sampler -----------------------------------------------------------------------------
    def _check_range_shape(self, x: Tensor) -> None:
        for name, p in (("center", self._center), ("radius", self._radius)):
            if isinstance(p, Tensor) and not _broadcasts_to(p.shape, x.shape):
                raise ValueError(f"{name} of shape {tuple(p.shape)} does not broadcast to x of shape {tuple(x.shape)}")

    def _clipped_input(self, x: Any) -> Tensor:
        """Check ``x`` (a finite floating-point tensor the range broadcasts to) and return it clipped,
        as a fresh tensor in the compute dtype (x's dtype; float32 for float16 / bfloat16)."""
        x = _check_tensor(x)
        if not x.dtype.is_floating_point:
            raise TypeError(f"x must be a floating-point tensor for {type(self).__name__}, got {x.dtype}")
        _check_finite(x)
        self._check_range_shape(x)
        w = x.detach().to(x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32)
        ends = [float((self._center - self._radius).min()) if isinstance(self._center - self._radius, Tensor)
                else self._center - self._radius,
                float((self._center + self._radius).max()) if isinstance(self._center + self._radius, Tensor)
                else self._center + self._radius]
        if max(abs(e) for e in ends) > torch.finfo(w.dtype).max:
            raise ValueError(f"the range [center - radius, center + radius] = [{ends[0]:.3g}, {ends[1]:.3g}] of {self!r} "
                             f"exceeds {w.dtype}'s range; use a smaller radius or float64 inputs")
        c, r = self._range(w)
        return torch.clamp(w, c - r, c + r)

    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Randomize every element of ``x`` independently (same shape, dtype, device as ``x``).

        ``x`` is clipped to ``[center - radius, center + radius]`` first (the guarantee holds for the
        clipped value); NaN / inf raise ``ValueError``. One uniform per element is drawn from
        ``generator`` and mapped to the report by the subclass's ``_sample`` (its formula). On CUDA the same
        formula runs as one fused Triton kernel with Philox uniforms keyed by a seed drawn from ``generator``
        (:mod:`ldptut.kernels`; other numbers than ``torch.rand``'s, the same law).
        """
        if isinstance(x, Tensor) and x.is_cuda and _fused_usable(self, x):
            from .. import kernels

            self._check_range_shape(x)
            return kernels.privatize(self, x, generator)
        w = self._clipped_input(x)
        u = torch.rand(w.shape, generator=generator, dtype=w.dtype, device=w.device)
        return _to_input_dtype(self._sample(w, u), x.dtype, self, exact=self.discrete)

    def privatize_rows(self, x: Tensor, generators: Sequence[Optional[torch.Generator]]) -> Tensor:
        """Row i of the (n, d) matrix ``x`` randomized with ``generators[i]`` (one client's stream per row): the same
        reports as ``privatize(x[i], generators[i])`` row by row. On CUDA, where the fused kernel applies, the whole
        matrix goes through one launch, row i keyed by a seed drawn from ``generators[i]`` as :meth:`privatize` draws
        it. The one place that decides between the fused kernel and PyTorch, with :meth:`privatize`."""
        x = _check_tensor(x)
        if x.ndim != 2 or len(generators) != x.shape[0]:
            raise ValueError(f"privatize_rows needs an (n, d) matrix and n generators, got shape {tuple(x.shape)} and "
                             f"{len(generators)} generators")
        if x.is_cuda and _fused_usable(self, x):
            from .. import kernels

            self._check_range_shape(x[0])
            return kernels.privatize_rows(self, x, kernels.seeds_from(generators, x.device))
        out = torch.empty_like(x)
        for i, g in enumerate(generators):  # one vectorised call per row (its own generator)
            out[i] = self.privatize(x[i], generator=g)
        return out

    def _sample(self, w: Tensor, u: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def __call__(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        return self.privatize(x, generator)

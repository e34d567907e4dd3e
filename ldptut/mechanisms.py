"""Local randomizers (LDP mechanisms) for one scalar report per coordinate.

Every mechanism is a small class in the style of Opacus / OpenDP:

* the constructor is keyword-only and validates its parameters (``ValueError`` naming the parameter);
* :meth:`~Mechanism.privatize` randomizes a tensor elementwise (same shape, dtype and device),
  drawing all randomness from the ``generator`` it is given, so the same generator seed gives the
  same output;
* the closed forms sit beside the sampler: :meth:`~Mechanism.mean`, :meth:`~Mechanism.variance`,
  and the exact output law ``output_distribution(x)`` (values and probabilities). The continuous
  mechanisms (:class:`Laplace`, :class:`Piecewise`, :class:`Hybrid`, :class:`Gaussian`) report on a fixed
  grid (:class:`GridMechanism`, :mod:`ldptut.fpsafe`), so their law is discrete too; their
  ``ideal_variance`` is the continuous mechanism's, for the cost of sampling safely;
* :attr:`~Mechanism.guarantee` states what is protected, as an :class:`ldptut.accounting.Guarantee`:
  ε (δ = 0; (ε, δ) for :class:`Gaussian`) **per coordinate per round** (one scalar report). A
  client that reports d coordinates per round, for T rounds, composes to
  ``guarantee.compose(d=d, rounds=T)`` (d·T·ε for the pure mechanisms).

Inputs outside the declared range ``[center - radius, center + radius]`` are clipped first; the
guarantee is about the clipped value. **The guarantee holds for the law the code samples**, floating
point included: the grid mechanisms draw each output with its exact probability from a 2^-24-step
uniform and keep every output's probability above a floor (:mod:`ldptut.fpsafe`); the textbook
float samplers do not (Mironov, CCS 2012; :mod:`ldptut.attacks` shows the attack). :class:`Gaussian`, an
(ε, δ) mechanism, draws its grid law with 2^-53-step uniforms and states the (ε, δ) its realised law gives
(its distance ``tv`` from the designed law inside δ; no finite ε where none is certified). The two-output
mechanisms' threshold is rounded to the uniforms' grid, which moves their ratio by one step of 2^-24 (the
foundations chapter prints the excess in ε). Closed forms are float64.
"""
from __future__ import annotations

import functools
import math
import numbers
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from . import accounting, fpsafe
from ._validate import all_finite, delta as _delta, real
from .accounting import PER_COORDINATE, Guarantee, gaussian_epsilon, gaussian_sigma

__all__ = ["Mechanism", "RandomizedResponse", "TwoPoint", "CorrelatedTwoPoint", "codebook_cdf", "Laplace", "Piecewise", "Hybrid",
           "Gaussian", "LdpSign", "MECHANISMS", "make_mechanism", "two_point_a"]

Param = Union[float, Tensor]

#: Threshold of the Hybrid Mechanism (Wang et al., ICDE 2019, Sec. III-C): for ε <= ε* ≈ 0.61 HM is
#: Duchi's mechanism alone.
HYBRID_EPSILON_STAR = 0.61


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
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number or tensor, got {value!r} of type {type(value).__name__}")
    if not math.isfinite(value) or (positive and value <= 0):
        raise ValueError(f"{name} must be {cond}, got {value}")
    return float(value)


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
    from . import kernels

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
            from . import kernels

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
            from . import kernels

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


# ---- 1. Randomized response -----------------------------------------------------------------------
class RandomizedResponse(Mechanism):
    """Warner's randomized response on one bit (Warner, "Randomized Response", JASA 60, 1965), with
    the ε-LDP choice p = e^ε / (1 + e^ε).

    Report the true bit with probability p = e^ε / (1 + e^ε), the flipped bit otherwise, so
    P[y | x] / P[y | x'] <= p / (1 - p) = e^ε. The raw report is biased (E[y] = 1 - p + (2p - 1) x);
    :meth:`estimate` de-biases it: x̂ = (y - (1 - p)) / (2p - 1), unbiased with variance
    p (1 - p) / (2p - 1)^2 (:meth:`variance`). Inputs must be exactly 0 or 1 (bool / integer /
    floating tensors); anything else raises ``ValueError``.
    """

    name = "randomized_response"
    discrete = True

    def __init__(self, *, epsilon: float) -> None:
        super().__init__(epsilon=epsilon)
        self.p = 1.0 / (1.0 + math.exp(-self._epsilon))  # e^ε / (1 + e^ε), overflow-safe

    def __repr__(self) -> str:
        return f"RandomizedResponse(epsilon={self._epsilon:g})"

    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Randomized bits, same shape/dtype/device as ``x`` (x in {0, 1}; no clipping)."""
        x = _check_tensor(x)
        if x.dtype.is_complex:
            raise TypeError("x must be a real tensor")
        if x.dtype.is_floating_point:
            _check_finite(x)
        if x.is_cuda and _fused_usable(self, x):
            from . import kernels

            return kernels.privatize(self, x, generator)
        not_bit = (x != 0) & (x != 1)
        if bool(not_bit.any()):
            raise ValueError(f"x must contain only 0 and 1 for RandomizedResponse, got {x[not_bit][0].item()}")
        dtype = torch.float64 if x.dtype == torch.float64 else torch.float32  # bool/int: as float32
        u = torch.rand(x.shape, generator=generator, dtype=dtype, device=x.device)
        flip = u >= self.p  # probability 1 - p
        return ((x != 0) ^ flip).to(x.dtype)

    def estimate(self, y: Tensor) -> Tensor:
        """Unbiased estimate of x from a report y: (y - (1 - p)) / (2p - 1) (float tensor)."""
        y = _check_tensor(y, "y")
        if not y.dtype.is_floating_point:
            y = y.to(torch.float32)
        return (y - (1.0 - self.p)) / (2.0 * self.p - 1.0)

    def clip(self, x: Any) -> Tensor:
        return _as64(x)

    def mean(self, x: Any) -> Tensor:
        """E[y | x] of the raw report: 1 - p + (2p - 1) x. (E[estimate(y) | x] = x.)"""
        return (1.0 - self.p) + (2.0 * self.p - 1.0) * _as64(x)

    def bias(self, x: Any) -> Tensor:
        """Bias of :meth:`estimate`: 0 (the raw report's bias is ``mean(x) - x``)."""
        return torch.zeros_like(_as64(x))

    def variance(self, x: Any) -> Tensor:
        """Var[estimate(y) | x] = p (1 - p) / (2p - 1)^2, for every x (float64)."""
        p = self.p
        return torch.full_like(_as64(x), p * (1.0 - p) / (2.0 * p - 1.0) ** 2)

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (0, 1), P[y=1|x] = p if x = 1 else 1 - p."""
        x = _as64(x)
        if not bool(((x == 0) | (x == 1)).all()):
            raise ValueError("x must contain only 0 and 1 for RandomizedResponse")
        p1 = self.mean(x)
        values = torch.stack([torch.zeros_like(x), torch.ones_like(x)], dim=-1)
        return values, torch.stack([1.0 - p1, p1], dim=-1)


# ---- 2. Duchi's two-point mechanism (LDP-FL) ------------------------------------------------------
def two_point_a(epsilon: float) -> float:
    """a = (e^ε + 1) / (e^ε - 1) = coth(ε/2) of LDP-FL Eq. (2), for any ε > 0 (float64).

    Beyond ε = 700, e^ε overflows a double while a - 1 = 2 / (e^ε - 1) < 1e-303 is far below the
    spacing of doubles near 1, so a is exactly 1.0 there.
    """
    eps = real(epsilon, "epsilon", positive=True)
    if eps > 700.0:
        return 1.0
    return (math.exp(eps) + 1.0) / math.expm1(eps)


class TwoPoint(Mechanism):
    """Duchi et al.'s one-dimensional mechanism on [c - r, c + r] = LDP-FL's perturbation.

    Sun, Qian, Chen, "LDP-FL: Practical Private Aggregation in Federated Learning with Local
    Differential Privacy", IJCAI 2021, Eq. (2) / Algorithm 2 (after Duchi, Jordan, Wainwright,
    JASA 2018). With a = (e^ε + 1) / (e^ε - 1) and w the clipped input:

        w* = c + r a   with probability  ((w - c)(e^ε - 1) + r (e^ε + 1)) / (2 r (e^ε + 1)),
        w* = c - r a   otherwise.

    Unbiased (E[w*] = w). Exact variance r² a² - (w - c)²; the paper's Lemma 2 states the bound
    r² a² (:meth:`variance_bound`). ``center`` / ``radius`` may be floats or tensors broadcastable
    to x (per-element or per-layer ranges).
    """

    name = "two_point"
    discrete = True

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon)
        self._set_range(center, radius)
        self.a = two_point_a(self._epsilon)

    def _sample(self, w: Tensor, u: Tensor) -> Tensor:
        """Reports from clipped inputs ``w`` and uniforms ``u`` (``w`` is overwritten)."""
        c, r = self._range(w)
        p_plus = w.sub_(c).div_(2.0 * r * self.a).add_(0.5)  # 1/2 + (w - c) / (2 r a)
        plus = (u < p_plus).to(w.dtype)
        return plus.mul_(2.0 * r * self.a).add_(c - r * self.a)  # (c - r a) + 2 r a · plus

    def prob_plus(self, x: Any) -> Tensor:
        """P[output = c + r a | x] (float64), x clipped first."""
        xc = self.clip(x)
        c, r = self._range(xc)
        return 0.5 + (xc - c) / (2.0 * r * self.a)

    def output_values(self, x: Any) -> Tuple[Tensor, Tensor]:
        """The two outputs (c - r a, c + r a), broadcast to x's shape (float64).

        The upper one is computed as (c - r a) + 2 r a, exactly as the sampler does, so float64
        samples equal these values bit for bit."""
        x = _as64(x)
        c, r = self._range(x)
        shape = _broadcast_shape(x, c, r)
        minus = c - r * self.a
        return _full(minus, shape, x), _full(minus + 2.0 * r * self.a, shape, x)

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (c - r a, c + r a), exact float64 probs."""
        lo, hi = self.output_values(x)
        p = self.prob_plus(x).expand(lo.shape)
        return torch.stack([lo, hi], dim=-1), torch.stack([1.0 - p, p], dim=-1)

    def variance(self, x: Any) -> Tensor:
        """Var[w* | w] = r² a² - (w - c)² (float64, elementwise)."""
        xc = self.clip(x)
        c, r = self._range(xc)
        v = (r * self.a) ** 2 - (xc - c) ** 2
        return v.expand(_broadcast_shape(xc, c, r)).clone()

    def variance_bound(self) -> Param:
        """The bound of LDP-FL's Lemma 2: Var[w*] <= r² a² (float, or tensor for tensor radius)."""
        return (self._radius * self.a) ** 2


# ---- 2b. Correlated two-point pairs (CoQ-FL / CorBin-FL) ---------------------------------------
def codebook_cdf(num_rand: int, p_x: float) -> Tensor:
    """F[k] = P[IntCR < k], k = 0..2^NumRand, of the shared codebook index (float64, exclusive CDF).

    CoQ-FL draft, Algorithm 3 (ProbabilityList): a codebook sequence s of NumRand bits, read as the
    integer IntCR, has probability P(s) = p_x^{w_H(s)} (1 - p_x)^{NumRand - w_H(s)} (w_H = popcount).
    The draft's ProbList[i] is the inclusive sum P[IntCR <= i] = F[i + 1].
    """
    nr = int(num_rand)
    k = torch.arange(2 ** nr, dtype=torch.int64)
    ones = torch.zeros_like(k)
    for b in range(nr):  # popcount, one pass per bit (NumRand <= 24)
        ones += (k >> b) & 1
    ones = ones.to(torch.float64)
    probs = p_x ** ones * (1.0 - p_x) ** (nr - ones)
    cdf = torch.cat([torch.zeros(1, dtype=torch.float64), torch.cumsum(probs, 0)])
    cdf[-1] = 1.0
    return cdf


class CorrelatedTwoPoint(TwoPoint):
    """LDP-FL's two-point mechanism for two clients that share common randomness, negatively correlated.

    CoQ-FL draft (published as CorBin-FL, arXiv 2409.13133), Algorithms 1-3 and Fig. 1. A pair draws a
    shared codebook index IntCR per coordinate (NumRand bits of bias p_x, :func:`codebook_cdf` F). Each
    client puts a cut t in [0, 1]: the leader t_L = P_L, the follower t_F = 1 - P_F, where
    P = 1/2 + (w - c)/(2 r a) is the two-point probability of c + r a (Eq. 2). With k the cell of the cut
    (F[k] <= t < F[k+1]) and f = (t - F[k]) / (F[k+1] - F[k]):

        leader   outputs c + r a  iff IntCR < k_L, or IntCR = k_L and V_L < f_L   (its own coin V_L)
        follower outputs c + r a  iff IntCR > k_F, or IntCR = k_F and V_F >= f_F

    so P[leader +] = F[k_L] + (F[k_L+1] - F[k_L]) f_L = P_L exactly, and P[follower +] = P_F: **each
    client's output alone is exactly the two-point mechanism** (ε-LDP per coordinate). Jointly,
    P[(+, +)] = max(0, P_L + P_F - 1) unless both cuts fall in the same cell k, where it is
    (F[k+1] - F[k]) f_L (1 - f_F) (:meth:`joint_distribution`). NumRand = 0 (one cell) is the
    independent pair. The shared index is sampled by the inverse CDF of one uniform (the same law as
    NumRand Bernoulli(p_x) bits read as an integer). ``privatize(x, generator)`` is the lone client's
    (the odd client out): the plain two-point mechanism.

    The draft's Algorithm 2 compares IntCR with FindIndex on the inclusive ProbList (ProbList[i] <= P <
    ProbList[i+1], IntCR < idx -> UP); its marginal is then ProbList[idx-1] + P(idx) ProbGrid, not P
    (:meth:`draft_marginal`). We use the exclusive CDF above, whose marginal is P.
    """

    name = "correlated_two_point"

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0, num_rand: int = 5,
                 p_x: float = 0.5) -> None:
        super().__init__(epsilon=epsilon, center=center, radius=radius)
        if isinstance(num_rand, bool) or not isinstance(num_rand, numbers.Integral) or not 0 <= num_rand <= 24:
            raise ValueError(f"num_rand (shared random bits per coordinate) must be an integer in [0, 24] "
                             f"(float32 uniforms resolve 2^-24), got {num_rand!r}")
        self.num_rand = int(num_rand)
        self.p_x = real(p_x, "p_x")
        if not 0.0 < self.p_x < 1.0:
            raise ValueError(f"p_x (bias of the shared coin) must be in (0, 1), got {p_x!r}")
        self.cdf = codebook_cdf(self.num_rand, self.p_x)

    def __repr__(self) -> str:
        return super().__repr__()[:-1] + f", num_rand={self.num_rand}, p_x={self.p_x:g})"

    # ---- sampler -------------------------------------------------------------------------------
    def privatize_pairs(self, leader: Tensor, follower: Tensor, *, shared: Optional[torch.Generator] = None,
                        local: Optional[torch.Generator] = None) -> Tuple[Tensor, Tensor]:
        """Reports of paired clients: row i of ``leader`` is paired with row i of ``follower`` (same shape).

        Two uniforms per (pair, coordinate), as many as two independent clients use. The leader's point
        U = F[K] + (F[K+1] - F[K]) V_L is drawn whole from ``shared``: a uniform U in [0, 1) read as
        its codebook cell K (F[K] <= U < F[K+1], which has the law of NumRand Bernoulli(p_x) bits read as an
        integer) and its position V_L in the cell (uniform, independent of K): the same joint law as a
        shared index K plus the leader's own coin V_L. The follower's own coin V_F comes from ``local``. (A
        deployment draws K from the pair's shared seed and V_L from the leader's own; the server sees only
        the reports, whose law is the same.) Returns the two report tensors (each the input's shape, dtype
        and device)."""
        if leader.shape != follower.shape:
            raise ValueError(f"leader {tuple(leader.shape)} and follower {tuple(follower.shape)} must have one shape")
        wl, wf = self._clipped_input(leader), self._clipped_input(follower)
        c, r = self._range(wl)
        u = torch.rand(wl.shape, generator=shared, dtype=wl.dtype, device=wl.device)   # leader's point in [0, 1)
        v = torch.rand(wf.shape, generator=local, dtype=wf.dtype, device=wf.device)    # follower's own coin
        # The leader reports + iff its point U < t_L = P_L, the follower iff its point F[K] + (F[K+1] - F[K]) V_F
        # >= t_F = 1 - P_F, with K the cell of U: the cell rule of the class docstring without the cuts' cells.
        t_l = wl.sub_(c).div_(2.0 * r * self.a).add_(0.5)                      # P_L
        if self.p_x == 0.5:  # F[k] = k / 2^NumRand: the follower compares in units of cells, K + V_F
            n = float(2 ** self.num_rand)
            point_f = v.add_(u.mul(n).floor_())                                 # K + V_F (x 2^NumRand is exact)
            t_f = wf.sub_(c).mul_(-n / (2.0 * r * self.a)).add_(n / 2)          # 2^NumRand (1 - P_F)
        else:
            cdf = self.cdf.to(dtype=wl.dtype, device=wl.device)
            k = torch.searchsorted(cdf[1:-1], u, right=True)
            point_f = v.mul_(cdf[k + 1] - cdf[k]).add_(cdf[k])                  # F[K] + (F[K+1] - F[K]) V_F
            t_f = wf.sub_(c).div_(-2.0 * r * self.a).add_(0.5)                  # 1 - P_F
        lo = c - r * self.a
        hi = lo + 2.0 * r * self.a  # the same float as TwoPoint's lo + 2 r a * 1
        lo, hi = torch.as_tensor(lo, dtype=wl.dtype, device=wl.device), torch.as_tensor(hi, dtype=wl.dtype, device=wl.device)
        out_l, out_f = torch.where(u < t_l, hi, lo), torch.where(point_f >= t_f, hi, lo)
        return (_to_input_dtype(out_l, leader.dtype, self, exact=True),
                _to_input_dtype(out_f, follower.dtype, self, exact=True))

    # ---- closed forms (float64) ----------------------------------------------------------------
    def joint_distribution(self, x_leader: Any, x_follower: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs): values (c - r a, c + r a) with shape ``(..., 2)``; probs of shape ``(..., 2, 2)``,
        probs[..., i, j] = P[leader = values[i], follower = values[j]] (exact, float64)."""
        pl, pf = self.prob_plus(x_leader), self.prob_plus(x_follower)
        pl, pf = torch.broadcast_tensors(pl, pf)
        cdf = self.cdf.to(pl.device)
        n = 2 ** self.num_rand
        kl = torch.clamp(torch.searchsorted(cdf[1:-1], pl.contiguous(), right=True), 0, n - 1)
        kf = torch.clamp(torch.searchsorted(cdf[1:-1], (1.0 - pf).contiguous(), right=True), 0, n - 1)
        mass = cdf[kl + 1] - cdf[kl]
        fl = torch.clamp((pl - cdf[kl]) / mass, 0.0, 1.0)
        ff = torch.clamp((1.0 - pf - cdf[kf]) / (cdf[kf + 1] - cdf[kf]), 0.0, 1.0)
        pp = torch.where(kl == kf, mass * fl * (1.0 - ff), torch.clamp(pl + pf - 1.0, min=0.0))
        pm, mp = torch.clamp(pl - pp, min=0.0), torch.clamp(pf - pp, min=0.0)
        mm = torch.clamp(1.0 - pp - pm - mp, min=0.0)  # float64 rounding: never a negative probability
        probs = torch.stack([torch.stack([mm, mp], -1), torch.stack([pm, pp], -1)], -2)
        lo, hi = self.output_values(pl)
        return torch.stack([lo, hi], -1), probs

    def covariance(self, x_leader: Any, x_follower: Any) -> Tensor:
        """Cov[leader, follower] = (2 r a)^2 (P[(+,+)] - P_L P_F) (exact, float64)."""
        _, probs = self.joint_distribution(x_leader, x_follower)
        pl, pf = probs[..., 1, :].sum(-1), probs[..., :, 1].sum(-1)
        _, r = self._range(pl)
        return (2.0 * r * self.a) ** 2 * (probs[..., 1, 1] - pl * pf)

    def pair_sum_variance(self, x_leader: Any, x_follower: Any) -> Tensor:
        """Var[leader + follower] = Var_L + Var_F + 2 Cov (exact, float64)."""
        return self.variance(x_leader) + self.variance(x_follower) + 2.0 * self.covariance(x_leader, x_follower)

    def draft_marginal(self, x: Any) -> Tensor:
        """P[UP] of Algorithm 2 as printed (inclusive ProbList, U = UP iff IntCR < idx, local refinement
        with (P - ProbList[idx]) / (ProbList[idx+1] - ProbList[idx])) for the leader's P = P_L."""
        if self.num_rand == 0:
            raise ValueError("draft_marginal needs num_rand >= 1 (a codebook of at least two entries)")
        p = self.prob_plus(x)
        incl = self.cdf[1:].to(p.device)                                    # ProbList[i] = P[IntCR <= i]
        n = incl.numel()
        idx = torch.clamp(torch.searchsorted(incl, p.contiguous(), right=True) - 1, 0, n - 2)  # PL[idx] <= P < PL[idx+1]
        below = self.cdf.to(p.device)[idx]                                  # P[IntCR < idx]
        grid = (p - incl[idx]) / (incl[idx + 1] - incl[idx])
        mass_idx = incl[idx] - below                                        # P[IntCR = idx]
        return below + mass_idx * torch.clamp(grid, 0.0, 1.0)


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


class _LaplaceGrid(fpsafe.GridLaw):
    """Laplace(t, β = 2/ε_d) on t units, with the tails collapsed and the middle rounded onto a grid of [-1, 1].

    Outputs: -(1 + β) (for Y < -1), the grid -1, -1 + g, ..., 1 (g = 2 / cells; Y in [-1, 1] randomly rounded to
    its two neighbours), 1 + β (for Y > 1). The tails are memoryless: given Y > 1 >= t, Y - 1 is exponential with
    mean β, so collapsing the tail onto its mean 1 + β keeps the report unbiased and lowers the variance. P[index
    <= grid point j] is the mean of the Laplace CDF G over [y_j, y_{j+1}]: for a cell below t,
    (β / 2g) e^{(y_j - t)/β} (e^{g/β} - 1); above t, 1 - (β / 2g) e^{-(y_j - t)/β} (1 - e^{-g/β}); around t,
    ((y_{j+1} - t) + (β/2)(e^{-(y_{j+1} - t)/β} - e^{(y_j - t)/β})) / g, the difference of exponentials as one of
    expm1's (no cancellation in any case)."""

    def __init__(self, epsilon_design: float, cells: int) -> None:
        self.epsilon_design, self.cells = float(epsilon_design), int(cells)
        self.b = 2.0 / self.epsilon_design
        self.g = 2.0 / self.cells
        grid = torch.arange(self.cells + 1, dtype=torch.float64) * self.g - 1.0
        grid[-1] = 1.0
        self.values = torch.cat([grid.new_tensor([-1.0 - self.b]), grid, grid.new_tensor([1.0 + self.b])])
        self._below = (self.b / (2.0 * self.g)) * math.expm1(self.g / self.b)
        self._above = (self.b / (2.0 * self.g)) * -math.expm1(-self.g / self.b)

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        (t,) = state
        n, b, g = self.cells, self.b, self.g
        lo = (k - 1).clamp(0, n - 1).to(torch.float64).mul_(g).sub_(1.0)
        z = (lo - t).div_(b)                                                   # (y_j - t) / β
        e_lo = torch.exp(z.clamp(max=0.0))
        below = e_lo * self._below
        above = torch.exp(z.neg().clamp_(max=0.0)).mul_(-self._above).add_(1.0)
        # around t: e^{-A} - e^{-B} as expm1(-A) - expm1(-B), A = (y_{j+1} - t)/β, B = (t - y_j)/β, both in [0, g/β]
        around = torch.expm1((z + g / b).neg_().clamp_(max=0.0)).sub_(torch.expm1(z.clamp(max=0.0)))
        around = around.mul_(b / 2.0).add_(lo + g - t).div_(g)
        avg = torch.where(z + g / b <= 0.0, below, torch.where(z >= 0.0, above, around))
        first = torch.exp((1.0 + t) / -b).mul_(0.5)                          # P[Y < -1]
        top = torch.exp((1.0 - t) / -b).mul_(-0.5).add_(1.0)                 # P[Y <= 1]
        return torch.where(k <= 0, first, torch.where(k <= n, avg, torch.where(k == n + 1, top, 1.0)))

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """Laplace at ε_d with collapsed tails: 2β² - β² (P[Y < -1] + P[Y > 1]) (the tail beyond a point is
        exponential: replacing it by its mean removes β² times its mass), t units."""
        b = self.b
        return b * b * (2.0 - 0.5 * torch.exp(-(1.0 - t) / b) - 0.5 * torch.exp(-(1.0 + t) / b))

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        (t,) = state
        y = torch.where(u < 0.5, torch.log(2.0 * u), -torch.log(2.0 * (1.0 - u))).mul_(self.b).add_(t)
        pos = y.add_(1.0).div_(self.g)                  # y* in cells from -1; below 0: the lower atom's region
        # index 0: the lower atom (y* < -1), 1 + j: grid point j (y* in cell j), n + 1: the point 1 (y* >= 1)
        c, near = fpsafe.cell_of(pos.add_(1.0), 0, self.cells + 1)
        return c, near


class _PiecewiseGrid(fpsafe.GridLaw):
    """The Piecewise Mechanism at ε_d on t units, randomly rounded onto the grid -C, -C + g, ..., C (g = 2C/cells).

    PM's CDF is G(y) = p_low (y + C) + (p_high - p_low) ramp(y), ramp(y) = clamp(y - l(t), 0, C - 1), so the mean
    of G over a cell [a, a + g] (P[index <= cell]) is p_low (a + g/2 + C) plus (p_high - p_low) times the mean of
    the ramp, ((β' - α)(β' + α)/2 + (C - 1) clamp(a + g - l - (C - 1), 0, g)) / g with α, β' the cell's ends
    relative to l clamped to [0, C - 1]: exact, and without cancellation."""

    def __init__(self, epsilon_design: float, cells: int) -> None:
        self.epsilon_design, self.cells = float(epsilon_design), int(cells)
        half = self.epsilon_design / 2.0
        self.C = 1.0 / math.tanh(half / 2.0)
        self.q = 1.0 / (1.0 + math.exp(-half))
        self.q_out = 1.0 / (1.0 + math.exp(half))
        self.p_high = self.q * math.expm1(half) / 2.0
        self.p_low = self.q_out / (self.C + 1.0)
        self.width = self.C - 1.0
        self.g = 2.0 * self.C / self.cells
        grid = torch.arange(self.cells + 1, dtype=torch.float64) * self.g - self.C
        grid[-1] = self.C
        self.values = grid

    def prepare(self, t: Tensor) -> tuple:
        return t, t * ((self.C + 1.0) / 2.0) - (self.C - 1.0) / 2.0  # t, l(t)

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """PM at ε_d: t² / (e^{ε_d/2} - 1) + (e^{ε_d/2} + 3) / (3 (e^{ε_d/2} - 1)²) (Wang et al., Sec. III-B)."""
        inv = 1.0 / math.expm1(self.epsilon_design / 2.0)
        return t * t * inv + (inv + 4.0 * inv * inv) / 3.0

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        t, l = state
        C, g, W = self.C, self.g, self.width
        rel = k.clamp(0, self.cells - 1).to(torch.float64).mul_(g).sub_(C).sub_(l)   # a - l
        alpha = rel.clamp(0.0, W)
        beta = (rel + g).clamp_(0.0, W)
        flat = (rel + (g - W)).clamp_(0.0, g)
        ramp = beta.sub(alpha).mul_(beta.add_(alpha)).mul_(0.5).add_(flat.mul_(W)).div_(g)
        avg = rel.add_(l).add_(g / 2.0 + C).mul_(self.p_low).add_(ramp.mul_(self.p_high - self.p_low))
        return torch.where(k >= self.cells, 1.0, avg)

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        t, l = state
        C = self.C
        d = u - (t + 1.0) * (self.q_out / 2.0)
        inner = d.clamp(0.0, self.q)
        outer = d.clamp(max=0.0).add_((d - self.q).clamp_(min=0.0))
        y = inner.div_(self.p_high).add_(l).add_(outer.div_(self.p_low)).clamp_(-C, C)
        return fpsafe.cell_of(y.add_(C).div_(self.g), 0, self.cells - 1)


class _HybridGrid(fpsafe.GridLaw):
    """HM at ε_d: with probability 1 - β Duchi's two outputs ±a (indices 0, 1), with probability β the grid
    Piecewise law (indices 2, ...); β = 1 - e^{-ε_d/2} above ε* ≈ 0.61, else 0 (Duchi alone)."""

    def __init__(self, epsilon_design: float, cells: int) -> None:
        self.epsilon_design, self.cells = float(epsilon_design), int(cells)
        e = self.epsilon_design
        self.beta = -math.expm1(-e / 2.0) if e > HYBRID_EPSILON_STAR else 0.0
        self.one_minus_beta = math.exp(-e / 2.0) if e > HYBRID_EPSILON_STAR else 1.0
        self.a = two_point_a(e)
        self.pm = _piecewise_grid(e, cells) if self.beta > 0.0 else None
        duchi = torch.tensor([-self.a, self.a], dtype=torch.float64)
        self.values = duchi if self.pm is None else torch.cat([duchi, self.pm.values])
        self.rounded_weight = self.beta
        self.g = self.pm.g if self.pm is not None else 0.0

    def prepare(self, t: Tensor) -> tuple:
        return (t,) if self.pm is None else self.pm.prepare(t)

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """β Var_PM(ε_d) + (1 - β)(a_d² - t²)."""
        duchi = self.a * self.a - t * t
        return duchi if self.pm is None else self.beta * self.pm.unrounded_variance(t) + self.one_minus_beta * duchi

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        t = state[0]
        first = (t / (-2.0 * self.a)).add_(0.5).mul_(self.one_minus_beta)  # (1 - β)(1 - P_plus)
        if self.pm is None:
            return torch.where(k <= 0, first, 1.0)
        pm = self.pm.cum_at((k - 2).clamp(min=0), state).mul_(self.beta).add_(self.one_minus_beta)
        return torch.where(k <= 0, first, torch.where(k == 1, self.one_minus_beta,
                                                      torch.where(k >= self.size - 1, 1.0, pm)))

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        duchi = u < self.one_minus_beta                  # index 0 or 1, decided by cum_at(0) alone
        if self.pm is None:
            return torch.zeros(u.shape, dtype=torch.int64, device=u.device), torch.zeros_like(duchi)
        v = ((u - self.one_minus_beta) / self.beta).clamp_(0.0, 1.0)
        c, near = self.pm.candidate(v, state)
        return torch.where(duchi, 0, c.add_(2)), near & ~duchi


_laplace_grid = functools.lru_cache(maxsize=512)(_LaplaceGrid)
_piecewise_grid = functools.lru_cache(maxsize=512)(_PiecewiseGrid)
_hybrid_grid = functools.lru_cache(maxsize=512)(_HybridGrid)


# ---- 3. Laplace -----------------------------------------------------------------------------------
class Laplace(GridMechanism):
    """The Laplace mechanism on [c - r, c + r], as a grid law.

    Ideal: clip to [c - r, c + r] and add Laplace noise of scale b = 2r / ε (Dwork, McSherry, Nissim, Smith,
    "Calibrating Noise to Sensitivity", TCC 2006: Lap(Δ/ε) for sensitivity Δ = 2r, the width of the range);
    unbiased, variance 2 b² (:meth:`ideal_variance`).

    Sampled (:class:`GridMechanism`): Laplace at the design ε_d, b_d = 2r / ε_d, with reports below c - r collapsed
    onto c - r - b_d and above c + r onto c + r + b_d (the tail of a Laplace beyond a point past its centre is
    exponential, so its mean is that point plus b_d: still unbiased) and the reports in between rounded without
    bias onto a grid of [c - r, c + r]. The cost against the ideal, ``variance / ideal_variance`` (measured in
    ``tests/test_fpsafe.py``): about 1.00 at ε = 1, below 1 at small ε (the collapsed tails) and above 1 at large
    ε, where the floor forces a coarse grid.
    """

    name = "laplace"

    _build = staticmethod(_laplace_grid)

    @property
    def scale(self) -> Param:
        """b = 2 r / ε of the ideal mechanism."""
        return 2.0 * self._radius / self._epsilon

    def ideal_variance(self, x: Any) -> Tensor:
        """2 b², b = 2r / ε (float64, elementwise)."""
        x = _as64(x)
        b = _like(self.scale, x)
        return _full(2.0 * b * b, _broadcast_shape(x, self._center, self._radius), x).clone()

    def ideal_density(self, y: Any, x: Any) -> Tensor:
        """f(y | x) = exp(-|y - clip(x)| / b) / (2b) of the ideal mechanism (float64)."""
        y, w = _as64(y), self.clip(x)
        b = _like(self.scale, w)
        return torch.exp(-(y - w).abs() / b) / (2.0 * b)


# ---- 4. Piecewise mechanism -----------------------------------------------------------------------
class Piecewise(GridMechanism):
    """Piecewise Mechanism (PM), Wang et al., "Collecting and Analyzing Multidimensional Data with Local
    Differential Privacy", ICDE 2019, Sec. III-B, Algorithm 2, as a grid law.

    Ideal, on t = (w - c) / r in [-1, 1] (w the clipped input), with C = (e^{ε/2} + 1) / (e^{ε/2} - 1),
    l(t) = (C + 1) t / 2 - (C - 1) / 2 and r(t) = l(t) + C - 1: with probability e^{ε/2} / (e^{ε/2} + 1) output
    uniform on [l(t), r(t)], otherwise uniform on [-C, l(t)) ∪ (r(t), C]; the report is c + r · t*. Density of t*:
    p_high = e^{ε/2}(e^{ε/2} - 1) / (2(e^{ε/2} + 1)) on [l, r], p_low = p_high / e^ε elsewhere on [-C, C].
    Unbiased; Var[t* | t] = t² / (e^{ε/2} - 1) + (e^{ε/2} + 3) / (3 (e^{ε/2} - 1)²) (Wang et al., Sec. III-B),
    times r² (:meth:`ideal_variance`).

    Sampled (:class:`GridMechanism`): PM at the design ε_d rounded without bias onto a grid of [-C_d, C_d]; the
    reports stay inside [c - r C_d, c + r C_d] (:meth:`support`). ``C``, ``q``, ``p_high``, ``p_low`` are the ideal
    mechanism's at the claimed ε; the grid law's are on :attr:`law`.
    """

    name = "piecewise"
    max_cells = 2048

    _build = staticmethod(_piecewise_grid)

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon, center=center, radius=radius)
        half = self._epsilon / 2.0
        self.C = 1.0 / math.tanh(half / 2.0)  # (e^{ε/2} + 1) / (e^{ε/2} - 1), no overflow
        self.q = 1.0 / (1.0 + math.exp(-half))  # e^{ε/2} / (e^{ε/2} + 1)
        self.q_out = 1.0 / (1.0 + math.exp(half)) if half < 700.0 else 0.0
        self.p_high = self.q * math.expm1(half) / 2.0 if half < 700.0 else math.inf
        self.p_low = self.q_out / (self.C + 1.0)

    def interval(self, x: Any) -> Tuple[Tensor, Tensor]:
        """The ideal mechanism's high-density interval [c + r l(t), c + r r(t)] in output units (float64)."""
        t, c, r = self._t(x)
        l = (self.C + 1.0) / 2.0 * t - (self.C - 1.0) / 2.0
        return c + r * l, c + r * (l + self.C - 1.0)

    def ideal_variance(self, x: Any) -> Tensor:
        """r² (t² / (e^{ε/2} - 1) + (e^{ε/2} + 3) / (3 (e^{ε/2} - 1)²)) (Wang et al., Sec. III-B)."""
        t, c, r = self._t(x)
        inv = 1.0 / math.expm1(self._epsilon / 2.0) if self._epsilon < 1400.0 else 0.0  # 1 / (e^{ε/2} - 1)
        return (t * t * inv + (inv + 4.0 * inv * inv) / 3.0) * r * r


# ---- 5. Hybrid mechanism --------------------------------------------------------------------------
class Hybrid(GridMechanism):
    """Hybrid Mechanism (HM), Wang et al., ICDE 2019, Sec. III-C, as a grid law.

    Ideal: with β = 1 - e^{-ε/2} if ε > ε* ≈ 0.61 and β = 0 otherwise, apply the Piecewise mechanism with
    probability β, otherwise Duchi's two-point mechanism (:class:`TwoPoint`), both with the same ε, center and
    radius. A mixture (input-independent weights) of two ε-LDP mechanisms is ε-LDP; both parts are unbiased, so
    Var = β Var_PM + (1 - β) Var_Duchi (:meth:`ideal_variance`).

    Sampled (:class:`GridMechanism`): HM at the design ε_d, its PM part on a grid; outputs c ∓ r a_d (Duchi's,
    a_d = (e^{ε_d} + 1) / (e^{ε_d} - 1)) and the grid of [c - r C_d, c + r C_d]; :attr:`beta` is the design's β.
    """

    name = "hybrid"

    _build = staticmethod(_hybrid_grid)

    @property
    def beta(self) -> float:
        """β of the design ε_d: the probability of the Piecewise part (0 at ε_d <= ε*)."""
        return self.law.beta

    def ideal_variance(self, x: Any) -> Tensor:
        """β Var_PM(x) + (1 - β) Var_Duchi(x) of the ideal HM at the claimed ε (float64)."""
        e = self._epsilon
        beta = -math.expm1(-e / 2.0) if e > HYBRID_EPSILON_STAR else 0.0
        pm = Piecewise(epsilon=e, center=self._center, radius=self._radius) if beta > 0.0 else None
        duchi = TwoPoint(epsilon=e, center=self._center, radius=self._radius).variance(x)
        return duchi if pm is None else beta * pm.ideal_variance(x) + (1.0 - beta) * duchi


# ---- 6. Gaussian (Wu et al. 2023, IID clients) ------------------------------------------------------
#: Grid cells per noise standard deviation of the Gaussian's grid law (rounding adds at most g²/4 = σ²/4096).
GAUSSIAN_CELLS_PER_SIGMA = 32
#: The Gaussian's report is clamped to [c - r - Bσ, c + r + Bσ] (B = 9: P[|Z| > 9] = 2.3e-19, below the 2^-53 step).
GAUSSIAN_CLAMP_SIGMAS = 9.0
_SQRT_2PI_INV = 1.0 / math.sqrt(2.0 * math.pi)


def _psi_neg(z: Tensor) -> Tensor:
    """ψ(z) = ∫_{-inf}^z Φ = z Φ(z) + φ(z) for z <= 0, as e^{-z²/2} (1/sqrt(2π) + (z/2) erfcx(-z/sqrt 2)): no
    underflow of Φ on the way, and the small bracket's relative error grows only like z² ε_mach."""
    return torch.exp(-0.5 * z * z) * (_SQRT_2PI_INV + 0.5 * z * torch.special.erfcx(-z / math.sqrt(2.0)))


class _GaussianGrid(fpsafe.GridLaw):
    """N(t, s²) on t units (s = σ / r), clamped to [-L, L] (L = 1 + B s) and rounded without bias onto the grid
    -L, -L + g, ..., L (n cells, g = 2L / n, about s / 32).

    P[index <= j] is the mean of the clamped CDF over the cell [y_j, y_{j+1}]: (s/g) (ψ(b) - ψ(a)),
    a = (y_j - t)/s, b = (y_{j+1} - t)/s, ψ(z) = z Φ(z) + φ(z). Below t it is computed so; above t as
    1 - (s/g) (ψ(-a) - ψ(-b)) (the mean of 1 - Φ); across t as (s/g) (b + ψ(-b) - ψ(a)) (ψ(b) = b + ψ(-b)): every ψ
    at a non-positive argument (:func:`_psi_neg`), no cancellation beyond the cell's own width. Sampled with
    2^-53-step uniforms (:data:`ldptut.fpsafe.GAUSSIAN_BITS`)."""

    bits = fpsafe.GAUSSIAN_BITS

    def __init__(self, s: float, max_cells: int) -> None:
        self.s = float(s)
        self.L = 1.0 + GAUSSIAN_CLAMP_SIGMAS * self.s
        want = math.ceil(2.0 * self.L * GAUSSIAN_CELLS_PER_SIGMA / self.s) if self.s > 0 else max_cells
        self.cells = int(min(max(want, 2), max_cells))
        self.g = 2.0 * self.L / self.cells
        grid = torch.arange(self.cells + 1, dtype=torch.float64) * self.g - self.L
        grid[-1] = self.L
        self.values = grid
        self.epsilon_design = math.nan  # an (ε, δ) law: no design ε

    @property
    def tv_bound(self) -> float:
        """Total variation between the realised and the designed law: each of the K = n + 1 cumulatives is off by
        less than 2^-53 (the ceil onto the uniforms' grid) plus its float error (:attr:`cum_error`), and
        TV = (1/2) Σ_k |p̂_k - p_k| <= K max_k |F̂_k - F_k|."""
        return (self.cells + 1) * (2.0 ** -fpsafe.GAUSSIAN_BITS + self.cum_error)

    @property
    def cum_error(self) -> float:
        """Bound on the float64 error of a cumulative: :data:`ldptut.fpsafe.GAUSSIAN_CUM_ERROR` (1 + 1/s)."""
        return fpsafe.GAUSSIAN_CUM_ERROR * (1.0 + 1.0 / self.s)

    def _lower_upper(self, k: Tensor, state: tuple) -> Tuple[Tensor, Tensor]:
        """(F_k, G_k = 1 - F_k), each computed directly: the mean of Φ over the cell for F, of 1 - Φ for G, so the
        small one of the two is accurate to its own size (float64 holds 1 - G only to 2^-53)."""
        (t,) = state
        n, s, g = self.cells, self.s, self.g
        lo = (k.clamp(0, n - 1).to(torch.float64) * g).sub_(self.L)
        a = (lo - t) / s
        b = (lo + g - t) / s
        # every case needs ψ at -|a| and -|b| only: ψ(a), ψ(b) below t; ψ(-a), ψ(-b) above; ψ(a), ψ(-b) across
        pa, pb = _psi_neg(-a.abs()), _psi_neg(-b.abs())
        w = s / g
        lower_below = (pb - pa) * w          # cell below t: the mean of Φ, small
        upper_above = (pa - pb) * w          # cell above t: the mean of 1 - Φ, small
        across = (b + pb - pa) * w           # cell around t: ψ(b) = b + ψ(-b)
        is_below, is_above = b <= 0.0, a >= 0.0
        F = torch.where(is_below, lower_below, torch.where(is_above, 1.0 - upper_above, across))
        G = torch.where(is_below, 1.0 - lower_below, torch.where(is_above, upper_above, 1.0 - across))
        last = k >= n
        return torch.where(last, torch.ones_like(F), F), torch.where(last, torch.zeros_like(G), G)

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:
        return self._lower_upper(k, state)[0]

    def upper_at(self, k: Tensor, state: tuple) -> Tensor:
        """G_k = 1 - F_k = P[index > k | t], computed directly (:meth:`_lower_upper`)."""
        return self._lower_upper(k, state)[1]

    def passed(self, k: Tensor, state: tuple, u: Tensor) -> Tensor:
        """F_k <= u, decided on F_k for u < 1/2 and on G_k >= 1 - u for u >= 1/2 (1 - u is exact for a multiple of
        2^-53): in the upper tail the cell probabilities are far below float64's step at 1."""
        F, G = self._lower_upper(k, state)
        return torch.where(u >= 0.5, G >= 1.0 - u, F <= u).to(torch.int64)

    def realized_probs(self, t: Tensor) -> Tensor:
        """What the sampler realises: J < 2^52 (u < 1/2) goes to the k with F_{k-1} <= J 2^-53 < F_k, J >= 2^52 to
        the k with G_k < 1 - J 2^-53 <= G_{k-1}; each probability a count of J times 2^-53 (float64, exact)."""
        t = torch.as_tensor(t, dtype=torch.float64)
        k = torch.arange(self.size, dtype=torch.int64, device=t.device).expand(*t.shape, -1)
        state = (t.unsqueeze(-1).expand(*t.shape, self.size),)
        full, half = float(1 << self.bits), float(1 << (self.bits - 1))
        F, G = self._lower_upper(k, state)
        low = torch.ceil(F * full).clamp_(0.0, half)
        low[..., -1] = half
        high = torch.floor(G * full).clamp_(0.0, half)
        high[..., -1] = 0.0
        n_low = torch.diff(low, dim=-1, prepend=torch.zeros_like(low[..., :1]))
        n_high = -torch.diff(high, dim=-1, prepend=torch.full_like(high[..., :1], half))
        return (n_low + n_high) * 2.0 ** -self.bits

    def unrounded_variance(self, t: Tensor) -> Tensor:
        """s² (the clamp at 9 s beyond the range changes it by less than 1e-30 relative, below float64's step)."""
        return torch.full_like(torch.as_tensor(t, dtype=torch.float64), self.s * self.s)

    def candidate(self, u: Tensor, state: tuple) -> Tensor:
        (t,) = state
        # the quantile through the smaller tail (1 - u is exact for u a multiple of 2^-53): relative accuracy
        z = torch.where(u < 0.5, torch.special.ndtri(u), -torch.special.ndtri(1.0 - u))
        pos = (z * self.s + t + self.L) / self.g
        return fpsafe.cell_of(pos, 0, self.cells)


@functools.lru_cache(maxsize=256)
def _gaussian_grid(s: float, max_cells: int) -> _GaussianGrid:
    return _GaussianGrid(s, max_cells)


class Gaussian(GridMechanism):
    """Clip to [c - r, c + r] and add N(0, σ²) noise: the Gaussian mechanism, (ε, δ)-LDP per coordinate, sampled as a
    grid law whose **realised** law gives the stated (ε, δ).

    Ideal: Dwork, Kenthapadi, McSherry, Mironov, Naor, Eurocrypt 2006; used by Wu, Xu, Zhu (Appl. Sci. 2023,
    Section 3.1) for IID clients. The sensitivity of one clipped coordinate is Δ = 2r (any two inputs), μ = 2r/σ, and
    the ideal mechanism's exact δ(ε) is Balle & Wang's (ICML 2018, Thm 8; :func:`ldptut.accounting.gaussian_delta`).

    **Sampled.** Float noise added to the input lets a report rule an input out (Mironov, CCS 2012; at (ε, δ) =
    (1, 1e-5) at least 12 % of float32 reports of 0 cannot occur for 1, far above δ). Instead (:class:`_GaussianGrid`):
    in units t = (w - c)/r, the noisy value is clamped to ±(1 + 9 s) (s = σ/r; post-processing), rounded without bias
    onto a fixed grid of step about s/32 (post-processing), and drawn by the inverse CDF of float64 cumulatives with
    one 2^-53-step uniform (:data:`ldptut.fpsafe.GAUSSIAN_BITS`). The designed law is a post-processing of the
    Gaussian, so it is μ-GDP exactly; the realised one is within total variation tv = K (2^-53 + float error) of it
    (K grid values, :attr:`_GaussianGrid.tv_bound`), so one report is (ε, δ_μ(ε) + (1 + e^ε) tv)-DP
    (:func:`ldptut.accounting.gaussian_epsilon`), and k reports add k tv (:class:`ldptut.accounting.Guarantee`).
    A pure grid law with a floor (the other continuous mechanisms) cannot work here: the Gaussian's privacy loss is
    unbounded, its tails must go into δ, and 2^-24 steps would leave tv about 1e-5, as large as δ itself.

    ``Gaussian(epsilon=, delta=)`` calibrates σ so that the **realised** law is (ε, δ)-DP: σ for the ideal mechanism
    at δ - (1 + e^ε) tv (tv of the grid at the ideal σ; a larger σ has fewer cells, so tv only falls); ``ValueError``
    when that leaves less than δ/2 (ε too large for 53-bit uniforms). :meth:`with_sigma` takes a given σ (e.g. a
    paper's formula) and states the smallest ε that holds for ``delta``, which is ``math.inf`` when none does: a
    one-uniform sampler realises no probability ratio above 2^53 = e^36.7 and no output below 2^-53, so a σ whose ideal
    ε runs into the hundreds (μ = 2r/σ above about 5 at δ = 1e-3) has **no** realised guarantee; its reports tell the
    ends of the range apart almost surely. Cost: Var = σ² + at most g² r²/4 (:meth:`variance`, exact;
    :meth:`ideal_variance` is σ²), unbiased up to the clamp (|bias| < 1e-20 σ).
    """

    name = "gaussian"
    #: Most cells of the grid (a σ below 2r/1000 or so reaches it; the grid is then coarser than s/32).
    max_cells = 1 << 16

    def __init__(self, *, epsilon: float, delta: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        Mechanism.__init__(self, epsilon=epsilon)
        self._delta = _delta(delta)
        self._set_range(center, radius)
        if isinstance(self._radius, Tensor):
            raise ValueError("Gaussian needs a scalar radius (σ is calibrated for one sensitivity 2r)")
        sens = 2.0 * self._radius
        tv0 = _gaussian_grid(gaussian_sigma(self._epsilon, self._delta, sens) / self._radius, self.max_cells).tv_bound
        room = self._delta - (math.inf if self._epsilon > 700 else (1.0 + math.exp(self._epsilon)) * tv0)
        if not room >= self._delta / 2.0:
            raise ValueError(
                f"epsilon={epsilon!r} with delta={delta!r} cannot be realised by a sampler of 2^-{fpsafe.GAUSSIAN_BITS}-step "
                f"uniforms: its total variation {tv0:.3g} from the ideal law, times (1 + e^epsilon), exceeds delta/2; "
                f"use a smaller epsilon or a larger delta")
        self.sigma = gaussian_sigma(self._epsilon, room, sens)
        self._init_law()
        if not accounting.gaussian_delta(self._epsilon, sens / self.sigma) + (1.0 + math.exp(self._epsilon)) * self.tv \
                <= self._delta:  # pragma: no cover - guarded by the calibration above
            raise AssertionError("Gaussian calibration: the realised delta exceeds delta")

    def _init_law(self) -> None:
        self.law = _gaussian_grid(self.sigma / self._radius, self.max_cells)
        self.design = None
        self.tv = self.law.tv_bound

    @classmethod
    def with_sigma(cls, *, sigma: float, delta: float, center: float = 0.0, radius: float = 1.0) -> "Gaussian":
        """The mechanism with noise std ``sigma``; its ε is the smallest that the realised law gives for ``delta``
        and Δ = 2r (``math.inf`` when none: see the class docstring)."""
        sig = _as_param(sigma, "sigma", positive=True)
        rad = _as_param(radius, "radius", positive=True)
        if isinstance(sig, Tensor) or isinstance(rad, Tensor):
            raise ValueError("Gaussian.with_sigma needs scalar sigma and radius")
        mu = 2.0 * rad / sig
        try:
            ideal = gaussian_epsilon(_delta(delta), mu) if math.isfinite(mu) else math.inf
        except ValueError:
            ideal = math.inf
        if not math.isfinite(ideal):
            raise ValueError(f"sigma={sigma!r} is too small for radius={radius!r} (sensitivity over sigma 2r/σ = {mu:.3g}): "
                             f"no finite epsilon holds for delta={delta!r}; give a larger sigma")
        self = cls.__new__(cls)
        self._delta = float(delta)
        self._set_range(center, rad)
        self.sigma = float(sig)
        self._init_law()
        self.ideal_epsilon = ideal
        # may be 0 (δ(0) <= delta: σ much larger than 2r) or inf (no finite ε holds for the realised law)
        self._epsilon = gaussian_epsilon(self._delta, mu, self.tv)
        return self

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def guarantee(self) -> Guarantee:
        """(ε, δ) for one report of one clipped coordinate, for the law the code samples: μ = 2r/σ of the designed
        law and its distance ``tv`` (composition adds it up; ε may be ``math.inf``: no finite ε at this δ)."""
        return Guarantee(epsilon=self._epsilon, delta=self._delta, mu=2.0 * self._radius / self.sigma, tv=self.tv)

    @property
    def ideal_guarantee(self) -> Guarantee:
        """The real-valued mechanism's exact (ε, δ) at this σ (no sampler realises it where ε is large)."""
        mu = 2.0 * self._radius / self.sigma
        return Guarantee(epsilon=gaussian_epsilon(self._delta, mu), delta=self._delta, mu=mu,
                         note="ideal real-valued mechanism")

    def __repr__(self) -> str:
        center = f"{self._center:g}" if isinstance(self._center, float) else f"tensor{tuple(self._center.shape)}"
        return (f"Gaussian(epsilon={self._epsilon:g}, delta={self._delta:g}, sigma={self.sigma:g}, "
                f"center={center}, radius={self._radius:g})")

    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Reports of the grid law for every element of ``x`` (same shape, dtype, device): ``x`` clipped, one
        integer uniform J in [0, 2^53) per element from ``generator``, the report c + r v_k with v_k the grid value
        whose cumulative interval holds J 2^-53 (float64, then the input's dtype)."""
        w = self._clipped_input(x)
        u = fpsafe.uniforms(w.shape, generator, w.device, bits=fpsafe.GAUSSIAN_BITS)
        return _to_input_dtype(self._sample(w, u), x.dtype, self)

    def ideal_variance(self, x: Any) -> Tensor:
        """σ² for every x (float64): the real-valued mechanism's."""
        x = _as64(x)
        return torch.full(_broadcast_shape(x, self._center, self._radius), self.sigma ** 2, dtype=torch.float64)

    def ideal_density(self, y: Any, x: Any) -> Tensor:
        """f(y | x) = exp(-(y - clip(x))² / (2σ²)) / (σ sqrt(2π)) of the real-valued mechanism (float64)."""
        z = (_as64(y) - self.clip(x)) / self.sigma
        return torch.exp(-0.5 * z * z) / (self.sigma * math.sqrt(2.0 * math.pi))

    def ideal_cdf(self, y: Any, x: Any) -> Tensor:
        """P[Y <= y | x] = Φ((y - clip(x)) / σ) of the real-valued mechanism (float64)."""
        return torch.special.ndtr((_as64(y) - self.clip(x)) / self.sigma)


# ---- 7. ldpsign (Wu et al. 2023, non-IID clients; Jin et al. 2020) -------------------------------
class LdpSign(Mechanism):
    """Stochastic sign: report +1 with probability Φ(w / σ), else -1 (w = x clipped to [-r, r]).

    Wu, Xu, Zhu (Appl. Sci. 2023, Section 3.1, after Jin et al., "Stochastic-Sign SGD for Federated
    Learning with Theoretical Guarantees", 2020) with σ = Δ2 sqrt(2 ln(1.25/δ)) / ε, the classical
    Gaussian-mechanism calibration (Dwork & Roth 2014, Thm A.1): the report is the sign of
    w + N(0, σ²), so it inherits the Gaussian mechanism's (ε, δ) **when that calibration is valid**
    (Thm A.1 needs ε < 1 and Δ2 >= 2r). Because the output is binary and w is bounded, the exact
    guarantee is pure: ε* = ln(Φ(r/σ) / Φ(-r/σ)) per coordinate per report (:attr:`guarantee`);
    the paper's (ε, δ) is kept as :attr:`calibration`.

    E[output | w] = 2Φ(w/σ) - 1 (a biased, monotone estimate of w's sign), Var = 1 - E².
    """

    name = "ldpsign"
    discrete = True

    def __init__(self, *, epsilon: float, delta: float, l2_sensitivity: float, radius: float = 1.0) -> None:
        eps = real(epsilon, "epsilon", positive=True)
        dl = _delta(delta)
        sens = _as_param(l2_sensitivity, "l2_sensitivity", positive=True)
        rad = _as_param(radius, "radius", positive=True)
        if isinstance(sens, Tensor) or isinstance(rad, Tensor):
            raise ValueError("LdpSign needs scalar l2_sensitivity and radius")
        self.sigma = sens * math.sqrt(2.0 * math.log(1.25 / dl)) / eps
        self.calibration = Guarantee(epsilon=eps, delta=dl, unit=PER_COORDINATE, note="as calibrated by the paper")
        self.l2_sensitivity = sens
        from scipy.special import log_ndtr

        exact = float(log_ndtr(rad / self.sigma) - log_ndtr(-rad / self.sigma))
        super().__init__(epsilon=exact)
        self._set_range(0.0, rad)

    def __repr__(self) -> str:
        return (f"LdpSign(epsilon={self.calibration.epsilon:g}, delta={self.calibration.delta:g}, "
                f"l2_sensitivity={self.l2_sensitivity:g}, radius={self._radius:g}; sigma={self.sigma:g}, "
                f"exact pure epsilon={self._epsilon:.4g})")

    def prob_plus(self, x: Any) -> Tensor:
        """P[output = +1 | x] = Φ(clip(x) / σ) (float64)."""
        return torch.special.ndtr(self.clip(x) / self.sigma)

    def _sample(self, w: Tensor, u: Tensor) -> Tensor:
        p = torch.special.ndtr(w / self.sigma)
        return torch.where(u < p, 1.0, -1.0).to(w.dtype)

    def mean(self, x: Any) -> Tensor:
        """E[output | x] = 2Φ(clip(x)/σ) - 1 (float64): not x, the mechanism is biased by design."""
        return 2.0 * self.prob_plus(x) - 1.0

    def variance(self, x: Any) -> Tensor:
        """1 - (2Φ(clip(x)/σ) - 1)² (float64)."""
        return 1.0 - self.mean(x) ** 2

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (-1, +1), exact float64 probabilities."""
        p = self.prob_plus(x)
        values = torch.stack([-torch.ones_like(p), torch.ones_like(p)], dim=-1)
        return values, torch.stack([1.0 - p, p], dim=-1)


# ---- registry -------------------------------------------------------------------------------------
MECHANISMS: Dict[str, type] = {
    "randomized_response": RandomizedResponse,
    "two_point": TwoPoint,
    "laplace": Laplace,
    "piecewise": Piecewise,
    "hybrid": Hybrid,
    "gaussian": Gaussian,
    "ldpsign": LdpSign,
}


def make_mechanism(name: str, **kwargs: Any) -> Mechanism:
    """Build a mechanism by name (``MECHANISMS`` key), e.g. ``make_mechanism("two_point", epsilon=1)``."""
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism name {name!r}; known names: {', '.join(sorted(MECHANISMS))}")
    return MECHANISMS[key](**kwargs)

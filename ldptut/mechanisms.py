"""Local randomizers (ε-LDP mechanisms) for one scalar report per coordinate.

Every mechanism is a small class in the style of Opacus / OpenDP:

* the constructor is keyword-only and validates its parameters (``ValueError`` naming the parameter);
* :meth:`~Mechanism.privatize` randomizes a tensor elementwise (same shape, dtype and device),
  drawing all randomness from the ``generator`` it is given, so the same generator seed gives the
  same output;
* the closed forms sit beside the sampler: :meth:`~Mechanism.mean`, :meth:`~Mechanism.variance`,
  and the exact output law, ``output_distribution(x)`` for the discrete mechanisms
  (:class:`RandomizedResponse`, :class:`TwoPoint`) and ``density(y, x)`` / ``cdf(y, x)`` /
  ``support(x)`` for the continuous ones (:class:`Laplace`, :class:`Piecewise`; :class:`Hybrid` is a
  mixture of a continuous part and two point masses, see its docstring);
* :attr:`~Mechanism.guarantee` states what is protected: ε (δ = 0) for **one scalar report**. A
  client that reports d coordinates per round, for T rounds, composes to d·T·ε (see
  :mod:`ldptut.privacy`).

Inputs outside the declared range ``[center - radius, center + radius]`` are clipped first; the
guarantee is about the clipped value. The guarantee is that of the ideal real-valued mechanism:
the float implementation draws uniforms on a grid of 2^-24 (float32) or 2^-53 (float64), so
probabilities are exact only up to that resolution (cf. Mironov, CCS 2012, on floating-point
attacks against the Laplace mechanism).

Speed: on CPU, tensors with scalar parameters are processed in cache-sized blocks (see ``_CHUNK``).
Each block's uniforms are drawn with ``uniform_(generator=...)`` in order, which consumes the
generator exactly like one ``torch.rand(x.shape, generator=generator, dtype=x.dtype)`` call, so the
output does not depend on the block size (nor on whether the draws are made on a helper thread one
block ahead, see ``_blocks_pipelined``). The Mersenne-Twister draws are single-threaded in ATen and
dominate the cost: expect a throughput of roughly the RNG's, well below that of ``x.clone()``
(``benchmarks/bench_mechanisms.py``).
"""
from __future__ import annotations

import math
import numbers
import queue
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

__all__ = [
    "Guarantee",
    "Mechanism",
    "RandomizedResponse",
    "TwoPoint",
    "Laplace",
    "Piecewise",
    "Hybrid",
    "MECHANISMS",
    "make_mechanism",
]

Param = Union[float, Tensor]

#: Block size (elements) of the CPU fast path. 32 Ki float32 = 128 KiB per temporary, so a block and
#: its temporaries stay in L2 instead of streaming several 40 MB temporaries through memory. It is
#: also ATen's intra-op grain size: ops on a block run on the calling thread, which avoids thousands
#: of tiny OpenMP regions (they stall badly when the cores are shared with other processes). The
#: uniform draws are single-threaded in ATen anyway.
_CHUNK = 1 << 15

#: Threshold of the Hybrid Mechanism (Wang et al., ICDE 2019, Sec. III-C): for ε <= ε* ≈ 0.61 HM is
#: Duchi's mechanism alone.
HYBRID_EPSILON_STAR = 0.61


# --------------------------------------------------------------------------------------------------
# Guarantee
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Guarantee:
    """What a mechanism promises: (ε, δ)-LDP for the stated unit of data.

    ``str(Guarantee(1.0))`` -> ``"ε = 1 (δ = 0) per coordinate (one scalar report)"``.
    """

    epsilon: float
    delta: float = 0.0
    unit: str = "per coordinate (one scalar report)"

    def __str__(self) -> str:
        return f"ε = {self.epsilon:g} (δ = {self.delta:g}) {self.unit}"


# --------------------------------------------------------------------------------------------------
# validation helpers
# --------------------------------------------------------------------------------------------------
def _check_epsilon(epsilon: Any) -> float:
    if isinstance(epsilon, Tensor) and epsilon.numel() == 1 and epsilon.dtype.is_floating_point:
        epsilon = epsilon.item()
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise ValueError(
            f"epsilon must be a finite real number > 0, got {epsilon!r} of type {type(epsilon).__name__}"
        )
    eps = float(epsilon)
    if not math.isfinite(eps) or eps <= 0.0:
        raise ValueError(f"epsilon must be finite and > 0, got {epsilon}")
    return eps


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
            bad = ~torch.isfinite(t)
            if positive:
                bad |= t <= 0
            if bool(bad.any()):
                first = t[bad].reshape(-1)[0].item()
                raise ValueError(f"{name} must be {cond} (elementwise), got {first} among its elements")
            return t
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{name} must be a real number or tensor, got {value!r} of type {type(value).__name__}")
    v = float(value)
    if not math.isfinite(v) or (positive and v <= 0.0):
        raise ValueError(f"{name} must be {cond}, got {value}")
    return v


def _check_tensor(x: Any, name: str = "x") -> Tensor:
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def _check_finite(x: Tensor, name: str = "x") -> Tuple[float, float]:
    """Raise ``ValueError`` if ``x`` holds NaN or ±inf (one reduction pass, no large temporary);
    return (min, max) of ``x``."""
    if x.numel() == 0:
        return 0.0, 0.0
    t_lo, t_hi = torch.aminmax(x.detach())  # NaN propagates to both; ±inf shows up as min/max
    lo, hi = t_lo.item(), t_hi.item()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{name} contains NaN or inf; privatize() needs finite inputs")
    return float(lo), float(hi)


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


def _as64(x: Any, device: Optional[torch.device] = None) -> Tensor:
    if isinstance(x, Tensor):
        return x.detach().to(dtype=torch.float64, device=device if device is not None else x.device)
    return torch.as_tensor(x, dtype=torch.float64, device=device)


def _p64(p: Param, like: Tensor) -> Param:
    """A parameter as float (unchanged) or float64 tensor on ``like``'s device."""
    return p if isinstance(p, float) else p.to(device=like.device, dtype=torch.float64)


def _broadcast_shape(x: Tensor, *params: Param) -> torch.Size:
    shapes = [x.shape] + [p.shape for p in params if isinstance(p, Tensor)]
    return torch.broadcast_shapes(*shapes)


def _full(v: Param, shape: torch.Size, like: Tensor) -> Tensor:
    if isinstance(v, Tensor):
        return v.expand(shape)
    return torch.full(shape, v, dtype=torch.float64, device=like.device)


class _Consts(dict):
    """Precomputed per-(dtype, device) constants with attribute access (the instance ``__dict__`` is
    the dict itself, so lookups in the block loop are plain attribute reads); ``scalar`` = all
    python floats."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.__dict__ = self

    @property
    def scalar(self) -> bool:
        return not any(isinstance(v, Tensor) for v in self.values())


def _axpy(y: Tensor, a: Param, x: Tensor, out: Tensor) -> Tensor:
    """``out = y + a * x`` in one pass (``out`` may alias ``x`` or ``y``)."""
    if isinstance(a, float):
        return torch.add(y, x, alpha=a, out=out)
    return torch.addcmul(y, x, a, out=out)


# --------------------------------------------------------------------------------------------------
# base class
# --------------------------------------------------------------------------------------------------
class Mechanism:
    """Base class: ε-LDP local randomizer for one scalar report per coordinate.

    Subclasses define ``_make_constants(dtype, device)`` and ``_kernel(xb, u, out, K, tmps)``, which
    writes the randomized ``xb`` into ``out`` given uniforms ``u`` in [0, 1) (``u`` and ``tmps`` may
    be overwritten).
    """

    name = "mechanism"
    discrete = False
    _n_tmp = 0

    def __init__(self, *, epsilon: float) -> None:
        self._epsilon = _check_epsilon(epsilon)
        self._center: Param = 0.0
        self._radius: Param = 1.0
        self._cache: Dict[Tuple[torch.dtype, torch.device], _Consts] = {}

    def __getstate__(self) -> Dict[str, Any]:
        state = self.__dict__.copy()
        state["_cache"] = {}  # derived constants (possibly on an accelerator): rebuilt on demand
        return state

    # ---- parameters --------------------------------------------------------------------------
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
        if isinstance(self._center, Tensor) and isinstance(self._radius, Tensor):
            try:
                torch.broadcast_shapes(self._center.shape, self._radius.shape)
            except RuntimeError as e:
                raise ValueError(
                    f"center {tuple(self._center.shape)} and radius {tuple(self._radius.shape)} do not broadcast"
                ) from e

    def input_range(self) -> Tuple[Param, Param]:
        """The clipping range ``(center - radius, center + radius)``."""
        return self._center - self._radius, self._center + self._radius

    def __repr__(self) -> str:
        def fmt(p: Param) -> str:
            return f"{p:g}" if isinstance(p, float) else f"tensor{tuple(p.shape)}"

        extra = "" if self.name == "randomized_response" else f", center={fmt(self._center)}, radius={fmt(self._radius)}"
        return f"{type(self).__name__}(epsilon={self._epsilon:g}{extra})"

    # ---- closed forms ------------------------------------------------------------------------
    def clip(self, x: Any) -> Tensor:
        """``x`` clipped to the input range, as float64."""
        x = _as64(x)
        c, r = _p64(self._center, x), _p64(self._radius, x)
        return torch.clamp(x, c - r, c + r) if isinstance(c, Tensor) or isinstance(r, Tensor) else x.clamp(c - r, c + r)

    def mean(self, x: Any) -> Tensor:
        """E[output | x] (float64). Unbiased mechanisms: the clipped input."""
        xc = self.clip(x)
        return xc.expand(_broadcast_shape(xc, self._center, self._radius)).clone()

    def bias(self, x: Any) -> Tensor:
        """E[output | x] - clip(x) (float64): identically 0 for all mechanisms here."""
        return self.mean(x) - self.clip(x)

    def variance(self, x: Any) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    # ---- sampler -----------------------------------------------------------------------------
    def _constants(self, dtype: torch.dtype, device: torch.device) -> _Consts:
        key = (dtype, device)
        K = self._cache.get(key)
        if K is None:
            K = self._make_constants(dtype, device)
            self._cache[key] = K
        return K

    def _make_constants(self, dtype: torch.dtype, device: torch.device) -> _Consts:  # pragma: no cover
        raise NotImplementedError

    def _kernel(self, xb: Tensor, u: Tensor, out: Tensor, K: _Consts, tmps: List[Tensor]) -> None:  # pragma: no cover
        raise NotImplementedError

    def _tensor_param(self, p: Param, dtype: torch.dtype, device: torch.device) -> Param:
        return p if isinstance(p, float) else p.to(device=device, dtype=dtype)

    def _check_param_shapes(self, x: Tensor) -> None:
        for name, p in (("center", self._center), ("radius", self._radius)):
            if isinstance(p, Tensor):
                try:
                    ok = torch.broadcast_shapes(p.shape, x.shape) == x.shape
                except RuntimeError:
                    ok = False
                if not ok:
                    raise ValueError(
                        f"{name} of shape {tuple(p.shape)} does not broadcast to x of shape {tuple(x.shape)}"
                    )

    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Randomize every element of ``x`` independently (same shape, dtype, device as ``x``).

        Inputs outside ``[center - radius, center + radius]`` are clipped first; the ε-LDP
        guarantee holds for the clipped value. NaN / inf in ``x`` raise ``ValueError``. All random
        draws come from ``generator`` (the default generator if ``None``).
        """
        x = _check_tensor(x)
        if not x.dtype.is_floating_point:
            raise TypeError(f"x must be a floating-point tensor for {type(self).__name__}, got {x.dtype}")
        _check_finite(x)
        self._check_param_shapes(x)
        cdt = _compute_dtype(x.dtype)
        K = self._constants(cdt, x.device)
        xin = x.detach()
        if xin.dtype != cdt:
            xin = xin.to(cdt)
        out = torch.empty(x.shape, dtype=cdt, device=x.device)
        _run(self._kernel, xin, out, K, generator, self._n_tmp)
        return out if cdt == x.dtype else out.to(x.dtype)

    def __call__(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        return self.privatize(x, generator)


def _run(
    kernel: Callable[..., None],
    x: Tensor,
    out: Tensor,
    K: _Consts,
    generator: Optional[torch.Generator],
    n_tmp: int,
) -> None:
    """Draw one uniform per element (in ``torch.rand`` order) and apply ``kernel``.

    CPU + scalar parameters: cache-sized blocks of the flattened tensor (same random stream as one
    ``torch.rand`` call); with several intra-op threads and enough blocks, the uniforms are drawn
    on a helper thread one block ahead (see :func:`_blocks_pipelined`). Otherwise one vectorised
    call on the whole tensor (parameters broadcast).
    """
    n = x.numel()
    if n == 0:
        return
    dtype, device = out.dtype, out.device
    if device.type == "cpu" and n > _CHUNK and K.scalar:
        xf = x.reshape(-1)
        of = out.view(-1)
        tbufs = [torch.empty(_CHUNK, dtype=dtype, device=device) for _ in range(n_tmp)]
        pipeline = _PIPELINE if _PIPELINE is not None else torch.get_num_threads() > 1
        if pipeline and n >= _PIPELINE_MIN_BLOCKS * _CHUNK:
            _blocks_pipelined(kernel, xf, of, K, generator, tbufs)
            return
        ubuf = torch.empty(_CHUNK, dtype=dtype, device=device)
        for s in range(0, n, _CHUNK):
            e = min(n, s + _CHUNK)
            m = e - s
            u = ubuf[:m]
            u.uniform_(0.0, 1.0, generator=generator)
            kernel(xf[s:e], u, of[s:e], K, [t[:m] for t in tbufs])
    else:
        u = torch.rand(x.shape, generator=generator, dtype=dtype, device=device)
        tbufs = [torch.empty_like(u) for _ in range(n_tmp)]
        kernel(x, u, out, K, tbufs)


#: Draw uniforms on a helper thread while the calling thread transforms the previous block:
#: None = when torch uses more than one intra-op thread, True = always, False = never.
_PIPELINE: Optional[bool] = None
_PIPELINE_MIN_BLOCKS = 8
_PIPELINE_DEPTH = 3


def _blocks_pipelined(
    kernel: Callable[..., None],
    xf: Tensor,
    of: Tensor,
    K: _Consts,
    generator: Optional[torch.Generator],
    tbufs: List[Tensor],
) -> None:
    """Block loop with the uniform draws on one helper thread (producer) a few blocks ahead.

    ATen's CPU ``uniform_`` is single-threaded (Mersenne Twister), so on a multi-core CPU drawing
    block i + 1 overlaps with the arithmetic on block i. Only the producer touches the generator
    and it draws the blocks in order, so the stream, and the output, are exactly those of the
    sequential loop (and of one ``torch.rand`` call).
    """
    n = xf.numel()
    starts = list(range(0, n, _CHUNK))
    depth = _PIPELINE_DEPTH
    bufs = [torch.empty(_CHUNK, dtype=of.dtype, device=of.device) for _ in range(depth)]
    free = threading.Semaphore(depth)
    ready: "queue.SimpleQueue[Optional[BaseException]]" = queue.SimpleQueue()
    stop = threading.Event()

    def produce() -> None:
        try:
            for i, s in enumerate(starts):
                free.acquire()
                if stop.is_set():
                    return
                bufs[i % depth][: min(_CHUNK, n - s)].uniform_(0.0, 1.0, generator=generator)
                ready.put(None)
        except BaseException as e:  # pragma: no cover - surfaced in the calling thread
            ready.put(e)

    th = threading.Thread(target=produce, name="ldptut-uniforms", daemon=True)
    th.start()
    try:
        for i, s in enumerate(starts):
            err = ready.get()
            if err is not None:  # pragma: no cover
                raise err
            e = min(n, s + _CHUNK)
            m = e - s
            kernel(xf[s:e], bufs[i % depth][:m], of[s:e], K, [t[:m] for t in tbufs])
            free.release()
    finally:
        stop.set()
        free.release()
        th.join()


# --------------------------------------------------------------------------------------------------
# 1. Randomized response
# --------------------------------------------------------------------------------------------------
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

    @staticmethod
    def _check_bits(x: Tensor) -> None:
        if x.numel() == 0:
            return
        if x.dtype == torch.bool:
            return
        if x.dtype.is_floating_point:
            lo, hi = _check_finite(x)
            ok = lo >= 0 and hi <= 1
            if ok:  # in [0, 1]: x in {0, 1}  <=>  x == round(x); checked block-wise (cache resident)
                xf = x.detach().reshape(-1)
                buf = torch.empty(min(xf.numel(), _CHUNK), dtype=xf.dtype, device=xf.device)
                for s in range(0, xf.numel(), _CHUNK):
                    xb = xf[s : s + _CHUNK]
                    rb = torch.round(xb, out=buf[: xb.numel()])
                    if not torch.equal(rb, xb):
                        ok = False
                        break
        else:
            ok = bool(((x == 0) | (x == 1)).all())
        if not ok:
            bad = x.detach().reshape(-1)
            bad = bad[(bad != 0) & (bad != 1)][0].item()
            raise ValueError(f"x must contain only 0 and 1 for RandomizedResponse, got {bad}")

    def _make_constants(self, dtype: torch.dtype, device: torch.device) -> _Consts:
        return _Consts(p=self.p)

    def _kernel(self, xb: Tensor, u: Tensor, out: Tensor, K: _Consts, tmps: List[Tensor]) -> None:
        u.ge_(K.p)  # 1.0 = flip (probability 1 - p)
        torch.sub(xb, u, out=out).abs_()  # |x - flip| = x XOR flip

    def privatize(self, x: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """Randomized bits, same shape/dtype/device as ``x`` (x in {0, 1}; no clipping)."""
        x = _check_tensor(x)
        if x.dtype.is_complex:
            raise TypeError("x must be a real tensor")
        self._check_bits(x)
        if x.dtype.is_floating_point:
            cdt = _compute_dtype(x.dtype)
            xin = x.detach() if x.dtype == cdt else x.detach().to(cdt)
            out = torch.empty(x.shape, dtype=cdt, device=x.device)
            _run(self._kernel, xin, out, self._constants(cdt, x.device), generator, 0)
            return out if cdt == x.dtype else out.to(x.dtype)
        # bool / integer input: same uniform stream as for a float32 input
        u = torch.rand(x.shape, generator=generator, dtype=torch.float32, device=x.device)
        return ((x != 0) ^ (u >= self.p)).to(x.dtype)

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
        x = _as64(x)
        return (1.0 - self.p) + (2.0 * self.p - 1.0) * x

    def bias(self, x: Any) -> Tensor:
        """Bias of :meth:`estimate`: 0 (the raw report's bias is ``mean(x) - x``)."""
        return torch.zeros_like(_as64(x))

    def variance(self, x: Any) -> Tensor:
        """Var[estimate(y) | x] = p (1 - p) / (2p - 1)^2, for every x (float64)."""
        x = _as64(x)
        p = self.p
        return torch.full_like(x, p * (1.0 - p) / (2.0 * p - 1.0) ** 2)

    def output_distribution(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(values, probs), shape ``x.shape + (2,)``: values (0, 1), P[y=1|x] = p if x = 1 else 1 - p."""
        x = _as64(x)
        if not bool(((x == 0) | (x == 1)).all()):
            raise ValueError("x must contain only 0 and 1 for RandomizedResponse")
        p1 = (1.0 - self.p) + (2.0 * self.p - 1.0) * x
        values = torch.stack([torch.zeros_like(x), torch.ones_like(x)], dim=-1)
        return values, torch.stack([1.0 - p1, p1], dim=-1)


# --------------------------------------------------------------------------------------------------
# 2. Duchi's two-point mechanism (LDP-FL)
# --------------------------------------------------------------------------------------------------
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
        self.a = (math.exp(self._epsilon) + 1.0) / math.expm1(self._epsilon)

    # P[plus | w] = 1/2 + (w - c) / (2 r a)
    def _make_constants(self, dtype: torch.dtype, device: torch.device) -> _Consts:
        c = self._tensor_param(self._center, torch.float64, device)
        r = self._tensor_param(self._radius, torch.float64, device)
        a = self.a
        K = dict(
            lo=c - r,
            hi=c + r,
            alpha=1.0 / (2.0 * r * a),
            beta=0.5 - c / (2.0 * r * a),
            minus=c - r * a,
            width=2.0 * r * a,
        )
        return _Consts({k: (v if isinstance(v, float) else v.to(dtype)) for k, v in K.items()})

    def _kernel(self, xb: Tensor, u: Tensor, out: Tensor, K: _Consts, tmps: List[Tensor]) -> None:
        torch.clamp(xb, K.lo, K.hi, out=out)
        out.mul_(K.alpha).add_(K.beta)  # P[plus | w]
        u.lt_(out)  # 1.0 -> plus
        torch.mul(u, K.width, out=out).add_(K.minus)

    def prob_plus(self, x: Any) -> Tensor:
        """P[output = c + r a | x] (float64), x clipped first."""
        xc = self.clip(x)
        c, r = _p64(self._center, xc), _p64(self._radius, xc)
        return 0.5 + (xc - c) / (2.0 * r * self.a)

    def output_values(self, x: Any) -> Tuple[Tensor, Tensor]:
        """The two outputs (c - r a, c + r a), broadcast to x's shape (float64).

        The upper one is computed as (c - r a) + 2 r a, exactly as the sampler does, so float64
        samples equal these values bit for bit."""
        x = _as64(x)
        c, r = _p64(self._center, x), _p64(self._radius, x)
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
        c, r = _p64(self._center, xc), _p64(self._radius, xc)
        v = (r * self.a) ** 2 - (xc - c) ** 2
        return v.expand(_broadcast_shape(xc, c, r)).clone()

    def variance_bound(self) -> Param:
        """The bound of LDP-FL's Lemma 2: Var[w*] <= r² a² (float, or tensor for tensor radius)."""
        return (self._radius * self.a) ** 2


# --------------------------------------------------------------------------------------------------
# 3. Laplace
# --------------------------------------------------------------------------------------------------
class Laplace(Mechanism):
    """Clip to [c - r, c + r] and add Laplace noise of scale b = 2r / ε.

    The Laplace mechanism (Dwork, McSherry, Nissim, Smith, "Calibrating Noise to Sensitivity",
    TCC 2006: noise Lap(Δ/ε) for sensitivity Δ) with Δ = 2r, the width of the clipped range. Density of the output y given the clipped
    input w: f(y | w) = exp(-|y - w| / b) / (2b). Unbiased, variance 2 b².

    Sampling: one uniform per element by the inverse CDF, v = u - (1/2 - δ) with δ half the
    uniform grid step, noise = b · sign(v) · (-log(1 - 2|v|)). v is never 0 and 1 - 2|v| >= 2δ, so
    the noise is finite and symmetric; the tail beyond ~16.6 b (float32) / ~36.7 b (float64) is
    truncated by the grid.
    """

    name = "laplace"

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon)
        self._set_range(center, radius)

    @property
    def scale(self) -> Param:
        """b = 2 r / ε."""
        return 2.0 * self._radius / self._epsilon

    def _make_constants(self, dtype: torch.dtype, device: torch.device) -> _Consts:
        c = self._tensor_param(self._center, torch.float64, device)
        r = self._tensor_param(self._radius, torch.float64, device)
        delta = 2.0**-25 if dtype == torch.float32 else 2.0**-54
        K = dict(lo=c - r, hi=c + r, b=2.0 * r / self._epsilon)
        K = {k: (v if isinstance(v, float) else v.to(dtype)) for k, v in K.items()}
        K["shift"] = 0.5 - delta  # exact in float32 / float64
        return _Consts(K)

    def _kernel(self, xb: Tensor, u: Tensor, out: Tensor, K: _Consts, tmps: List[Tensor]) -> None:
        u.sub_(K.shift)  # v: odd multiple of δ in (-1/2, 1/2), never 0
        torch.abs(u, out=out).mul_(-2.0).add_(1.0).log_()  # log(1 - 2|v|) <= 0 (1 - 2|v| is exact)
        out.copysign_(u)  # sign(v) · |log(1 - 2|v|)|
        torch.clamp(xb, K.lo, K.hi, out=u)
        _axpy(u, K.b, out, out)  # clip(x) + b · noise

    def variance(self, x: Any) -> Tensor:
        """2 b² (float64, elementwise)."""
        x = _as64(x)
        b = _p64(self.scale, x)
        shape = _broadcast_shape(x, self._center, self._radius)
        return _full(2.0 * b * b, shape, x).clone()

    def support(self, x: Any) -> Tuple[Tensor, Tensor]:
        """(-inf, inf) for every x."""
        x = _as64(x)
        shape = _broadcast_shape(x, self._center, self._radius)
        return torch.full(shape, -math.inf, dtype=torch.float64, device=x.device), torch.full(
            shape, math.inf, dtype=torch.float64, device=x.device
        )

    def density(self, y: Any, x: Any) -> Tensor:
        """f(y | x) = exp(-|y - clip(x)| / b) / (2b) (float64)."""
        y, w = _as64(y), self.clip(x)
        b = _p64(self.scale, w)
        return torch.exp(-(y - w).abs() / b) / (2.0 * b)

    def cdf(self, y: Any, x: Any) -> Tensor:
        """P[Y <= y | x] (float64)."""
        y, w = _as64(y), self.clip(x)
        b = _p64(self.scale, w)
        z = (y - w) / b
        return torch.where(z < 0, 0.5 * torch.exp(torch.clamp(z, max=0.0)), 1.0 - 0.5 * torch.exp(-torch.clamp(z, min=0.0)))


# --------------------------------------------------------------------------------------------------
# 4. Piecewise mechanism
# --------------------------------------------------------------------------------------------------
class Piecewise(Mechanism):
    """Piecewise Mechanism (PM), Wang et al., "Collecting and Analyzing Multidimensional Data with
    Local Differential Privacy", ICDE 2019, Sec. III-B, Algorithm 2.

    On t = (w - c) / r in [-1, 1] (w the clipped input), with C = (e^{ε/2} + 1) / (e^{ε/2} - 1),
    l(t) = (C + 1) t / 2 - (C - 1) / 2 and r(t) = l(t) + C - 1: with probability
    e^{ε/2} / (e^{ε/2} + 1) output uniform on [l(t), r(t)], otherwise uniform on [-C, l(t)) ∪ (r(t), C];
    the report is c + r · t*. Density of t*: p = e^{ε/2}(e^{ε/2} - 1) / (2(e^{ε/2} + 1)) on [l, r],
    p / e^ε elsewhere on [-C, C]. Unbiased; Var[t* | t] = t² / (e^{ε/2} - 1) +
    (e^{ε/2} + 3) / (3 (e^{ε/2} - 1)²) (Wang et al., Sec. III-B), times r² in output units.

    Sampling: one uniform u per element through the inverse CDF of the piecewise-constant density,
    t* = -C + h / p_low + g / p_high with g = clamp(u - A(t), 0, q), h = u - g,
    A(t) = (1 - q)(1 + t) / 2 the mass left of l(t) and q = e^{ε/2} / (e^{ε/2} + 1) — i.e. the
    inner interval and the two outer pieces (total length C + 1) are sampled from one draw.
    """

    name = "piecewise"

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon)
        self._set_range(center, radius)
        h = self._epsilon / 2.0
        eh = math.exp(h)
        em1 = math.expm1(h)
        self.C = (eh + 1.0) / em1
        self.q = 1.0 / (1.0 + math.exp(-h))  # e^{ε/2} / (e^{ε/2} + 1)
        self.p_high = eh * em1 / (2.0 * (eh + 1.0))
        self.p_low = em1 / (2.0 * eh * (eh + 1.0))

    def _make_constants(self, dtype: torch.dtype, device: torch.device) -> _Consts:
        c = self._tensor_param(self._center, torch.float64, device)
        r = self._tensor_param(self._radius, torch.float64, device)
        q, C = self.q, self.C
        a1 = (1.0 - q) / (2.0 * r)  # A = a1 * w + a0
        a0 = (1.0 - q) / 2.0 - a1 * c
        s_l = r / self.p_low
        s_h = r / self.p_high
        K = dict(
            lo=c - r,
            hi=c + r,
            neg_a1=-a1,
            a0=a0,
            a0q=a0 + q,
            s_l=s_l,
            s_h=s_h,
            k=c - r * C + (s_l - s_h) * a0,
        )
        return _Consts({k: (v if isinstance(v, float) else v.to(dtype)) for k, v in K.items()})

    @staticmethod
    def _core(xc: Tensor, u: Tensor, out: Tensor, K: _Consts) -> None:
        """PM from a clipped input ``xc`` (may alias ``out``) and uniforms ``u`` (overwritten)."""
        _axpy(u, K.neg_a1, xc, out)  # u - A + a0
        out.clamp_(K.a0, K.a0q)  # g + a0
        u.sub_(out)  # h - a0
        out.mul_(K.s_h)
        _axpy(out, K.s_l, u, out)
        out.add_(K.k)  # c + r (-C + h / p_low + g / p_high)

    def _kernel(self, xb: Tensor, u: Tensor, out: Tensor, K: _Consts, tmps: List[Tensor]) -> None:
        torch.clamp(xb, K.lo, K.hi, out=out)
        self._core(out, u, out, K)

    def _t(self, x: Any) -> Tuple[Tensor, Param, Param]:
        xc = self.clip(x)
        c, r = _p64(self._center, xc), _p64(self._radius, xc)
        return (xc - c) / r, c, r

    def interval(self, x: Any) -> Tuple[Tensor, Tensor]:
        """The high-density interval [c + r l(t), c + r r(t)] in output units (float64)."""
        t, c, r = self._t(x)
        l = (self.C + 1.0) / 2.0 * t - (self.C - 1.0) / 2.0
        return c + r * l, c + r * (l + self.C - 1.0)

    def support(self, x: Any) -> Tuple[Tensor, Tensor]:
        """[c - r C, c + r C] (float64)."""
        x = _as64(x)
        c, r = _p64(self._center, x), _p64(self._radius, x)
        shape = _broadcast_shape(x, c, r)
        return _full(c - r * self.C, shape, x).clone(), _full(c + r * self.C, shape, x).clone()

    def density(self, y: Any, x: Any) -> Tensor:
        """Exact pdf of the report y given x (float64): p_high / r on the inner interval,
        p_low / r elsewhere on the support, 0 outside."""
        y = _as64(y)
        t, c, r = self._t(x)
        z = (y - c) / r
        l = (self.C + 1.0) / 2.0 * t - (self.C - 1.0) / 2.0
        rr = l + self.C - 1.0
        inner = (z >= l) & (z <= rr)
        inside = (z >= -self.C) & (z <= self.C)
        d = self.p_low * inside.to(torch.float64) + (self.p_high - self.p_low) * inner.to(torch.float64)
        return d / r

    def cdf(self, y: Any, x: Any) -> Tensor:
        """P[Y <= y | x] (float64)."""
        y = _as64(y)
        t, c, r = self._t(x)
        z = torch.clamp((y - c) / r, -self.C, self.C)
        l = (self.C + 1.0) / 2.0 * t - (self.C - 1.0) / 2.0
        return self.p_low * (z + self.C) + (self.p_high - self.p_low) * torch.clamp(z - l, 0.0, self.C - 1.0)

    def variance(self, x: Any) -> Tensor:
        """r² (t² / (e^{ε/2} - 1) + (e^{ε/2} + 3) / (3 (e^{ε/2} - 1)²)) (Wang et al., Sec. III-B)."""
        t, c, r = self._t(x)
        em1 = math.expm1(self._epsilon / 2.0)
        v = t * t / em1 + (em1 + 4.0) / (3.0 * em1 * em1)
        v = v * r * r
        return v.expand(_broadcast_shape(t, c, r)).clone()


# --------------------------------------------------------------------------------------------------
# 5. Hybrid mechanism
# --------------------------------------------------------------------------------------------------
class Hybrid(Mechanism):
    """Hybrid Mechanism (HM), Wang et al., ICDE 2019, Sec. III-C.

    With β = 1 - e^{-ε/2} if ε > ε* ≈ 0.61 and β = 0 otherwise: with probability β apply the
    :class:`Piecewise` mechanism, otherwise Duchi's two-point mechanism (:class:`TwoPoint`), both
    with the same ε, center and radius. A mixture (with input-independent weights) of two ε-LDP
    mechanisms is ε-LDP; both parts are unbiased, so Var = β Var_PM + (1 - β) Var_Duchi.

    The output law is mixed: :meth:`density` is the (defective) density of the continuous part,
    β · f_PM(y | x), which integrates to β; :meth:`atoms` gives the two point masses
    c ∓ r a with probabilities (1 - β)(1 - P_plus), (1 - β) P_plus; :meth:`cdf` is the full CDF.
    One uniform per element: u < β -> PM with u / β; β <= u < β + (1 - β) P_plus -> c + r a; else c - r a.
    """

    name = "hybrid"
    _n_tmp = 2

    def __init__(self, *, epsilon: float, center: Param = 0.0, radius: Param = 1.0) -> None:
        super().__init__(epsilon=epsilon)
        self._set_range(center, radius)
        self.beta = -math.expm1(-self._epsilon / 2.0) if self._epsilon > HYBRID_EPSILON_STAR else 0.0
        self.piecewise = Piecewise(epsilon=self._epsilon, center=self._center, radius=self._radius)
        self.two_point = TwoPoint(epsilon=self._epsilon, center=self._center, radius=self._radius)

    def _make_constants(self, dtype: torch.dtype, device: torch.device) -> _Consts:
        Kt = self.two_point._constants(dtype, device)
        b = self.beta
        if b == 0.0:
            return Kt
        K = _Consts(Kt)
        K["inv_beta"] = 1.0 / b
        K["beta"] = b
        # threshold β + (1 - β) P_plus(w) = ta * w + tb
        K["ta"] = (1.0 - b) * Kt.alpha
        K["tb"] = b + (1.0 - b) * Kt.beta
        return K

    def _kernel(self, xb: Tensor, u: Tensor, out: Tensor, K: _Consts, tmps: List[Tensor]) -> None:
        if self.beta == 0.0:  # ε <= ε*: Duchi's mechanism alone
            self.two_point._kernel(xb, u, out, K, tmps)
            return
        Kp = self.piecewise._constants(out.dtype, out.device)
        xc, dp = tmps
        torch.clamp(xb, K.lo, K.hi, out=xc)
        torch.mul(xc, K.ta, out=dp).add_(K.tb)  # threshold for "plus"
        dp.gt_(u)  # 1.0 -> plus (only used where u >= β)
        dp.mul_(K.width).add_(K.minus)
        use_pm = u < K.beta
        u.mul_(K.inv_beta)  # uniform on [0, 1) where u < β
        Piecewise._core(xc, u, out, Kp)
        torch.where(use_pm, out, dp, out=out)

    def atoms(self, x: Any) -> Tuple[Tensor, Tensor]:
        """Point masses: (values, probs), shape ``x.shape + (2,)``; values (c - r a, c + r a),
        probs (1 - β)(1 - P_plus), (1 - β) P_plus (float64). Sum of probs = 1 - β."""
        v, p = self.two_point.output_distribution(x)
        return v, (1.0 - self.beta) * p

    def density(self, y: Any, x: Any) -> Tensor:
        """Density of the continuous part, β · f_PM(y | x) (integrates to β; float64)."""
        return self.beta * self.piecewise.density(y, x)

    def support(self, x: Any) -> Tuple[Tensor, Tensor]:
        """Support of the continuous part, [c - r C, c + r C] (contains both atoms)."""
        return self.piecewise.support(x)

    def cdf(self, y: Any, x: Any) -> Tensor:
        """Full CDF P[Y <= y | x] including the atoms (float64)."""
        y = _as64(y)
        vals, probs = self.atoms(x)
        F = self.beta * self.piecewise.cdf(y, x)
        return F + (probs * (y.unsqueeze(-1) >= vals).to(torch.float64)).sum(-1)

    def variance(self, x: Any) -> Tensor:
        """β Var_PM(x) + (1 - β) Var_Duchi(x) (float64)."""
        return self.beta * self.piecewise.variance(x) + (1.0 - self.beta) * self.two_point.variance(x)


# --------------------------------------------------------------------------------------------------
# registry
# --------------------------------------------------------------------------------------------------
MECHANISMS: Dict[str, type] = {
    "randomized_response": RandomizedResponse,
    "two_point": TwoPoint,
    "laplace": Laplace,
    "piecewise": Piecewise,
    "hybrid": Hybrid,
}


def make_mechanism(name: str, **kwargs: Any) -> Mechanism:
    """Build a mechanism by name (``MECHANISMS`` key), e.g. ``make_mechanism("two_point", epsilon=1)``."""
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism name {name!r}; known names: {', '.join(sorted(MECHANISMS))}")
    return MECHANISMS[key](**kwargs)

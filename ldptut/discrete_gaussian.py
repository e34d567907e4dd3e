"""Exact samplers of the discrete Laplace and discrete Gaussian laws, with integer arithmetic only.

Canonne, Kamath, Steinke, "The Discrete Gaussian for Differential Privacy" (NeurIPS 2020; CKS below), Algorithms 1-3,
vectorised over a tensor of independent elements with ``torch.int64``: no Python loop over elements, only loops over
rejection rounds on the still-active subset. Every random decision compares an exactly uniform integer with an
integer (a Bernoulli(num / den) is [J < num floor(2^62 / den)] for J uniform below den floor(2^62 / den)), so the law
of what comes out is the stated law *exactly*: no floating-point number is computed on the sampling path (the float64
:func:`discrete_gaussian_pmf` and :func:`discrete_gaussian_variance` are for tests and reporting).

**The one source of randomness.** ``torch.randint(0, 2**62, dtype=torch.int64)`` returns ``random64 % 2**62`` where
``random64`` is 64 uniform bits (CPU: two 32-bit words of the generator's MT19937; CUDA: two 32-bit Philox words;
``at::uniform_int_from_to_distribution`` and the CUDA ``random_from_to_kernel`` in torch 2.x). Since 2^62 divides
2^64 the remainder is exactly uniform on {0, ..., 2^62 - 1}: each residue has 4 preimages. Every other draw derives
from these by rejection, with integer arithmetic.

**Integer bounds.** Every integer handled stays at most 2^62 (so no int64 overflow, 2^63 - 1 being the largest
int64); where a rare draw could push a quantity past that bound the sampler raises :class:`ValueError` naming the
quantity instead of overflowing silently (:data:`LIMIT`).
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Sequence, Union

import torch
from torch import Tensor

from ._validate import integer, real

__all__ = ["LIMIT", "uniform_below", "bernoulli_ratio", "bernoulli_exp", "discrete_laplace", "discrete_gaussian",
           "discrete_gaussian_pmf", "discrete_gaussian_variance", "discrete_laplace_pmf"]

LIMIT = 2 ** 62
"""The bound on every integer the samplers compute: the range of the raw uniform draws and the largest denominator."""

_DIFF_MAX = 2 ** 31 - 1  # | |Y| - c | <= _DIFF_MAX keeps (|Y| - c)^2 < 2^62 (discrete_gaussian)

Device = Union[str, torch.device]


def _int64(x: Tensor | int, name: str, device: Optional[Device] = None) -> Tensor:
    if isinstance(x, Tensor):
        if x.dtype != torch.int64:
            raise ValueError(f"{name} must be an int64 tensor, got dtype {x.dtype}")
        return x
    return torch.as_tensor(integer(x, name), dtype=torch.int64, device=device)


def _words(bound: Tensor | int, size: int, generator: Optional[torch.Generator], device: Device) -> Tensor:
    """``size`` integers J, each uniform on {0, ..., bound_i - 1} where bound = n floor(2^62 / n) <= 2^62 (int or
    int64 tensor of ``size``): J uniform on {0, ..., 2^62 - 1} (one ``torch.randint`` word, exactly uniform), the ones
    with J >= bound redrawn until below (probability < n / 2^62 each; never when bound = 2^62, n a power of 2)."""
    j = torch.randint(0, LIMIT, (size,), dtype=torch.int64, device=device, generator=generator)
    if isinstance(bound, int) and bound == LIMIT:
        return j
    bad = j >= bound
    while bool(bad.any()):
        j[bad] = torch.randint(0, LIMIT, (int(bad.sum()),), dtype=torch.int64, device=device, generator=generator)
        bad = j >= bound
    return j


def _bernoulli(num: Tensor | int, den: Tensor | int, size: int, generator: Optional[torch.Generator],
               device: Device) -> Tensor:
    """Bernoulli(num / den) exactly, 0 <= num <= den < 2^62 (ints or int64 tensors of ``size``): with q =
    floor(2^62 / den) and J uniform on {0, ..., q den - 1} (:func:`_words`), P(J < num q) = num q / (q den)
    = num / den. No division on the tensors (num q <= den q <= 2^62: no overflow)."""
    q = LIMIT // den
    return _words(q * den, size, generator, device) < num * q


def uniform_below(n: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    """One integer uniform on {0, ..., n_i - 1} for each element n_i of the int64 tensor ``n`` (1 <= n_i < 2^62).

    Rejection from J uniform on {0, ..., 2^62 - 1} (``torch.randint(0, 2**62)``, exactly uniform: see the module
    docstring): accept J < n floor(2^62 / n), a multiple of n, and return J mod n; the rejected elements draw again.
    A rejection has probability < n / 2^62. ``generator`` is on ``n``'s device (None: torch's default generator)."""
    n = _int64(n, "n")
    if n.numel() and (int(n.min()) < 1 or int(n.max()) >= LIMIT):
        raise ValueError(f"n must be in [1, 2^62), got values in [{int(n.min())}, {int(n.max())}]")
    flat = n.reshape(-1)
    return (_words((LIMIT // flat) * flat, flat.numel(), generator, n.device) % flat).view(n.shape)


def bernoulli_ratio(num: Tensor, den: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    """Exact Bernoulli(num / den) per element (bool tensor), 0 <= num <= den, 1 <= den < 2^62 (int64 tensors of one
    shape): [U < num] for U = :func:`uniform_below` (den), computed as [J < num floor(2^62/den)] for J uniform on
    {0, ..., den floor(2^62/den) - 1}, the same event without the remainder: P = num / den exactly."""
    num, den = torch.broadcast_tensors(_int64(num, "num"), _int64(den, "den"))
    if num.numel() and (int(den.min()) < 1 or int(den.max()) >= LIMIT):
        raise ValueError(f"den must be in [1, 2^62), got values in [{int(den.min())}, {int(den.max())}]")
    if num.numel() and (bool((num < 0).any()) or bool((num > den).any())):
        raise ValueError("num must satisfy 0 <= num <= den (a probability num / den)")
    flat_num, flat_den = num.reshape(-1), den.reshape(-1)
    return _bernoulli(flat_num, flat_den, flat_num.numel(), generator, num.device).view(num.shape)


def _bernoulli_exp_unit(num: Tensor | int, den: Tensor | int, size: int, generator: Optional[torch.Generator],
                        device: Device) -> Tensor:
    """CKS Algorithm 1 for γ = num / den in [0, 1] (``size`` elements; num, den ints or int64 tensors of ``size``):
    K = 1; repeat A ~ Bernoulli(γ / K) = Bernoulli(num / (den K)), stop at A = 0, else K += 1; output [K odd].
    P(K > k) = γ^k / k!, so P(K odd) = Σ_k (-γ)^k / k! = exp(-γ). All elements still looping share the same K, a
    Python integer; den K is checked against 2^62 before each draw (ValueError naming den * K)."""
    out = torch.zeros(size, dtype=torch.bool, device=device)
    den_max = den if isinstance(den, int) else (int(den.max()) if size else 1)
    todo: Optional[Tensor] = None                       # None: every element (no index built before the first draw)
    k = 1
    if isinstance(num, int) and isinstance(den, int) and num == den:
        k = 2                                           # γ = 1: A = 1 surely at K = 1 (no draw needed)
    while size:
        if den_max * k > LIMIT:
            raise ValueError(f"bernoulli_exp: den * K = {den_max} * {k} exceeds 2^62 (den too large for int64)")
        a = _bernoulli(num, den * k, size, generator, device)
        if k % 2 == 1:                                  # stopping at an odd K: output 1 (even K: the zero stays)
            if todo is None:
                out = ~a
            else:
                out[todo[~a]] = True
        todo = torch.nonzero(a).view(-1) if todo is None else todo[a]
        if not isinstance(num, int):
            num = num[a]
        if not isinstance(den, int):
            den = den[a]
        size = todo.numel()
        k += 1
    return out


def _exp_minus_one(size: int, generator: Optional[torch.Generator], device: Device) -> Tensor:
    """``size`` independent Bernoulli(exp(-1)) trials (CKS Algorithm 1 at γ = 1)."""
    return _bernoulli_exp_unit(1, 1, size, generator, device)


def _all_successes(counts: Tensor, generator: Optional[torch.Generator], chunk: int = 4) -> Tensor:
    """For each element, whether ``counts_i`` independent Bernoulli(exp(-1)) trials all succeed (bool). Each pass
    draws min(left_i, chunk) trials for element i; an element with a failure stops."""
    ok = torch.ones(counts.shape, dtype=torch.bool, device=counts.device)
    idx = torch.nonzero(counts > 0).view(-1)
    left = counts[idx]
    while idx.numel():
        take = left.clamp(max=chunk)
        owner = torch.repeat_interleave(torch.arange(idx.numel(), device=counts.device), take)
        trials = _exp_minus_one(owner.numel(), generator, counts.device)
        fails = torch.zeros(idx.numel(), dtype=torch.int64, device=counts.device)
        fails.index_add_(0, owner, (~trials).to(torch.int64))
        ok[idx[fails > 0]] = False
        left = left - take
        keep = (fails == 0) & (left > 0)
        idx, left = idx[keep], left[keep]
    return ok


def _bernoulli_exp(num: Tensor, den: Tensor | int, generator: Optional[torch.Generator]) -> Tensor:
    """:func:`bernoulli_exp` without the argument checks, on a 1-d ``num`` (``den`` an int or a tensor like num)."""
    size, device = num.numel(), num.device
    whole = num // den
    out = _all_successes(whole, generator)
    if bool(out.all()):
        return _bernoulli_exp_unit(num - whole * den, den, size, generator, device)
    rest = torch.nonzero(out).view(-1)
    d = den if isinstance(den, int) else den[rest]
    out[rest] = _bernoulli_exp_unit(num[rest] - whole[rest] * d, d, rest.numel(), generator, device)
    return out


def bernoulli_exp(num: Tensor, den: Tensor | int, generator: Optional[torch.Generator]) -> Tensor:
    """Exact Bernoulli(exp(-γ)) per element (bool tensor), γ = num / den >= 0 rational (CKS Algorithm 1).

    γ <= 1: K = 1; loop A ~ Bernoulli(num / (den K)); stop at A = 0, else K += 1; return [K odd] (P = exp(-γ)).
    γ > 1: floor(γ) independent Bernoulli(exp(-1)) trials (the γ = 1 case) must all succeed, then one
    Bernoulli(exp(-(γ - floor γ))) with γ - floor γ = (num mod den) / den; the product has probability exp(-γ).
    ``num``: int64 tensor, num >= 0; ``den``: an int or an int64 tensor of num's shape, 1 <= den < 2^62. Raises
    ValueError if den K would exceed 2^62 (K passes k with probability γ^k / k!, so only for den close to 2^62)."""
    num = _int64(num, "num")
    if not isinstance(den, Tensor):
        den = integer(den, "den", minimum=1)
        lo = hi = den
    else:
        den = _int64(den, "den")
        if den.shape != num.shape:
            raise ValueError(f"den must be an int or a tensor of num's shape {tuple(num.shape)}, "
                             f"got {tuple(den.shape)}")
        den = den.reshape(-1)
        lo, hi = (int(den.min()), int(den.max())) if den.numel() else (1, 1)
    if lo < 1 or hi >= LIMIT:
        raise ValueError(f"den must be in [1, 2^62), got values in [{lo}, {hi}]")
    if num.numel() and bool((num < 0).any()):
        raise ValueError("num must be >= 0 (γ = num / den >= 0)")
    return _bernoulli_exp(num.reshape(-1), den, generator).view(num.shape)


def _geometric_exp1(n: int, generator: Optional[torch.Generator], device: Device) -> Tensor:
    """V: the number of successes before the first failure of independent Bernoulli(exp(-1)) trials (CKS Algorithm 2's
    inner loop), n of them; P(V >= v) = exp(-v). The trials are drawn a few per element at a time (2 in the first
    pass, 4 after), those after the first failure discarded: independent draws, so no law changes."""
    v = torch.zeros(n, dtype=torch.int64, device=device)
    idx: Optional[Tensor] = None
    chunk = 2
    while n:
        trials = _exp_minus_one(n * chunk, generator, device).view(n, chunk)
        run = torch.cumprod(trials.to(torch.int64), dim=1)              # 1 up to the first failure, then 0
        counted = run.sum(dim=1)
        more = run[:, -1] == 1                           # all succeeded: keep counting
        if idx is None:
            v += counted
            idx = torch.nonzero(more).view(-1)
        else:
            v[idx] += counted
            idx = idx[more]
        n, chunk = idx.numel(), 4
    return v


def _laplace_attempt(n: int, t: int, generator: Optional[torch.Generator], device: Device
                     ) -> tuple[Tensor, Tensor]:
    """One pass of CKS Algorithm 2's loop (s = 1) for n elements: (Y, accepted). U uniform on {0..t-1};
    D ~ Bernoulli(exp(-U / t)), reject at D = 0; V ~ (successes of Bernoulli(exp(-1)) before a failure); X = U + t V;
    B ~ Bernoulli(1/2), reject at B = 1 and X = 0; Y = (1 - 2B) X. V and B are drawn for the D-rejected elements
    too (independent draws, discarded with them: one selection per pass instead of one per step)."""
    j = _words((LIMIT // t) * t, n, generator, device)
    u = j & (t - 1) if t & (t - 1) == 0 else j % t      # t a power of 2: the low bits, exactly uniform
    ok = _bernoulli_exp_unit(u, t, n, generator, device)
    v = _geometric_exp1(n, generator, device)
    if n and int(v.max()) > (LIMIT - t) // t:
        raise ValueError(f"discrete_laplace: X = U + t V exceeds 2^62 (t = {t}, V = {int(v.max())})")
    x = u + t * v
    b = _bernoulli(1, 2, n, generator, device)
    ok &= ~(b & (x == 0))
    return torch.where(b, -x, x), ok


def _check_shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    shape = (shape,) if isinstance(shape, int) and not isinstance(shape, bool) else tuple(shape)
    return tuple(integer(s, "shape", minimum=0) for s in shape)


def discrete_laplace(*, t: int, shape: Sequence[int] | int, generator: Optional[torch.Generator],
                     device: Device = "cpu") -> Tensor:
    """Independent samples of the discrete Laplace law of scale t on Z (int64 tensor of ``shape``):
    P(Y = y) = (e^{1/t} - 1) / (e^{1/t} + 1) e^{-|y| / t} (CKS Algorithm 2 with s = 1, integer t >= 1).

    Each round is one pass of the algorithm's loop (:func:`_laplace_attempt`); the elements whose pass was rejected
    run again. ``generator``: a torch.Generator on ``device`` (None: torch's default)."""
    t = integer(t, "t", minimum=1)
    if t >= LIMIT:
        raise ValueError(f"t must be < 2^62, got {t}")
    shape = _check_shape(shape)
    out = torch.empty(math.prod(shape), dtype=torch.int64, device=device)
    todo = torch.arange(out.numel(), device=device)
    while todo.numel():
        y, ok = _laplace_attempt(todo.numel(), t, generator, device)
        out[todo[ok]] = y[ok]
        todo = todo[~ok]
    return out.view(shape)


def discrete_gaussian(*, shape: Sequence[int] | int, generator: Optional[torch.Generator], device: Device = "cpu",
                      t: int = 2 ** 16, c: int = 2 ** 16) -> Tensor:
    """Independent samples of the discrete Gaussian N_Z(0, σ²) with σ² = t c (int64 tensor of ``shape``):
    P(Y = y) = e^{-y² / (2σ²)} / Σ_{k ∈ Z} e^{-k² / (2σ²)} (CKS Definition 1; exact sampler CKS Algorithm 3).

    Algorithm 3: repeat { Y ~ discrete Laplace of scale t (Algorithm 2); C ~ Bernoulli(exp(-(|Y| - σ²/t)² / (2σ²)));
    if C = 1 return Y }. With σ² = t c the acceptance exponent is γ = (|Y| - c)² / (2 t c), a ratio of integers,
    sampled exactly by :func:`bernoulli_exp`. **Exact for every t > 0**, not only CKS's efficient choice
    t = floor(σ) + 1: a round outputs y with probability proportional to
    e^{-|y|/t} · e^{-(|y| - σ²/t)² / (2σ²)} = e^{-y² / (2σ²)} · e^{-σ² / (2t²)}, and the second factor does not
    depend on y, so the accepted Y has law N_Z(0, σ²); t only sets the acceptance rate (about 0.76 per round for
    t = c). A rejected discrete-Laplace pass (Algorithm 2's own loop) also starts a new round here: both are rounds
    of i.i.d. trials whose first success is output, so the law is the same.

    Defaults t = c = 2^16 (σ = 65536): 2tc = 2^33, so den K <= 2^62 while K <= 2^29 (K passes k with probability
    at most 1/k!). The integers stay below 2^62 while | |Y| - c | <= 2^31 - 1, i.e. |Y| < 2^31 + c; for the default
    P(|Y| >= 2^31) is about e^{-2^31 / 2^16} = e^{-32768} per draw, and the sampler checks it and raises ValueError
    (never overflows) if it ever happens. Requires t >= 1, 1 <= c <= 2^31 - 1 and 2tc < 2^62."""
    t = integer(t, "t", minimum=1)
    c = integer(c, "c", minimum=1)
    if c > _DIFF_MAX:
        raise ValueError(f"c must be <= 2^31 - 1 (so that (|Y| - c)^2 fits in int64), got {c}")
    if 2 * t * c >= LIMIT:
        raise ValueError(f"2 * t * c must be < 2^62 (the denominator of γ), got t = {t}, c = {c}")
    shape = _check_shape(shape)
    den = 2 * t * c
    out = torch.empty(math.prod(shape), dtype=torch.int64, device=device)
    todo = torch.arange(out.numel(), device=device)
    while todo.numel():
        y, ok = _laplace_attempt(todo.numel(), t, generator, device)
        idx = torch.nonzero(ok).view(-1)
        diff = y[idx].abs() - c
        if diff.numel() and int(diff.abs().max()) > _DIFF_MAX:
            raise ValueError(f"discrete_gaussian: | |Y| - c | = {int(diff.abs().max())} exceeds 2^31 - 1 "
                             f"((|Y| - c)^2 would overflow int64; t = {t}, c = {c})")
        ok[idx] = _bernoulli_exp(diff * diff, den, generator)
        out[todo[ok]] = y[ok]
        todo = todo[~ok]
    return out.view(shape)


def _support(sigma: float) -> Tensor:
    half = math.ceil(20 * sigma) + 20                   # the mass beyond |k| = 20σ is below e^{-200}
    return torch.arange(-half, half + 1, dtype=torch.float64)


@lru_cache(maxsize=32)
def _log_normaliser(sigma: float) -> float:
    k = _support(sigma)
    return math.log(float(torch.exp(-k * k / (2 * sigma * sigma)).sum()))


def discrete_gaussian_pmf(k: Tensor | int, sigma: float) -> Tensor:
    """P(Y = k) for Y ~ N_Z(0, σ²) in float64: e^{-k²/(2σ²)} / Σ_{|j| <= 20σ + 20} e^{-j²/(2σ²)} (the tail left out of
    the normaliser is below e^{-200} relative). For tests and reporting, never for sampling."""
    sigma = real(sigma, "sigma", positive=True)
    k = torch.as_tensor(k, dtype=torch.float64)
    return torch.exp(-k * k / (2 * sigma * sigma) - _log_normaliser(sigma))


@lru_cache(maxsize=32)
def discrete_gaussian_variance(sigma: float) -> float:
    """Var(Y) = Σ k² P(Y = k) for Y ~ N_Z(0, σ²), in float64 over |k| <= 20σ + 20. Below σ² (CKS prove Var(Y) < σ²);
    by Poisson summation σ² - Var(Y) is of order σ⁴ e^{-2π²σ²}, nothing at float64 precision for σ >= 2."""
    sigma = real(sigma, "sigma", positive=True)
    k = _support(sigma)
    return float((k * k * discrete_gaussian_pmf(k, sigma)).sum())


def discrete_laplace_pmf(k: Tensor | int, t: int) -> Tensor:
    """P(Y = k) for the discrete Laplace of scale t: (e^{1/t} - 1) / (e^{1/t} + 1) e^{-|k|/t}, float64 (tests)."""
    t = integer(t, "t", minimum=1)
    k = torch.as_tensor(k, dtype=torch.float64)
    return math.tanh(1 / (2 * t)) * torch.exp(-k.abs() / t)

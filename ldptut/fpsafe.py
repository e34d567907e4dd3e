"""Floating-point-safe sampling: a fixed output grid, each output drawn with its exact probability.

**The problem.** A mechanism's ε is a statement about its output law. The textbook samplers (the inverse CDF of one
uniform, or noise added to the input in floating point) do not realise that law: which floats can come out depends
on the input, so one report can rule an input out (Mironov, "On significance of the least significant bits for
differential privacy", CCS 2012). Enumerating all 2^24 float32 uniforms of ``torch.rand`` through the textbook
Laplace sampler at ε = 1, 80 % of the reports for x = 0 cannot occur for x = 1: the realised ε is infinite.

**What we do.** A continuous ε-LDP mechanism of :mod:`ldptut.mechanisms` (Laplace, Piecewise, Hybrid) reports one of a
finite, input-independent set of values (its *grid law*), drawn with one uniform by the inverse CDF of exact
cumulative probabilities:

1. *An ideal law on a grid.* The mechanism at a design ε_d <= ε (in units of the range, t = (w - c) / r in [-1, 1]),
   followed by unbiased randomized rounding onto a fixed grid (a value between two grid points goes to either with
   probabilities that keep its mean). Rounding is post-processing, so the grid law is ε_d-LDP, and it stays
   unbiased. Its cumulative probabilities are averages of the continuous CDF over a grid cell, in closed form,
   computed in float64 (:meth:`GridLaw.cum`).
2. *Uniforms on a known grid.* The uniform is an integer J drawn uniformly from [0, 2^24) by ``torch.randint``,
   u = J 2^-24 (:func:`uniforms`), on every device and for every input dtype. Output k comes out for the J with
   F_{k-1} <= u < F_k, so its realised probability is (ceil(F_k 2^24) - ceil(F_{k-1} 2^24)) 2^-24
   (:func:`realized`), within :data:`SLACK` of the designed one (the rounding of the float64 cumulatives, bounded
   by :data:`CUM_ERROR`, included).
3. *A floor.* Every output's designed probability is at least p_min = SLACK (e^ε + 1) / (e^ε - e^{ε_d}) for every
   input (:func:`floor_probability`). Then for any inputs x, x' and output k the realised probabilities satisfy
   p̂(x) <= e^{ε_d} p(x') + SLACK <= e^ε (p(x') - SLACK) <= e^ε p̂(x'): **the law the code samples is ε-LDP**,
   with ε the claimed value, and every output possible under one input is possible under all.
4. *The design.* ε_d and the grid's fineness trade two costs: the margin ε - ε_d (more noise) against the floor
   (a coarser grid, more rounding noise). :func:`choose_design` takes, among candidate ε_d, the finest grid whose
   smallest output probability (at t = -1 and t = 1, where a unimodal cell probability is smallest) meets the floor,
   and keeps the pair with the smallest mean variance over t in {-1, -1/2, 0, 1/2, 1}. The variance of the grid law
   is exact (a finite sum); the mechanisms give it beside the ideal mechanism's closed form, and the ratio is the
   cost of sampling safely.

Why not the alternatives. Mironov's snapping mechanism (clamp, add Laplace noise computed with an exact-rounding
log, round to a power-of-two grid) costs a large clamp bound and does not carry over to the Piecewise Mechanism.
OpenDP samples exactly with arbitrary-precision arithmetic and rational parameters (discrete Laplace / Gaussian by
Bernoulli trials, Canonne, Kamath, Steinke 2020); diffprivlib's ``Laplace`` uses floats (its snapping variant is
separate). A grid law with a floor keeps one uniform per report and vectorised float64 arithmetic on any device,
works for every mechanism with a CDF in closed form, and its guarantee is checked exhaustively over the 2^24
uniforms (``tests/test_fpsafe.py``).

**The Gaussian** (:class:`ldptut.mechanisms.Gaussian`) is an (ε, δ) mechanism with an unbounded privacy loss: no
floor can hold, and its tails are what δ pays for. Its grid law (clamped at 9 σ beyond the range, rounded without
bias onto a grid of step σ/32) is sampled with 2^-53-step uniforms (:data:`GAUSSIAN_BITS`; the lower half of the
uniforms compared with F_k, the upper half with 1 - F_k computed directly, so the tails keep their precision). The
designed law is a post-processing of the Gaussian, so μ-GDP exactly; the realised law is within total variation
tv = K (2^-53 + float error) of it, and the guarantee stated is (ε, δ_μ(ε) + (1 + e^ε) tv)
(:func:`ldptut.accounting.gaussian_epsilon`), checked exactly on the realised laws in ``tests/test_fpsafe.py``
(:func:`ldptut.audits.exact_delta_audit`).

The assumption left: the generator's integers are uniform (true of a counter-based generator up to its own
statistical quality). Seeded generators make a simulation reproducible; a deployment draws its randomness from a
secret, cryptographic source.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

import torch
from torch import Tensor

__all__ = ["UNIFORM_BITS", "RESOLUTION", "CUM_ERROR", "SLACK", "GAUSSIAN_BITS", "GAUSSIAN_CUM_ERROR", "uniforms", "floor_probability", "GridLaw",
           "Design", "choose_design", "realized", "design_candidates", "cell_of"]

#: Bits of every uniform: u = J 2^-24, J uniform on [0, 2^24) (float32 ``torch.rand``'s grid).
UNIFORM_BITS = 24
#: The uniforms' step, 2^-24.
RESOLUTION = 2.0 ** -UNIFORM_BITS
#: A bound on the absolute float64 error of a computed cumulative probability (they are sums of a few terms,
#: each accurate to a few ulps of 1, about 1e-16; the bound leaves a factor 10^4).
CUM_ERROR = 2.0 ** -40
#: |realised - designed| probability of any output: one step of the uniforms plus the two cumulatives' errors.
SLACK = RESOLUTION + 2.0 * CUM_ERROR
#: Bits of the Gaussian's uniforms: its (ε, δ) law has tails far below 2^-24 that go into δ, so its realised law
#: must be within a total variation far below δ of the designed one (:class:`ldptut.mechanisms.Gaussian`).
GAUSSIAN_BITS = 53
#: The Gaussian grid law's bound on the absolute float64 error of its cumulatives is this times (1 + 1/s), s = σ/r
#: the noise in units of the range (cell means of Φ through ψ(z) = z Φ(z) + φ(z) and erfcx; the error grows like
#: 1/s because the cell ends, of size about 1, are divided by s). Measured against 50-digit mpmath: at most
#: 7.6e-14 at s = 0.01 and 1e-14 at s >= 0.077, 10 to 80 times below the bound (``tests/test_fpsafe.py``).
GAUSSIAN_CUM_ERROR = 2.0 ** -44
#: Elements per chunk of the sampler (bounds its float64 temporaries to a few hundred MB).
CHUNK = 1 << 21


def uniforms(shape: Sequence[int], generator: Optional[torch.Generator], device: torch.device | str,
             bits: int = UNIFORM_BITS) -> Tensor:
    """u = J 2^-bits with J uniform on the integers [0, 2^bits) (``torch.randint``), as float64: the same grid on
    every device, whatever the dtype of the input. ``bits`` is 24 (the ε-LDP grid laws) or up to 53 (the Gaussian's
    (ε, δ) law, :data:`GAUSSIAN_BITS`); float64 holds every such u exactly."""
    if not 1 <= bits <= 53:
        raise ValueError(f"bits must be in [1, 53], got {bits!r}")
    if bits <= 24:
        j = torch.randint(0, 1 << bits, tuple(shape), generator=generator, device=device, dtype=torch.int32)
    else:
        j = torch.randint(0, 1 << bits, tuple(shape), generator=generator, device=device, dtype=torch.int64)
    return j.to(torch.float64).mul_(2.0 ** -bits)


def floor_probability(epsilon: float, epsilon_design: float) -> float:
    """p_min = SLACK (e^ε + 1) / (e^ε - e^{ε_d}): every output with at least this designed probability keeps the
    realised ratio within e^ε (module docstring, step 3). Computed as SLACK (1 + e^-ε) / (1 - e^{ε_d - ε})."""
    if not 0.0 < epsilon_design < epsilon:
        raise ValueError(f"the design epsilon must lie in (0, epsilon={epsilon:g}), got {epsilon_design!r}")
    return SLACK * (1.0 + math.exp(-epsilon)) / -math.expm1(epsilon_design - epsilon)


class GridLaw:
    """A grid law on t in [-1, 1] (units of the range): K output values and their cumulative probabilities.

    Subclasses give ``values`` (K float64 values, t units), :meth:`prepare` (per-element quantities of t, computed
    once), :meth:`cum_at` (P[index <= k | t] from them, float64, exactly 1 for k >= K - 1) and :meth:`candidate`
    (an index within one of the answer, from the continuous quantile in float64)."""

    values: Tensor
    epsilon_design: float
    cells: int

    @property
    def size(self) -> int:
        return int(self.values.numel())

    def prepare(self, t: Tensor) -> tuple:
        return (t,)

    def cum_at(self, k: Tensor, state: tuple) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def candidate(self, u: Tensor, state: tuple) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def passed(self, k: Tensor, state: tuple, u: Tensor) -> Tensor:
        """Whether u lies at or beyond cumulative k, F_k <= u (int64 0 / 1): the sampler's only comparison."""
        return (self.cum_at(k, state) <= u).to(torch.int64)

    def cum(self, k: Tensor, t: Tensor) -> Tensor:
        """P[index <= k | t] (k and t of one shape; float64)."""
        return self.cum_at(k, self.prepare(t))

    def cum_all(self, t: Tensor) -> Tensor:
        """P[index <= k | t] for every k: shape t.shape + (K,) (float64)."""
        t = torch.as_tensor(t, dtype=torch.float64)
        k = torch.arange(self.size, dtype=torch.int64, device=t.device)
        return self.cum(k.expand(*t.shape, -1), t.unsqueeze(-1).expand(*t.shape, self.size))

    def probs(self, t: Tensor) -> Tensor:
        """Designed probability of every output, shape t.shape + (K,) (float64)."""
        F = self.cum_all(t)
        return torch.diff(F, dim=-1, prepend=torch.zeros_like(F[..., :1]))

    #: Bits of the uniforms the law is sampled with.
    bits: int = UNIFORM_BITS

    def realized_probs(self, t: Tensor) -> Tensor:
        """The probabilities the sampler realises with 2^-bits-step uniforms: counts of J times 2^-bits."""
        return realized(self.cum_all(t), self.bits)

    #: Probability weight of the part of the law that is rounded onto the grid (1, or β for the Hybrid).
    rounded_weight: float = 1.0

    def unrounded_variance(self, t: Tensor) -> Tensor:  # pragma: no cover - abstract
        """Closed-form variance of the law before the grid's rounding (the ideal mechanism at ε_d, tails collapsed
        where the law collapses them), t units."""
        raise NotImplementedError

    def variance_bounds(self, t: Tensor) -> tuple[Tensor, Tensor]:
        """Randomized rounding of a value at fraction f of a cell of width g adds g² f (1 - f) <= g²/4 to the
        variance: V0 <= Var <= V0 + w g²/4, V0 = :meth:`unrounded_variance`, w = :attr:`rounded_weight`."""
        v0 = self.unrounded_variance(torch.as_tensor(t, dtype=torch.float64))
        return v0, v0 + self.rounded_weight * self.g * self.g / 4.0

    def variance(self, t: Tensor) -> Tensor:
        """Var[output | t] of the grid law (exact finite sum, float64, t units)."""
        t = torch.as_tensor(t, dtype=torch.float64)
        p = self.probs(t)
        v = self.values.to(t.device)
        return (p * (v - t.unsqueeze(-1)) ** 2).sum(-1)

    def index(self, u: Tensor, t: Tensor) -> Tensor:
        """The output index for uniforms ``u`` (float64 multiples of 2^-bits) and inputs ``t`` (same shape): the
        smallest k with u < F_k (int64).

        :meth:`candidate` gives c, the cell of the continuous quantile y* (computed in float64), whose answer is c or
        c + 1 (F_{c-1} <= G(y_c) <= G(y*) = u <= G(y_{c+1}) <= F_{c+1}), so one cumulative decides it:
        k = c + [F_c <= u]. Where y* lies within 1e-6 of a cell's edge (``near``), float error could put it in the
        neighbouring cell; there three cumulatives, at c - 1, c and c + 1, decide among c - 1 ... c + 2."""
        out = torch.empty(u.shape, dtype=torch.int64, device=u.device)
        uf, tf, of = u.reshape(-1), t.reshape(-1), out.view(-1)
        last = self.size - 1
        for s in range(0, uf.numel(), CHUNK):
            us = uf[s:s + CHUNK]
            state = self.prepare(tf[s:s + CHUNK])
            c, near = self.candidate(us, state)
            k = c + self.passed(c, state, us)
            idx = near.nonzero().flatten()
            if idx.numel():
                sub_u, sub_state = us[idx], tuple(x[idx] for x in state)
                base = (c[idx] - 1).clamp_(0, last)
                kk = base.clone()
                for i in range(3):
                    kk += self.passed((base + i).clamp_(max=last), sub_state, sub_u)
                k[idx] = kk
            of[s:s + CHUNK] = k
        return out


def cell_of(pos: Tensor, lo: int, hi: int) -> tuple[Tensor, Tensor]:
    """floor(pos) clamped to [lo, hi] (int64), and whether pos lies within 1e-6 of an integer (where float error
    in pos could change its floor)."""
    f = torch.floor(pos)
    frac = pos - f
    near = (frac < 1e-6) | (frac > 1.0 - 1e-6) | ~torch.isfinite(pos)
    return f.clamp_(lo, hi).to(torch.int64), near


def realized(F: Tensor, bits: int = UNIFORM_BITS) -> Tensor:
    """Realised probabilities from cumulatives F (last axis, F[-1] = 1): output k takes the uniforms J 2^-b with
    F_{k-1} <= J 2^-b < F_k, (ceil(F_k 2^b) - ceil(F_{k-1} 2^b)) of the 2^b (b = ``bits``; float64, exact: scaling
    by a power of two and ceil are exact, and every count is below 2^53)."""
    n = torch.ceil(F.to(torch.float64) * float(1 << bits)).clamp_(0, float(1 << bits))
    n[..., -1] = float(1 << bits)
    return torch.diff(n, dim=-1, prepend=torch.zeros_like(n[..., :1])) * 2.0 ** -bits


@dataclass(frozen=True)
class Design:
    """The grid law chosen for a claimed ε: the design ε_d, the number of grid cells, the floor every output's
    probability meets (at every input) and the smallest probability it has."""

    epsilon: float
    epsilon_design: float
    cells: int
    floor: float
    min_probability: float
    mean_variance: float  # mean over t in {-1, -1/2, 0, 1/2, 1} of the grid law's variance (t units)

    def __str__(self) -> str:
        return (f"grid law at eps_d = {self.epsilon_design:.6g} (claimed {self.epsilon:g}), {self.cells} cells; "
                f"smallest output probability {self.min_probability:.3g} >= floor {self.floor:.3g}")


#: Relative margins ε - ε_d tried, and absolute caps on ε_d for large ε (beyond about ε = 16 no 24-bit sampler can
#: realise a law whose smallest output probability ratio needs more than 2^24 steps).
_MARGINS = (1e-4, 3e-4, 1e-3, 3e-3, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
_CAPS = tuple(float(c) for c in range(2, 41, 2))
_OBJECTIVE_T = (-1.0, -0.5, 0.0, 0.5, 1.0)


def design_candidates(epsilon: float) -> list[float]:
    """The design ε_d tried for a claimed ε: ε (1 - s) for the margins s, and the caps below ε."""
    out = [epsilon * (1.0 - s) for s in _MARGINS]
    out += [c for c in _CAPS if c < epsilon * (1.0 - _MARGINS[0])]
    return sorted({e for e in out if 0.0 < e <= _CAPS[-1]})


def _min_prob(law: GridLaw) -> float:
    return float(law.probs(torch.tensor([-1.0, 1.0], dtype=torch.float64)).min())


def choose_design(epsilon: float, build: Callable[[float, int], GridLaw], *, max_cells: int, name: str) -> Design:
    """The (ε_d, cells) of smallest mean variance whose law meets the floor (module docstring, step 4).

    For each candidate ε_d, the largest number of cells in [1, max_cells] whose smallest output probability (at
    t = ±1) is at least :func:`floor_probability` (bisection). Raises ``ValueError`` naming epsilon when no
    candidate is feasible (ε too small for 2^24-step uniforms)."""
    best: Optional[Design] = None
    ts = torch.tensor(_OBJECTIVE_T, dtype=torch.float64)
    for eps_d in design_candidates(epsilon):
        floor = floor_probability(epsilon, eps_d)
        if not _min_prob(build(eps_d, 1)) >= floor:  # (a NaN is not feasible)
            continue
        lo, hi = 1, max_cells
        if _min_prob(build(eps_d, hi)) >= floor:
            lo = hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if _min_prob(build(eps_d, mid)) >= floor:
                lo = mid
            else:
                hi = mid
        law = build(eps_d, lo)
        var = float(law.variance(ts).mean())
        if not math.isfinite(var):
            continue
        if best is None or var < best.mean_variance:
            best = Design(epsilon=epsilon, epsilon_design=eps_d, cells=lo, floor=floor,
                          min_probability=_min_prob(law), mean_variance=var)
    if best is None:
        raise ValueError(f"epsilon={epsilon:g} is too small for {name} to be sampled safely with 2^{UNIFORM_BITS}-step "
                         f"uniforms (no output grid keeps every probability above the floor); use a larger epsilon "
                         f"or the two-point mechanism")
    return best


@functools.lru_cache(maxsize=256)
def cached_design(cls_name: str, epsilon: float, build: Callable[[float, int], GridLaw], max_cells: int) -> Design:
    """:func:`choose_design`, memoised per (mechanism, ε)."""
    return choose_design(epsilon, build, max_cells=max_cells, name=cls_name)

"""Privacy accounting: what an ε protects (its unit), composition, and calibration.

* :class:`Unit` and :class:`Guarantee`: an (ε, δ) with a structured unit (per coordinate, per model,
  per round, over training) and :meth:`Guarantee.compose` (d coordinates, T rounds). Every mechanism
  states its guarantee this way (:attr:`ldptut.mechanisms.Mechanism.guarantee`), the privatizers of
  :mod:`ldptut.fl` report theirs, and the simulator records what each round spends.
* Composition: basic sequential composition (Dwork & Roth, "The Algorithmic Foundations of
  Differential Privacy", 2014, Theorem 3.16): running mechanisms with (ε_i, δ_i) on the same
  client's data gives (Σ ε_i, Σ δ_i); Gaussian mechanisms compose exactly through μ-GDP (Dong, Roth,
  Su, JRSS-B 2022). :func:`epsilon_table` lays a per-coordinate ε next to its composed figures.
* Calibration: the exact (ε, δ) of the Gaussian mechanism (Balle & Wang, ICML 2018).
* Shuffling: the amplification bound of Feldman, McMillan, Talwar (FOCS 2021).

Audits (checking a mechanism's claim from its output law or from samples) are in :mod:`ldptut.audits`.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace
from typing import Any, Iterable, Optional, Sequence, Tuple

from torch import Tensor

from ._validate import delta as _delta, pos_int, real

__all__ = ["Unit", "PER_COORDINATE", "Guarantee", "ClientAccountant", "compose_sequential",
           "epsilon_table", "shuffle_amplification", "gaussian_delta", "gaussian_epsilon", "gaussian_sigma",
           "compose_gaussian"]


# --------------------------------------------------------------------------------------------------
# the unit of epsilon
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """What one guarantee protects: ``coordinates`` scalars of one client's report (its whole model when
    ``whole_model``), over ``rounds`` rounds. ``Unit()`` is one coordinate in one round (one scalar report).

    ``str(Unit())`` -> "per coordinate per round"; ``str(Unit(1_199_882, 10, True))`` ->
    "per model (d = 1,199,882 coordinates) over 10 rounds".
    """

    coordinates: int = 1
    rounds: int = 1
    whole_model: bool = False

    def __post_init__(self) -> None:
        pos_int(self.coordinates, "coordinates")
        pos_int(self.rounds, "rounds")

    def __str__(self) -> str:
        if self.whole_model:
            what = f"per model (d = {self.coordinates:,} coordinates)"
        elif self.coordinates == 1:
            what = "per coordinate"
        else:
            what = f"per {self.coordinates:,} coordinates"
        return f"{what} {'per round' if self.rounds == 1 else f'over {self.rounds:,} rounds'}"

    def compose(self, *, d: Optional[int] = None, rounds: Optional[int] = None) -> "Unit":
        """The unit after composing over ``d`` coordinates (the whole model) and/or ``rounds`` rounds."""
        return Unit(coordinates=self.coordinates * (1 if d is None else pos_int(d, "d")),
                    rounds=self.rounds * (1 if rounds is None else pos_int(rounds, "rounds")),
                    whole_model=self.whole_model or d is not None)


#: One scalar report: the unit of LDP-FL's, CoQ-FL's and PD-LDPFL's ε (per weight per round).
PER_COORDINATE = Unit()


@dataclass(frozen=True)
class Guarantee:
    """(ε, δ)-LDP for the stated :class:`Unit` of one client's data; what a mechanism promises.

    ``mu`` is set for a Gaussian mechanism (μ = Δ/σ, μ-GDP; Dong, Roth, Su 2022): it composes exactly,
    μ_total = sqrt(Σ μ_i²), and ε is the exact one for δ (:func:`gaussian_epsilon`). Without ``mu``,
    composition is basic (ε and δ add up: an upper bound, tight for the discrete mechanisms here).
    ``note`` says how the figure was obtained when that matters (e.g. "as calibrated by the paper").
    ``tv`` (with ``mu``) is the total variation between the law a sampler realises and the ideal μ-GDP law: then
    δ = δ_μ(ε) + (1 + e^ε) tv (:func:`gaussian_epsilon`), k reports are within k tv of their ideal composition, and
    ε may be ``math.inf``: no finite ε holds at this δ.

    ``str(Guarantee(1.0))`` -> "ε = 1 (δ = 0) per coordinate per round".
    """

    epsilon: float
    delta: float = 0.0
    unit: Unit = PER_COORDINATE
    mu: Optional[float] = None
    note: str = ""
    tv: float = 0.0

    def __post_init__(self) -> None:
        if self.epsilon != math.inf:  # inf: no finite ε holds at this δ (a realised law too sharp for its sampler)
            real(self.epsilon, "epsilon", nonneg=True)
        if not 0 <= self.delta <= 1:
            raise ValueError(f"delta must be in [0, 1], got {self.delta}")
        if self.mu is not None:
            real(self.mu, "mu", positive=True)
        if not 0 <= real(self.tv, "tv", nonneg=True) <= 1:
            raise ValueError(f"tv must be in [0, 1], got {self.tv}")
        if self.tv and self.mu is None:
            raise ValueError("tv (the realised law's distance from a μ-GDP law) needs mu")

    @property
    def finite(self) -> bool:
        """Whether some finite ε holds at this δ."""
        return math.isfinite(self.epsilon)

    def __str__(self) -> str:
        head = f"ε = {self.epsilon:g} (δ = {self.delta:g})" if self.finite else f"no finite ε certified at δ = {self.delta:g}"
        return f"{head} {self.unit}" + (f", {self.note}" if self.note else "")

    def compose(self, *, d: Optional[int] = None, rounds: Optional[int] = None) -> "Guarantee":
        """The guarantee of ``d`` such reports (one per coordinate of a model) in each of ``rounds`` rounds."""
        k = (1 if d is None else pos_int(d, "d")) * (1 if rounds is None else pos_int(rounds, "rounds"))
        unit = self.unit.compose(d=d, rounds=rounds)
        if self.mu is not None:
            mu, tv = self.mu * math.sqrt(k), min(1.0, self.tv * k)
            return replace(self, epsilon=gaussian_epsilon(self.delta, mu, tv), mu=mu, unit=unit, tv=tv)
        return replace(self, epsilon=self.epsilon * k, delta=min(1.0, self.delta * k), unit=unit)

    def __add__(self, other: "Guarantee") -> "Guarantee":
        """Sequential composition of two guarantees on the same client's data (e.g. two rounds of one model)."""
        if not isinstance(other, Guarantee):
            return NotImplemented
        a, b = self.unit, other.unit
        if (a.coordinates, a.whole_model) != (b.coordinates, b.whole_model):
            raise ValueError(f"cannot add guarantees of different units: {a} and {b}")
        unit = Unit(coordinates=a.coordinates, rounds=a.rounds + b.rounds, whole_model=a.whole_model)
        if self.mu is not None and other.mu is not None and self.delta == other.delta:
            mu, tv = math.hypot(self.mu, other.mu), min(1.0, self.tv + other.tv)
            return Guarantee(epsilon=gaussian_epsilon(self.delta, mu, tv), delta=self.delta, unit=unit, mu=mu,
                             note=self.note, tv=tv)
        return Guarantee(epsilon=self.epsilon + other.epsilon, delta=min(1.0, self.delta + other.delta), unit=unit,
                         note=self.note if self.note == other.note else "")


# --------------------------------------------------------------------------------------------------
# composition
# --------------------------------------------------------------------------------------------------
def _as_list(v: Any, name: str) -> list:
    if isinstance(v, Tensor):
        return v.detach().reshape(-1).tolist()
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise ValueError(f"{name} must be a sequence of numbers, got {v!r}")
    return list(v)


def compose_sequential(
    epsilons: Sequence[float], deltas: Optional[Sequence[float]] = None
) -> Tuple[float, float]:
    """Basic sequential composition: (Σ ε_i, Σ δ_i) (Dwork & Roth 2014, Thm. 3.16).

    ``deltas=None`` means all δ_i = 0. Each ε_i must be finite and >= 0, each δ_i in [0, 1], and
    both sequences the same non-zero length. The δ sum is not capped (a sum >= 1 is vacuous).
    """
    eps = [real(e, f"epsilons[{i}]", nonneg=True) for i, e in enumerate(_as_list(epsilons, "epsilons"))]
    if not eps:
        raise ValueError("epsilons must not be empty")
    if deltas is None:
        dl = [0.0] * len(eps)
    else:
        dl = [real(d, f"deltas[{i}]", nonneg=True) for i, d in enumerate(_as_list(deltas, "deltas"))]
        if len(dl) != len(eps):
            raise ValueError(f"deltas must have the same length as epsilons ({len(eps)}), got {len(dl)}")
        for i, d in enumerate(dl):
            if d > 1:
                raise ValueError(f"deltas[{i}] must be in [0, 1], got {d}")
    return math.fsum(eps), math.fsum(dl)


class ClientAccountant:
    """Per-client privacy spent by one federated run under local DP, by basic composition (Dwork & Roth 2014,
    Thm. 3.16): in each round a participating client's per-coordinate guarantee (ε, δ) is composed over the model's
    ``d`` coordinates (d·ε, d·δ per model per round: :meth:`Guarantee.compose`) and added to that client's total
    over the rounds it took part in. An accountant in the manner of Opacus's: :meth:`step` per round,
    :meth:`spent` for the total so far (the largest of any client: the run's guarantee to every client).

    A round whose release has no stated guarantee (``None``, e.g. clipping alone) makes the run unprotected from then
    on: :meth:`spent` is None, never a number that would read as a guarantee."""

    def __init__(self, *, d: int):
        self.d = pos_int(d, "d")
        self.totals: dict[int, Guarantee] = {}
        self.unprotected = False

    def step(self, client_ids: Sequence[int], guarantees: Optional[Sequence[Optional[Guarantee]]]) -> Optional[Guarantee]:
        """Account one round: client ``client_ids[i]`` released ``guarantees[i]`` per coordinate, or for its whole
        model when the guarantee's unit says so (e.g. FedSel's one selected coordinate; not composed over d again;
        None: the round's release states no guarantee). Returns the largest per-model guarantee of a client in this round (None when
        not stated)."""
        ids = client_ids.tolist() if isinstance(client_ids, Tensor) else [int(c) for c in client_ids]
        if guarantees is None or any(g is None for g in guarantees):
            self.unprotected = True
            return None
        if len(guarantees) != len(ids):
            raise ValueError(f"step: {len(guarantees)} guarantees for {len(ids)} clients")
        worst = None
        per_model: dict[Guarantee, Guarantee] = {}
        for cid, g in zip(ids, guarantees):
            if g not in per_model:  # a per-coordinate guarantee covers one of the d reports; a per-model one all
                per_model[g] = g if g.unit.whole_model else g.compose(d=self.d)
            this_round = per_model[g]
            self.totals[cid] = this_round if cid not in self.totals else self.totals[cid] + this_round
            if worst is None or this_round.epsilon > worst.epsilon:
                worst = this_round
        return worst

    def spent(self) -> Optional[Guarantee]:
        """The largest total of a client so far (by ε, then δ); None when a round was unprotected or none was
        accounted."""
        if self.unprotected or not self.totals:
            return None
        return max(self.totals.values(), key=lambda g: (g.epsilon, g.delta))


def epsilon_table(guarantee: Guarantee | float, d: int, rounds: int):
    """A per-coordinate guarantee next to what it composes to, as a ``pandas.DataFrame``.

    ``guarantee``: a mechanism's :class:`Guarantee` (or a pure ε per coordinate per round). Rows (index
    ``level``): ``per coordinate`` (the guarantee), ``per model per round`` (composed over the ``d``
    coordinates a client reports per round; pass k if only k are reported) and ``per model over
    training`` (and over ``rounds`` rounds), with columns ``epsilon``, ``delta``, ``unit`` and
    ``composition`` (how the figure is obtained: :meth:`Guarantee.compose`, basic composition, or exact
    μ-GDP composition for a Gaussian). Basic composition is an upper bound; it is what a per-coordinate ε
    claim implies for a whole model without further analysis.
    """
    import pandas as pd

    g = guarantee if isinstance(guarantee, Guarantee) else Guarantee(real(guarantee, "epsilon", positive=True))
    d, rounds = pos_int(d, "d"), pos_int(rounds, "rounds")
    how = "exact μ-GDP composition" if g.mu is not None else "basic sequential composition"
    rows = [("per coordinate", g, "mechanism guarantee"),
            ("per model per round", g.compose(d=d), f"{how} over d = {d:,} coordinates"),
            ("per model over training", g.compose(d=d, rounds=rounds),
             f"{how} over d = {d:,} coordinates x {rounds} rounds")]
    df = pd.DataFrame([(level, x.epsilon, x.delta, str(x.unit), comp) for level, x, comp in rows],
                      columns=["level", "epsilon", "delta", "unit", "composition"])
    return df.set_index("level")


# --------------------------------------------------------------------------------------------------
# amplification by shuffling
# --------------------------------------------------------------------------------------------------
def shuffle_amplification(eps0: float, n: int, delta: float) -> float:
    """Central ε after shuffling n reports of an ε0-LDP randomizer (upper bound, (ε, δ)-DP).

    Feldman, McMillan, Talwar, "Hiding Among the Clones: A Simple and Nearly Optimal Analysis of
    Privacy Amplification by Shuffling", FOCS 2021, Theorem 3.1:

        ε = log(1 + (e^ε0 - 1) / (e^ε0 + 1) · (8 sqrt(e^ε0 log(4/δ)) / sqrt(n) + 8 e^ε0 / n)),

    valid for ε0 <= log(n / (16 log(2/δ))); outside that range ``ValueError`` (the bound does not
    apply; ε0 itself remains a valid, unamplified guarantee). Apple's reference code
    (ml-shuffling-amplification, ``closedformanalysis``) checks the slightly stricter
    ε0 <= log(n / (16 log(4/δ))).

    Applied to LDP-FL this is the per-coordinate view of parameter shuffling: it assumes the n
    reports of one coordinate (position id) in one round are perfectly unlinkable — uniformly
    shuffled, nothing such as arrival time tying them to a client (see
    :mod:`ldptut.shuffling` for how timing can break this) — and that each client sends exactly one
    report per coordinate. The result is (ε, δ)-DP per coordinate per round with respect to the
    server; a client's d coordinates and T rounds still compose. The LDP-FL paper (Sun, Qian, Chen,
    IJCAI 2021) does not claim this bound: it argues only that shuffling makes the per-weight ε0
    sufficient and gives no amplification theorem.
    """
    e0 = real(eps0, "eps0", positive=True)
    n = pos_int(n, "n")
    dl = _delta(delta)
    ratio = n / (16.0 * math.log(2.0 / dl))
    if ratio <= 1.0 or e0 > math.log(ratio):
        limit = math.log(ratio) if ratio > 0 else -math.inf
        raise ValueError(
            f"the shuffling bound of Feldman et al. (Thm. 3.1) does not apply: it needs"
            f" eps0 <= log(n / (16 log(2/delta))) = {limit:.4g} for n = {n}, delta = {dl:g}; got eps0 = {e0:g}"
        )
    ee = math.exp(e0)
    inner = (ee - 1.0) / (ee + 1.0) * (8.0 * math.sqrt(ee * math.log(4.0 / dl) / n) + 8.0 * ee / n)
    return math.log1p(inner)



# --------------------------------------------------------------------------------------------------
# Gaussian mechanism: exact (ε, δ)
# --------------------------------------------------------------------------------------------------
def gaussian_delta(epsilon: float, mu: float) -> float:
    """Exact δ(ε) of the Gaussian mechanism with μ = Δ / σ (sensitivity over noise std).

    δ(ε) = Φ(-ε/μ + μ/2) - e^ε Φ(-ε/μ - μ/2): Balle & Wang, "Improving the Gaussian Mechanism for
    Differential Privacy: Analytical Calibration and Optimal Denoising", ICML 2018, Theorem 8
    (equivalently μ-GDP, Dong, Roth, Su, JRSS-B 2022, Corollary 2.13). Tight: no smaller δ holds.
    """
    from scipy.special import log_ndtr, ndtr

    eps = real(epsilon, "epsilon", nonneg=True)
    m = real(mu, "mu", positive=True)
    a = -eps / m + m / 2
    b = -eps / m - m / 2
    return max(0.0, float(ndtr(a) - math.exp(eps + log_ndtr(b))))


def gaussian_epsilon(delta: float, mu: float, tv: float = 0.0) -> float:
    """Smallest ε >= 0 with :func:`gaussian_delta` (ε, μ) + (1 + e^ε) tv <= δ (bisection to 1e-10 relative);
    ``math.inf`` when no ε satisfies it.

    ``tv`` = 0: the ideal Gaussian mechanism. ``tv`` > 0: a law within total variation tv of a μ-GDP one (what a
    sampler realises, :class:`ldptut.mechanisms.Gaussian`): for every event S, P̂_x(S) <= P_x(S) + tv <= e^ε P_x'(S)
    + δ_μ(ε) + tv <= e^ε P̂_x'(S) + δ_μ(ε) + (1 + e^ε) tv. The bound h(ε) = δ_μ(ε) + (1 + e^ε) tv is convex in ε with
    h'(ε) = e^ε (tv - Φ(-ε/μ - μ/2)), smallest at ε_m = μ (Φ^{-1}(1 - tv) - μ/2): if h(max(ε_m, 0)) > δ, no ε holds
    at this δ (the law is then too sharp for its sampler: its privacy loss exceeds what the uniforms can realise)."""
    t = real(tv, "tv", nonneg=True)
    if t > 1:
        raise ValueError(f"tv must be in [0, 1], got {tv}")
    return _gaussian_epsilon(_delta(delta), real(mu, "mu", positive=True), t)


def _slack_term(eps: float, tv: float) -> float:
    """(1 + e^ε) tv, inf when e^ε overflows."""
    if tv == 0.0:
        return 0.0
    return math.inf if eps > 700.0 else (1.0 + math.exp(eps)) * tv


@functools.lru_cache(maxsize=65536)
def _gaussian_epsilon(dl: float, m: float, tv: float = 0.0) -> float:
    """Cached: the simulator composes the same μ for every client and run of a grid."""
    def ok(eps: float) -> bool:
        return gaussian_delta(eps, m) + _slack_term(eps, tv) <= dl

    if ok(0.0):
        return 0.0
    if tv == 0.0:
        return _threshold(ok, rel=1e-10)[1]  # upper end: δ(ε) <= δ holds
    from statistics import NormalDist

    if tv >= 0.5:
        return math.inf
    e_min = max(0.0, -m * NormalDist().inv_cdf(tv) - m * m / 2.0)  # Φ^{-1}(1 - tv) = -Φ^{-1}(tv), exact for tiny tv
    if not ok(e_min):
        return math.inf
    return _threshold(ok, rel=1e-10, hi=e_min)[1]  # h decreases on [0, e_min]: ok(e_min), not ok(0)


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest noise std σ for which N(0, σ²) on a query of ℓ2 ``sensitivity`` is (ε, δ)-DP (exact,
    Balle & Wang 2018, Thm 8: bisection on μ = Δ/σ with :func:`gaussian_delta`)."""
    eps = real(epsilon, "epsilon", positive=True)
    dl = _delta(delta)
    sens = real(sensitivity, "sensitivity", positive=True)
    mu = _threshold(lambda m: gaussian_delta(eps, m) > dl, rel=1e-12)[0]  # lower end: δ(ε; μ) <= δ holds
    return sens / mu


def _threshold(ok: Any, *, rel: float, hi: Optional[float] = None) -> Tuple[float, float]:
    """Bracket (lo, hi), hi - lo <= rel * hi, of the threshold of a predicate on v > 0 that is false
    below it and true above it: ``ok(lo)`` is false (or lo = 0) and ``ok(hi)`` is true. ``hi``: a known point
    where ``ok`` holds (else found by doubling from 1)."""
    lo = 0.0
    if hi is None:
        hi = 1.0
        while not ok(hi):
            lo, hi = hi, 2 * hi
    for _ in range(200):
        mid = (lo + hi) / 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
        if hi - lo <= rel * hi:
            break
    return lo, hi


def compose_gaussian(mus: Sequence[float]) -> float:
    """μ of the adaptive composition of Gaussian mechanisms with μ_1..μ_k: sqrt(Σ μ_i²) (exact;
    Dong, Roth, Su 2022, Corollary 3.3). d coordinates of one vector, each with sensitivity Δ and
    noise σ, are one Gaussian mechanism with μ = sqrt(d) Δ / σ."""
    vals = [real(m, "mu", positive=True) for m in mus]
    if not vals:
        raise ValueError("mus must hold at least one value")
    return math.sqrt(sum(v * v for v in vals))


"""Privacy accounting and audits for the local randomizers of :mod:`ldptut.mechanisms`.

* Composition (basic sequential composition, Dwork & Roth, "The Algorithmic Foundations of
  Differential Privacy", 2014, Theorem 3.16): running mechanisms with (ε_i, δ_i) on the same
  client's data gives (Σ ε_i, Σ δ_i). :func:`epsilon_table` turns a per-coordinate ε into the
  per-model-per-round (d coordinates) and per-model-over-training (T rounds) figures.
* Audits: :func:`exact_ldp_audit` computes the privacy loss of a discrete mechanism exactly from
  its ``output_distribution``; :func:`monte_carlo_audit` estimates a lower confidence bound on the
  loss of any mechanism from samples (histogram over common bins); :func:`histogram_ratio_exact`
  gives the same binned loss from the exact ``cdf`` / ``density``, for comparison.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from ._validate import pos_int, real

__all__ = [
    "compose_sequential",
    "per_model_per_round",
    "over_rounds",
    "epsilon_table",
    "AuditResult",
    "exact_ldp_audit",
    "monte_carlo_audit",
    "histogram_ratio_exact",
    "binomial_confidence_bounds",
]


def _as_list(v: Any, name: str) -> list:
    if isinstance(v, Tensor):
        return v.detach().reshape(-1).tolist()
    if isinstance(v, (str, bytes)) or not isinstance(v, Iterable):
        raise ValueError(f"{name} must be a sequence of numbers, got {v!r}")
    return list(v)


# --------------------------------------------------------------------------------------------------
# composition
# --------------------------------------------------------------------------------------------------
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


def per_model_per_round(eps_per_coordinate: float, d: int) -> float:
    """ε for one client's whole update in one round: d reports of ε each compose to d · ε."""
    return pos_int(d, "d") * real(eps_per_coordinate, "eps_per_coordinate", positive=True)


def over_rounds(eps_per_round: float, rounds: int) -> float:
    """ε over training: a client reporting in ``rounds`` rounds composes to rounds · ε."""
    return pos_int(rounds, "rounds") * real(eps_per_round, "eps_per_round", positive=True)


def epsilon_table(eps_per_coordinate: float, d: int, rounds: int):
    """The per-coordinate guarantee next to what it composes to, as a ``pandas.DataFrame``.

    Rows (index ``level``): ``per coordinate`` (ε), ``per model per round`` (d · ε),
    ``per model over training`` (rounds · d · ε), with columns ``epsilon``, ``delta``, ``unit``
    (what one ε protects) and ``composition`` (how the figure is obtained). ``d`` is the number
    of coordinates a client reports per round (pass k if only k of d coordinates are reported),
    ``rounds`` the number of rounds the client participates in. Basic composition is an upper
    bound; it is what a per-coordinate ε claim implies for a whole model without further analysis.
    """
    import pandas as pd

    eps = real(eps_per_coordinate, "eps_per_coordinate", positive=True)
    d = pos_int(d, "d")
    rounds = pos_int(rounds, "rounds")
    e_round = per_model_per_round(eps, d)
    e_train = over_rounds(e_round, rounds)
    rows = [
        ("per coordinate", eps, 0.0, "one scalar report (one coordinate, one round)", "mechanism guarantee"),
        (
            "per model per round",
            e_round,
            0.0,
            f"one client's update of d = {d} coordinates in one round",
            f"sequential composition over d = {d} coordinates",
        ),
        (
            "per model over training",
            e_train,
            0.0,
            f"one client's updates over {rounds} rounds",
            f"sequential composition over d = {d} coordinates x {rounds} rounds",
        ),
    ]
    df = pd.DataFrame(rows, columns=["level", "epsilon", "delta", "unit", "composition"])
    return df.set_index("level")


# --------------------------------------------------------------------------------------------------
# audits
# --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class AuditResult:
    """Outcome of a privacy audit.

    ``epsilon_observed`` is the exact loss (exact audits) or a lower confidence bound on it
    (Monte-Carlo audit); ``ratio_max = exp(epsilon_observed)``; ``worst_inputs`` = (x, x', output
    or bin) attaining it; ``details`` holds method-specific extras.
    """

    epsilon_claimed: float
    epsilon_observed: float
    ratio_max: float
    passed: bool
    worst_inputs: Tuple[Any, ...]
    method: str
    details: Dict[str, Any] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (
            f"{verdict}: ε observed {self.epsilon_observed:.6g} vs claimed {self.epsilon_claimed:.6g} "
            f"(max ratio {self.ratio_max:.6g}; worst {self.worst_inputs}; {self.method})"
        )


def _claimed_epsilon(mechanism: Any) -> float:
    g = getattr(mechanism, "guarantee", None)
    eps = g.epsilon if g is not None else getattr(mechanism, "epsilon")
    return float(eps)


def exact_ldp_audit(mechanism: Any, inputs: Any, *, rtol: float = 1e-9) -> AuditResult:
    """Exact privacy loss of a discrete mechanism over a grid of inputs.

    For every ordered pair (x, x') of ``inputs`` and every output y, the ratio
    P[y | x] / P[y | x'] from ``mechanism.output_distribution`` (float64; outputs with equal values
    are merged). A zero probability against a non-zero one is an infinite loss; 0 vs 0 is no
    evidence. ``epsilon_observed = log(max ratio)``; ``passed = ratio_max <= e^ε (1 + rtol)``. The
    mechanism's parameters must be scalar (one mechanism for the whole grid).
    """
    if not hasattr(mechanism, "output_distribution"):
        raise TypeError(f"{type(mechanism).__name__} has no output_distribution(); use monte_carlo_audit")
    xs = torch.as_tensor(inputs, dtype=torch.float64).reshape(-1)
    if xs.numel() < 2:
        raise ValueError(f"inputs must hold at least 2 values, got {xs.numel()}")
    if not bool(torch.isfinite(xs).all()):
        raise ValueError("inputs must be finite")
    for attr in ("center", "radius"):
        v = getattr(mechanism, attr, None)
        if isinstance(v, Tensor) and v.numel() > 1:
            raise ValueError(f"exact_ldp_audit needs scalar mechanism parameters; {attr} is a tensor of shape {tuple(v.shape)}")
    eps = _claimed_epsilon(mechanism)
    values, probs = mechanism.output_distribution(xs)
    values = values.to(torch.float64)
    probs = probs.to(torch.float64)
    m = xs.numel()
    if values.ndim != 2 or values.shape[0] != m or probs.shape != values.shape:
        raise ValueError(
            f"output_distribution returned shape {tuple(values.shape)} for {m} inputs; the audit needs"
            " scalar mechanism parameters (shape (len(inputs), k))"
        )
    if bool((probs < 0).any()):
        raise ValueError("output_distribution returned negative probabilities")
    uniq, inv = torch.unique(values.reshape(-1), return_inverse=True)
    P = torch.zeros(m, uniq.numel(), dtype=torch.float64)
    P.scatter_add_(1, inv.reshape(m, -1), probs)
    num = P.unsqueeze(1)  # P[y | x_i]
    den = P.unsqueeze(0)  # P[y | x_j]
    ratio = torch.where(
        den > 0,
        num / torch.where(den > 0, den, torch.ones_like(den)),
        torch.where(num > 0, torch.full_like(num, math.inf), torch.zeros_like(num)),
    )
    flat = int(torch.argmax(ratio).item())
    i, rem = divmod(flat, m * uniq.numel())
    j, k = divmod(rem, uniq.numel())
    ratio_max = float(ratio[i, j, k].item())
    eps_obs = math.log(ratio_max) if ratio_max > 0 else -math.inf
    passed = ratio_max <= math.exp(eps) * (1.0 + rtol)
    return AuditResult(
        epsilon_claimed=eps,
        epsilon_observed=eps_obs,
        ratio_max=ratio_max,
        passed=bool(passed),
        worst_inputs=(float(xs[i]), float(xs[j]), float(uniq[k])),
        method="exact: max over input pairs and outputs of P[y|x]/P[y|x'] (float64)",
        details={
            "outputs": uniq,
            "probabilities": P,
            "row_sums_max_error": float((P.sum(1) - 1).abs().max()),
            "inputs": xs,
        },
    )


def binomial_confidence_bounds(k: Tensor, n: int, alpha: float) -> Tuple[Tensor, Tensor, str]:
    """One-sided (lower, upper) bounds for a binomial proportion, each at level ``alpha``.

    Clopper-Pearson (exact) through the beta quantile when SciPy is importable
    (lower = Beta⁻¹(α; k, n - k + 1), upper = Beta⁻¹(1 - α; k + 1, n - k)); otherwise the Wilson
    score bound with z = Φ⁻¹(1 - α) (approximate). Returns (lower, upper, method name).
    """
    k = torch.as_tensor(k, dtype=torch.float64)
    try:
        from scipy.stats import beta as _beta

        kn = k.numpy()
        lo = torch.from_numpy(_beta.ppf(alpha, kn, n - kn + 1)).to(torch.float64)
        hi = torch.from_numpy(_beta.ppf(1 - alpha, kn + 1, n - kn)).to(torch.float64)
        lo = torch.where(k == 0, torch.zeros_like(lo), lo)
        hi = torch.where(k == n, torch.ones_like(hi), hi)
        return lo, hi, "Clopper-Pearson (scipy beta quantile)"
    except ImportError:  # pragma: no cover - scipy is normally present (scikit-learn dependency)
        z = float(torch.special.ndtri(torch.tensor(1 - alpha, dtype=torch.float64)))
        p = k / n
        den = 1 + z * z / n
        mid = (p + z * z / (2 * n)) / den
        half = z * torch.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
        return (mid - half).clamp(min=0.0), (mid + half).clamp(max=1.0), "Wilson score (normal approximation)"


def _histogram(y: Tensor, edges: Tensor) -> Tensor:
    """Counts per bin (edges[i-1], edges[i]], i = 1..K."""
    idx = torch.bucketize(y.reshape(-1).to(torch.float64), edges, right=False)
    counts = torch.bincount(idx, minlength=edges.numel() + 1)
    return counts[1 : edges.numel()].to(torch.float64)


def _full_edges(edges: Any) -> Tensor:
    e = torch.as_tensor(edges, dtype=torch.float64).reshape(-1)
    if e.numel() < 2 or bool(torch.isnan(e).any()) or not bool((e[1:] > e[:-1]).all()):
        raise ValueError("bins must be an int >= 2 or a strictly increasing 1-D sequence of >= 2 edges")
    if e[0] > -math.inf:
        e = torch.cat([torch.tensor([-math.inf], dtype=torch.float64), e])
    if e[-1] < math.inf:
        e = torch.cat([e, torch.tensor([math.inf], dtype=torch.float64)])
    return e


def _samples(mechanism: Any, x: float, n: int, generator: Optional[torch.Generator]) -> Tensor:
    return mechanism.privatize(torch.full((n,), x, dtype=torch.float64), generator).to(torch.float64)


def monte_carlo_audit(
    mechanism: Any,
    x0: float,
    x1: float,
    *,
    n_samples: int,
    bins: Union[int, Sequence[float], Tensor],
    generator: Optional[torch.Generator],
    confidence: float = 0.99,
    compare_exact: bool = True,
) -> AuditResult:
    """Monte-Carlo lower confidence bound on the privacy loss between inputs ``x0`` and ``x1``.

    Draw ``n_samples`` outputs at x0 and at x1 (float64 inputs) and histogram them over common
    bins. For every bin B and both directions, P[B | x] / P[B | x'] >= lower(P[B|x]) / upper(P[B|x'])
    with one-sided binomial bounds (Clopper-Pearson via SciPy's beta quantile; Wilson if SciPy is
    missing — see ``details["bounds"]``), at level (1 - confidence) / (4 K) each (Bonferroni over
    2 directions x K bins x 2 bounds). So ``epsilon_observed`` = max over bins and directions of the
    log of that ratio (floored at 0) is a lower bound on the true ε with probability >= confidence;
    ``passed = epsilon_observed <= ε claimed``.

    ``bins``: an int K -> K equal-mass bins from the pooled quantiles of an independent pilot
    sample (so the bins do not depend on the audited samples), outer edges ±inf; or explicit edges
    (extended by ±inf so every sample is counted). Bins are (e_{i-1}, e_i].
    If ``compare_exact`` and the mechanism has ``cdf`` (or ``density``), ``details["exact"]`` holds
    :func:`histogram_ratio_exact` on the same bins.
    """
    n = pos_int(n_samples, "n_samples")
    if n < 10:
        raise ValueError(f"n_samples must be >= 10, got {n}")
    x0 = real(x0, "x0")
    x1 = real(x1, "x1")
    conf = real(confidence, "confidence")
    if not 0 < conf < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    eps = _claimed_epsilon(mechanism)

    if isinstance(bins, numbers.Integral) and not isinstance(bins, bool):
        K = int(bins)
        if K < 2:
            raise ValueError(f"bins must be an int >= 2 or a sequence of edges, got {bins}")
        n_pilot = max(1000, min(n, 200_000))
        pilot = torch.cat([_samples(mechanism, x0, n_pilot, generator), _samples(mechanism, x1, n_pilot, generator)])
        pilot, _ = torch.sort(pilot)
        pos = (torch.arange(1, K, dtype=torch.float64) / K * (pilot.numel() - 1)).round().long()
        inner = torch.unique(pilot[pos])
        inf = torch.tensor([math.inf], dtype=torch.float64)
        edges = torch.cat([-inf, inner, inf])
    elif isinstance(bins, bool):
        raise ValueError("bins must be an int >= 2 or a sequence of edges, got a bool")
    else:
        edges = _full_edges(bins)

    y0 = _samples(mechanism, x0, n, generator)
    y1 = _samples(mechanism, x1, n, generator)
    c0, c1 = _histogram(y0, edges), _histogram(y1, edges)
    nb = c0.numel()
    alpha_each = (1.0 - conf) / (4.0 * nb)
    lo0, hi0, bound_name = binomial_confidence_bounds(c0, n, alpha_each)
    lo1, hi1, _ = binomial_confidence_bounds(c1, n, alpha_each)
    with torch.no_grad():
        l01 = torch.log(lo0) - torch.log(hi1)  # lower bound of log P[B|x0]/P[B|x1]
        l10 = torch.log(lo1) - torch.log(hi0)
    both = torch.stack([l01, l10])  # (2, nb)
    flat = int(torch.argmax(both).item())
    direction, b = divmod(flat, nb)
    lcb = max(float(both[direction, b]), 0.0)
    # point estimate: plug-in ratio over bins with both counts > 0
    ok = (c0 > 0) & (c1 > 0)
    point = float((torch.log(c0[ok]) - torch.log(c1[ok])).abs().max()) if bool(ok.any()) else math.nan
    worst = (x0, x1) if direction == 0 else (x1, x0)
    details: Dict[str, Any] = {
        "edges": edges,
        "counts_x0": c0,
        "counts_x1": c1,
        "n_samples": n,
        "confidence": conf,
        "bounds": bound_name,
        "alpha_per_bound": alpha_each,
        "epsilon_point_estimate": point,
        "worst_bin": (float(edges[b]), float(edges[b + 1])),
    }
    if compare_exact and (hasattr(mechanism, "cdf") or hasattr(mechanism, "density")):
        try:
            details["exact"] = histogram_ratio_exact(mechanism, x0, x1, edges)
        except ValueError as e:  # e.g. density only and infinite edges
            details["exact"] = f"not available: {e}"
    return AuditResult(
        epsilon_claimed=eps,
        epsilon_observed=lcb,
        ratio_max=math.exp(lcb),
        passed=bool(lcb <= eps),
        worst_inputs=worst + ((float(edges[b]), float(edges[b + 1])),),
        method=(
            f"monte-carlo histogram ({nb} bins, n = {n} per input), {conf:.0%} lower confidence bound,"
            f" {bound_name}, Bonferroni"
        ),
        details=details,
    )


def _bin_probs(mechanism: Any, x: float, edges: Tensor, n_sub: int) -> Tensor:
    if hasattr(mechanism, "cdf"):
        xx = torch.tensor(x, dtype=torch.float64)
        F = mechanism.cdf(edges, xx).to(torch.float64)
        return (F[1:] - F[:-1]).clamp(min=0.0)
    if not bool(torch.isfinite(edges).all()):
        raise ValueError("integrating a density needs finite edges (mechanism has no cdf)")
    # composite Simpson on each bin
    a, b = edges[:-1], edges[1:]
    t = torch.linspace(0, 1, 2 * n_sub + 1, dtype=torch.float64)
    pts = a.unsqueeze(1) + (b - a).unsqueeze(1) * t  # (K, 2 n_sub + 1)
    f = mechanism.density(pts, torch.tensor(x, dtype=torch.float64)).to(torch.float64)
    w = torch.ones_like(t)
    w[1:-1:2] = 4.0
    w[2:-1:2] = 2.0
    return (f * w).sum(1) * (b - a) / (6.0 * n_sub)


def histogram_ratio_exact(
    mechanism: Any, x0: float, x1: float, edges: Any, *, n_sub: int = 512, rtol: float = 1e-9
) -> AuditResult:
    """Binned privacy loss from the exact output law, on the same bins as :func:`monte_carlo_audit`.

    Bin probabilities are cdf differences (exact) when the mechanism has ``cdf``; otherwise
    ``density`` integrated per bin by composite Simpson with ``n_sub`` panels (finite edges only).
    ``epsilon_observed`` = max over bins of |log P[B|x0] / P[B|x1]| (a lower bound of the
    mechanism's true loss between x0 and x1, equal to it when the bins resolve the worst region).
    """
    x0 = real(x0, "x0")
    x1 = real(x1, "x1")
    e = torch.as_tensor(edges, dtype=torch.float64).reshape(-1)
    if e.numel() < 2 or not bool((e[1:] > e[:-1]).all()):
        raise ValueError("edges must be a strictly increasing 1-D sequence of >= 2 values")
    eps = _claimed_epsilon(mechanism)
    p0 = _bin_probs(mechanism, x0, e, n_sub)
    p1 = _bin_probs(mechanism, x1, e, n_sub)
    inf = torch.full_like(p0, math.inf)
    r01 = torch.where(p1 > 0, p0 / torch.where(p1 > 0, p1, 1.0), torch.where(p0 > 0, inf, 0.0))
    r10 = torch.where(p0 > 0, p1 / torch.where(p0 > 0, p0, 1.0), torch.where(p1 > 0, inf, 0.0))
    both = torch.stack([r01, r10])
    flat = int(torch.argmax(both).item())
    direction, b = divmod(flat, p0.numel())
    ratio_max = float(both[direction, b])
    eps_obs = math.log(ratio_max) if ratio_max > 0 else -math.inf
    return AuditResult(
        epsilon_claimed=eps,
        epsilon_observed=eps_obs,
        ratio_max=ratio_max,
        passed=bool(ratio_max <= math.exp(eps) * (1 + rtol)),
        worst_inputs=((x0, x1) if direction == 0 else (x1, x0)) + ((float(e[b]), float(e[b + 1])),),
        method="exact bin probabilities (" + ("cdf differences" if hasattr(mechanism, "cdf") else "Simpson on density") + ")",
        details={"edges": e, "p_x0": p0, "p_x1": p1},
    )


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
    dl = real(delta, "delta", positive=True)
    if dl >= 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
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


__all__.append("shuffle_amplification")


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


def gaussian_epsilon(delta: float, mu: float) -> float:
    """Smallest ε >= 0 with :func:`gaussian_delta` (ε, μ) <= δ (bisection to 1e-10 relative)."""
    dl = real(delta, "delta", positive=True)
    if dl >= 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    m = real(mu, "mu", positive=True)
    if gaussian_delta(0.0, m) <= dl:
        return 0.0
    return _threshold(lambda eps: gaussian_delta(eps, m) <= dl, rel=1e-10)[1]  # upper end: δ(ε) <= δ holds


def gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest noise std σ for which N(0, σ²) on a query of ℓ2 ``sensitivity`` is (ε, δ)-DP (exact,
    Balle & Wang 2018, Thm 8: bisection on μ = Δ/σ with :func:`gaussian_delta`)."""
    eps = real(epsilon, "epsilon", positive=True)
    dl = real(delta, "delta", positive=True)
    if dl >= 1:
        raise ValueError(f"delta must be in (0, 1), got {delta}")
    sens = real(sensitivity, "sensitivity", positive=True)
    mu = _threshold(lambda m: gaussian_delta(eps, m) > dl, rel=1e-12)[0]  # lower end: δ(ε; μ) <= δ holds
    return sens / mu


def _threshold(ok: Any, *, rel: float) -> Tuple[float, float]:
    """Bracket (lo, hi), hi - lo <= rel * hi, of the threshold of a predicate on v > 0 that is false
    below it and true above it: ``ok(lo)`` is false (or lo = 0) and ``ok(hi)`` is true."""
    lo, hi = 0.0, 1.0
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


__all__ += ["gaussian_delta", "gaussian_epsilon", "gaussian_sigma", "compose_gaussian"]

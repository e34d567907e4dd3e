"""Audits: check a mechanism's claims against its output law or against samples.

* :func:`exact_ldp_audit` computes the privacy loss of a discrete mechanism exactly from its
  ``output_distribution``; :func:`monte_carlo_audit` estimates a lower confidence bound on the loss of
  any mechanism from samples (histogram over common bins); :func:`histogram_ratio_exact` gives the same
  binned loss from the exact ``cdf`` / ``density``, for comparison.
* :func:`empirical_moments` privatizes inputs many times and compares the sample mean and variance
  with the closed forms (the chapters and the tests use the same function).

The claims themselves (ε with its unit, composition) are in :mod:`ldptut.accounting`.
"""
from __future__ import annotations

import math
import sys
import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import pandas as pd
import torch
from torch import Tensor

from ._validate import pos_int, real
from .rng import generator

__all__ = ["AuditResult", "exact_ldp_audit", "monte_carlo_audit", "histogram_ratio_exact",
           "binomial_confidence_bounds", "empirical_moments", "grid_sampling_cost"]


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
    g = getattr(mechanism, "guarantee", None)
    if g is not None and g.delta > 0:
        raise ValueError(f"{type(mechanism).__name__} claims (epsilon, delta) with delta = {g.delta:g}, which bounds no "
                         f"single ratio: use exact_delta_audit")
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


def exact_delta_audit(mechanism: Any, inputs: Any) -> AuditResult:
    """Exact δ(ε) of the law a mechanism's sampler realises, at its claimed ε, over every ordered pair of ``inputs``.

    δ(ε) = Σ_y max(0, P̂[y | x] - e^ε P̂[y | x']) (the hockey-stick divergence; (ε, δ)-DP holds for the pair iff it is
    <= δ), with P̂ from ``mechanism.realized_distribution`` (the counts of the uniforms the sampler draws) where the
    mechanism has one, else ``output_distribution``. ``passed``: the largest δ(ε) is within the claimed δ.
    ``epsilon_observed`` is the claimed ε (the audit is of δ at it); ``details["delta"]`` the largest δ(ε),
    ``details["unreachable"]`` the largest mass of outputs possible under x and impossible under x'. A claimed ε of
    inf (no certified guarantee) is audited at e^ε = the largest finite float."""
    law = getattr(mechanism, "realized_distribution", None) or getattr(mechanism, "output_distribution", None)
    if law is None:
        raise TypeError(f"{type(mechanism).__name__} has no realized_distribution() or output_distribution()")
    xs = torch.as_tensor(inputs, dtype=torch.float64).reshape(-1)
    if xs.numel() < 2 or not bool(torch.isfinite(xs).all()):
        raise ValueError(f"inputs must hold at least 2 finite values, got {xs.tolist()}")
    g = mechanism.guarantee
    eps = float(g.epsilon)
    factor = math.exp(eps) if eps < 709.0 else sys.float_info.max
    values, probs = law(xs)
    worst, pair, unreachable = -1.0, (None, None), 0.0
    for i in range(xs.numel()):
        for j in range(xs.numel()):
            if i == j:
                continue
            if not torch.equal(values[i], values[j]):
                raise ValueError("exact_delta_audit needs one output grid for every input (scalar center and radius)")
            d = float(torch.clamp(probs[i] - factor * probs[j], min=0.0).sum())
            unreachable = max(unreachable, float(probs[i][probs[j] == 0].sum()))
            if d > worst:
                worst, pair = d, (float(xs[i]), float(xs[j]))
    return AuditResult(epsilon_claimed=eps, epsilon_observed=eps, ratio_max=factor, passed=bool(worst <= g.delta),
                       worst_inputs=pair, method="exact: hockey-stick divergence of the realised laws at the claimed ε",
                       details={"delta": worst, "delta_claimed": g.delta, "unreachable": unreachable})


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


def empirical_moments(mechanism, inputs: torch.Tensor, *, n_samples: int, seed: int,
                      dtype: torch.dtype = torch.float64) -> pd.DataFrame:
    """Privatize each input ``n_samples`` times (one vectorised call) and compare with the closed forms.

    Columns: ``input``, ``mean`` (empirical), ``z`` = (mean - input) / (sqrt(variance / n)), the bias in
    standard errors, ``var`` (empirical, unbiased), ``var_closed`` (``mechanism.variance``) and
    ``var_rel_err`` = var / var_closed - 1. For an unbiased mechanism |z| < 4 except with probability ~6e-5.
    """
    if n_samples < 2:
        raise ValueError(f"n_samples must be >= 2, got {n_samples}")
    x = inputs.to(dtype).reshape(-1, 1).expand(-1, n_samples).contiguous()
    y = mechanism.privatize(x, generator=generator(seed, "empirical-moments"))
    mean, var = y.mean(dim=1), y.var(dim=1)
    closed = mechanism.variance(x[:, 0]).to(dtype)
    return pd.DataFrame({
        "input": inputs.double().cpu().numpy(),
        "mean": mean.double().cpu().numpy(),
        "z": ((mean - x[:, 0]) / torch.sqrt(closed / n_samples)).double().cpu().numpy(),
        "var": var.double().cpu().numpy(),
        "var_closed": closed.double().cpu().numpy(),
        "var_rel_err": (var / closed - 1).double().cpu().numpy(),
    })


def grid_sampling_cost(epsilons: Sequence[float], mechanisms: Sequence[type] = ()) -> pd.DataFrame:
    """What sampling safely costs (:mod:`ldptut.fpsafe`): for each grid mechanism and ε (per coordinate), the design
    ε_d, the grid's cells, the smallest output probability and its floor, and the grid law's variance over the
    textbook mechanism's at ε (closed forms, at the centre t = 0 and the ends t = ±1 of the range; below 1: less
    noise than the textbook mechanism, as for Laplace, whose tails beyond the range are collapsed)."""
    from .mechanisms import Hybrid, Laplace, Piecewise

    rows = []
    ts = torch.tensor([0.0, 1.0], dtype=torch.float64)
    for cls in mechanisms or (Laplace, Piecewise, Hybrid):
        for eps in epsilons:
            m = cls(epsilon=float(eps))
            ratio = (m.variance(ts) / m.ideal_variance(ts)).tolist()
            rows.append({"mechanism": cls.__name__, "epsilon": float(eps), "epsilon_design": m.design.epsilon_design,
                         "cells": m.design.cells if m.law.size > 2 else 0, "outputs": m.law.size,
                         "min probability": m.design.min_probability, "floor": m.design.floor,
                         "variance ratio (t = 0)": ratio[0], "variance ratio (t = ±1)": ratio[1]})
    return pd.DataFrame(rows)

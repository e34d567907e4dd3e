"""CoQ-FL / CorBin-FL: LDP-FL's two-point mechanism with negatively correlated client pairs.

Sources: the CoQ-FL draft (``../shared/papers/coq-fl_correlated-quantization_draft.txt``: Eq. 2-6,
Lemma 2, Algorithms 1-3; "LDP-FedCR" in its algorithm boxes) and its published form, CorBin-FL
(arXiv 2409.13133), whose experiment settings and numbers we take from the reading notes
(``NOTES.md`` section 3) and the authors' public code.

The mechanism is generic and lives in the package: :class:`ldptut.mechanisms.CorrelatedTwoPoint` (one
pair, exact marginals and joint law) and :class:`ldptut.fl.PairedPerturbation` (random pairs each round,
the odd client out on the plain two-point mechanism). This module holds the paper's closed forms
(Lemma 2, Eq. 6), the two claim checks (the "50 % of the budget" claim and the joint view of a pair),
its settings and numbers, the experiment grid (:class:`CorbinConfig`) and the paper-vs-ours table.
Every ε here is **per weight per round**, as in the paper.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar, Iterable, Mapping, Optional, Sequence

import numpy as np
import pandas as pd
import torch

from .._validate import epsilon as _epsilon, fraction, pos_int, real
from ..audits import exact_ldp_audit
from ..experiments import FedAvgConfig, diverged_note
from ..fl import PairedPerturbation, SmoothedMean
from ..mechanisms import CorrelatedTwoPoint, TwoPoint, two_point_a
from ..params import ChapterParams, P, chapter_params, param
from ..rng import generator
from . import Paper, Reported, finite_accuracy, interval_cell, mean_std, paired_cell

__all__ = ["PAPER", "EPSILON_UNIT", "SETTINGS", "REPORTED", "lemma2_covariance", "eq6_pair_variance",
           "binary_report_epsilon", "own_report_epsilon", "sampled_own_report_epsilon", "colluding_view_loss",
           "independent_pair_variance", "epsilon_from_a", "authors_code_marginal", "equal_variance_epsilons", "joint_view_loss",
           "joint_view_table", "SmoothedMean", "CorbinConfig", "METHODS", "chapter_config", "method_config", "configs", "base_config",
           "tuning_runs", "tuning_table", "choose_smoothing", "smoothed_runs", "fixed_range_runs", "followup",
           "Params", "grid", "outcome", "compare", "AUTHORS_REPO", "AUTHORS_METHODS",
           "AUTHORS_LOG_MNIST", "SERIES", "epsilon_table", "plot_vs_epsilon", "range_ablation_table", "stored_grid",
           "SUMMARY_EPSILONS", "key_numbers", "own_report_table", "sampler_joint_deviation", "marginal_table",
           "pair_variance_table", "numrand_variance", "plot_pair_variance", "plot_numrand", "plot_rounds",
           "authors_side_table", "long_run_numbers", "NAMES", "COMPARE_HEADERS", "ABLATION_HEADERS",
           "setting_words", "runs_sentence", "epsilon_tables", "authors_code_rounds"]

PAPER = Paper(
    key="corbin",
    citation="CoQ-FL: Local differential privacy for federated learning with correlated quantization (draft); "
             "published as CorBin-FL, arXiv 2409.13133.",
    chapter="book/corbin",
    intro="**CoQ-FL / CorBin-FL**: LDP-FL's two-point mechanism with negatively correlated client pairs, "
          "what the correlation buys (variance, not half the budget) and what the server's view of a pair "
          "gives away.",
)

EPSILON_UNIT = "per weight per round"

#: CorBin-FL's settings (the authors' code, NOTES.md section 3): the MNIST CNN is their ``CNNMNIST``
#: (``cnn_pool``, without its dropout), 80 % of the training set split equally over the clients (960 each;
#: the other 20 % is their validation split), NumRand = 5 shared bits with p_x = 1/2, the range per tensor
#: from the global model, the full weights perturbed.
SETTINGS = {
    "mnist": {"model": "cnn_pool", "n_clients": 50, "rounds": 100, "local_epochs": 1, "optimizer": "adam", "lr": 1e-3,
              "weight_decay": 3e-3, "batch_size": 64, "partition": "iid", "epsilons": [0.1, 0.3, 1.0, 3.0],
              "seeds": 5, "n_train": 48000, "validation": 12000, "num_rand": 5},
    "cifar10": {"model": "resnet18", "n_clients": 50, "rounds": 100, "local_epochs": 1, "optimizer": "adam",
                "lr": 1e-3, "weight_decay": 3e-3, "batch_size": 64, "partition": "iid", "epsilons": [1.0, 5.0],
                "seeds": 5, "n_train": 40000, "validation": 10000, "num_rand": 5},
}

_ACC = "accuracy (%) as reported by CorBin-FL; server smoothing λ tuned on test accuracy"

#: Published numbers (CorBin-FL): method, data set, ε per weight per round.
REPORTED = [
    Reported(claim=f"{name} {method} " + ("non-private" if eps is None else f"ε={eps:g}"), value=value, metric=_ACC,
             source="CorBin-FL, arXiv 2409.13133" + (" and the authors' results log" if name == "mnist" else ""),
             epsilon=eps, epsilon_unit=EPSILON_UNIT if eps is not None else "",
             setting=(("dataset", name), ("method", method)))
    for name, method, eps, value in [
        ("mnist", "coq_fl", 0.1, 93.1), ("mnist", "coq_fl", 0.3, 96.5), ("mnist", "coq_fl", 1.0, 97.5),
        ("mnist", "coq_fl", 3.0, 98.0),
        ("cifar10", "coq_fl", 1.0, 59.5), ("cifar10", "coq_fl", 5.0, 72.7),
        ("cifar10", "ldp_fl", 1.0, 44.2), ("cifar10", "ldp_fl", 5.0, 68.9), ("cifar10", "fedavg", None, 78.2)]
]


#: The authors' results log (``results.log`` in their repository, commit a956027): CorBin-FL on MNIST (50 IID clients,
#: 100 rounds, NumRand = 5, Adam lr 1e-3), test accuracy (%) mean and std over 5 seeds at each server smoothing λ, per
#: ε per weight per round; the best-validation round's model, λ then chosen on this test accuracy (their ★). The log has
#: no LDP-FL, FedAvg or CIFAR-10 CorBin-FL rows.
AUTHORS_LOG_MNIST = pd.DataFrame(
    [(e, l / 10, a, sd) for e, rows in {
        0.1: [(93.13, .5266), (86.01, .9099), (79.73, 2.4086), (76.52, 2.1164), (71.64, 2.8499), (64.35, 8.5018),
              (58.65, 11.1792), (56.54, 8.0516), (49.56, 10.2661), (48.05, 7.2306)],
        0.3: [(96.50, .0845), (95.21, .1939), (93.18, .4034), (91.61, .4365), (89.08, .9106), (85.61, 1.1119),
              (82.28, 1.3294), (80.21, 1.6769), (77.60, 5.4174), (75.78, 2.8842)],
        1.0: [(96.90, .1130), (97.52, .1350), (97.35, .1812), (96.85, .2002), (96.41, .1439), (96.07, .1580),
              (95.55, .3035), (95.14, .1510), (94.85, .2326), (93.97, .4762)],
        3.0: [(96.87, .1326), (97.67, .1114), (97.89, .1396), (97.98, .1108), (97.99, .1077), (97.93, .0331),
              (97.79, .1053), (97.72, .1728), (97.65, .1192), (97.45, .0392)]}.items()
     for l, (a, sd) in zip(range(1, 11), rows)], columns=["ε", "λ", "accuracy (%)", "std"])


# ------------------------------------------------------------------------------------ closed forms
def lemma2_covariance(w_i: Any, w_j: Any, *, epsilon: float, center: float = 0.0, radius: float = 1.0) -> torch.Tensor:
    """Lemma 2 (Eq. 5): Cov(w_i*, w_j*) = -(w_i - w_lo)(w_j - w_lo) if (w_i + w_j)/2 <= c, else
    -(w_i - w_hi)(w_j - w_hi), with w_lo/hi = c -/+ a(ε) r (float64). It is the covariance of the
    countermonotone pair (a shared uniform, NumRand -> infinity)."""
    a = two_point_a(epsilon)
    wi, wj = torch.as_tensor(w_i, dtype=torch.float64), torch.as_tensor(w_j, dtype=torch.float64)
    lo, hi = center - a * radius, center + a * radius
    return torch.where((wi + wj) / 2 <= center, -(wi - lo) * (wj - lo), -(wi - hi) * (wj - hi))


def eq6_pair_variance(mean: Any, *, epsilon: float, center: float = 0.0, radius: float = 1.0) -> torch.Tensor:
    """Eq. 6: Var(w_i* + w_j*) = -4 (E[w] - c)(E[w] - w_lo) if E[w] <= c, else -4 (E[w] - c)(E[w] - w_hi),
    E[w] = (w_i + w_j)/2 (float64). Its maximum over all E[w] is a² r², at E[w] = c -/+ a r / 2."""
    a = two_point_a(epsilon)
    m = torch.as_tensor(mean, dtype=torch.float64)
    lo, hi = center - a * radius, center + a * radius
    return torch.where(m <= center, -4 * (m - center) * (m - lo), -4 * (m - center) * (m - hi))


def independent_pair_variance(w_i: Any, w_j: Any, *, epsilon: float, center: float = 0.0,
                              radius: float = 1.0) -> torch.Tensor:
    """Var(w_i* + w_j*) of two independent two-point reports: 2 a² r² - (w_i - c)² - (w_j - c)² (Eq. 3)."""
    m = TwoPoint(epsilon=epsilon, center=center, radius=radius)
    return m.variance(w_i) + m.variance(w_j)


def epsilon_from_a(a: float) -> float:
    """The ε with a(ε) = (e^ε + 1)/(e^ε - 1) = a, i.e. ε = ln((a + 1)/(a - 1)); inf for a <= 1 (no finite
    ε gives a variance that small)."""
    a = real(a, "a", positive=True)
    if a <= 1:  # a(ε) > 1 for every finite ε: no ε reaches a <= 1
        return math.inf
    return math.log((a + 1) / (a - 1))


def _eq6_max_in_range(a: float) -> float:
    """max over E[w] in [c - r, c + r] of Eq. 6, in units of r²: a² if a <= 2 (the vertex a r/2 lies in the
    range), else at E[w] = c -/+ r: 4 (a - 1)."""
    return a * a if a <= 2 else 4 * (a - 1)


def _mean_pair_variance(a: float, correlated: bool, n: int = 2001) -> float:
    """Average over w_i, w_j independent uniform on [c - r, c + r] of Var(w_i* + w_j*), in units of r²
    (correlated: Eq. 6 averaged over the triangular law of the mean; independent: 2 (a² - 1/3))."""
    if not correlated:
        return 2 * (a * a - 1.0 / 3.0)
    m = np.linspace(-1.0, 1.0, n)                       # (E[w] - c)/r
    density = 1.0 - np.abs(m)                           # triangular law of the mean of two uniforms
    v = np.where(m <= 0, -4 * m * (m + a), -4 * m * (m - a))
    return float(np.trapezoid(v * density, m) / np.trapezoid(density, m))


def equal_variance_epsilons(epsilons: Iterable[float]) -> pd.DataFrame:
    """The "50 % of the privacy budget for the same accuracy" claim, checked on the variance of a pair's sum.

    For each ε of the correlated pair, the ε' at which two *independent* two-point reports have the same
    variance of w_i* + w_j*, under three readings of "the variance": the draft's (the maximum over all
    E[w], a² r² vs 2 a'² r²), the worst case over inputs in the range [c - r, c + r], and the average over
    inputs uniform in the range. The claim holds where ε / ε' = 0.5; ε' = inf means no independent pair, at
    any ε, is as precise (its variance is at least 2 r² (a'² - 1) > 0 for a' > 1).
    """
    rows = []
    for eps in epsilons:
        a = two_point_a(_epsilon(eps))
        row: dict[str, float] = {"ε correlated": eps}
        # draft: 2 a'^2 = a^2
        e1 = epsilon_from_a(a / math.sqrt(2))
        # worst case in range: independent 2 a'^2 (at w = c) = correlated max in range
        e2 = epsilon_from_a(math.sqrt(_eq6_max_in_range(a) / 2))
        # average over uniform inputs: 2 (a'^2 - 1/3) = correlated average
        e3 = epsilon_from_a(math.sqrt(_mean_pair_variance(a, True) / 2 + 1.0 / 3.0))
        for label, e in (("sup over E[w] (draft)", e1), ("worst case in range", e2), ("average, uniform inputs", e3)):
            row[f"ε' {label}"] = e
            row[f"ε/ε' {label}"] = eps / e
        rows.append(row)
    return pd.DataFrame(rows)


class _JointView:
    """A pair's two reports as one mechanism of one client's input, the partner's input fixed: the four joint
    outcomes coded 0..3 ((-,-), (-,+), (+,-), (+,+)), so :func:`ldptut.audits.exact_ldp_audit` can audit it."""

    def __init__(self, mechanism: CorrelatedTwoPoint, x_partner: float, role: str):
        if role not in ("leader", "follower"):
            raise ValueError(f"role must be 'leader' or 'follower', got {role!r}")
        self.mechanism, self.x_partner, self.role = mechanism, x_partner, role
        self.guarantee = mechanism.guarantee          # the claim audited: the client's own ε

    def output_distribution(self, x: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.as_tensor(x, dtype=torch.float64)
        xp = torch.full_like(x, self.x_partner)
        _, probs = (self.mechanism.joint_distribution(x, xp) if self.role == "leader"
                    else self.mechanism.joint_distribution(xp, x))
        p = probs.reshape(x.shape + (4,))
        return torch.arange(4, dtype=torch.float64).expand_as(p), p


def _delta_at(p: torch.Tensor, epsilon: float) -> float:
    """δ at ε of a finite law given per input: max over inputs w, w' of Σ_o max(0, P[o | w] - e^ε P[o | w']),
    ``p`` of shape (inputs, outcomes)."""
    return float(torch.clamp(p[:, None, :] - math.exp(epsilon) * p[None, :, :], min=0).sum(-1).max())


def joint_view_loss(mechanism: CorrelatedTwoPoint, x_partner: float, *, grid: int = 201,
                    role: str = "leader") -> dict[str, float]:
    """Privacy loss of one client when the server sees both reports of its pair and knows the partner's
    input ``x_partner`` (or the partner colludes), over a grid of the client's inputs in the range: the exact
    audit's max log P[(o_i, o_j) | x] / P[(o_i, o_j) | x'] (inf when a joint outcome has probability 0 for
    one input and not for another), the share of inputs for which some possible joint outcome has
    probability 0, and the δ at ε = the mechanism's: max over x, x' of Σ_o max(0, P[o | x] - e^ε P[o | x'])."""
    c, r = float(mechanism.center), float(mechanism.radius)
    audit = exact_ldp_audit(_JointView(mechanism, x_partner, role),
                            torch.linspace(c - r, c + r, grid, dtype=torch.float64))
    p = audit.details["probabilities"]                      # (inputs, outcomes)
    delta = _delta_at(p, mechanism.epsilon)
    impossible = ((p <= 0) & (p.amax(0, keepdim=True) > 0)).any(-1)
    return {"max privacy loss": audit.epsilon_observed, "inputs with an impossible joint outcome (%)":
            100.0 * float(impossible.double().mean()), "δ at ε": delta}


def joint_view_table(epsilon: float, *, partners: Sequence[float] = (-1.0, -0.5, 0.0, 0.5, 1.0),
                     num_rand: Sequence[int] = (0, 1, 8), grid: int = 201) -> pd.DataFrame:
    """:func:`joint_view_loss` of the leader on [-1, 1] for each partner input and NumRand (0 is the
    independent pair, whose joint view is ε-LDP for each client)."""
    rows = []
    for nr in num_rand:
        mech = CorrelatedTwoPoint(epsilon=epsilon, center=0.0, radius=1.0, num_rand=nr)
        for xp in partners:
            rows.append({"NumRand": nr, "partner's input": xp, **joint_view_loss(mech, xp, grid=grid)})
    return pd.DataFrame(rows)


def colluding_view_loss(mechanism: CorrelatedTwoPoint, *, grid: int = 201) -> dict[str, float]:
    """The leader's privacy loss against a **colluding partner**, who knows the pair's shared codebook index K as
    well as its own input and report. Given K the partner's report depends only on K, its input and its own coin,
    so the view is (K, leader's report), with P[K = k, up | x] = clamp(P_L(x) - F[k], 0, F[k+1] - F[k]) (the
    leader reports up iff its uniform point U < P_L, K the cell of U) and P[K = k, down | x] = F[k+1] - F[k] minus
    that; the partner's input does not enter. Over a grid of the leader's inputs: the largest log-ratio of an
    outcome's probabilities (inf when an outcome is impossible for one input and not another) and the δ at the
    mechanism's ε, max over w, w' of Σ_o max(0, P[o | w] - e^ε P[o | w'])."""
    c, r = float(mechanism.center), float(mechanism.radius)
    x = torch.linspace(c - r, c + r, pos_int(grid, "grid"), dtype=torch.float64)
    p_up = mechanism.prob_plus(x)[:, None]                               # (inputs, 1)
    lo, width = mechanism.cdf[:-1][None, :], torch.diff(mechanism.cdf)[None, :]
    up = torch.minimum(torch.clamp(p_up - lo, min=0.0), width)
    probs = torch.cat([up, width - up], dim=1)                           # (inputs, 2 * 2^NumRand)
    delta = _delta_at(probs, mechanism.epsilon)
    hi, low = probs.amax(0), probs.amin(0)
    seen = hi > 0
    loss = math.inf if bool((low[seen] <= 0).any()) else float(torch.log(hi[seen] / low[seen]).max())
    return {"max privacy loss": loss, "δ at ε": delta}


def authors_code_marginal(x: Any, *, epsilon: float, num_rand: int = 5, center: float = 0.0,
                          radius: float = 1.0) -> torch.Tensor:
    """P[leader reports c + r a] in the authors' public code (as we read it; float64). The cell is
    k = min(floor(P 2^NumRand), 2^NumRand - 1) with P = 1/2 + (w - c)/(2 r a); in cell k the client reports
    UP with probability (P - k'/2^NumRand) 2^NumRand, where the code sets k' = 2^NumRand - 2 in the top cell.
    Below the top cell this is P exactly; in the top cell (P >= 1 - 2^-NumRand, reachable when
    e^ε/(e^ε + 1) >= 1 - 2^-NumRand, i.e. ε >= ln(2^NumRand - 1)) it is 1: the lower report becomes
    impossible for those inputs and the report is no longer ε-LDP."""
    p = TwoPoint(epsilon=epsilon, center=center, radius=radius).prob_plus(x)
    n = 2 ** int(num_rand)
    k = torch.clamp(torch.floor(p * n), 0, n - 1)
    k_used = torch.where(k == n - 1, torch.full_like(k, n - 2), k)
    inside = torch.clamp((p - k_used / n) * n, 0.0, 1.0)
    return k / n + inside / n


def binary_report_epsilon(p_plus: Any) -> float:
    """The exact ε of a two-valued report whose probability of the upper value is ``p_plus`` over a set of inputs:
    max(ln(max p / min p), ln(max (1 - p) / min (1 - p))) (``inf`` when either report is impossible for some
    input and possible for another)."""
    p = torch.as_tensor(p_plus, dtype=torch.float64).flatten()
    out = 0.0
    for q in (p, 1.0 - p):
        hi, lo = float(q.max()), float(q.min())
        if hi > 0.0:
            out = max(out, math.inf if lo <= 0.0 else math.log(hi / lo))
    return out


def own_report_epsilon(mechanism: CorrelatedTwoPoint, x: Any, partners: Sequence[float]) -> dict[str, float]:
    """The exact ε of each client's **own** report, read off the pair's joint law
    (:meth:`~ldptut.mechanisms.CorrelatedTwoPoint.joint_distribution`, not the inherited two-point law): for the
    leader, its marginal P[report up | x, x_partner] over every x in ``x`` and every partner input (the partner's
    input may change the marginal of a faulty coupling, so it ranges too); likewise for the follower.
    :func:`binary_report_epsilon` of each; a coupling whose marginal is not the two-point law shows here."""
    x = torch.as_tensor(x, dtype=torch.float64).flatten()
    lead, follow = [], []
    for xp in partners:
        _, probs = mechanism.joint_distribution(x, torch.full_like(x, float(xp)))
        lead.append(probs[..., 1, :].sum(-1))
        _, probs = mechanism.joint_distribution(torch.full_like(x, float(xp)), x)
        follow.append(probs[..., :, 1].sum(-1))
    return {"leader": binary_report_epsilon(torch.cat(lead)), "follower": binary_report_epsilon(torch.cat(follow))}


def sampled_own_report_epsilon(mechanism: CorrelatedTwoPoint, *, n: int, partners: Sequence[float],
                               shared: torch.Generator, local: torch.Generator,
                               alpha: float = 1e-3) -> dict[str, float]:
    """What the sampler's own reports show: ``n`` pairs per partner input with the leader at each end of the range
    (c - r, c + r); Clopper-Pearson bounds (level ``alpha`` each side) on P[up] and P[down] at both ends give a
    one-sided lower bound on the leader's ε, ln(lower(P(e | c + r)) / upper(P(e | c - r))) maximised over the
    report e and the partners, and the point estimate (frequencies). For an ε-LDP sampler the lower bound stays
    below ε (with probability >= 1 - 2 alpha per comparison), and the estimate approaches ε as n grows."""
    from ..audits import binomial_confidence_bounds

    n = pos_int(n, "n")
    c, r = float(mechanism.center), float(mechanism.radius)
    ends = torch.tensor([c - r, c + r], dtype=torch.float64)
    lower, point = 0.0, 0.0
    for xp in partners:
        xl = ends.repeat(n, 1)
        ol, _ = mechanism.privatize_pairs(xl, torch.full_like(xl, float(xp)), shared=shared, local=local)
        k_up = (ol > c).sum(0).to(torch.float64)                          # (2,): counts at c - r and c + r
        for k in (k_up, n - k_up):                                        # the upper report, then the lower one
            lo, hi, _ = binomial_confidence_bounds(k, n, alpha)
            for a, b in ((1, 0), (0, 1)):
                if float(lo[a]) > 0.0 and float(hi[b]) > 0.0:
                    lower = max(lower, math.log(float(lo[a]) / float(hi[b])))
            if float(k.min()) > 0.0:
                point = max(point, abs(math.log(float(k[1]) / float(k[0]))))
    return {"lower bound": lower, "estimate": point}


# ------------------------------------------------------------------------------------ the chapter's checks, tables, figures
def own_report_table(*, epsilon: float = 1.0, num_rands: Sequence[int] = (0, 1, 5, 12), inputs: int = 201,
                     partners: int = 21) -> pd.DataFrame:
    """Each client's own report, read off the pair's exact joint law, against the two-point mechanism: per NumRand,
    the largest |marginal - two-point P| over ``inputs`` x ``partners`` inputs on [-1, 1] (c = 0, r = 1), and the exact
    ε of the leader's and the follower's own report (:func:`own_report_epsilon`), ε per weight per round."""
    x = torch.linspace(-1, 1, pos_int(inputs, "inputs"), dtype=torch.float64)
    others = torch.linspace(-1, 1, pos_int(partners, "partners"), dtype=torch.float64).tolist()
    two_point = TwoPoint(epsilon=epsilon)
    rows = []
    for nr in num_rands:
        mech = CorrelatedTwoPoint(epsilon=epsilon, num_rand=nr)
        worst = 0.0
        for xp in others:
            _, probs = mech.joint_distribution(x, torch.full_like(x, xp))
            worst = max(worst, (probs[..., 1, :].sum(-1) - two_point.prob_plus(x)).abs().max().item(),
                        (probs[..., :, 1].sum(-1) - two_point.prob_plus(xp)).abs().max().item())
        own = own_report_epsilon(mech, x, others)
        rows.append({"NumRand": nr, "max |marginal − two-point P|": worst, "leader's ε": own["leader"],
                     "follower's ε": own["follower"]})
    return pd.DataFrame(rows)


def sampler_joint_deviation(mechanism: CorrelatedTwoPoint, leader: Any, follower: Any, *, n: int,
                            shared: torch.Generator, local: torch.Generator) -> float:
    """The sampler against the exact joint law: ``n`` pairs at each input pair (``leader[i]``, ``follower[i]``), the
    largest |frequency - probability| over the pairs and the four joint outcomes, in standard errors
    sqrt(p (1 - p) / n) (at least 1/n)."""
    xl, xf = torch.as_tensor(leader, dtype=torch.float32), torch.as_tensor(follower, dtype=torch.float32)
    ol, of = mechanism.privatize_pairs(xl.repeat(pos_int(n, "n"), 1), xf.repeat(n, 1), shared=shared, local=local)
    _, probs = mechanism.joint_distribution(xl, xf)
    c = float(mechanism.center)
    z = 0.0
    for i, a in enumerate((ol < c, ol > c)):
        for j, b in enumerate((of < c, of > c)):
            p = probs[:, i, j]
            se = torch.sqrt(p * (1 - p) / n).clamp(min=1 / n)
            z = max(z, ((a & b).double().mean(0) - p).abs().div(se).max().item())
    return z


def marginal_table(xs: Sequence[float] = (-1.0, -0.5, 0.0, 0.5, 1.0), *, num_rand: int = 5) -> pd.DataFrame:
    """P[report c + r a] at the inputs ``xs`` (c = 0, r = 1): the two-point mechanism at ε = 1, the draft's Algorithm 2
    as printed (NumRand = ``num_rand``, at least 1), the two-point mechanism at ε = 5 and the authors' code at ε = 5
    (NumRand = 5, its top cell); ε per weight per round. One row per rule, one column per input."""
    x = torch.tensor(list(xs), dtype=torch.float64)
    nr = max(int(num_rand), 1)
    rules = [("two-point, ε = 1", TwoPoint(epsilon=1.0).prob_plus(x)),
             (f"draft Alg. 2, ε = 1, NumRand = {nr}", CorrelatedTwoPoint(epsilon=1.0, num_rand=nr).draft_marginal(x)),
             ("two-point, ε = 5", TwoPoint(epsilon=5.0).prob_plus(x)),
             ("authors' code, ε = 5, NumRand = 5", authors_code_marginal(x, epsilon=5.0, num_rand=5))]
    return pd.DataFrame([{"rule": name, **{f"w = {v:g}": float(p) for v, p in zip(xs, ps.tolist())}}
                         for name, ps in rules])


def pair_variance_table(epsilons: Iterable[float], *, n: int = 2001) -> pd.DataFrame:
    """Var(w_i* + w_j*) in units of r² (c = 0, r = 1) per ε (per weight per round): a(ε), the independent pair's worst
    case 2 a², Eq. 6's maximum over all means a² (the draft's), Eq. 6's maximum for means in the range (on ``n``
    points), and the ratio of the last to the independent pair's worst case."""
    rows = []
    for e in epsilons:
        a = two_point_a(_epsilon(e))
        in_range = eq6_pair_variance(torch.linspace(-1, 1, pos_int(n, "n"), dtype=torch.float64), epsilon=e).max().item()
        rows.append({"ε": e, "a": a, "independent, max (2a²)": 2 * a * a, "Eq. 6, max over all means (a²)": a * a,
                     "Eq. 6, max in range": in_range, "in range / independent": in_range / (2 * a * a)})
    return pd.DataFrame(rows)


def numrand_variance(*, epsilon: float = 1.0, num_rands: Sequence[int] = tuple(range(11)),
                     p_xs: Sequence[float] = (0.5, 0.7, 0.9), n: int = 20000, seed: int = 1) -> pd.DataFrame:
    """The mean of Var(w_i* + w_j*) (units of r², c = 0, r = 1) over ``n`` input pairs uniform in the range, at ε per
    weight per round, for each NumRand and p_x (``kind`` "correlated"), with the independent pair and Eq. 6's
    countermonotone limit (``kind`` "independent" / "Eq. 6 limit", NumRand and p_x NaN); ``missed (%)``: the share
    of the possible reduction (independent minus limit) that the correlated pair misses."""
    g = generator(seed, "uniform inputs")
    wi = torch.rand(pos_int(n, "n"), generator=g, dtype=torch.float64) * 2 - 1
    wj = torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1
    ind = independent_pair_variance(wi, wj, epsilon=epsilon).mean().item()
    lim = eq6_pair_variance((wi + wj) / 2, epsilon=epsilon).mean().item()
    rows = [{"kind": "independent", "NumRand": math.nan, "p_x": math.nan, "mean variance (r²)": ind},
            {"kind": "Eq. 6 limit", "NumRand": math.nan, "p_x": math.nan, "mean variance (r²)": lim}]
    for px in p_xs:
        for nr in num_rands:
            v = CorrelatedTwoPoint(epsilon=epsilon, num_rand=nr, p_x=px).pair_sum_variance(wi, wj).mean().item()
            rows.append({"kind": "correlated", "NumRand": nr, "p_x": px, "mean variance (r²)": v})
    out = pd.DataFrame(rows)
    out["missed (%)"] = 100 * (out["mean variance (r²)"] - lim) / (ind - lim)
    return out


def plot_pair_variance(epsilons: Sequence[float] = (0.5, 1.0, 2.0, 4.0), *, num_rand: int = 5, center: float = 0.0,
                       radius: float = 0.5):
    """The paper's Figure 2 redrawn: Var(w_i* + w_j*) of a pair at the same input w, independent (LDP-FL), correlated
    (exact, NumRand = ``num_rand``) and Eq. 6 (NumRand -> infinity), one panel per ε (per weight per round), two per
    row (:func:`ldptut.display.figure`). Returns the figure."""
    from ..display import figure

    eps = list(epsilons)
    fig, axes = figure(2 if len(eps) > 1 else 1, math.ceil(len(eps) / 2), squeeze=False)
    w = torch.linspace(center - radius, center + radius, 401, dtype=torch.float64)
    for ax, e in zip(axes.flat, eps):
        m = CorrelatedTwoPoint(epsilon=e, center=center, radius=radius, num_rand=num_rand)
        ax.plot(w, independent_pair_variance(w, w, epsilon=e, center=center, radius=radius), label="independent")
        ax.plot(w, m.pair_sum_variance(w, w), label=f"correlated, NumRand = {num_rand}")
        ax.plot(w, eq6_pair_variance(w, epsilon=e, center=center, radius=radius), "--", label="Eq. 6 (NumRand → ∞)")
        ax.set(title=f"ε = {e:g}", xlabel="w = w_i = w_j", ylabel="Var(w_i* + w_j*)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(eps):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=8)
    return fig


def plot_numrand(table: pd.DataFrame, *, epsilon: float = 1.0):
    """:func:`numrand_variance`'s table as a figure: the mean variance of a pair's sum against NumRand per p_x, with
    the independent pair and Eq. 6's limit as lines (one panel, the column's width). Returns the figure."""
    from ..display import figure

    fig, ax = figure(1, height=3.4)
    corr = table[table["kind"] == "correlated"]
    for px, g in corr.groupby("p_x", sort=True):
        ax.plot(g["NumRand"], g["mean variance (r²)"], marker="o", label=f"p_x = {px:g}")
    for kind, ls in (("independent", ":"), ("Eq. 6 limit", "--")):
        ax.axhline(float(table.loc[table["kind"] == kind, "mean variance (r²)"].iloc[0]), color="k", ls=ls,
                   label="independent (NumRand = 0)" if kind == "independent" else kind)
    ax.set(xlabel="NumRand (shared random bits per weight)", ylabel="mean Var(w_i* + w_j*) (r²)",
           title=f"ε = {epsilon:g} per weight per round, inputs uniform in the range")
    from ..display import integer_rounds

    integer_rounds(ax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


_COLORS = {"fedavg": "k", "ldp_fl": "tab:blue", "coq_fl": "tab:red"}


def plot_rounds(records: Sequence[Any], epsilons: Sequence[float]):
    """Test accuracy (%, left) and test loss (log scale, right) per round of the runs ``records`` (RunRecords of
    :class:`CorbinConfig`), one row per ε of ``epsilons`` (per weight per round), FedAvg in every row; an x marks a run
    stopped as diverging. Two panels per row (:func:`ldptut.display.figure`). Returns the figure."""
    from matplotlib.ticker import LogFormatter

    from ..display import figure, integer_rounds

    eps = list(epsilons)
    fig, axes = figure(2, len(eps), height=2.6 * len(eps), squeeze=False, sharex=True)
    for row, e in enumerate(eps):
        ax_acc, ax_loss = axes[row]
        seen = set()
        for rec in records:
            cfg, h = rec.config, rec.history
            if cfg.epsilon not in (None, e):
                continue
            style = dict(color=_COLORS[cfg.method], ls="--" if cfg.method == "fedavg" else "-", alpha=0.8)
            label = _NAMES[cfg.method] if cfg.method not in seen else None
            seen.add(cfg.method)
            ax_acc.plot(h["round"], 100 * h["accuracy"], label=label, **style)
            ax_loss.plot(h["round"], h["loss"], **style)
            if "diverged" in h and bool(h["diverged"].iloc[-1]):
                ax_loss.plot(h["round"].iloc[-1], h["loss"].iloc[-1], "x", color=style["color"], ms=9)
        ax_acc.set(ylabel="test accuracy (%)", title=f"ε = {e:g} per weight per round")
        ax_loss.set(ylabel="test loss (log)", yscale="log", title=f"ε = {e:g}: test loss")
        ax_loss.yaxis.set_major_formatter(LogFormatter())     # "2", "2.2", "1e+04" rather than 2.2 x 10^0
        ax_loss.yaxis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))
        for ax in (ax_acc, ax_loss):
            ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set(xlabel="communication round")
        integer_rounds(ax)
    axes[0, 0].legend(fontsize=8)
    return fig


def authors_side_table(side: Mapping[str, Any]) -> pd.DataFrame:
    """The authors' code beside ours (``book/runs/corbin-authors.json``: rows of method, round, theirs, ours): test
    accuracy (%) per round, one column per method and code, and each round's gap ours − theirs per method."""
    rows = pd.DataFrame(side["rows"])
    out = pd.DataFrame({"round": sorted(rows["round"].unique())})
    for m in ("coq_fl", "ldp_fl"):
        g = rows[rows["method"] == m].set_index("round")
        out[f"{_NAMES[m]}, theirs (%)"] = out["round"].map(g["theirs"])
        out[f"{_NAMES[m]}, ours (%)"] = out["round"].map(g["ours"])
        out[f"{_NAMES[m]}, ours − theirs (points)"] = out["round"].map(g["ours"] - g["theirs"])
    return out


# ------------------------------------------------------------------------------------ runs
#: The chapter's methods: (mechanism, correlated) of a :class:`CorbinConfig`.
METHODS = {"fedavg": (None, False), "ldp_fl": ("two_point", False), "coq_fl": ("two_point", True)}


@dataclass(frozen=True, kw_only=True)
class CorbinConfig(FedAvgConfig):
    """A FedAvg run with LDP-FL's two-point mechanism, optionally on correlated pairs (CoQ-FL).

    ``correlated``: pair the clients at random each round (:class:`~ldptut.fl.PairedPerturbation` with
    ``num_rand`` shared bits of bias ``p_x``); ``smoothing``: the server's λ (None: the plain mean).
    ``n_train`` / ``n_test`` / ``validation`` (:class:`~ldptut.experiments.FedAvgConfig`'s subsets): the chapter tunes λ
    on the validation split, never on test.
    """

    kind: ClassVar[str] = "corbin"

    correlated: bool = False
    num_rand: int = 5
    p_x: float = 0.5
    smoothing: Optional[float] = None

    def __post_init__(self) -> None:
        if self.correlated and self.mechanism != "two_point":  # before the parent builds the privatizer
            raise ValueError(f"correlated pairs perturb with the two-point mechanism; got mechanism={self.mechanism!r}")
        super().__post_init__()
        if self.smoothing is not None:
            SmoothedMean(self.smoothing)

    @property
    def method(self) -> str:
        """"fedavg", "ldp_fl" or "coq_fl"."""
        return "fedavg" if self.mechanism is None else ("coq_fl" if self.correlated else "ldp_fl")

    def privatizer(self):
        if self.correlated:
            return PairedPerturbation(epsilon=self.epsilon, range=self.range, num_rand=self.num_rand, p_x=self.p_x)
        return super().privatizer()

    def server_rule(self):
        return self.aggregator if self.smoothing is None else SmoothedMean(self.smoothing)

    def label(self) -> str:
        """"FedAvg, seed 0", "LDP-FL ε=1, seed 0", "CoQ-FL ε=1, λ=0.5, seed 0"."""
        if self.mechanism is None:
            return f"FedAvg, seed {self.seed}"
        name = "CoQ-FL" if self.correlated else "LDP-FL"
        lam = "" if self.smoothing is None else f", λ={self.smoothing:g}"
        return f"{name} ε={self.epsilon:g}{lam}, seed {self.seed}"


def chapter_config(*, dataset: str = "mnist", rounds: Optional[int] = None, n_clients: Optional[int] = None,
                n_train: Optional[int] = None, n_test: Optional[int] = None, model: Optional[str] = None,
                seed: int = 0) -> CorbinConfig:
    """The non-private run at CorBin-FL's settings for ``dataset`` (:data:`SETTINGS`), any of them overridden
    (rounds, clients, training-set size, test subset, model)."""
    if dataset not in SETTINGS:
        raise ValueError(f"dataset must be one of {sorted(SETTINGS)}, got {dataset!r}")
    s = SETTINGS[dataset]
    return CorbinConfig(paper="corbin", dataset=dataset, model=model or s["model"], n_clients=n_clients or s["n_clients"],
                     rounds=rounds or s["rounds"], seed=seed, partition=s["partition"], local_epochs=s["local_epochs"],
                     optimizer=s["optimizer"], lr=s["lr"], weight_decay=s["weight_decay"], batch_size=s["batch_size"],
                     n_train=n_train or s["n_train"], n_test=n_test, num_rand=s["num_rand"])


def method_config(method: str, *, base: CorbinConfig, epsilon: Optional[float] = None) -> CorbinConfig:
    """``base`` (non-private) turned into ``method`` ("fedavg", "ldp_fl", "coq_fl") at ``epsilon``."""
    if method not in METHODS:
        raise ValueError(f"method must be one of {sorted(METHODS)}, got {method!r}")
    mechanism, correlated = METHODS[method]
    if mechanism is None:
        return base.replace(mechanism=None, epsilon=None, range=None, correlated=False)
    if epsilon is None:
        raise ValueError(f"method {method!r} needs epsilon (per weight per round)")
    from ..fl import GlobalModelRange

    return base.replace(mechanism=mechanism, epsilon=epsilon, range=base.range or GlobalModelRange(),
                        correlated=correlated)


def configs(base: CorbinConfig, *, seeds: Sequence[int], epsilons: Iterable[float],
            methods: Sequence[str] = ("fedavg", "ldp_fl", "coq_fl")) -> list[tuple[str, CorbinConfig]]:
    """The grid "vs epsilon": FedAvg once per seed, LDP-FL and CoQ-FL at every ε, for every seed."""
    out = []
    for s in seeds:
        b = base.replace(seed=s)
        for m in methods:
            if m == "fedavg":
                out.append(("vs epsilon", method_config(m, base=b)))
            else:
                out.extend(("vs epsilon", method_config(m, base=b, epsilon=e)) for e in epsilons)
    return out


def tuning_runs(base: CorbinConfig, *, seeds: Sequence[int], smoothing_grid: Sequence[float],
                epsilons: Iterable[float], validation: int) -> list[tuple[str, CorbinConfig]]:
    """The grid "tune λ": LDP-FL and CoQ-FL at every ε of ``epsilons`` with the plain mean (λ = 1) and every other λ
    of ``smoothing_grid``, evaluated on ``validation`` held-out training images (never the test set), for every seed
    of ``seeds``; none when ``smoothing_grid`` is empty. The authors chose λ per ε (on test accuracy)."""
    if not smoothing_grid:
        return []
    val_base = base.replace(validation=validation, n_test=None)
    lams = [None] + [l for l in smoothing_grid if l != 1.0]
    return [("tune λ", method_config(m, base=val_base.replace(seed=s, smoothing=l), epsilon=e))
            for e in epsilons for m in ("ldp_fl", "coq_fl") for l in lams for s in seeds]


def tuning_table(tune: pd.DataFrame) -> pd.DataFrame:
    """The "tune λ" runs (rows of :func:`ldptut.runcache.records_table`) as one row per method and ε (per weight per
    round): final validation accuracy (%) per λ (λ = 1 the plain mean; "mean (n seeds)", diverged runs counted
    apart, :func:`outcome`) and the λ chosen (:func:`choose_smoothing`)."""
    if not len(tune):
        return pd.DataFrame()
    t = tune.assign(method=tune["config"].map(lambda c: c.method), ε=tune["epsilon"].astype(float),
                    λ=tune["smoothing"].map(lambda l: 1.0 if pd.isna(l) else float(l)))
    shown = t.groupby(["method", "ε", "λ"])[["accuracy", "diverged", "last_round"]].apply(outcome).unstack("λ")
    shown.columns = [f"λ = {l:g}" for l in shown.columns]
    best = choose_smoothing(tune)
    shown["λ chosen"] = [("none: every λ diverged" if best.get(k) is None else f"{best[k]:g}") for k in shown.index]
    return shown.reset_index()


def choose_smoothing(tune: pd.DataFrame) -> dict[tuple[str, float], Optional[float]]:
    """λ per (method, ε) from the "tune λ" runs (validation split): the λ whose runs have the highest mean final
    validation accuracy over the tuning seeds, among the λ none of whose runs diverged (a λ that blows up on one
    seed is not chosen); ties go to the larger λ (the plain mean, 1, first: the simpler server). None where every λ
    diverged on some seed. Never reads the test set."""
    if not len(tune):
        return {}
    if (tune["validation"].isna()).any():
        raise ValueError("choose_smoothing takes the 'tune λ' runs only (evaluated on the validation split); "
                         "some rows were evaluated on the test set")
    t = tune.assign(method=tune["config"].map(lambda c: c.method), eps=tune["epsilon"].astype(float),
                    lam=tune["smoothing"].map(lambda l: 1.0 if pd.isna(l) else float(l)),
                    gone=tune["diverged"].astype(bool) if "diverged" in tune else False)
    out: dict[tuple[str, float], Optional[float]] = {}
    for (m, e), g in t.groupby(["method", "eps"], sort=True):
        score = {lam: float(h["accuracy"].mean()) for lam, h in g.groupby("lam") if not h["gone"].any()}
        out[(m, e)] = max(score, key=lambda lam: (score[lam], lam)) if score else None
    return out


def smoothed_runs(base: CorbinConfig, best: Mapping[tuple[str, float], Optional[float]], *,
                  seeds: Sequence[int]) -> list[tuple[str, CorbinConfig]]:
    """The runs "smoothed": for each (method, ε) of ``best`` (:func:`choose_smoothing`: the λ chosen on validation; 1
    is the plain mean, None: every λ diverged, no run) that method at that ε on the test set, for every seed. They
    depend on the "tune λ" results, so they are not in :func:`grid` (:func:`followup`)."""
    return [("smoothed", method_config(m, base=base.replace(seed=s, smoothing=None if lam == 1.0 else lam), epsilon=e))
            for (m, e), lam in best.items() if lam is not None for s in seeds]


def fixed_range_runs(base: CorbinConfig, *, seeds: Sequence[int], epsilons: Iterable[float]) -> list[tuple[str, CorbinConfig]]:
    """The ablation "fixed range": LDP-FL and CoQ-FL with the plain mean at every ε of ``epsilons``, the range fixed at
    the initial model's per-layer range (:class:`ldptut.fl.InitialModelRange`) instead of recomputed each round from
    the noisy global model; everything else as in "vs epsilon" (same seeds, so the pairs are comparable)."""
    from ..fl import InitialModelRange

    return [("fixed range", method_config(m, base=base.replace(seed=s), epsilon=e).replace(range=InitialModelRange()))
            for e in epsilons for m in ("ldp_fl", "coq_fl") for s in seeds]


#: The chapter's parameters and their checks (:func:`ldptut.notebooks.setup` checks them; the notebook's parameters
#: cell holds the defaults, ``book/params/corbin*-paper.yaml`` the paper-scale values).
@chapter_params
class Params(ChapterParams):
    """The chapter's parameters (``book/corbin.ipynb``'s parameters cell: the same names, defaults and order),
    each with its check; a parameter file gives other values for some."""

    dataset: str = param(P.choice("mnist", "cifar10"), "mnist")
    model: Optional[str] = param(P.optional(P.choice("cnn_pool", "resnet18", "resnet18_bn")), None)
    rounds: int = param(P.pos_int, 3)
    n_clients: int = param(P.pos_int, 50)
    n_train: Optional[int] = param(P.optional(P.pos_int), 2000)
    n_test: Optional[int] = param(P.optional(P.pos_int), 1000)
    seeds: list[int] = param(P.list_of(P.nonneg_int), [0])
    epsilons: list[float] = param(P.list_of(P.pos_float), [0.3, 1.0, 3.0])
    num_rand: int = param(P.nonneg_int, 5)
    smoothing_grid: list[float] = param(P.list_of(P.fraction), [0.2])
    smoothing_epsilons: list[float] = param(P.list_of(P.pos_float), [1.0])
    tuning_seeds: list[int] = param(P.list_of(P.nonneg_int), [0])
    validation: int = param(P.pos_int, 1000)
    fixed_range_epsilons: list[float] = param(P.list_of(P.pos_float), [1.0])
    pair_samples: int = param(P.pos_int, 200000)
    device: str = param(P.device, "auto")
    run_cache: Optional[str] = param(P.optional(P.string), None)
    paper_runs_dir: Optional[str] = param(P.optional(P.string), "runs/cache/corbin")




def base_config(p: Mapping[str, Any]) -> CorbinConfig:
    """The chapter's non-private run (:func:`chapter_config`) from its parameters ``p`` (the notebook's names)."""
    return chapter_config(dataset=p["dataset"], rounds=p["rounds"], n_clients=p["n_clients"], n_train=p["n_train"],
                       n_test=p["n_test"], model=p["model"]).replace(num_rand=p["num_rand"])


def grid(p: Mapping[str, Any]) -> list[tuple[str, CorbinConfig]]:
    """The chapter's runs that its parameters ``p`` (the notebook's names, e.g. a parameter file over the defaults)
    fix before any training: "vs epsilon" (:func:`configs`), "tune λ" (:func:`tuning_runs` at every ε of
    ``smoothing_epsilons``, seeds ``tuning_seeds``) and "fixed range" (:func:`fixed_range_runs` at
    ``fixed_range_epsilons``). The chapter and ``python -m ldptut.sweep corbin`` both build their runs here.

    Not in it: the "smoothed" runs (:func:`followup`), which use the λ each method scores best with on the
    validation split, known only once the "tune λ" runs are trained; the sweep trains them after the grid."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    base = base_config(p)
    return (configs(base, seeds=p["seeds"], epsilons=p["epsilons"])
            + tuning_runs(base, seeds=p["tuning_seeds"], smoothing_grid=p["smoothing_grid"],
                          epsilons=p["smoothing_epsilons"], validation=p["validation"])
            + fixed_range_runs(base, seeds=p["seeds"], epsilons=p["fixed_range_epsilons"]))


def followup(p: Mapping[str, Any], tune: pd.DataFrame) -> list[tuple[str, CorbinConfig]]:
    """The runs that depend on :func:`grid`'s results: "smoothed" (:func:`smoothed_runs`) with the λ chosen on
    validation (:func:`choose_smoothing`) from ``tune``, the stored "tune λ" runs of ``grid(p)`` (a records table),
    for every seed of ``seeds``. ``tune`` may hold other runs too: those of the experiment "tune λ" are used when it
    has an ``experiment`` column, else those evaluated on the validation split."""
    p = Params.of(p)  # checked: a notebook's names, a parameter file over the defaults, or a Params
    if "experiment" in tune:
        tune = tune[tune["experiment"] == "tune λ"]
    elif len(tune):
        tune = tune[tune["validation"].notna()]
    return smoothed_runs(base_config(p), choose_smoothing(tune), seeds=p["seeds"])


def outcome(runs: pd.DataFrame) -> str:
    """Final test accuracy (%) of ``runs`` as "mean ± std (n seeds)", over the runs that did not diverge;
    diverged runs are counted and the round they blew up named (:func:`ldptut.experiments.diverged_note`,
    "1 of 3 diverged (round 8)")."""
    if len(runs) == 0:
        return "not run"
    div = runs["diverged"].astype(bool) if "diverged" in runs else pd.Series(False, index=runs.index)
    return "; ".join(part for part in (mean_std(runs.loc[~div, "accuracy"]) if (~div).any() else "",
                                       diverged_note(runs)) if part)


def _fixed_range(c: Any) -> bool:
    from ..fl import InitialModelRange

    return isinstance(getattr(c, "range", None), InitialModelRange)


def compare(runs: pd.DataFrame) -> pd.DataFrame:
    """CorBin-FL's reported accuracies beside ours (final test accuracy, mean ± std over seeds; diverged runs
    counted apart, :func:`outcome`), per data set, method and ε (per weight per round), one row per setting of ours
    (rounds, training images, λ; the largest scale first), from a Runner table or ``runcache.load_runs``; runs
    evaluated on the validation split and the fixed-range ablation are left out. The composed figure per client over
    the run is ε · d · rounds."""
    rows = []
    for claim in REPORTED:
        where = claim.where
        sel = runs[(runs["dataset"] == where["dataset"])] if len(runs) else runs
        if len(sel):
            sel = sel[sel["config"].map(lambda c: getattr(c, "method", None) == where["method"]
                                        and getattr(c, "validation", None) is None and not _fixed_range(c))]
            sel = sel[sel["epsilon"].isna()] if claim.epsilon is None else sel[sel["epsilon"] == claim.epsilon]
        setting = lambda c: (-c.rounds, -(c.n_train or 10**9), c.smoothing or 1.0)  # noqa: E731 - largest scale first
        groups = [(key[2], g) for key, g in sel.groupby(sel["config"].map(setting), sort=True)] if len(sel) else []
        for lam, g in groups or [(None, sel)]:
            settings = composed = ""
            if len(g):
                c = g["config"].iloc[0]
                settings = (f"{c.model}, {c.n_clients} clients, {c.n_train or 'all'} train images, {c.rounds} rounds, "
                            + ("plain mean" if lam == 1.0 else f"λ = {lam:g}"))
                if claim.epsilon is not None:
                    d = _n_params(c)
                    composed = f"{claim.epsilon * d * c.rounds:.3g} (d = {d:,}, {c.rounds} rounds)"
            rows.append({"claim": claim.claim, "ε unit": claim.epsilon_unit or "non-private",
                         "paper (%)": claim.value, "ours (%)": outcome(g),
                         "settings": settings, "ε composed per client (basic)": composed})
    return pd.DataFrame(rows)


# ------------------------------------------------------------------------------------ the ε sweep and the ablation
_NAMES = {"fedavg": "FedAvg", "ldp_fl": "LDP-FL", "coq_fl": "CoQ-FL"}
#: The methods' shown names.
NAMES = dict(_NAMES)
#: The series of the ε sweep: (method, server) -> label; "plain" is the plain mean ("vs epsilon"), "tuned" the λ chosen
#: on validation ("smoothed"), "fixed" the fixed-range ablation.
SERIES = {("fedavg", "plain"): "FedAvg (no noise)", ("ldp_fl", "plain"): "LDP-FL, plain mean",
          ("coq_fl", "plain"): "CoQ-FL, plain mean", ("ldp_fl", "tuned"): "LDP-FL, λ chosen on validation",
          ("coq_fl", "tuned"): "CoQ-FL, λ chosen on validation", ("ldp_fl", "fixed"): "LDP-FL, fixed range",
          ("coq_fl", "fixed"): "CoQ-FL, fixed range"}
_SERVER = {"vs epsilon": "plain", "smoothed": "tuned", "fixed range": "fixed"}


def _series(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` (a Runner table, with ``experiment``) with ``method``, ``server`` and ``eps`` (inf: FedAvg) columns,
    the tuning runs left out; ``accuracy`` NaN for a diverged run."""
    runs = runs[runs["experiment"].isin(list(_SERVER))]
    return runs.assign(method=runs["config"].map(lambda c: c.method), server=runs["experiment"].map(_SERVER),
                       eps=runs["config"].map(lambda c: math.inf if c.mechanism is None else float(c.epsilon)),
                       accuracy=finite_accuracy(runs))


def epsilon_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The ε sweep (a Runner table of "vs epsilon", "smoothed" and optionally "tune λ" and "fixed range" runs, one
    setting): per ε (per weight per round) each series' final test accuracy (%) as mean [95 % t interval] over seeds,
    diverged runs counted apart (:func:`ldptut.papers.interval_cell`), the λ chosen (where every λ diverged on
    validation, said so), and "CoQ-FL − LDP-FL" with the plain mean and with λ chosen, paired by seed (where both
    finished)."""
    t = _series(runs)
    if not len(t):
        return pd.DataFrame()
    tune = runs[runs["experiment"] == "tune λ"]
    chosen = choose_smoothing(tune) if len(tune) else {}
    acc = lambda e, m, srv: (lambda g: pd.Series(g["accuracy"].to_numpy(float), index=g["seed"].to_numpy()))(  # noqa: E731
        t[(t["eps"] == e) & (t["method"] == m) & (t["server"] == srv)])
    lam = lambda e, m: sorted({c.smoothing or 1.0 for c in t[(t["eps"] == e) & (t["method"] == m)  # noqa: E731
                                                                & (t["server"] == "tuned")]["config"]})
    rows = []
    fed = acc(math.inf, "fedavg", "plain")
    for e in sorted(x for x in set(t["eps"]) if x != math.inf):
        row = {"ε": f"{e:g}"}
        for m in ("ldp_fl", "coq_fl"):
            row[f"{_NAMES[m]} plain (%)"] = interval_cell(acc(e, m, "plain"))
        a, b = acc(e, "coq_fl", "plain"), acc(e, "ldp_fl", "plain")
        row["CoQ − LDP, plain (points)"] = paired_cell(a, b) if len(a) and len(b) else "-"
        for m in ("ldp_fl", "coq_fl"):
            tuned = acc(e, m, "tuned")
            gone = not len(tuned) and (m, e) in chosen and chosen[(m, e)] is None
            row[f"{_NAMES[m]} tuned (%)"] = "every λ diverged on validation" if gone else interval_cell(tuned)
            row[f"{_NAMES[m]} λ"] = ", ".join(f"{l:g}" for l in lam(e, m)) or "-"
        a, b = acc(e, "coq_fl", "tuned"), acc(e, "ldp_fl", "tuned")
        row["CoQ − LDP, tuned (points)"] = paired_cell(a, b) if len(a) and len(b) else "-"
        rows.append(row)
    if len(fed):
        rows.append({"ε": "none (FedAvg)", "LDP-FL plain (%)": interval_cell(fed)})
    return pd.DataFrame(rows).fillna("")


_SERVER_TITLES = {"plain": "plain mean (λ = 1)", "tuned": "λ chosen on validation", "fixed": "fixed range, plain mean"}


def _draw_vs_epsilon(ax, t: pd.DataFrame, keys: Sequence[str], labels: Mapping[str, str], styles: Mapping[str, dict],
                     ylim: tuple[float, float] = (0, 100)) -> None:
    """One panel of :func:`plot_vs_epsilon` (the drawing of :func:`ldptut.plotting.plot_accuracy_vs_epsilon` on a given
    Axes): per series the mean over seeds with its 95 % t interval, each seed as a dot, a diverged run as an x at the
    bottom; ε on a log axis, FedAvg ("none") at the right."""
    from . import t_interval

    inf = math.inf
    finite = sorted(e for e in set(t["eps"]) if e != inf)
    none_x = (finite[-1] * 2.5) if finite else 1.0
    has_none = bool((t["eps"] == inf).any())
    for j, key in enumerate(keys):
        sel = t[t["series"] == key]
        if not len(sel):
            continue
        style = dict(styles[key])
        shift = 1 + 0.05 * (j - (len(keys) - 1) / 2)
        xs, means, lo, hi = [], [], [], []
        for e, g in sorted(sel.groupby("eps"), key=lambda kv: kv[0]):
            x = (none_x if e == inf else e) * shift
            ok = g["accuracy"].dropna()
            ax.scatter([x] * len(ok), ok, s=10, alpha=0.4, color=style["color"])
            if len(g) > len(ok):
                ax.scatter([x], [ylim[0]], marker="x", s=40, color=style["color"], clip_on=False, zorder=3)
            if len(ok):
                ci = t_interval(ok) or (ok.mean(), ok.mean())
                xs.append(x)
                means.append(ok.mean())
                lo.append(ok.mean() - ci[0])
                hi.append(ci[1] - ok.mean())
        ax.errorbar(xs, means, yerr=[lo, hi], capsize=3, label=labels[key], **style)
    ax.set_xscale("log")
    ax.set_ylim(*ylim)
    ax.set_xticks(finite + ([none_x] if has_none else []), [f"{e:g}" for e in finite] + (["none"] if has_none else []))
    ax.minorticks_off()
    ax.set(xlabel="ε per weight per round" + (" (none: no noise)" if has_none else ""))
    ax.grid(alpha=0.3)


def plot_vs_epsilon(runs: pd.DataFrame, *, title: str = "", servers: Sequence[str] = ("plain", "tuned")):
    """Final test accuracy (%) against ε per weight per round (log axis), one panel per server rule of ``servers``
    ("plain": the plain mean, "tuned": λ chosen on validation, "fixed": the fixed-range ablation), two per row
    (:func:`ldptut.display.figure`), FedAvg at "none" in each: the mean and 95 % t interval over seeds, each seed's run
    as a dot, a diverged run as an x at the bottom. Returns the figure."""
    from ..display import figure

    t = _series(runs)
    t = t.assign(series=[f"{m}|{srv}" for m, srv in zip(t["method"], t["server"])])
    styles = {f"{m}|{srv}": {"color": _COLORS[m], "ls": {"plain": ":", "tuned": "-", "fixed": "--"}[srv],
                             "marker": {"plain": "s", "tuned": "o", "fixed": "^"}[srv]} for m, srv in SERIES}
    labels = {f"{m}|{srv}": _NAMES[m] for m, srv in SERIES}
    servers = list(servers)
    fig, axes = figure(2 if len(servers) > 1 else 1, math.ceil(len(servers) / 2), squeeze=False, sharey=True)
    for ax, srv in zip(axes.flat, servers):
        keys = [k for k in ("ldp_fl|" + srv, "coq_fl|" + srv, "fedavg|plain") if k in styles]
        _draw_vs_epsilon(ax, t, keys, labels, styles)
        ax.set_title(_SERVER_TITLES[srv])
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, title="x: diverged", title_fontsize=8)
    for ax in list(axes.flat)[len(servers):]:
        ax.set_visible(False)
    for ax in axes[:, 0]:
        ax.set_ylabel("final test accuracy (%)")
    if title:
        fig.suptitle(title)
    return fig


def range_ablation_table(runs: pd.DataFrame) -> pd.DataFrame:
    """The fixed-range ablation (a Runner table of "vs epsilon" and "fixed range" runs): per method and ε (per weight
    per round) at the ablation's ε values, the final test accuracy (%) with the adaptive range (recomputed from the
    global model each round) and with the range fixed at the initial model's, as mean [95 % t interval] over seeds with
    diverged runs counted (and the rounds they blew up), and the paired difference fixed − adaptive."""
    t = _series(runs)
    fixed = t[t["server"] == "fixed"]
    rows = []
    for (m, e), g in fixed.groupby(["method", "eps"], sort=False):
        ad = t[(t["server"] == "plain") & (t["method"] == m) & (t["eps"] == e) & t["seed"].isin(g["seed"])]
        by_seed = lambda h: pd.Series(h["accuracy"].to_numpy(float), index=h["seed"].to_numpy())  # noqa: E731
        blown = lambda h: ", ".join(str(r) for r in h.loc[h["diverged"].astype(bool), "last_round"]) or "-"  # noqa: E731
        rows.append({"method": _NAMES[m], "ε": f"{e:g}", "adaptive range (%)": interval_cell(by_seed(ad)),
                     "diverged at round": blown(ad), "fixed range (%)": interval_cell(by_seed(g)),
                     "diverged at round ": blown(g), "fixed − adaptive (points)": paired_cell(by_seed(g), by_seed(ad))})
    return pd.DataFrame(rows)


#: The ε values (per weight per round) the chapter's summary quotes, the paper's grid.
SUMMARY_EPSILONS = (0.1, 0.3, 1.0, 3.0)


def key_numbers(runs: pd.DataFrame) -> dict[str, str]:
    """Sentences' numbers for the chapter's summary from an ε sweep (:func:`epsilon_table` and
    :func:`range_ablation_table` of ``runs``), one string per key, "(not run)" where the sweep lacks it, so that every
    key exists at any parameters: ``plain_<e>`` and ``tuned_<e>`` per ε of :data:`SUMMARY_EPSILONS` (``<e>`` with "_"
    for "."), ``fedavg``, ``ablation``, ``fixed`` (the fixed-range runs alone)."""
    table = epsilon_table(runs)
    rows = {r["ε"]: r for _, r in table.iterrows()} if len(table) else {}
    out = {}
    for e in SUMMARY_EPSILONS:
        k, r = f"{e:g}".replace(".", "_"), rows.get(f"{e:g}")
        if r is None:
            out[f"plain_{k}"] = out[f"tuned_{k}"] = "(not run)"
            continue
        gap = lambda d: f", CoQ-FL − LDP-FL {d} points" if d[:1] in "+-" and d[1:2].isdigit() else ""  # noqa: E731
        lam = lambda m: f" (λ = {r[m + ' λ']})" if r[m + " λ"] != "-" else ""  # noqa: E731
        out[f"plain_{k}"] = (f"LDP-FL {r['LDP-FL plain (%)']}, CoQ-FL {r['CoQ-FL plain (%)']}"
                             + gap(r["CoQ − LDP, plain (points)"]))
        out[f"tuned_{k}"] = (f"LDP-FL {r['LDP-FL tuned (%)']}{lam('LDP-FL')}, CoQ-FL {r['CoQ-FL tuned (%)']}"
                             f"{lam('CoQ-FL')}" + gap(r["CoQ − LDP, tuned (points)"]))
    fed = rows.get("none (FedAvg)")
    out["fedavg"] = "(not run)" if fed is None else fed["LDP-FL plain (%)"]
    abl = range_ablation_table(runs)
    said = lambda cell, rounds: (f"{cell}, none diverged" if rounds == "-" else  # noqa: E731
                                 f"{cell}, at round{'s' if ',' in rounds else ''} {rounds}")
    several = abl["ε"].nunique() > 1 if len(abl) else False
    out["fixed"] = ", ".join(f"{r['method']} {r['fixed range (%)']}" + (f" at ε = {r['ε']}" if several else "")
                             for _, r in abl.iterrows()) if len(abl) else "(not run)"
    out["ablation"] = "; ".join(
        f"{r['method']} at ε = {r['ε']}, adaptive range {said(r['adaptive range (%)'], r['diverged at round'])}, "
        f"fixed range {said(r['fixed range (%)'], r['diverged at round '])}"
        for _, r in abl.iterrows()) if len(abl) else "(not run)"
    return out


#: Shorter shown names of the tables' columns (:func:`ldptut.display.table`'s ``headers``).
COMPARE_HEADERS = {"ε composed per client (basic)": "ε per client, composed (basic)"}
ABLATION_HEADERS = {"diverged at round": "adaptive: diverged at round", "diverged at round ": "fixed: diverged at round"}


def setting_words(p: Mapping[str, Any]) -> str:
    """"2,000 training images, 3 rounds, seed 0" from the chapter's parameters ``p`` (the notebook's names)."""
    seeds = list(p["seeds"])
    images = f"{p['n_train']:,}" if p.get("n_train") else "all"
    return (f"{images} training images, {p['rounds']} rounds, "
            f"seed{'s' if len(seeds) > 1 else ''} {', '.join(str(s) for s in seeds)}")


def runs_sentence(sweep: pd.DataFrame, p: Mapping[str, Any], *, epsilon: float = 1.0) -> str:
    """One sentence of final test accuracies (%) from :func:`epsilon_table`'s ``sweep`` with the plain mean, at
    ``epsilon`` per weight per round (else the sweep's first ε), with the setting (:func:`setting_words` of ``p``)."""
    rows = {r["ε"]: r for _, r in sweep.iterrows()} if len(sweep) else {}
    eps = [k for k in rows if k != "none (FedAvg)"]
    if not eps:
        return "(not run)"
    key = f"{epsilon:g}" if f"{epsilon:g}" in rows else eps[0]
    r = rows[key]
    fed = rows.get("none (FedAvg)")
    return (f"{setting_words(p)}, ε = {key} per weight per round: LDP-FL {r['LDP-FL plain (%)']}, "
            f"CoQ-FL {r['CoQ-FL plain (%)']}" + (f", FedAvg {fed['LDP-FL plain (%)']}" if fed is not None else ""))


def epsilon_tables(sweep: pd.DataFrame, *, what: str, first: int) -> list:
    """:func:`epsilon_table`'s ``sweep`` shown as two tables that fit the book's column (:func:`ldptut.display.table`):
    Table ``first`` with the plain mean (FedAvg's accuracy in its caption), Table ``first + 1`` with λ chosen on
    validation; ``what`` completes both captions ("after 3 rounds, mean [95 % CI] over seeds [0]")."""
    from ..display import table

    if not len(sweep):
        return []
    fed = sweep[sweep["ε"] == "none (FedAvg)"]
    body = sweep[sweep["ε"] != "none (FedAvg)"]
    fed_words = f"; FedAvg (no noise) {fed['LDP-FL plain (%)'].iloc[0]}" if len(fed) else ""
    plain = body[["ε", "LDP-FL plain (%)", "CoQ-FL plain (%)", "CoQ − LDP, plain (points)"]]
    tuned = body[["ε", "LDP-FL tuned (%)", "LDP-FL λ", "CoQ-FL tuned (%)", "CoQ-FL λ", "CoQ − LDP, tuned (points)"]]
    return [table(plain, caption=f"Table {first}. Test accuracy (%) {what}, plain mean (ε per weight per round)"
                                 + fed_words,
                  headers={"LDP-FL plain (%)": "LDP-FL (%)", "CoQ-FL plain (%)": "CoQ-FL (%)",
                           "CoQ − LDP, plain (points)": "CoQ − LDP (points)"}),
            table(tuned, caption=f"Table {first + 1}. Test accuracy (%) {what}, λ chosen on validation",
                  headers={"LDP-FL tuned (%)": "LDP-FL (%)", "CoQ-FL tuned (%)": "CoQ-FL (%)",
                           "CoQ − LDP, tuned (points)": "CoQ − LDP (points)"})]


def long_run_numbers(stored: pd.DataFrame, *, dataset: str = "mnist", epsilon: float = 1.0) -> dict[str, str]:
    """Sentences' numbers from the longest stored runs of ``dataset`` evaluated on the test set (``stored``:
    :func:`ldptut.runcache.load_runs`; the fixed-range ablation and the validation runs left out): ``setting`` (rounds,
    training images, seeds), ``tuned`` (each method's final test accuracy at ``epsilon`` per weight per round with the
    server smoothing λ, and FedAvg), ``plain`` (the plain mean: the round each method's run diverged at, or its
    accuracy). Averages over seeds where several are stored; "(not stored)" where the runs lack one."""
    none = {"setting": "(not stored)", "tuned": "(not stored)", "plain": "(not stored)"}
    if not len(stored):
        return none
    t = stored[(stored["dataset"] == dataset) & stored["validation"].isna()
               & ~stored["config"].map(_fixed_range)]
    if not len(t):
        return none
    t = t[t["rounds"] == t["rounds"].max()]
    t = t.assign(method=t["config"].map(lambda c: c.method))
    n_train = t["n_train"].dropna()
    out = {"setting": f"{int(t['rounds'].iloc[0])} rounds on "
                      + (f"{int(n_train.iloc[0]):,}" if len(n_train) else "all") + " training images, "
                      + f"{t['seed'].nunique()} seed{'s' if t['seed'].nunique() > 1 else ''}"}
    at = t[t["epsilon"] == epsilon]
    tuned, plain = [], []
    for m in ("coq_fl", "ldp_fl"):
        g = at[(at["method"] == m) & at["smoothing"].notna() & ~at["diverged"].astype(bool)]
        if len(g):
            lams = ", ".join(f"{v:g}" for v in sorted(set(g["smoothing"])))
            tuned.append(f"{_NAMES[m]} {g['accuracy'].mean():.1f} % (λ = {lams})")
        g = at[(at["method"] == m) & at["smoothing"].isna()]
        if len(g):
            gone = g[g["diverged"].astype(bool)]
            plain.append(f"{_NAMES[m]} diverged at round {', '.join(str(int(r)) for r in gone['last_round'])}"
                         if len(gone) else f"{_NAMES[m]} {g['accuracy'].mean():.1f} %")
    fed = t[t["method"] == "fedavg"]
    if len(fed):
        tuned.append(f"FedAvg {fed['accuracy'].mean():.1f} %")
    out["tuned"] = ", ".join(tuned) or "(not stored)"
    out["plain"] = ", ".join(plain) or "(not stored)"
    return out


def stored_grid(params: Mapping[str, Any], cache_dir: str) -> pd.DataFrame:
    """The runs of :func:`grid` and :func:`followup` at ``params`` that are stored in ``cache_dir``, as a records table
    with an ``experiment`` column (:func:`ldptut.runcache.stored_table`: nothing is trained; ``attrs["missing"]``
    counts the runs not stored)."""
    from ..runcache import RunCache, stored_table

    cache = RunCache(cache_dir)  # read only: nothing is trained here
    table = stored_table(grid(params), cache)
    missing = len(table.attrs["missing"])
    if len(table):
        extra = stored_table(followup(params, table), cache)
        missing += len(extra.attrs["missing"])
        table = pd.concat([table, extra], ignore_index=True) if len(extra) else table
    table.attrs["missing"] = missing
    return table


def _n_params(c: CorbinConfig) -> int:
    """d, the number of weights each client reports per round (one two-point report each)."""
    from ..data import IMAGE_SHAPES
    from ..models import build_model, count_parameters

    shape, k = IMAGE_SHAPES[c.dataset]
    return count_parameters(build_model(c.model, input_shape=shape, num_classes=k))


# ------------------------------------------------------------------------------------ the authors' code beside ours
#: The authors' public code (CorBin-FL), its method names for ours, and the MNIST command of its Experiments/*.sh.
AUTHORS_REPO = "github.com/solidlabnetwork/CorbinFL"
AUTHORS_METHODS = {"ldp_fl": "LDPFL", "coq_fl": "CorbinFL"}


def authors_code_rounds(repo: str, *, method: str, epsilon: float, rounds: int, seed: int = 0, lam: float = 0.2,
                        python: Optional[str] = None, timeout: float = 3600.0) -> pd.DataFrame:
    """Run the authors' code (a checkout of :data:`AUTHORS_REPO` at ``repo``, with MNIST's four IDX files under
    ``repo/data/MNIST/MNIST/raw``) for ``rounds`` rounds on the CPU at their MNIST setting (Experiments/MNIST_*.sh: 50
    IID clients, NumRand 5, Adam lr 1e-3, weight decay 3e-3, batch 64, smoothing λ = ``lam``) and return its
    per-round "Round", "Test Accuracy" (%) from the CSV it writes. ``method``: "ldp_fl" or "coq_fl" (their LDPFL,
    CorbinFL). Their code seeds its own generators (``--seed``); it imports GPUtil and ijson (stubs will do: no GPU,
    no FEMNIST)."""
    import glob
    import os
    import subprocess
    import sys

    if method not in AUTHORS_METHODS:
        raise ValueError(f"method must be one of {sorted(AUTHORS_METHODS)}, got {method!r}")
    _epsilon(epsilon)
    pos_int(rounds, "rounds")
    fraction(lam, "lam")
    if not os.path.isfile(os.path.join(repo, "main.py")):
        raise FileNotFoundError(f"{repo} has no main.py: give a checkout of {AUTHORS_REPO}")
    name = AUTHORS_METHODS[method]
    before = set(glob.glob(os.path.join(repo, "results", f"{name}_MNIST_*", "*.csv")))
    args = ["main.py", "--dataset", "MNIST", "--iid", "--method", name, "--device", "CPU", "--num_clients", "50",
            "--num_rounds", str(rounds), "--epsilon", f"{epsilon:g}", "--num_rand", "5", "--lambda_param", f"{lam:g}",
            "--seed", str(seed), "--lr", "0.001", "--weight_decay", "0.003"]
    # their main() ends with torch.cuda.reset_peak_memory_stats(), which raises without a GPU: a no-op here (it
    # only resets a memory counter); nothing else of their code is touched
    launcher = ("import runpy, sys, torch; torch.cuda.reset_peak_memory_stats = lambda *a, **k: None; "
                f"sys.argv = {args!r}; runpy.run_path('main.py', run_name='__main__')")
    done = subprocess.run([python or sys.executable, "-c", launcher], cwd=repo, capture_output=True, text=True,
                          timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"the authors' main.py failed ({done.returncode}): {done.stderr[-2000:]}")
    new = sorted(set(glob.glob(os.path.join(repo, "results", f"{name}_MNIST_*", "*.csv"))) - before)
    if len(new) != 1:
        raise RuntimeError(f"expected one new results CSV from the authors' code, found {new}")
    out = pd.read_csv(new[0])[["Round", "Test Accuracy"]]
    return out.assign(**{"Test Accuracy": out["Test Accuracy"].astype(float)})

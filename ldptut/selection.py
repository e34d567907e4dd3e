"""Private top-k dimension selection: FedSel's first stage (Liu, Cao, Yoshikawa, Chen, DASFAA 2020, Section 4.1).

A user holds a vector v in R^d and reports one index j in [d] (or, for PE, possibly nothing: ``EMPTY``),
chosen with eps1-LDP with respect to the *status* of v: its ranking by |v| (EXP) or its top-k indicator
(PE, PS). Each class is vectorised over users (rows of ``v``), draws from an explicit ``torch.Generator``,
and has its exact output distribution and exact privacy loss beside the sampler.

Ranks: z_j in {1, ..., d}, ascending in |v_j| (the largest |v_j| has rank d), ties broken by the index
(a stable sort), so the top-k set is {j : z_j > d - k}.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch
from torch import Tensor

from ._validate import epsilon as _epsilon, pos_int
from .mechanisms import RandomizedResponse

__all__ = ["EMPTY", "ranks", "top_k_status", "ExponentialSelection", "PerturbedEncoding", "PerturbedSampling"]

#: PE's report when its perturbed set is empty (the server reads a zero vector).
EMPTY = -1


def ranks(v: Tensor) -> Tensor:
    """z (int64, v's shape): the rank of |v_j| in its row, 1 (smallest) to d (largest), ties by index."""
    order = torch.argsort(v.abs(), dim=-1, stable=True)
    z = torch.empty_like(order)
    z.scatter_(-1, order, torch.arange(1, v.shape[-1] + 1, device=v.device).expand_as(order))
    return z


def top_k_status(v: Tensor, k: int) -> Tensor:
    """The top-k indicator (bool, v's shape): the k largest |v_j| of each row, ties by index as in
    :func:`ranks` (of equal |v_j| the later index ranks higher), i.e. ``ranks(v) > d - k``.

    Without a sort: the k-th largest |v| (``topk``) is the threshold; everything above it is in, and of the
    entries equal to it the last ``k - #above`` (counted from the right) are in."""
    a = v.abs()
    thr = a.topk(k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    above = a > thr
    tie = a == thr
    need = k - above.sum(-1, keepdim=True)
    from_right = tie.flip(-1).cumsum(-1).flip(-1)          # ties at index >= j
    return above | (tie & (from_right <= need))


def _uniform_pick(mask: Tensor, generator: Optional[torch.Generator]) -> Tensor:
    """One index per row, uniform over the row's True entries (EMPTY where a row has none): one uniform u
    per row, the r-th True entry with r = floor(u * count) (uniform up to the 2^-24 grid of float32 u)."""
    return _pick(mask, torch.rand(mask.shape[:-1] + (1,), generator=generator, device=mask.device))


def _pick(mask: Tensor, u: Tensor) -> Tensor:
    """:func:`_uniform_pick` with its uniforms given (u: one float32 per row, shape mask.shape[:-1] + (1,))."""
    count = mask.sum(-1, keepdim=True)
    r = torch.minimum((u * count).long(), (count - 1).clamp(min=0))
    j = torch.searchsorted(mask.cumsum(-1), r + 1).squeeze(-1)   # first position with r + 1 True entries
    return torch.where(count.squeeze(-1) > 0, j.clamp(max=mask.shape[-1] - 1), torch.full_like(j, EMPTY))


def _row_uniforms(generators: Sequence[torch.Generator], rows: int, dtype: torch.dtype, device: torch.device,
                  draws: int = 1) -> Tensor:
    """(rows, draws) uniforms, row i's from ``generators[i]``, drawn one at a time as a one-row :meth:`select` draws
    them (so a row's index does not depend on the other rows)."""
    if len(generators) != rows:
        raise ValueError(f"need one generator per row: {len(generators)} generators for {rows} rows")
    return torch.cat([torch.cat([torch.rand((1, 1), generator=g, dtype=dtype, device=device) for _ in range(draws)], 1)
                      for g in generators])


def _check_v(v: Tensor, k: int = 1) -> int:
    if not isinstance(v, Tensor) or not v.dtype.is_floating_point or v.dim() < 1:
        raise TypeError(f"v must be a floating-point tensor (users x d), got {type(v).__name__}")
    d = v.shape[-1]
    if d < 2 or not 1 <= k < d:
        raise ValueError(f"need d >= 2 and 1 <= k < d, got d = {d}, k = {k}")
    return d


class ExponentialSelection:
    """EXP (Section 4.1, Lemma 1): P[j] = exp(eps1 z_j / (d - 1)) / sum_i exp(eps1 z_i / (d - 1)).

    The ranks are a permutation of 1..d, so the denominator is the same for every v and the privacy loss
    is eps1 (d - 1) / (d - 1) = eps1 exactly (:meth:`privacy_loss`)."""

    def __init__(self, *, epsilon: float) -> None:
        self.epsilon = _epsilon(epsilon)

    def output_distribution(self, v: Tensor) -> Tensor:
        """P[j | v] (float64, v's shape)."""
        d = _check_v(v)
        return torch.softmax(self.epsilon * ranks(v).double() / (d - 1), dim=-1)

    def select(self, v: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """One index per row (int64), by the inverse CDF of one uniform per row."""
        cdf = self.output_distribution(v).cumsum(-1)
        u = torch.rand(cdf.shape[:-1] + (1,), generator=generator, dtype=torch.float64, device=v.device)
        return torch.searchsorted(cdf, u * cdf[..., -1:], right=True).clamp_(max=v.shape[-1] - 1).squeeze(-1)

    def select_rows(self, v: Tensor, generators: Sequence[torch.Generator]) -> Tensor:
        """:meth:`select` of row i with ``generators[i]`` (the same draw, so the same index), vectorised over the
        rows: each generator gives its row's uniform, one inverse-CDF step for all."""
        cdf = self.output_distribution(v).cumsum(-1)
        u = _row_uniforms(generators, v.shape[0], torch.float64, v.device)
        return torch.searchsorted(cdf, u * cdf[..., -1:], right=True).clamp_(max=v.shape[-1] - 1).squeeze(-1)

    def privacy_loss(self, d: int) -> float:
        """max over outputs j and inputs v, v' of ln P[j | v] / P[j | v'] (exact). Every v has the same
        denominator, so it is the log ratio of the most and the least likely rank: eps1 for every d >= 2."""
        p = self.output_distribution(torch.arange(1.0, pos_int(d, "d") + 1))
        return math.log(p.max() / p.min())


class PerturbedEncoding:
    """PE (Section 4.1, Lemma 2): flip each bit of the top-k indicator with randomized response
    (keep with p = e^eps1 / (e^eps1 + 1)), then report an index drawn uniformly from the set S of ones,
    or ``EMPTY`` if S is empty.

    The lemma's proof divides by the *expected* size of S; the true P[j | v] averages 1 / |S| over the
    random size, which depends on z_j, so the privacy loss (:meth:`privacy_loss`, exact) exceeds eps1."""

    def __init__(self, *, epsilon: float, k: int) -> None:
        self.epsilon = _epsilon(epsilon)
        self.k = pos_int(k, "k")
        self.flip = RandomizedResponse(epsilon=self.epsilon)  # the status bits' perturbation
        self.p = self.flip.p

    def _inclusion(self, d: int) -> tuple[float, float, float]:
        """(P[j | z_j = 1], P[j | z_j = 0], P[EMPTY]) exactly: P[j] = P[j in S] E[1 / (1 + |S \\ {j}|)],
        |S \\ {j}| the sum of Bin(#other top, p) and Bin(#other non-top, 1 - p)."""
        k, p = self.k, self.p

        def mean_inverse(n_top: int, n_rest: int) -> float:
            a = torch.distributions.Binomial(n_top, torch.tensor(p, dtype=torch.float64))
            b = torch.distributions.Binomial(n_rest, torch.tensor(1.0 - p, dtype=torch.float64))
            pa = a.log_prob(torch.arange(n_top + 1, dtype=torch.float64)).exp()
            pb = b.log_prob(torch.arange(n_rest + 1, dtype=torch.float64)).exp()
            joint = torch.outer(pa, pb)
            size = torch.arange(n_top + 1, dtype=torch.float64)[:, None] + torch.arange(n_rest + 1, dtype=torch.float64)
            return float((joint / (1.0 + size)).sum())

        top = p * mean_inverse(k - 1, d - k)
        rest = (1.0 - p) * mean_inverse(k, d - k - 1)
        empty = (1.0 - p) ** k * p ** (d - k)
        return top, rest, empty

    def output_distribution(self, v: Tensor) -> Tensor:
        """P[j | v] for j = 0..d-1, then P[EMPTY] (float64, shape (..., d + 1))."""
        d = _check_v(v, self.k)
        top, rest, empty = self._inclusion(d)
        z = top_k_status(v, self.k)
        probs = torch.where(z, torch.tensor(top, dtype=torch.float64), torch.tensor(rest, dtype=torch.float64))
        return torch.cat([probs.to(v.device), torch.full(z.shape[:-1] + (1,), empty, dtype=torch.float64, device=v.device)], -1)

    def select(self, v: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """One index per row (int64), ``EMPTY`` where the perturbed set is empty."""
        _check_v(v, self.k)
        return _uniform_pick(self.flip.privatize(top_k_status(v, self.k), generator), generator)

    def privacy_loss(self, d: int) -> float:
        """max ln P[out | v] / P[out | v'] over outputs and inputs (exact); EMPTY has the same probability
        for every v, so it is |ln P[j | z_j = 1] / P[j | z_j = 0]|. The lemma claims eps1."""
        top, rest, _ = self._inclusion(pos_int(d, "d"))
        return abs(math.log(top / rest))


class PerturbedSampling:
    """PS (Section 4.1, Lemma 3): with probability p = e^eps1 k / (d - k + e^eps1 k) report a uniform index of
    the top-k set, otherwise a uniform index of the other d - k: P[j | z_j = 1] / P[j | z_j = 0] = e^eps1
    exactly."""

    def __init__(self, *, epsilon: float, k: int) -> None:
        self.epsilon = _epsilon(epsilon)
        self.k = pos_int(k, "k")

    def p_top(self, d: int) -> float:
        e = math.exp(self.epsilon)
        return e * self.k / (d - self.k + e * self.k)

    def output_distribution(self, v: Tensor) -> Tensor:
        """P[j | v] (float64, v's shape)."""
        d = _check_v(v, self.k)
        p = self.p_top(d)
        z = top_k_status(v, self.k)
        f64 = dict(dtype=torch.float64, device=v.device)
        return torch.where(z, torch.tensor(p / self.k, **f64), torch.tensor((1.0 - p) / (d - self.k), **f64))

    def select(self, v: Tensor, generator: Optional[torch.Generator] = None) -> Tensor:
        """One index per row (int64): one uniform for the set, one for the pick inside it."""
        d = _check_v(v, self.k)
        z = top_k_status(v, self.k)
        in_top = torch.rand(z.shape[:-1] + (1,), generator=generator, device=v.device) < self.p_top(d)
        return _uniform_pick(z == in_top, generator)

    def select_rows(self, v: Tensor, generators: Sequence[torch.Generator]) -> Tensor:
        """:meth:`select` of row i with ``generators[i]`` (the same two draws, so the same index), vectorised over
        the rows."""
        d = _check_v(v, self.k)
        z = top_k_status(v, self.k)
        u = _row_uniforms(generators, v.shape[0], torch.float32, v.device, draws=2)
        in_top = u[:, :1] < self.p_top(d)
        return _pick(z == in_top, u[:, 1:])

    def privacy_loss(self, d: int) -> float:
        """Exact: ln (p / k) / ((1 - p) / (d - k)) = eps1."""
        p = self.p_top(pos_int(d, "d"))
        return math.log((p / self.k) / ((1.0 - p) / (d - self.k)))

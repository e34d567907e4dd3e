"""Correlated two-point pairs (CoQ-FL / CorBin-FL): two clients' reports drawn jointly from a shared codebook.
"""
from __future__ import annotations

import numbers
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from .._validate import real
from .base import Param, _to_input_dtype
from .two_point import TwoPoint


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

    #: A client's part in a pair: :meth:`privatize_as`'s ``role``.
    ROLES = ("leader", "follower", "alone")

    def privatize_as(self, x: Tensor, *, role: str, shared: Optional[torch.Generator],
                     own: Optional[torch.Generator]) -> Tensor:
        """One client's report drawn on that client alone, as in a federation where each client runs on its own
        machine and the two of a pair share only a seed (the cell rule of the class docstring, Algorithms 1-3).

        Both clients of a pair draw the same shared index K per coordinate from ``shared`` (a stream seeded alike on
        the two machines): the inverse-CDF cell of a float64 uniform (F[K] <= U < F[K+1]). Each adds its own coin V
        from ``own`` (float64) and compares its point F[K] + (F[K+1] - F[K]) V with its cut: the leader reports
        c + r a iff the point < P_L, the follower iff the point >= 1 - P_F. The pair's joint law is
        :meth:`joint_distribution`, as for :meth:`privatize_pairs` (which draws the leader's K and V_L as one uniform);
        each report alone is the two-point mechanism. ``role="alone"`` (the odd client of a round): the plain
        two-point mechanism with ``own`` (``shared`` unused). Points and cuts in float64 (the points lie on a grid
        of 2^-53 F-units, so the realised marginal differs from P by less than 1e-15). Returns the report in x's
        dtype and shape."""
        if role not in self.ROLES:
            raise ValueError(f"role must be one of {self.ROLES}, got {role!r}")
        if role == "alone":
            return self.privatize(x, generator=own)
        w = self._clipped_input(x)
        dev = w.device
        u = torch.rand(w.shape, generator=shared, dtype=torch.float64, device=dev)   # the pair's shared index
        v = torch.rand(w.shape, generator=own, dtype=torch.float64, device=dev)      # this client's own coin
        cdf = self.cdf.to(device=dev)
        k = torch.searchsorted(cdf[1:-1], u, right=True)
        point = v.mul_(cdf[k + 1] - cdf[k]).add_(cdf[k])                            # F[K] + (F[K+1] - F[K]) V
        p = self.prob_plus(w).to(dev)                                                # P (float64)
        up = point < p if role == "leader" else point >= 1.0 - p
        c, r = self._range(w)
        lo = c - r * self.a
        hi = lo + 2.0 * r * self.a  # the same float as TwoPoint's and privatize_pairs' upper point
        lo, hi = torch.as_tensor(lo, dtype=w.dtype, device=dev), torch.as_tensor(hi, dtype=w.dtype, device=dev)
        return _to_input_dtype(torch.where(up, hi, lo), x.dtype, self, exact=True)

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

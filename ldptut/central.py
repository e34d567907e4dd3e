"""Central DP-FedAvg, the trusted-server reference: clients clip their update, the server adds discrete Gaussian noise
to the sum on a fine grid, sampled exactly.

McMahan, Ramage, Talwar, Zhang (ICLR 2018), "Learning differentially private recurrent language models", Algorithm 1
(DP-FedAvg) with its fixed-denominator estimator: client k sends its update Δ_k clipped to L2 norm at most C
(:class:`ClipUpdate`), and the server releases the noisy sum over m, m the number of clients sampled in the round,
public (:class:`NoisyMean`).

**What is sampled.** Not ``torch.randn``: float noise does not realise the Gaussian law (Mironov, CCS 2012), and a
per-coordinate total-variation slack cannot be afforded over d ~ 1e5 coordinates and T rounds. :class:`NoisyMean`
works on the grid g Z^d, g = z C / σ_int (σ_int = :data:`SIGMA_INT` = 2^16, the noise's standard deviation in grid
units):

1. the server re-clips every row in float64 to L2 norm C (whatever a client sent: a row with a NaN or an inf counts
   as zero) and rounds each coordinate to the grid, q_k = round(clip(Δ_k) / g) ∈ Z^d;
2. it sums the q_k exactly (integers below 2^53, checked: no float summation error) and adds Z ∈ Z^d with
   independent coordinates Z_j ~ N_Z(0, σ_int²), the discrete Gaussian sampled exactly with integer arithmetic and
   exactly uniform integers (:func:`ldptut.discrete_gaussian.discrete_gaussian`; Canonne, Kamath, Steinke, NeurIPS
   2020, Algorithm 3);
3. it releases g (Σ_k q_k + Z) / m, computed in float64 and returned in the payloads' dtype: post-processing of the
   integer vector Σ_k q_k + Z, so the floats of this last step cost no privacy.

**Why the guarantee holds for what is sampled.** Adding or removing one client changes the integer vector Σ_k q_k by
one q_k, whose L2 norm is at most Δ = (C / g)(1 + η) + √d / 2 = σ_int (1 + η) / z + √d / 2
(:func:`central_sensitivity`): round-to-nearest moves each coordinate by at most 1/2, and η = (d + 16) 2^-53
(:func:`clip_slack`) bounds the float64 error of the server's clip and of the scaling by 1/g. The multivariate
discrete Gaussian with independent N_Z(0, σ_int²) coordinates added to an integer vector of L2 sensitivity Δ is
ρ-zCDP with ρ = Δ² / (2 σ_int²) (Canonne, Kamath, Steinke 2020, their theorem on the multivariate discrete Gaussian:
every Rényi divergence of order α is at most α Δ² / (2 σ_int²), the curve of the continuous Gaussian of noise
multiplier σ_int / Δ). Over T rounds zCDP adds up: ρ_T = T Δ² / (2 σ_int²) (:func:`central_rho`), per client,
user-level, add/remove-one-client neighbours, every round counted (valid for any client sampling; sampling only
amplifies, and the amplified bound is not computed here). The exact GDP / PLD composition of the continuous Gaussian
does **not** apply to the discrete one, so :func:`central_epsilon` converts ρ_T to (ε, δ) with the conversion of
dp-accounting's RDP accountant (:func:`zcdp_epsilon`; CKS 2020 Proposition 12, Asoodeh et al. 2021), minimised over
the order α.

**The price.** This is the ideal continuous Gaussian's zCDP with 1/z replaced by Δ / σ_int = (1 + η)/z +
√d / (2 σ_int): the grid adds √d g / (2 z C) = √d / (2 σ_int) to the inverse noise multiplier. For d = 1e5 that is
0.0024 (0.24 % of 1/z at z = 1): ρ grows by 0.48 %, and at z = 1, T = 50, δ = 1e-5 ε grows by 0.35 % (57.45 against
the ideal Gaussian's 57.25 through the same conversion; the ideal's exact GDP ε, which the discrete Gaussian cannot
claim, is 54.38). The noise's standard deviation per coordinate of the released mean is z C / m up to the discrete
Gaussian's (relative gap below 1e-15 at σ_int = 2^16, :meth:`NoisyMean.std`); rounding moves each client's
coordinate by at most g / 2, g = z C / 65536.

What it is not: local DP. The server sees each update in clear and must be trusted to add the noise; the guarantee is
about what the released model reveals.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ._validate import delta as _delta, pos_int, real
from .discrete_gaussian import discrete_gaussian, discrete_gaussian_variance
from .fl.context import RoundContext

__all__ = ["ClipUpdate", "NoisyMean", "SIGMA_INT", "clip_slack", "central_sensitivity", "central_rho",
           "zcdp_epsilon", "central_epsilon", "central_noise_multiplier", "NEIGHBOURS"]

SIGMA_INT = 2 ** 16
"""The server noise's standard deviation in grid units: N_Z(0, σ_int²) with σ_int² = t c, t = c = 2^16."""

_U = 2.0 ** -53          # float64's unit roundoff
_CLIP_RANGE = (2.0 ** -400, 2.0 ** 400)


class ClipUpdate:
    """A client's update scaled down to L2 norm at most ``clip`` (DP-FedAvg's clipping; no noise: the server adds it).

    Row i of the payloads (one client's update ``local - global``, ``send="updates"``) becomes
    Δ_i · min(1, clip / ‖Δ_i‖₂): its direction kept, its norm at most ``clip``. No local guarantee: the engine records
    the run as having none (the central guarantee is :func:`central_epsilon`'s)."""

    def __init__(self, *, clip: float):
        self.clip = real(clip, "clip", positive=True)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        if context.send != "updates":
            raise ValueError(f"ClipUpdate clips updates: the run must send updates (send='updates'), not {context.send!r}")
        norms = torch.linalg.vector_norm(payloads, dim=1, keepdim=True)
        return payloads * torch.clamp(self.clip / norms, max=1.0)  # a zero update: clip / 0 = inf -> 1, stays zero

    def guarantee(self, context: RoundContext) -> list[None]:
        """No local privacy: None for every client."""
        return [None] * len(context.client_ids)

    def __repr__(self) -> str:
        return f"ClipUpdate(clip={self.clip:g})"


class NoisyMean:
    """The server's DP-FedAvg step with exactly sampled discrete Gaussian noise: g (Σ_k round(clip(Δ_k) / g) + Z) / m.

    ``clip`` is C, the clients' clipping norm (:class:`ClipUpdate`; the server clips again, in float64, so the bound
    holds whatever was sent), ``noise_multiplier`` z; g = z C / σ_int is the grid step and Z ∈ Z^d has independent
    N_Z(0, σ_int²) coordinates (σ_int = :attr:`SIGMA_INT`), drawn from the round's server stream
    (``context.server_generator``), so a run is reproducible. z = 0: no noise, no grid, the mean of the re-clipped
    updates. The module docstring states the privacy argument (:func:`central_epsilon`)."""

    SIGMA_INT = SIGMA_INT

    def __init__(self, *, clip: float, noise_multiplier: float):
        self.clip = real(clip, "clip", positive=True)
        if not _CLIP_RANGE[0] <= self.clip <= _CLIP_RANGE[1]:
            raise ValueError(f"clip must be in [2^-400, 2^400] (the float64 error bound of the server's clip), "
                             f"got {clip!r}")
        self.noise_multiplier = real(noise_multiplier, "noise_multiplier", nonneg=True)
        if self.noise_multiplier > 0 and not 2.0 ** -1000 < self.grid <= 2.0 ** 1000:
            raise ValueError(f"noise_multiplier must make the grid step z C / 2^16 a normal float64 number, got "
                             f"noise_multiplier={noise_multiplier!r}, clip={clip!r}")

    @property
    def grid(self) -> float:
        """g = z C / σ_int, the grid step (float64; 0 when z = 0)."""
        return self.noise_multiplier * self.clip / self.SIGMA_INT

    def std(self, m: int) -> float:
        """Standard deviation of the noise on each coordinate of the released mean of m clients: g σ_Z / m, σ_Z² the
        discrete Gaussian's variance Σ k² P(Z = k) (float64,
        :func:`ldptut.discrete_gaussian.discrete_gaussian_variance`),
        equal to σ_int² to float64 precision, so the value is z C / m (0 when z = 0)."""
        m = pos_int(m, "m")
        if self.noise_multiplier == 0:
            return 0.0
        return self.grid * math.sqrt(discrete_gaussian_variance(float(self.SIGMA_INT))) / m

    def _scaled(self, payloads: torch.Tensor, scale: float) -> torch.Tensor:
        """The rows in float64 times min(1, C / n̂) · scale, n̂ = sqrt(Σ_j x_j²) computed in float64; a row whose n̂ is
        not finite (a NaN or an inf in it, or squares that overflow) becomes zero. A fresh tensor."""
        x = payloads.to(torch.float64, copy=True)
        norms = (x * x).sum(dim=1, keepdim=True).sqrt()
        bad = ~torch.isfinite(norms).view(-1)
        if bool(bad.any()):
            x[bad] = 0.0
            norms[bad] = 0.0
        return x.mul_(torch.clamp(self.clip / norms, max=1.0) * scale)   # a zero row: C / 0 = inf -> 1, stays zero

    def clipped(self, payloads: torch.Tensor) -> torch.Tensor:
        """The rows in float64 scaled to L2 norm at most C: x min(1, C / n̂), n̂ = sqrt(Σ_j x_j²) computed in float64
        (a row with a NaN or an inf becomes zero; a row whose squares overflow has n̂ = inf and becomes zero too)."""
        return self._scaled(payloads, 1.0)

    def _units(self, payloads: torch.Tensor) -> torch.Tensor:
        """round(x_j · h), h = fl(min(1, C / n̂) · fl(1 / g)), per row, float64 holding integers (m, d); checks that
        the m rows' sum stays below 2^53 in magnitude, so summing them in float64 is exact whatever the order."""
        if self.noise_multiplier == 0:
            raise ValueError("NoisyMean.quantized needs noise_multiplier > 0 (the grid step is z C / 2^16)")
        m, d = payloads.shape
        # each |q_kj| <= σ_int (1 + η) / z + 1/2
        if m * (self.SIGMA_INT * (1 + clip_slack(d)) / self.noise_multiplier + 1) >= 2 ** 53:
            raise ValueError(f"noise_multiplier={self.noise_multiplier!r} too small for m={m} clients: the integer "
                             f"sum m sigma_int / z would pass 2^53")
        return self._scaled(payloads, 1 / self.grid).round_()

    def quantized(self, payloads: torch.Tensor) -> torch.Tensor:
        """q_k = round(clip(x_k) / g) per row, int64 (m, d): the integer vectors whose exact sum the noise protects.
        Computed as round(x_j · h), h = fl(f · fl(1 / g)), f = fl(min(1, C / n̂)): the roundings :func:`clip_slack`
        counts."""
        return self._units(payloads).to(torch.int64)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
        m, d = payloads.shape
        if self.noise_multiplier == 0:
            return (self.clipped(payloads).sum(dim=0) / m).to(payloads.dtype), {}
        if context.server_generator is None:
            raise ValueError("NoisyMean needs the round's server generator (context.server_generator)")
        total = self._units(payloads).sum(dim=0).to(torch.int64)       # exact: integers below 2^53 in float64
        noise = discrete_gaussian(shape=d, generator=context.server_generator, device=payloads.device,
                                  t=self.SIGMA_INT, c=self.SIGMA_INT)  # σ² = t c = σ_int²
        released = (total + noise).to(torch.float64) * self.grid / m   # post-processing of total + noise
        return released.to(payloads.dtype), {}

    def __repr__(self) -> str:
        return f"NoisyMean(clip={self.clip:g}, noise_multiplier={self.noise_multiplier:g})"


def clip_slack(dimension: int) -> float:
    """η = (d + 16) 2^-53: the server's float64 clip and scaling by 1/g give a row of true L2 norm at most
    (C / g)(1 + η) in grid units. Derivation (u = 2^-53, any summation order, d u <= 0.01): the computed sum of
    squares is at least (1 - d u) ‖x‖² (d - 1 additions and one rounding per square, non-negative terms), n̂ at least
    (1 - u) sqrt of it, so ‖x‖ / n̂ <= 1 + (d/2 + 2) u; g = fl(z C) / 2^16, f = fl(C / n̂), fl(1 / g), their product
    h = fl(f fl(1 / g)) and the products fl(x_j h) add five roundings: 1 + (d/2 + 7) u + O(d² u²) <= 1 + (d + 16) u.
    Subnormal squares add at most d 2^-1075 absolutely, nothing against C² >= 2^-800 (:class:`NoisyMean` takes C in
    [2^-400, 2^400])."""
    d = pos_int(dimension, "dimension")
    if d * _U > 0.01:
        raise ValueError(f"dimension must be below 0.01 * 2^53, got {dimension!r}")
    return (d + 16) * _U


def central_sensitivity(*, noise_multiplier: float, dimension: int) -> float:
    """Δ, the L2 sensitivity of one round's integer sum Σ_k round(clip(Δ_k) / g) in grid units (add/remove one
    client): ‖round(clip(Δ_k) / g)‖₂ <= (C / g)(1 + η) + √d / 2 = σ_int (1 + η) / z + √d / 2 (rounding moves each of
    the d coordinates by at most 1/2; η = :func:`clip_slack`)."""
    z = real(noise_multiplier, "noise_multiplier", positive=True)
    d = pos_int(dimension, "dimension")
    return SIGMA_INT * (1 + clip_slack(d)) / z + math.sqrt(d) / 2


NEIGHBOURS = ("add_remove", "replace")


def central_rho(*, noise_multiplier: float, rounds: int, dimension: int, neighbours: str = "add_remove") -> float:
    """ρ of T rounds of :class:`NoisyMean` at noise multiplier z on d coordinates, per client over the training:
    ρ_T = T Δ² / (2 σ_int²), Δ = :func:`central_sensitivity` (each round ρ-zCDP by CKS 2020's multivariate discrete
    Gaussian theorem; zCDP composes by adding ρ). That is T ((1 + η)/z + √d / (2 σ_int))² / 2, the ideal continuous
    Gaussian's T / (2 z²) with 1/z raised by √d / (2 σ_int) + η / z.

    ``neighbours``: "add_remove" (one client's data present or absent, DP-FedAvg's relation) or "replace" (one
    client's data replaced by any other, the relation local DP's "any two inputs" bounds): a replacement changes the
    integer sum by q_k - q'_k, of norm at most 2 Δ, so ρ is four times the add/remove one."""
    from ._validate import one_of

    t = pos_int(rounds, "rounds")
    delta_int = central_sensitivity(noise_multiplier=noise_multiplier, dimension=dimension)
    if one_of(neighbours, "neighbours", NEIGHBOURS) == "replace":
        delta_int *= 2
    return t * (delta_int / SIGMA_INT) ** 2 / 2


def _conversion(alpha: np.ndarray, rho: float, log_inv_delta: float) -> np.ndarray:
    return alpha * rho + np.log1p(-1 / alpha) + (log_inv_delta - np.log(alpha)) / (alpha - 1)


def zcdp_epsilon(*, rho: float, delta: float) -> float:
    """ε at δ of a ρ-zCDP mechanism (Rényi divergence of order α at most α ρ for every α > 1), the conversion of
    dp-accounting's RDP accountant (Canonne, Kamath, Steinke 2020, Proposition 12; Asoodeh et al. 2021):

        ε = max(0, min_{α > 1} α ρ + log(1 - 1/α) + (log(1/δ) - log α) / (α - 1)),

    and ε = 0 when δ >= sqrt(1 - e^{-ρ}) (the KL bound, KL <= ρ, as dp-accounting). The minimum over α is found on
    a grid of 4001 orders, log(α - 1) evenly spaced in [-12, 30], refined by golden-section search between the best
    point's neighbours (relative precision about 1e-12; the result is the value at an actual α, so an upper bound)."""
    rho = real(rho, "rho", positive=True)
    dl = _delta(delta)
    if dl * dl + math.expm1(-rho) > 0:
        return 0.0
    L = -math.log(dl)
    logs = np.linspace(-12.0, 30.0, 4001)
    values = _conversion(1 + np.exp(logs), rho, L)
    i = int(np.argmin(values))
    lo, hi = logs[max(i - 1, 0)], logs[min(i + 1, len(logs) - 1)]
    phi = (math.sqrt(5) - 1) / 2

    def f(x: float) -> float:
        return float(_conversion(np.array([1 + math.exp(x)]), rho, L)[0])

    a, b = hi - phi * (hi - lo), lo + phi * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(80):
        if fa <= fb:
            hi, b, fb = b, a, fa
            a = hi - phi * (hi - lo)
            fa = f(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + phi * (hi - lo)
            fb = f(b)
    return max(0.0, min(float(values[i]), fa, fb))


def central_epsilon(*, noise_multiplier: float, rounds: int, delta: float, dimension: int,
                    neighbours: str = "add_remove") -> float:
    """ε at ``delta`` of T rounds of :class:`NoisyMean` at noise multiplier z on a model of d coordinates, **per
    client over the whole training** (user-level; ``neighbours`` add/remove one client, or replace one client's data
    as local DP does, :func:`central_rho`; every round counted, so valid for any client sampling): :func:`zcdp_epsilon`
    of ρ_T = :func:`central_rho`. Holds for the noise the code samples (exact discrete Gaussian on the grid); it is
    the ideal continuous Gaussian's RDP ε with 1/z raised by √d / (2 σ_int) + η / z."""
    return zcdp_epsilon(rho=central_rho(noise_multiplier=noise_multiplier, rounds=rounds, dimension=dimension,
                                        neighbours=neighbours), delta=delta)


def central_noise_multiplier(*, epsilon: float, rounds: int, delta: float, dimension: int,
                             neighbours: str = "add_remove") -> float:
    """The smallest noise multiplier z (to a relative 1e-9, rounded up) whose :func:`central_epsilon` is at most
    ``epsilon`` (per client over the training, at ``delta``): bisection on log z, ε falling as z grows. ``ValueError``
    when even z = 1e6 does not reach it, or when z = 1e-6 already does (then the noise is negligible: say so rather
    than calibrate)."""
    from ._validate import epsilon as _eps

    target = _eps(epsilon)
    kw = dict(rounds=rounds, delta=delta, dimension=dimension, neighbours=neighbours)
    lo, hi = 1e-6, 1e6
    if central_epsilon(noise_multiplier=hi, **kw) > target:
        raise ValueError(f"epsilon={epsilon!r} is below what z = 1e6 gives; no noise multiplier reaches it")
    if central_epsilon(noise_multiplier=lo, **kw) <= target:
        raise ValueError(f"epsilon={epsilon!r} is reached with z = 1e-6 already: the noise would be negligible")
    while hi / lo > 1 + 1e-9:
        mid = math.sqrt(lo * hi)
        if central_epsilon(noise_multiplier=mid, **kw) <= target:
            hi = mid
        else:
            lo = mid
    return hi

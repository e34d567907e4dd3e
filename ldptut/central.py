"""Central DP-FedAvg, the trusted-server reference: clients clip their update, the server adds Gaussian noise to the sum.

McMahan, Ramage, Talwar, Zhang (ICLR 2018), "Learning differentially private recurrent language models", Algorithm 1
(DP-FedAvg) with its fixed-denominator estimator: client k sends its update Δ_k clipped to L2 norm at most C
(:class:`ClipUpdate`), and the server releases

    Δ = (Σ_k clip(Δ_k) + N(0, (z C)² I_d)) / m,

m the number of clients sampled in the round, public (:class:`NoisyMean`). Adding or removing one client changes the
sum by at most C in L2 norm, so each round is the Gaussian mechanism with noise multiplier z: μ-GDP with μ = 1/z
(Dong, Roth, Su 2022), per client, at the level of a whole client's data (user-level), against add/remove-one-client
neighbours. Over T rounds, μ = √T / z; :func:`central_epsilon` turns that into ε at δ exactly
(:func:`ldptut.accounting.gaussian_epsilon`). The bound counts every round for every client, so it holds whatever
fraction of the clients a round samples (sampling only amplifies; the amplified bound is not computed here).

What it is not: local DP. The server sees each clipped update in clear and must be trusted to add the noise; the
guarantee is about what the released model reveals. The noise here is torch's float Gaussian (``torch.randn``), the
textbook sampler, whose realised law is not exactly the Gaussian (the Foundations chapter shows reports the float
noise rules out); ε is the ideal law's, as for every central DP library that samples this way.
"""
from __future__ import annotations

import math

import torch

from ._validate import pos_int, real
from .accounting import gaussian_epsilon
from .fl.context import RoundContext

__all__ = ["ClipUpdate", "NoisyMean", "central_mu", "central_epsilon"]


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
    """The server's DP-FedAvg step: (sum of the m clipped updates + N(0, (z C)² I_d)) / m.

    ``clip`` is C, the clients' clipping norm (:class:`ClipUpdate`), ``noise_multiplier`` z (z = 0: no noise, the mean
    of the clipped updates). The noise comes from the round's server stream (``context.server_generator``), so a run is
    reproducible. Per coordinate the released mean has noise standard deviation z C / m."""

    def __init__(self, *, clip: float, noise_multiplier: float):
        self.clip = real(clip, "clip", positive=True)
        self.noise_multiplier = real(noise_multiplier, "noise_multiplier", nonneg=True)

    def std(self, m: int) -> float:
        """Standard deviation of the noise on each coordinate of the released mean of m clients: z C / m."""
        return self.noise_multiplier * self.clip / m

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
        m, d = payloads.shape
        total = payloads.sum(dim=0)
        if self.noise_multiplier > 0:
            if context.server_generator is None:
                raise ValueError("NoisyMean needs the round's server generator (context.server_generator)")
            noise = torch.randn(d, generator=context.server_generator, device=payloads.device, dtype=payloads.dtype)
            total = total + noise * (self.noise_multiplier * self.clip)
        return total / m, {}

    def __repr__(self) -> str:
        return f"NoisyMean(clip={self.clip:g}, noise_multiplier={self.noise_multiplier:g})"


def central_mu(*, noise_multiplier: float, rounds: int) -> float:
    """μ of T rounds of DP-FedAvg at noise multiplier z, per client over the training: √T / z (each round 1/z-GDP,
    composed exactly: Dong, Roth, Su 2022, Corollary 3.3)."""
    return math.sqrt(pos_int(rounds, "rounds")) / real(noise_multiplier, "noise_multiplier", positive=True)


def central_epsilon(*, noise_multiplier: float, rounds: int, delta: float) -> float:
    """ε at ``delta`` of T rounds of DP-FedAvg at noise multiplier z, **per client over the whole training**
    (user-level, add/remove-one-client neighbours; every round counted, so valid for any client sampling): the exact
    ε of a √T / z-GDP mechanism (:func:`ldptut.accounting.gaussian_epsilon`)."""
    return gaussian_epsilon(delta, central_mu(noise_multiplier=noise_multiplier, rounds=rounds))

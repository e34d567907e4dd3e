"""Server rules: the plain and the sample-weighted mean of the privatized vectors, by name; the rules of the papers
(Wu et al.'s weighting by 1/σ, probability-based selection and sign; CorBin-FL's smoothing), usable with any
privatizer."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .._validate import fraction, one_of, real
from .context import Aggregator, RoundContext


def mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
    """Arithmetic mean of the clients' vectors (LDP-FL Algorithm 1, line "average")."""
    return payloads.mean(dim=0), {}


def weighted_mean_aggregator(payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
    """FedAvg's mean weighted by the clients' sample counts n_i / sum n_j (McMahan et al. 2017)."""
    w = context.num_samples.to(payloads.dtype)
    return (w / w.sum()) @ payloads, {}


AGGREGATORS: dict[str, Aggregator] = {"mean": mean_aggregator, "weighted_mean": weighted_mean_aggregator}


def make_aggregator(agg: str | Aggregator) -> Aggregator:
    if callable(agg):
        return agg
    if agg not in AGGREGATORS:
        raise ValueError(f"unknown aggregator {agg!r}; known: {sorted(AGGREGATORS)} or pass a callable")
    return AGGREGATORS[agg]


# ------------------------------------------------------------------- weighting by the clients' noise (Wu et al. 2023)
#: What :class:`ProbabilitySelection` does when no client passes: keep the global model, or average all clients.
ON_EMPTY = ("keep", "all")
#: Readings of aggregation C (:class:`ProbabilitySelection`): normalisation of P_i / how the server draws.
C_READINGS = ("sum/round", "max/round", "sum/client", "max/client")


def _rho(sigmas: Sequence[float]) -> torch.Tensor:
    s = torch.as_tensor([real(v, "sigma", positive=True) for v in sigmas], dtype=torch.float64)
    if s.numel() == 0:
        raise ValueError("sigmas must hold one value per client")
    return 1.0 / s


def inverse_sigma_weights(sigmas: Sequence[float]) -> torch.Tensor:
    """α_i = ρ_i / Σ_j ρ_j with ρ_i = 1/σ_i (Wu et al. Section 4.1); sums to one."""
    rho = _rho(sigmas)
    return rho / rho.sum()


def selection_probabilities(sigmas: Sequence[float]) -> torch.Tensor:
    """P_i = ρ_i / Σ_j ρ_j (Wu et al. Section 4.2): the same numbers as the weights of B."""
    return inverse_sigma_weights(sigmas)


class WeightedBySigma:
    """B: weighted mean Σ α_i G̃_i / Σ α_i, α_i ∝ 1/σ_i (Wu et al. Section 4.1), over the clients of the round.

    ``sigmas`` holds σ_i for every client id (public: derived from the public ε_i).
    """

    def __init__(self, sigmas: Sequence[float]):
        self.rho = _rho(sigmas)

    def weights(self, client_ids: torch.Tensor) -> torch.Tensor:
        r = self.rho[client_ids.cpu()]
        return r / r.sum()

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
        return self.weights(context.client_ids).to(payloads) @ payloads, {}

    def __repr__(self) -> str:
        return f"WeightedBySigma(n={self.rho.numel()})"


class ProbabilitySelection:
    """C: probability-based selection (Wu et al. Section 4.2), in one of the readings of :data:`C_READINGS`.

    The paper: "P_i = ρ_i / Σ_j ρ_j" (the operators partly lost in our text) with "0 < P_i <= 1", computed once
    before training; each round the server draws ω ~ U(0, 1) and keeps the clients with P_i > ω. ``reading``
    is "<normalisation>/<draw>":

    * normalisation "sum" (adopted, the formula as printed): P_i = ρ_i / Σ_j ρ_j, so the P_i sum to one and
      often **no client passes** (probability 1 - max_i P_i per round); "max": P_i = ρ_i / max_j ρ_j, so the
      least noisy client has P_i = 1 (the only way the stated P_i <= 1 is reached with several clients) and
      always passes;
    * draw "round" (adopted, as printed): one ω per round from ``context.server_generator``, keep P_i > ω (the
      kept set is always the clients above a threshold); "client": each client kept on its own draw with
      probability P_i.

    When no client passes, ``on_empty`` decides (the paper does not say): ``"keep"`` (default) keeps the
    previous global model (the round is skipped), ``"all"`` averages all clients (falls back to A). The
    metrics report ``clients_used``, how many clients were kept.
    """

    def __init__(self, sigmas: Sequence[float], *, on_empty: str = "keep", reading: str = "sum/round"):
        self.reading = one_of(reading, "reading", C_READINGS)
        self.normalise, self.draw = self.reading.split("/")
        rho = _rho(sigmas)
        self.probabilities = rho / (rho.sum() if self.normalise == "sum" else rho.max())
        self.on_empty = one_of(on_empty, "on_empty", ON_EMPTY)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
        g = context.server_generator
        if g is None:
            raise ValueError("ProbabilitySelection needs context.server_generator (the server's ω draw)")
        p = self.probabilities[context.client_ids.cpu()]
        if self.draw == "round":
            omega = torch.rand((), generator=g, dtype=torch.float64, device=g.device).item()
            keep = p > omega
        else:  # one draw per client
            keep = torch.rand(p.shape, generator=g, dtype=torch.float64, device=g.device).cpu() < p
        used = {"clients_used": int(keep.sum())}
        if not bool(keep.any()):
            if self.on_empty == "keep":
                return context.global_vector.to(payloads).clone(), used
            return payloads.mean(dim=0), used
        return payloads[keep.to(payloads.device)].mean(dim=0), used

    def __repr__(self) -> str:
        return (f"ProbabilitySelection(n={self.probabilities.numel()}, on_empty={self.on_empty!r}, "
                f"reading={self.reading!r})")


class SignOf:
    """Server rule η sign(f(G̃_1, ..., G̃_N)); sign(0) = 0. With η = 1 on weights, Wu et al.'s non-IID rule
    W = sign(f(...)) (Section 3.2, Algorithm 2 line 7); on updates with a step η, signSGD's majority vote (Bernstein
    et al. 2018; Jin et al. 2020's stochastic sign): the global model moves by η in the sign of the aggregate."""

    def __init__(self, aggregator: Any, *, step: float = 1.0):
        self.aggregator = aggregator
        self.step = real(step, "step", positive=True)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
        vec, metrics = self.aggregator(payloads, context=context)
        out = torch.sign(vec)
        return (out if self.step == 1.0 else out.mul_(self.step)), metrics

    def __repr__(self) -> str:
        return f"SignOf({self.aggregator!r}" + ("" if self.step == 1.0 else f", step={self.step:g}") + ")"


# ------------------------------------------------------------------- smoothing (CorBin-FL, authors' code)
@dataclass(frozen=True)
class SmoothedMean:
    """CorBin-FL's server smoothing (authors' code): W <- (1 - λ) W + λ mean(W_i*). λ = 1 is the plain mean.
    The authors tuned λ on test accuracy; here it is an explicit option, tuned on a validation split."""

    lam: float

    def __post_init__(self) -> None:
        fraction(self.lam, "smoothing λ")

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> tuple[torch.Tensor, dict]:
        if context.send != "weights":
            raise ValueError("SmoothedMean mixes weights; use send='weights'")
        return (1.0 - self.lam) * context.global_vector + self.lam * payloads.mean(dim=0), {}

"""Client-side privatizers: the book's mechanisms applied per coordinate within a range rule, clipping alone, correlated
client pairs, a recorder of what clients send, one mechanism per client (personalized budgets, Wu et al. 2023) and
Piecewise on weights scaled by the client's own maximum (PD-LDPFL's Algorithm 2).
"""
from __future__ import annotations

import dataclasses
from dataclasses import replace
from typing import Callable, Optional, Sequence

import torch

from .._validate import epsilon as _epsilon, one_of, real
from ..accounting import Guarantee
from ..mechanisms import Mechanism, Piecewise
from ..rng import round_generator
from .context import Privatizer, RoundContext
from .ranges import FixedRange


class LocalPerturbation:
    """Clip each client's vector to a range and perturb every coordinate with an LDP mechanism.

    ``mechanism`` is a class from :mod:`ldptut.mechanisms` taking ``epsilon``, ``center``, ``radius``
    (e.g. ``TwoPoint``, ``Piecewise``, ``Laplace``). :meth:`guarantee` is the mechanism's, ``epsilon``
    per coordinate per round; the engine composes it over the d coordinates and the rounds.
    """

    def __init__(self, *, mechanism: type, epsilon: float, range: Callable[[RoundContext], tuple] = FixedRange(),
                 **mechanism_kwargs):
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.range = range
        self.mechanism_kwargs = mechanism_kwargs
        # Validate epsilon and kwargs now, with a unit range, so a bad parameter fails before training.
        self._unit = mechanism(epsilon=epsilon, center=0.0, radius=1.0, **mechanism_kwargs)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        center, radius = self.range(context)
        mech = self.mechanism(epsilon=self.epsilon, center=center, radius=radius, **self.mechanism_kwargs)
        # row i with client i's own generator (the mechanism decides between its fused CUDA kernel and PyTorch)
        return mech.privatize_rows(payloads, context.generators)

    def guarantee(self, context: RoundContext) -> list[Guarantee]:
        """The mechanism's guarantee (per coordinate per round) for every sampled client."""
        return [self._unit.guarantee] * len(context.client_ids)

    def __repr__(self) -> str:
        return f"LocalPerturbation({self.mechanism.__name__}, epsilon={self.epsilon}, range={self.range})"


class ClipToRange:
    """Clip each client's vector to a range and send it without noise: **not private** (no guarantee).

    The ablation that separates clipping from noise (e.g. LDP-FL's fixed range with the two-point mechanism
    removed): the server receives exactly what :class:`LocalPerturbation` clips, unperturbed.
    """

    def __init__(self, *, range: Callable[[RoundContext], tuple] = FixedRange()):
        self.range = range

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        center, radius = self.range(context)
        lo, hi = center - radius, center + radius
        if isinstance(lo, torch.Tensor) or isinstance(hi, torch.Tensor):
            lo, hi = (torch.as_tensor(v, dtype=payloads.dtype, device=payloads.device) for v in (lo, hi))
        return torch.clamp(payloads, lo, hi)

    def guarantee(self, context: RoundContext) -> list[None]:
        """No privacy: None for every client (the engine records the run as unprotected)."""
        return [None] * len(context.client_ids)

    def __repr__(self) -> str:
        return f"ClipToRange(range={self.range})"


def pair_rows(m: int, *, seed: int, round: int) -> tuple[torch.Tensor, torch.Tensor, Optional[int]]:
    """The round's random pairing of m clients (rows in client-id order): (leader rows, follower rows, the odd row or
    None), from a permutation of the server's "pairing" stream, pair k = (perm[2k], perm[2k + 1]). The engine's
    :class:`PairedPerturbation` and a federation's server (``ldptut.flower.assign_pairs``) pair alike."""
    perm = torch.randperm(m, generator=round_generator(seed, round, "pairing"))
    k = m // 2
    return perm[0:2 * k:2], perm[1:2 * k:2], (int(perm[-1]) if m % 2 else None)


class PairedPerturbation:
    """Clip to a range and perturb with LDP-FL's two-point mechanism, the sampled clients paired at random
    each round and each pair negatively correlated (CoQ-FL / CorBin-FL, Algorithm 1).

    The server pairs the round's clients by a random permutation (its "pairing" stream, on the CPU so
    the pairs do not depend on the device); in each pair the first is the leader, the second the
    follower of :class:`~ldptut.mechanisms.CorrelatedTwoPoint`. An odd client out uses the plain
    two-point mechanism with its own "privatize" stream. Two uniforms per pair and weight, as for two
    independent clients: the leaders' points (the shared codebook cell and the leader's coin in it, one
    uniform: the same law) in one call from the round's "pair-shared" stream (row k belongs to pair k
    alone; in a deployment the two clients derive the cell from a seed they share,
    :meth:`RoundContext.pair_generator`), the followers' own coins in one call from "pair-local": no
    Python loop over pairs or weights.

    :meth:`guarantee`: ε per coordinate per round for each client's **own** report (its marginal is
    exactly the two-point mechanism). The server also sees the partner's report; that joint view is
    not ε-LDP for either client (the CorBin chapter computes its privacy loss).
    """

    def __init__(self, *, epsilon: float, range: Callable[[RoundContext], tuple] = FixedRange(),
                 num_rand: int = 5, p_x: float = 0.5):
        from ..mechanisms import CorrelatedTwoPoint

        self.epsilon, self.range, self.num_rand, self.p_x = epsilon, range, num_rand, p_x
        self._unit = CorrelatedTwoPoint(epsilon=epsilon, num_rand=num_rand, p_x=p_x)  # validates now

    def mechanism(self, context: RoundContext):
        from ..mechanisms import CorrelatedTwoPoint

        center, radius = self.range(context)
        return CorrelatedTwoPoint(epsilon=self.epsilon, center=center, radius=radius, num_rand=self.num_rand,
                                  p_x=self.p_x)

    @staticmethod
    def pairs(context: RoundContext) -> tuple[torch.Tensor, torch.Tensor, Optional[int]]:
        """(leader rows, follower rows, the odd row or None): rows of this round's payloads, paired at random
        (:func:`pair_rows`)."""
        return pair_rows(len(context.client_ids), seed=context.seed, round=context.round)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        mech = self.mechanism(context)
        leaders, followers, odd = self.pairs(context)
        leaders, followers = leaders.to(payloads.device), followers.to(payloads.device)
        out = torch.empty_like(payloads)
        if len(leaders):
            dev = context.device
            shared = round_generator(context.seed, context.round, "pair-shared", device=dev)
            local = round_generator(context.seed, context.round, "pair-local", device=dev)
            out[leaders], out[followers] = mech.privatize_pairs(payloads[leaders], payloads[followers],
                                                                shared=shared, local=local)
        if odd is not None:
            out[odd] = mech.privatize(payloads[odd], generator=context.generators[odd])
        return out

    def privatize_client(self, payload: torch.Tensor, *, context: RoundContext, role: str,
                         shared: Optional[torch.Generator]) -> torch.Tensor:
        """One client's report drawn on that client alone (a federation, ``ldptut.flower``): ``context`` holds this
        client only (its own stream ``context.generators[0]``), ``role`` is its part in its pair ("leader",
        "follower", or "alone" for the odd client) and ``shared`` the stream of the seed the pair shares
        (:meth:`~ldptut.mechanisms.CorrelatedTwoPoint.privatize_as`). The pair's reports have the law of
        :meth:`__call__`'s, not its numbers."""
        if len(context.client_ids) != 1:
            raise ValueError(f"privatize_client draws one client's report; the context holds "
                             f"{len(context.client_ids)} clients")
        return self.mechanism(context).privatize_as(payload, role=role, shared=shared, own=context.generators[0])

    def guarantee(self, context: RoundContext) -> list[Guarantee]:
        """Each client's own report: ε per coordinate per round (the joint view of a pair is not covered)."""
        g = replace(self._unit.guarantee, note="each client's own report (a pair's joint view is not ε-LDP)")
        return [g] * len(context.client_ids)

    def __repr__(self) -> str:
        return (f"PairedPerturbation(CorrelatedTwoPoint, epsilon={self.epsilon}, range={self.range}, "
                f"num_rand={self.num_rand}, p_x={self.p_x})")


class RecordPayloads:
    """Wrap a privatizer (or none) and keep the last round's payloads before and after it, for inspection.

    Used by chapters to look at what clients send (e.g. a client's own weights in the range-leak check).
    """

    def __init__(self, privatizer: Privatizer | None = None):
        self.privatizer = privatizer
        self.raw: torch.Tensor | None = None
        self.sent: torch.Tensor | None = None
        self.context: RoundContext | None = None

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        self.raw, self.context = payloads.detach().clone(), context
        out = payloads if self.privatizer is None else self.privatizer(payloads, context=context)
        self.sent = out.detach().clone()
        return out

    def guarantee(self, context: RoundContext) -> Optional[list]:
        inner = getattr(self.privatizer, "guarantee", None)
        return None if inner is None else inner(context)

    def __repr__(self) -> str:
        return f"RecordPayloads({self.privatizer!r})"


# ------------------------------------------------------------------- one mechanism per client (Wu et al. 2023)
class PersonalizedPerturbation:
    """Client-side privatizer with one mechanism per client id (personalized ε_i); ``None`` = no noise.

    Every payload is clipped to [-clip, clip] first (Algorithm 1), then row i (client
    ``context.client_ids[i]``) goes through ``mechanisms[id]`` with ``context.generators[i]``. With ``sign``
    (non-IID protocol, Algorithm 2) a client without a mechanism sends sign(G). :meth:`guarantee` is each
    client's mechanism's (per coordinate per round; None for a client without noise).
    """

    def __init__(self, mechanisms: Sequence[Optional[Mechanism]], *, clip: float, sign: bool = False):
        self.mechanisms = list(mechanisms)
        self.clip = real(clip, "clip", positive=True)
        self.sign = bool(sign)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        clipped = payloads.clamp(-self.clip, self.clip)
        out = clipped.clone()
        for row, (cid, g) in enumerate(zip(context.client_ids.tolist(), context.generators)):
            mech = self.mechanisms[cid]
            if mech is not None:
                out[row] = mech.privatize(clipped[row], generator=g)
            elif self.sign:
                out[row] = torch.sign(clipped[row])
        return out

    def guarantee(self, context: RoundContext) -> list[Optional[Guarantee]]:
        return [None if self.mechanisms[c] is None else self.mechanisms[c].guarantee for c in context.client_ids.tolist()]

    def __repr__(self) -> str:
        return f"PersonalizedPerturbation({len(self.mechanisms)} clients, clip={self.clip:g}, sign={self.sign})"


# ------------------------------------------------------------------- PD-LDPFL's Algorithm 2 (Wang et al. 2024)
#: How a client scales a tensor before PM: the paper's max(θ), max|θ| (no value outside [-1, 1]), per tensor.
SCALINGS = ("max", "max_abs")


class LayerScaledPiecewise:
    """Algorithm 2 (DataPerturbation) as a privatizer: per client and parameter tensor, t = max(w) (``scaling``
    "max", the paper's) or max|w| ("max_abs"), PM with ε per weight on w / t (clipped to [-1, 1]: with t = max(w)
    a negative weight below -t lies outside), the report times t.

    The paper's text takes t over the whole model; the authors' code per layer; ``scope`` picks ("tensor",
    "model"). t is computed from the client's own weights and never made public, so the report is **not**
    ε-LDP: its support [-C t, C t] reveals t (``ldptut.attacks.recover_piecewise_scale``). :meth:`guarantee` states
    the per-weight ε PM would give with a public t, with that caveat in its note."""

    def __init__(self, *, epsilon: float, scaling: str = "max", scope: str = "tensor") -> None:
        self.epsilon = _epsilon(epsilon)
        self.scaling = one_of(scaling, "scaling", SCALINGS)
        self.scope = one_of(scope, "scope", ("tensor", "model"))
        self._unit = Piecewise(epsilon=self.epsilon)

    def scales(self, payloads: torch.Tensor, context: RoundContext) -> torch.Tensor:
        """t per client and coordinate, (m, d): the max (or max |w|) of the coordinate's tensor (or model)."""
        t = self._per_tensor(payloads, context)
        if self.scope == "model":
            return t.expand_as(payloads)
        return t[:, context.layout.layer_index(payloads.device)]

    def _per_tensor(self, payloads: torch.Tensor, context: RoundContext) -> torch.Tensor:
        """t per client and tensor, (m, tensors) (one column for scope "model")."""
        v = payloads.abs() if self.scaling == "max_abs" else payloads
        if self.scope == "model":
            return v.amax(-1, keepdim=True)
        return torch.stack([v[:, s].amax(-1) for s in context.layout.slices], dim=-1)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        bad = ~torch.isfinite(payloads).all(-1)      # a client whose training blew up: its report stays NaN
        if bool(bad.any()):
            out = torch.full_like(payloads, float("nan"))
            ok = (~bad).nonzero().flatten().tolist()
            if ok:
                sub = dataclasses.replace(context, client_ids=context.client_ids[ok],
                                          generators=[context.generators[i] for i in ok])
                out[ok] = self(payloads[ok], context=sub)
            return out
        t = self._per_tensor(payloads, context)
        if not bool((t > 0).all()):
            raise ValueError("a tensor's max weight is <= 0: Algorithm 2 divides by it (use scaling='max_abs')")
        slices = [slice(0, payloads.shape[-1])] if self.scope == "model" else list(context.layout.slices)
        unit = payloads.clone()
        for j, s in enumerate(slices):              # θ / t, one scalar per client and tensor (line 2)
            unit[:, s] /= t[:, j:j + 1]
        for i, g in enumerate(context.generators):  # PM on every value (lines 3-10), the client's own stream
            unit[i] = self._unit.privatize(unit[i], generator=g)
        for j, s in enumerate(slices):              # times t (line 11)
            unit[:, s] *= t[:, j:j + 1]
        return unit

    def guarantee(self, context: RoundContext) -> list[Guarantee]:
        g = dataclasses.replace(self._unit.guarantee, note="only if t were public: the client's own max scales it, and the "
                                               "reports reveal it (not LDP)")
        return [g] * len(context.client_ids)

    def __repr__(self) -> str:
        return f"LayerScaledPiecewise(epsilon={self.epsilon}, scaling={self.scaling!r}, scope={self.scope!r})"

"""FedSel's two-stage report as a privatizer of the round engine: one privately selected coordinate of the update,
its value perturbed; the rest of the vector not sent.

Liu, Cao, Yoshikawa, Chen (DASFAA 2020), Algorithm 1, lines 16-18, on a client's whole update instead of a one-record
user's gradient: the client picks one index j from |Δ| with an ε1-LDP selector (:class:`~ldptut.selection.
ExponentialSelection` or :class:`~ldptut.selection.PerturbedSampling`, on the ranking or the top-k status of |Δ|),
clips Δ_j to the range and perturbs it with an ε2-LDP value mechanism (Piecewise by default); the server receives
(j, value) and reads a vector that is 0 elsewhere. Sequential composition: ε1 + ε2 for the client's whole update in
the round (FedSel, Theorem 1), a guarantee **per model per round**, not per coordinate. What this leaves out of the
paper: the accumulator of unsent coordinates (line 15, a client state across rounds) and its momentum term η.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from .._validate import epsilon as _epsilon, one_of, pos_int
from ..accounting import Guarantee, Unit
from .context import RoundContext
from .ranges import FixedRange

__all__ = ["SelectThenPerturb", "SELECTORS"]

#: The private selectors a client may use (FedSel, Section 4.1): EXP on the ranking, PS on the top-k status.
SELECTORS = ("exp", "ps")


class SelectThenPerturb:
    """Each client sends one coordinate of its update, chosen with ε1-LDP, its value perturbed with ε2-LDP.

    ``epsilon_select`` (ε1) and ``epsilon_value`` (ε2): the two stages' budgets; the client's guarantee is
    ε1 + ε2 per model per round. ``selector``: "exp" (exponential mechanism on the ranking of |Δ|) or "ps" (perturbed
    sampling on the top-``k`` status). ``mechanism``: the value perturbation (a class of :mod:`ldptut.mechanisms`
    taking ``epsilon``, ``center``, ``radius``; Piecewise by default), within ``range``. Both stages draw from the
    client's "privatize" stream of the round, the selection first.
    """

    def __init__(self, *, epsilon_select: float, epsilon_value: float, selector: str = "exp", k: int = 1,
                 mechanism: Optional[type] = None, range: Callable[[RoundContext], tuple] = FixedRange()):
        from ..mechanisms import Piecewise

        self.epsilon_select = _epsilon(epsilon_select, "epsilon_select")
        self.epsilon_value = _epsilon(epsilon_value, "epsilon_value")
        self.selector = one_of(selector, "selector", SELECTORS)
        self.k = pos_int(k, "k")
        self.mechanism = Piecewise if mechanism is None else mechanism
        self.range = range
        self._unit = self.mechanism(epsilon=self.epsilon_value, center=0.0, radius=1.0)  # checks ε2 now

    def _select(self, d: int):
        from ..selection import ExponentialSelection, PerturbedSampling

        if self.selector == "exp":
            return ExponentialSelection(epsilon=self.epsilon_select)
        if self.k >= d:
            raise ValueError(f"k must be below the model's d = {d} for perturbed sampling, got {self.k}")
        return PerturbedSampling(epsilon=self.epsilon_select, k=self.k)

    def __call__(self, payloads: torch.Tensor, *, context: RoundContext) -> torch.Tensor:
        if context.send != "updates":
            raise ValueError("SelectThenPerturb selects from the update: the run must send updates (send='updates'), "
                             f"not {context.send!r}")
        m, d = payloads.shape
        selector = self._select(d)
        # one index per client from its own stream (the selection's uniforms first, then the value's)
        j = selector.select_rows(payloads, context.generators).to(payloads.device)
        center, radius = self.range(context)
        if isinstance(center, torch.Tensor) or isinstance(radius, torch.Tensor):
            raise ValueError("SelectThenPerturb needs a range with one center and radius for the whole model")
        mech = self.mechanism(epsilon=self.epsilon_value, center=center, radius=radius)
        rows = torch.arange(m, device=payloads.device)
        values = mech.privatize_rows(payloads[rows, j].unsqueeze(1), context.generators).squeeze(1)
        out = torch.zeros_like(payloads)
        out[rows, j] = values.to(payloads.dtype)
        return out

    def guarantee(self, context: RoundContext) -> list[Guarantee]:
        """ε1 + ε2 per model per round for every sampled client (FedSel, Theorem 1: sequential composition of the
        selection and the value report; the unsent coordinates are not released)."""
        d = context.layout.numel
        g = Guarantee(self.epsilon_select + self.epsilon_value, unit=Unit(coordinates=d, whole_model=True),
                      note="selection + value")
        return [g] * len(context.client_ids)

    def __repr__(self) -> str:
        return (f"SelectThenPerturb(epsilon_select={self.epsilon_select:g}, epsilon_value={self.epsilon_value:g}, "
                f"selector={self.selector!r}, k={self.k}, mechanism={self.mechanism.__name__}, range={self.range})")

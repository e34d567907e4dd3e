"""Weight-range rules: the public range [c - r, c + r] a privatizer maps a client's weights into (fixed, or per layer
from the global model: LDP-FL, Sun et al. 2021, Section 3.2).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .._validate import real
from .layout import ParamLayout
from .context import RoundContext


@dataclass(frozen=True)
class FixedRange:
    """A public range [center - radius, center + radius] for every coordinate (e.g. LDP-FL's (0, 0.075))."""

    center: float = 0.0
    radius: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "center", real(self.center, "center"))
        object.__setattr__(self, "radius", real(self.radius, "radius", positive=True))

    def __call__(self, context: RoundContext) -> tuple[float, float]:
        return self.center, self.radius


@dataclass(frozen=True)
class GlobalModelRange:
    """Per-layer range computed by the server from the current global model only (public data).

    For each parameter tensor l: c_l = (max + min) / 2, r_l = margin * (max - min) / 2 (+ ``min_radius``).
    LDP-FL (Sun et al. 2021, Section 3.2) gives no formula for its adaptive range; this rule is the
    one used by CorBin-FL's baseline code and is our choice. Returns per-coordinate tensors.
    """

    margin: float = 1.0
    min_radius: float = 1e-6

    def __post_init__(self) -> None:
        object.__setattr__(self, "margin", real(self.margin, "margin", positive=True))
        object.__setattr__(self, "min_radius", real(self.min_radius, "min_radius", positive=True))

    def __call__(self, context: RoundContext) -> tuple[torch.Tensor, torch.Tensor]:
        if context.send == "updates":
            raise ValueError(f"{type(self).__name__} bounds weights; use send='weights' (LDP-FL perturbs weights)")
        return _layer_ranges(self._model(context), context.layout, margin=self.margin, min_radius=self.min_radius)

    def _model(self, context: RoundContext) -> torch.Tensor:
        return context.global_vector


def _layer_ranges(g: torch.Tensor, layout: ParamLayout, *, margin: float,
                  min_radius: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-coordinate (centre, radius) of the layer-wise range of ``g``: c_l = (max + min) / 2,
    r_l = margin (max - min) / 2 + min_radius over each parameter tensor l."""
    centers, radii = [], []
    for s in layout.slices:
        lo, hi = g[s].min(), g[s].max()
        centers.append((hi + lo) / 2)
        radii.append(margin * (hi - lo) / 2 + min_radius)
    idx = layout.layer_index(g.device)
    return torch.stack(centers)[idx], torch.stack(radii)[idx]


@dataclass(frozen=True)
class InitialModelRange(GlobalModelRange):
    """:class:`GlobalModelRange`'s per-layer rule applied to the run's **initial** global model (round 0, public),
    so the range is fixed for the whole run: the ablation that removes the adaptive range's feedback (a range
    recomputed from a noisy model, whose noise is scaled by that range). Weights that outgrow it are clipped."""

    def _model(self, context: RoundContext) -> torch.Tensor:
        if context.initial_vector is None:
            raise ValueError("InitialModelRange needs the round context's initial_vector (set by fl.simulate)")
        return context.initial_vector


#: The range rules by name ("fixed": a public constant range, "adaptive": from the global model).
RANGE_RULES = {"fixed": FixedRange, "adaptive": GlobalModelRange}

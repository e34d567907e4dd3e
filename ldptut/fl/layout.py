"""The flattened parameter layout: one vector of d weights per model, its per-tensor slices, and loading a vector back
into a model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch
from torch import nn


# ----------------------------------------------------------------------------------------- layout
@dataclass(frozen=True)
class ParamLayout:
    """Where each parameter tensor sits in the flattened vector of d scalars."""

    names: tuple[str, ...]
    shapes: tuple[torch.Size, ...]
    slices: tuple[slice, ...]

    @classmethod
    def from_model(cls, model: nn.Module) -> "ParamLayout":
        names, shapes, slices, start = [], [], [], 0
        for name, p in model.named_parameters():
            names.append(name)
            shapes.append(p.shape)
            slices.append(slice(start, start + p.numel()))
            start += p.numel()
        return cls(tuple(names), tuple(shapes), tuple(slices))

    @property
    def numel(self) -> int:
        """d, the number of scalars a client sends."""
        return self.slices[-1].stop if self.slices else 0

    def layer_slices(self) -> dict[str, slice]:
        return dict(zip(self.names, self.slices))

    def layer_index(self, device: str | torch.device = "cpu") -> torch.Tensor:
        """Tensor of length d giving, for each scalar, the index of the parameter tensor it belongs to."""
        sizes = torch.tensor([s.stop - s.start for s in self.slices], device=device)
        return torch.repeat_interleave(torch.arange(len(self.slices), device=device), sizes)

    def flatten(self, params: Mapping[str, torch.Tensor], batch_dims: int = 0) -> torch.Tensor:
        """Concatenate ``params`` into (*batch, d); ``batch_dims`` leading dims are kept (stacked clients)."""
        parts = [params[n].reshape(*params[n].shape[:batch_dims], -1) for n in self.names]
        return torch.cat(parts, dim=batch_dims)

    def unflatten(self, vec: torch.Tensor) -> dict[str, torch.Tensor]:
        """Inverse of :meth:`flatten`; ``vec`` has shape (*batch, d)."""
        batch = vec.shape[:-1]
        return {n: vec[..., s].reshape(*batch, *shape) for n, s, shape in zip(self.names, self.slices, self.shapes)}


@torch.no_grad()
def load_vector(model: nn.Module, layout: ParamLayout, vector: torch.Tensor) -> nn.Module:
    """Copy the flattened weights ``vector`` into ``model``'s parameters (in place); returns the model."""
    for (k, p), v in zip(model.named_parameters(), layout.unflatten(vector).values()):
        p.copy_(v)
    return model

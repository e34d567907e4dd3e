"""Linear classifiers with closed-form per-example gradients, vectorised over runs and users.

The one-record users of federated SGD (FedSel, Liu et al., DASFAA 2020, Section 2.1) each compute the
gradient of an l2-regularised loss on their own record (x, y), y in {-1, +1}, at the global weights w:

* logistic regression: L = ln(1 + exp(-y w.x)) + (lam / 2) |w|^2, grad = -y sigmoid(-y w.x) x + lam w;
* linear SVM (hinge):  L = max(0, 1 - y w.x) + (lam / 2) |w|^2,   grad = -y 1[y w.x < 1] x + lam w
  (the subgradient 0 at the kink y w.x = 1).

Shapes: ``w`` (R, d) for R independent runs, ``x`` (R, m, d), ``y`` (R, m): one gradient per run and user,
(R, m, d), without a Python loop. Tested against ``torch.autograd`` per example.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ._validate import one_of, real

__all__ = ["MODELS", "margins", "per_example_gradients", "losses", "predict", "accuracy"]

#: The losses the simulator knows.
MODELS = ("logistic", "svm")


def margins(w: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """y w.x, shape (R, m)."""
    return y * torch.einsum("rmd,rd->rm", x, w)


def per_example_gradients(w: Tensor, x: Tensor, y: Tensor, *, model: str, l2: float) -> Tensor:
    """Each user's gradient (R, m, d) of the regularised loss (module docstring) at w (R, d)."""
    one_of(model, "model", MODELS)
    lam = real(l2, "l2", nonneg=True)
    z = margins(w, x, y)
    coef = -y * (torch.sigmoid(-z) if model == "logistic" else (z < 1).to(x.dtype))
    g = coef.unsqueeze(-1) * x
    return g.add_(w.unsqueeze(1), alpha=lam) if lam else g


def losses(w: Tensor, x: Tensor, y: Tensor, *, model: str, l2: float) -> Tensor:
    """Each user's loss (R, m) (module docstring); what :func:`per_example_gradients` differentiates."""
    one_of(model, "model", MODELS)
    z = margins(w, x, y)
    data = torch.nn.functional.softplus(-z) if model == "logistic" else torch.clamp(1 - z, min=0)
    return data + 0.5 * real(l2, "l2", nonneg=True) * (w * w).sum(-1, keepdim=True)


def predict(w: Tensor, x: Tensor) -> Tensor:
    """Labels in {-1, +1}: sign(x.w) for x (n, d) and each run's w (R, d), shape (R, n); 0 counts as +1."""
    return torch.where(w @ x.T >= 0, 1.0, -1.0).to(x.dtype)


def accuracy(w: Tensor, x: Tensor, y: Tensor, mask: Tensor) -> Tensor:
    """Each run's accuracy in [0, 1] over the rows of (x, y) where ``mask`` (R, n) is True, shape (R,)."""
    correct = (predict(w, x) == y).logical_and_(mask)
    return correct.sum(-1).double() / mask.sum(-1).double()

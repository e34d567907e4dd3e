"""Local randomizers (LDP mechanisms) for one scalar report per coordinate.

Every mechanism is a small class in the style of Opacus / OpenDP:

* the constructor is keyword-only and validates its parameters (``ValueError`` naming the parameter);
* :meth:`~Mechanism.privatize` randomizes a tensor elementwise (same shape, dtype and device),
  drawing all randomness from the ``generator`` it is given, so the same generator seed gives the
  same output;
* the closed forms sit beside the sampler: :meth:`~Mechanism.mean`, :meth:`~Mechanism.variance`,
  and the exact output law ``output_distribution(x)`` (values and probabilities). The continuous
  mechanisms (:class:`Laplace`, :class:`Piecewise`, :class:`Hybrid`, :class:`Gaussian`) report on a fixed
  grid (:class:`GridMechanism`, :mod:`ldptut.fpsafe`), so their law is discrete too; their
  ``ideal_variance`` is the continuous mechanism's, for the cost of sampling safely;
* :attr:`~Mechanism.guarantee` states what is protected, as an :class:`ldptut.accounting.Guarantee`:
  ε (δ = 0; (ε, δ) for :class:`Gaussian`) **per coordinate per round** (one scalar report). A
  client that reports d coordinates per round, for T rounds, composes to
  ``guarantee.compose(d=d, rounds=T)`` (d·T·ε for the pure mechanisms).

Inputs outside the declared range ``[center - radius, center + radius]`` are clipped first; the
guarantee is about the clipped value. **The guarantee holds for the law the code samples**, floating
point included: the grid mechanisms draw each output with its exact probability from a 2^-24-step
uniform and keep every output's probability above a floor (:mod:`ldptut.fpsafe`); the textbook
float samplers do not (Mironov, CCS 2012; :mod:`ldptut.attacks` shows the attack). :class:`Gaussian`, an
(ε, δ) mechanism, draws its grid law with 2^-53-step uniforms and states the (ε, δ) its realised law gives
(its distance ``tv`` from the designed law inside δ; no finite ε where none is certified). The two-output
mechanisms' threshold is rounded to the uniforms' grid, which moves their ratio by one step of 2^-24 (the
foundations chapter prints the excess in ε). Closed forms are float64.

One module per mechanism (formula, sampler, closed-form law and guarantee together) on a shared base
(:mod:`.base`; the grid mechanisms' base in :mod:`.grid`); every name is importable from ``ldptut.mechanisms``.
"""
from __future__ import annotations

from typing import Any, Dict

from .base import Mechanism
from .correlated import CorrelatedTwoPoint, codebook_cdf
from .gaussian import GAUSSIAN_CELLS_PER_SIGMA, GAUSSIAN_CLAMP_SIGMAS, Gaussian
from .grid import GridMechanism
from .hybrid import HYBRID_EPSILON_STAR, Hybrid
from .laplace import Laplace
from .ldpsign import LdpSign
from .piecewise import Piecewise
from .randomized_response import RandomizedResponse
from .two_point import TwoPoint, two_point_a
from ..accounting import Guarantee  # noqa: F401  (kept importable from here, as before)

__all__ = ["Mechanism", "RandomizedResponse", "TwoPoint", "CorrelatedTwoPoint", "codebook_cdf", "Laplace", "Piecewise",
           "Hybrid", "Gaussian", "LdpSign", "MECHANISMS", "make_mechanism", "two_point_a"]


# ---- registry -------------------------------------------------------------------------------------
MECHANISMS: Dict[str, type] = {
    "randomized_response": RandomizedResponse,
    "two_point": TwoPoint,
    "laplace": Laplace,
    "piecewise": Piecewise,
    "hybrid": Hybrid,
    "gaussian": Gaussian,
    "ldpsign": LdpSign,
}


def make_mechanism(name: str, **kwargs: Any) -> Mechanism:
    """Build a mechanism by name (``MECHANISMS`` key), e.g. ``make_mechanism("two_point", epsilon=1)``."""
    key = name.strip().lower().replace("-", "_") if isinstance(name, str) else name
    if key not in MECHANISMS:
        raise ValueError(f"unknown mechanism name {name!r}; known names: {', '.join(sorted(MECHANISMS))}")
    return MECHANISMS[key](**kwargs)

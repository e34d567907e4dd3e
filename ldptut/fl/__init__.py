"""The round engine: federated averaging with pluggable local training, privatizers and aggregation.

One room per idea (the public names are all importable from ``ldptut.fl``):

* :mod:`.engine` -- :func:`next_round`, the package's one round (client sampling, local training, privatizing,
  aggregating, evaluating, accounting) on a :class:`SimulationState` made by :func:`start` and read by :func:`finish`;
  :func:`simulate`, the loop over them; :func:`run_fedavg`, :func:`train_centralised`;
* :mod:`.spec` -- what :func:`simulate` is given and returns: :class:`Run`, :class:`FLConfig`, :class:`FLResult`;
* :mod:`.layout` -- :class:`ParamLayout`: a model as one vector of d weights and its per-tensor slices;
* :mod:`.context` -- :class:`RoundContext` (what a privatizer or aggregator sees in a round, and its random streams)
  and the :class:`Privatizer` and :class:`Aggregator` protocols;
* :mod:`.ranges` -- the weight-range rules (fixed, adaptive from the global model, fixed from the initial model);
* :mod:`.privatizers` -- per-coordinate mechanisms within a range, clipping alone, correlated pairs, a recorder, one
  mechanism per client, Piecewise on weights scaled by the client's maximum;
* :mod:`.selected` -- FedSel's two-stage report (one privately selected coordinate, its value perturbed);
* :mod:`.aggregators` -- the server's rules: mean, weighted mean, weighting by 1/σ, probability-based selection, sign,
  smoothing;
* :mod:`.checks` -- the engine's input checks and its checks of what privatizers and aggregators return.

Nothing here knows about run configurations or the run cache (:mod:`ldptut.experiments` registers the range rules
as configuration values).
"""
from .aggregators import (AGGREGATORS, C_READINGS, ON_EMPTY, ProbabilitySelection, SignOf, SmoothedMean, WeightedBySigma,
                          inverse_sigma_weights, make_aggregator, mean_aggregator, selection_probabilities,
                          weighted_mean_aggregator)
from .context import Aggregator, Privatizer, RoundContext
from .engine import (HUGE_LOSS, SimulationState, evaluate, finish, next_round, run_fedavg, sample_clients, simulate, start,
                     train_centralised)
from .layout import ParamLayout, load_vector
from .privatizers import (SCALINGS, ClipToRange, LayerScaledPiecewise, LocalPerturbation, PairedPerturbation,
                          PersonalizedPerturbation, RecordPayloads)
from .ranges import RANGE_RULES, FixedRange, GlobalModelRange, InitialModelRange
from .selected import SELECTORS, SelectThenPerturb
from .spec import FLConfig, FLResult, Run

__all__ = [
    "ParamLayout", "RoundContext", "Privatizer", "Aggregator", "FixedRange", "GlobalModelRange", "InitialModelRange",
    "RANGE_RULES", "LocalPerturbation", "ClipToRange", "PairedPerturbation", "RecordPayloads", "mean_aggregator",
    "weighted_mean_aggregator", "AGGREGATORS", "make_aggregator", "sample_clients", "evaluate", "load_vector", "Run",
    "FLConfig", "FLResult", "simulate", "start", "next_round", "finish", "SimulationState", "run_fedavg", "train_centralised", "HUGE_LOSS", "WeightedBySigma",
    "ProbabilitySelection", "SignOf", "SmoothedMean", "inverse_sigma_weights", "selection_probabilities", "ON_EMPTY",
    "C_READINGS", "PersonalizedPerturbation", "LayerScaledPiecewise", "SCALINGS", "SelectThenPerturb", "SELECTORS",
]

"""One module per paper, each with the same face.

Every paper module defines

* ``PAPER``: a :class:`Paper` (citation, the chapter notebook, its parameter files, one line for the
  book's introduction);
* ``SETTINGS``: the paper's experimental settings as printed (with what the paper leaves unstated marked);
* ``REPORTED``: its published numbers as :class:`Reported` rows (value, unit of ε, and what the number
  measures: training or test accuracy, and where it comes from);
* ``configs(...)``: its experiment grid as typed run configurations (:class:`ldptut.runconfig.RunConfig`);
* ``compare(runs)``: the paper-vs-ours table from runs (``ldptut.runcache.load_runs`` or a
  :class:`ldptut.experiments.Runner` table).

A new chapter adds one module here (and registers it in :data:`PAPERS`), one notebook, one parameter
file, one test file and one ``_toc.yml`` entry.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Optional

# the seed statistics every paper module uses, from the generic module that holds them (kept importable from here)
from ..intervals import (number_text, cv_interval, finite_accuracy, format_interval, interval_cell, mean_std,  # noqa: F401
                         paired_cell, t_interval, welch_interval)

__all__ = ["Paper", "Reported", "PAPERS", "paper_modules", "mean_std", "t_interval", "cv_interval", "format_interval",
           "interval_cell", "paired_cell", "finite_accuracy"]


@dataclass(frozen=True)
class Paper:
    """Who wrote it, where it appeared, and where the book re-runs it."""

    key: str            # the module name under ldptut.papers
    citation: str
    chapter: str        # the chapter notebook, relative to the repository root, without .ipynb
    intro: str          # the book introduction's bullet for this chapter (bold short title first)


@dataclass(frozen=True)
class Reported:
    """One published number. ``value`` in the paper's unit (accuracy in %, gains in points; None where the
    paper states only that there is none); ``epsilon`` in ``epsilon_unit``; ``metric`` says what it
    measures (e.g. "test accuracy") and ``source`` where it is printed (section, table, figure caption).
    ``setting`` holds the (name, value) pairs a paper module's ``compare`` matches runs on."""

    claim: str
    value: Optional[float]
    metric: str
    source: str
    epsilon: Optional[float] = None
    epsilon_unit: str = ""
    setting: tuple[tuple[str, Any], ...] = ()

    @property
    def where(self) -> dict[str, Any]:
        """``setting`` as a dict."""
        return dict(self.setting)


#: The paper modules, in the book's order.
PAPERS = ("ldp_fl", "personalized_ldp_fl", "corbin", "fedsel", "pd_ldpfl", "comparison")


def paper_modules() -> list[ModuleType]:
    """The imported paper modules, in the book's order."""
    return [importlib.import_module(f"{__name__}.{name}") for name in PAPERS]

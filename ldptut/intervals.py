"""Seed statistics the chapters print: mean ± std, t intervals (one sample, paired, Welch, the corrected resampled t
of cross-validation) and the table cells made of them.

Generic (they know nothing of a paper): the paper modules, ``ldptut.plotting`` and the chapters use them.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import pandas as pd

__all__ = ["mean_std", "t_interval", "cv_interval", "welch_interval", "format_interval", "interval_cell",
           "paired_cell", "finite_accuracy"]


def mean_std(values: pd.Series, *, fmt: str = ".1f", count: bool = True, unit: str = "seed") -> str:
    """'mean ± std' (sample std), ``fmt`` for the mean (e.g. "+.1f" for gains, ".2f" for two decimals) and, without
    its sign, for the std; with ``count`` the number of values follows, counted in ``unit`` (one value per seed by
    default; "run" where values pool runs that share a seed, e.g. two learning rates); a single value has no std; no
    value is "not run"."""
    if len(values) == 0:
        return "not run"
    seeds = f" ({len(values)} {unit}{'s' if len(values) > 1 else ''})" if count else ""
    if len(values) == 1:
        return f"{values.iloc[0]:{fmt}}{seeds}"
    return f"{values.mean():{fmt}} ± {values.std():{fmt.lstrip('+- ')}}{seeds}"


def t_interval(values: pd.Series, *, level: float = 0.95) -> Optional[tuple[float, float]]:
    """Student's t confidence interval for the mean of ``values`` (one per seed; for paired differences, the
    differences): mean ± t_{(1 + level) / 2, n - 1} s / sqrt(n), s the sample std; None with fewer than two values."""
    n = len(values)
    if n < 2:
        return None
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    from scipy.stats import t as _t

    half = float(_t.ppf((1 + level) / 2, n - 1)) * float(values.std(ddof=1)) / math.sqrt(n)
    m = float(values.mean())
    return m - half, m + half


def cv_interval(diffs: Any, *, folds: int, level: float = 0.95) -> Optional[tuple[float, float, float]]:
    """(mean, lo, hi): the corrected resampled t interval for a mean difference over repeated k-fold
    cross-validation (Nadeau & Bengio, Machine Learning 52, 2003; Bouckaert & Frank, PAKDD 2004). The J = repeats x
    folds paired differences share training data, so s²/J understates the variance; the correction uses
    (1/J + n_test/n_train) s² = (1/J + 1/(folds - 1)) s² with t_{(1 + level)/2, J - 1}. None with fewer than two
    differences."""
    d = pd.Series(diffs, dtype=float)
    n = len(d)
    if n < 2:
        return None
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    if int(folds) < 2:
        raise ValueError(f"folds must be >= 2, got {folds!r}")
    from scipy.stats import t as _t

    half = float(_t.ppf((1 + level) / 2, n - 1)) * math.sqrt((1 / n + 1 / (int(folds) - 1)) * float(d.var(ddof=1)))
    m = float(d.mean())
    return m, m - half, m + half


def welch_interval(a: pd.Series, b: pd.Series, *, level: float = 0.95) -> Optional[tuple[float, float, float]]:
    """(mean(a) - mean(b), lo, hi): Welch's t confidence interval for the difference of two independent means,
    mean(a) - mean(b) ± t_{(1 + level) / 2, ν} sqrt(s_a²/n_a + s_b²/n_b), with ν the Welch-Satterthwaite degrees of
    freedom (s the sample std); None when either has fewer than two values."""
    na, nb = len(a), len(b)
    if na < 2 or nb < 2:
        return None
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    from scipy.stats import t as _t

    va, vb = float(a.var(ddof=1)) / na, float(b.var(ddof=1)) / nb
    nu = (va + vb) ** 2 / (va ** 2 / (na - 1) + vb ** 2 / (nb - 1))
    half = float(_t.ppf((1 + level) / 2, nu)) * math.sqrt(va + vb)
    d = float(a.mean()) - float(b.mean())
    return d, d - half, d + half


def format_interval(values: pd.Series, *, level: float = 0.95, fmt: str = ".1f") -> str:
    """:func:`t_interval` as "[lo, hi]", or "" with fewer than two values (an interval needs two seeds)."""
    ci = t_interval(values, level=level)
    return "" if ci is None else f"[{ci[0]:{fmt}}, {ci[1]:{fmt}}]"


def number_text(v: float, fmt: str) -> str:
    """``v`` in ``fmt`` without a signed zero ("-0.0" is "+0.0" or "0.0"), rounded as the table cells round it (a
    NumPy float rounds half to even after scaling, e.g. 69.35 to 69.4, where Python's format gives 69.3): the one
    formatting of a number that prose and tables share."""
    digits = int(fmt.rstrip("f").split(".")[-1] or 0)
    return f"{round(v, digits) + 0.0:{fmt}}"


def interval_cell(values: pd.Series, fmt: str = ".1f") -> str:
    """'mean [lo, hi]' over seeds (Student's t, 95 %), the count of diverged runs (NaN) said apart."""
    ok = values.dropna()
    gone = len(values) - len(ok)
    if not len(values):
        return "not run"
    if not len(ok):
        return f"diverged ({gone} of {len(values)})"
    ci = t_interval(ok)
    out = number_text(ok.mean(), fmt) + (f" [{number_text(ci[0], fmt)}, {number_text(ci[1], fmt)}]" if ci else f" ({len(ok)} seed)")
    return out + (f", {gone} of {len(values)} diverged" if gone else "")


def finite_accuracy(runs: pd.DataFrame) -> pd.Series:
    """``runs``' final accuracy, NaN for a run stopped as diverged (its last accuracy is that of a broken model)."""
    gone = runs["diverged"].astype(bool) if "diverged" in runs else pd.Series(False, index=runs.index)
    return runs["accuracy"].where(~gone)


def paired_cell(a: pd.Series, b: pd.Series, fmt: str = "+.1f") -> str:
    """:func:`interval_cell` of a - b over the seeds both have with finite values (Series indexed by seed)."""
    d = (a - b).dropna()
    return interval_cell(d, fmt) if len(d) else "no seed with both runs finite"

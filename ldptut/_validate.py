"""Shared argument checks: the one home of the package's primitive rules, each raising ValueError in one wording.

The rules (each a function here, used by the mechanisms, the engine, :class:`ldptut.params.P` and
:func:`ldptut.runconfig._normalise`):

* an **integer** (:func:`integer`, :func:`pos_int`): a ``numbers.Integral`` (numpy integers too), never a bool;
* a **finite real** (:func:`real`, :func:`epsilon`): a ``numbers.Real``, never a bool, neither NaN nor ±inf (an int too
  large for a float counts as infinite); optionally > 0 or >= 0;
* a **fraction** (:func:`fraction`): a real number in (0, 1]; a **δ** (:func:`delta`): one in (0, 1);
* a **bool** (:func:`boolean`): ``True`` or ``False`` only (not 0 / 1, not a numpy bool);
* a **string** (:func:`string`); **one of** a set (:func:`one_of`, compared with ``==``).

A failed check reads ``"{name} must be {what}, got {value!r} ({type})"`` (:func:`expected`); ``name=""`` leaves the
name to the caller (:func:`ldptut.params.check_parameters` prefixes ``parameter 'x'``). A non-finite real raises
:class:`NotFiniteError` (a ValueError) so a caller can say why finiteness matters to it.

The numeric checks return the plain Python number and, by default, read a one-element real tensor as its number
(``tensor=True``: an ε computed as a tensor). What their callers add on purpose:

* :class:`ldptut.params.P` checks and keeps the value as given, so it passes ``tensor=False`` (a tensor parameter would
  stay a tensor), bounds a real's magnitude by ``P.REAL_MAX`` (the chapters compute in float32) and adds papermill's
  hint to a string that looks like a list;
* :func:`ldptut.runconfig._normalise` converts before it checks (an int-valued float for an int field, 0 / 1 for a bool
  field: one key for equal settings from JSON, YAML or numpy) and says why a key needs a finite number.
"""
from __future__ import annotations

import math
import numbers
from typing import Any, Iterable, NoReturn

import torch


class NotFiniteError(ValueError):
    """A real number that is NaN or ±inf (or an int beyond the float range) where a finite one is required."""


def expected(name: str, what: str, v: Any) -> str:
    """The one wording of a failed check: ``"{name} must be {what}, got {v!r} ({type})"`` (no name when ``name=""``)."""
    return f"{name} must be {what}, got {v!r} ({type(v).__name__})".lstrip()


def _fail(name: str, what: str, v: Any, error: type[ValueError] = ValueError) -> NoReturn:
    raise error(expected(name, what, v))


def _item(v: Any, tensor: bool) -> Any:
    """A one-element non-complex tensor as its Python number (when ``tensor``), anything else unchanged."""
    if tensor and isinstance(v, torch.Tensor) and v.numel() == 1 and not v.dtype.is_complex:
        return v.item()
    return v


def _as_float(x: Any) -> float:
    """``float(x)`` of a real number, inf for an int beyond the float range (``float(10**400)`` raises)."""
    try:
        return float(x)
    except OverflowError:
        return math.inf if x > 0 else -math.inf


def real(v: Any, name: str, *, positive: bool = False, nonneg: bool = False, tensor: bool = True) -> float:
    """``v`` as a finite float; optionally > 0 (``positive``) or >= 0 (``nonneg``). Bools, strings, NaN and ±inf raise
    (NaN and ±inf as :class:`NotFiniteError`); ``tensor``: a one-element real tensor is read as its number."""
    what = "a finite real number" + (" > 0" if positive else " >= 0" if nonneg else "")
    x = _item(v, tensor)
    if isinstance(x, bool) or not isinstance(x, numbers.Real):
        _fail(name, what, v)
    f = _as_float(x)
    if not math.isfinite(f):
        _fail(name, what, v, NotFiniteError)
    if (positive and f <= 0) or (nonneg and f < 0):
        _fail(name, what, v)
    return f


def integer(v: Any, name: str, *, minimum: int | None = None, tensor: bool = True) -> int:
    """``v`` as an int, optionally >= ``minimum``: a ``numbers.Integral`` that is not a bool (3.0 raises: a caller
    that accepts an int-valued float converts it first); ``tensor``: a one-element integer tensor is read as its int."""
    what = "an integer" + (f" >= {minimum}" if minimum is not None else "")
    x = _item(v, tensor)
    if isinstance(x, bool) or not isinstance(x, numbers.Integral) or (minimum is not None and x < minimum):
        _fail(name, what, v)
    return int(x)


def pos_int(v: Any, name: str) -> int:
    """``v`` as an int >= 1 (bools rejected)."""
    return integer(v, name, minimum=1)


def _real_in(v: Any, name: str, what: str, inside: Any, tensor: bool) -> float:
    x = _item(v, tensor)
    if isinstance(x, bool) or not isinstance(x, numbers.Real) or not inside(_as_float(x)):  # NaN is in no interval
        _fail(name, what, v)
    return _as_float(x)


def epsilon(v: Any, name: str = "epsilon") -> float:
    """A privacy parameter ε: a finite real number > 0 (NaN, inf, 0, negatives, bools and strings raise)."""
    return real(v, name, positive=True)


def delta(v: Any, name: str = "delta") -> float:
    """A privacy parameter δ: a real number in the open interval (0, 1)."""
    return _real_in(v, name, "a real number in (0, 1)", lambda f: 0 < f < 1, True)


def fraction(v: Any, name: str, *, tensor: bool = True) -> float:
    """A real number in (0, 1] (a fraction of clients, a sampling probability)."""
    return _real_in(v, name, "a real number in (0, 1]", lambda f: 0 < f <= 1, tensor)


def boolean(v: Any, name: str) -> bool:
    """``v`` if it is ``True`` or ``False`` (0 and 1 raise: a caller that accepts them converts them first)."""
    if not isinstance(v, bool):
        _fail(name, "True or False", v)
    return v


def string(v: Any, name: str) -> str:
    """``v`` if it is a ``str``."""
    if not isinstance(v, str):
        _fail(name, "a string", v)
    return v


def one_of(v: Any, name: str, choices: Iterable[Any]) -> Any:
    """``v`` if it is one of ``choices``, else ValueError listing them."""
    options = list(choices)
    if v not in options:
        _fail(name, "one of " + ", ".join(repr(c) for c in options), v)
    return v


def all_finite(x: torch.Tensor) -> bool:
    """Whether every element of ``x`` is finite (no NaN, no inf); an empty or non-floating tensor is.

    Reads ``x`` once with ``torch.aminmax`` (a min or max is NaN when any element is NaN, and +-inf when any is):
    on the CPU about 20x faster than ``torch.isfinite(x).all()``, which materialises a boolean tensor (16 M float32
    weights: 4.8 ms against 108 ms on 2 cores)."""
    if x.numel() == 0 or not (x.dtype.is_floating_point or x.dtype.is_complex):
        return True
    if x.dtype.is_complex:
        return all_finite(torch.view_as_real(x))
    lo, hi = torch.aminmax(x)
    return bool(torch.isfinite(lo)) and bool(torch.isfinite(hi))


def finite_rows(x: torch.Tensor) -> torch.Tensor:
    """Boolean per row of ``x`` (first dimension): every element of the row is finite. One fast pass when all are."""
    if all_finite(x):
        return torch.ones(x.shape[0], dtype=torch.bool, device=x.device)
    return torch.isfinite(x.reshape(x.shape[0], -1)).all(-1)

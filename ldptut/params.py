"""A chapter's parameters: the validators (:class:`P`), the check of a notebook's namespace
(:func:`check_parameters`), and :class:`ChapterParams`, the base of each paper module's frozen ``Params`` dataclass.

:func:`check_parameters` runs, through the chapter's ``Params.of`` in :func:`ldptut.notebooks.setup`, in the cell
right after a chapter's ``parameters`` cell: it checks the type and range of every parameter (papermill's ``-p``
passes strings where a list was meant) and rejects names the chapter does not have (a misspelt ``-p round 1`` would
otherwise run the whole chapter with the default ``rounds`` and fail at the end, because ``round`` hides the
builtin). A paper module's ``Params`` (fields declared with :func:`param`: a validator of
:class:`P` and the default of the chapter's parameters cell) checks itself when built, and is what ``grid``,
``followup`` and the sweep take: ``Params.of(mapping)`` from a notebook's names or a parameter file over the defaults.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
from collections.abc import Mapping
from typing import Any, Callable, Iterator, NoReturn, TypeVar

from . import _validate as _v

__all__ = ["P", "ParameterError", "check_parameters", "ChapterParams", "param", "chapter_params"]


class ParameterError(ValueError):
    """A chapter parameter of the wrong type or range, or one the chapter does not have."""


def _hint(v: Any) -> str:
    """Papermill's hint for a string that looks like a list or a dict (``-p`` passes text)."""
    if isinstance(v, str) and v.lstrip().startswith(("[", "{")):
        return "; papermill's -p passes text: give lists and dicts with -y 'name: [1, 2]' or a parameter file (-f)"
    return ""


def _fail(what: str) -> Callable[[Any], NoReturn]:
    """Raise ValueError ``"must be {what}, got v (type)"`` (the wording of :func:`ldptut._validate.expected`) with
    papermill's hint: for what :mod:`ldptut._validate` has no rule of (a list, a float32 magnitude, a device name)."""
    def raise_(v: Any) -> NoReturn:
        raise ValueError(_v.expected("", what, v) + _hint(v))
    return raise_


def _rule(check: Callable[..., Any], v: Any, *args: Any, **kwargs: Any) -> None:
    """``check(v, "", ...)``, a rule of :mod:`ldptut._validate` (the parameter is named by :func:`check_parameters`),
    its message with papermill's hint."""
    try:
        check(v, "", *args, **kwargs)
    except ValueError as e:
        raise ValueError(f"{e}{_hint(v)}") from None


class P:
    """Validators for :func:`check_parameters`: each takes a value and raises ValueError saying what it must be.

    Each applies a rule of :mod:`ldptut._validate` (what an integer, a finite real, a fraction, a bool, a string is),
    unnamed, as :func:`check_parameters` names the parameter. A validator checks and keeps the value as given, so,
    unlike the computing functions' checks, it accepts no tensor (a tensor parameter would stay a tensor) and no
    int-valued float for an integer (``rounds = 3.0`` would reach ``range()``). What it adds: :attr:`REAL_MAX`
    bounds a real's magnitude, and a string that looks like a list gets papermill's hint."""

    @staticmethod
    def integer(v: Any, *, minimum: int | None = None) -> None:
        _rule(_v.integer, v, minimum=minimum, tensor=False)

    @staticmethod
    def pos_int(v: Any) -> None:
        P.integer(v, minimum=1)

    @staticmethod
    def nonneg_int(v: Any) -> None:
        P.integer(v, minimum=0)

    #: The largest magnitude of a real parameter: the chapters compute in float32, whose largest finite value is about
    #: 3.4e38; a parameter near it (a range radius of 1e300) passes a finiteness check and overflows later.
    REAL_MAX = 1e30

    @staticmethod
    def real(v: Any, *, positive: bool = False) -> None:
        _rule(_v.real, v, positive=positive, tensor=False)
        if abs(v) > P.REAL_MAX:
            _fail(f"a number of magnitude at most {P.REAL_MAX:g} (the chapters compute in float32)")(v)

    @staticmethod
    def device(v: Any) -> None:
        """A torch device name: "auto" (CUDA when present, else the CPU), "cpu", "cuda", "cuda:N". Only the name is
        checked here (a parameter file may name "cuda" for a GPU run); the chapter's ``resolve_device`` then
        refuses "cuda" on a machine without one, saying so."""
        from .devices import check_device_name

        if not isinstance(v, str):
            _fail("a device name: 'auto', 'cpu', 'cuda' or 'cuda:N'")(v)
        check_device_name(v)

    @staticmethod
    def pos_float(v: Any) -> None:
        P.real(v, positive=True)

    @staticmethod
    def fraction(v: Any) -> None:
        _rule(_v.fraction, v, tensor=False)

    @staticmethod
    def boolean(v: Any) -> None:
        _rule(_v.boolean, v)

    @staticmethod
    def string(v: Any) -> None:
        _rule(_v.string, v)

    @staticmethod
    def choice(*options: Any) -> Callable[[Any], None]:
        def check(v: Any) -> None:
            _rule(_v.one_of, v, options)
        return check

    @staticmethod
    def optional(inner: Callable[[Any], None]) -> Callable[[Any], None]:
        def check(v: Any) -> None:
            if v is not None:
                inner(v)
        return check

    @staticmethod
    def list_of(inner: Callable[[Any], None], *, nonempty: bool = False) -> Callable[[Any], None]:
        """A list of items that each pass ``inner``; ``nonempty``: at least one (for a list the chapter cannot do
        without; an empty list elsewhere skips what it lists)."""
        def check(v: Any) -> None:
            if not isinstance(v, (list, tuple)):
                _fail("a list")(v)
            if not v and nonempty:
                _fail("a non-empty list")(v)
            for i, item in enumerate(v):
                try:
                    inner(item)
                except ValueError as e:
                    raise ValueError(f"item {i}: {e}") from None
        return check


#: Names IPython, papermill and nbval put into a kernel's namespace: never chapter parameters.
_KERNEL_NAMES = {"In", "Out", "get_ipython", "exit", "quit", "open"}


def check_parameters(namespace: Mapping[str, Any], spec: Mapping[str, Callable[[Any], None]]) -> None:
    """Check a chapter's parameters in ``namespace`` (the notebook's ``globals()``) against ``spec``
    (name -> validator of :class:`P`), before anything else runs.

    Raises :class:`ParameterError` naming every bad parameter: a value of the wrong type or range, and any
    data-valued name the chapter does not declare (what papermill's ``-p`` injects for a misspelt name; the
    closest declared names are suggested). Modules, functions and classes, and names starting with "_", are
    not parameters and are ignored.
    """
    problems = []
    for name, check in spec.items():
        if name not in namespace:
            problems.append(f"parameter {name!r} is not defined (the parameters cell lost it?)")
            continue
        try:
            check(namespace[name])
        except ValueError as e:
            problems.append(f"parameter {name!r} {e}")
    for name, value in namespace.items():
        if name.startswith("_") or name in spec or name in _KERNEL_NAMES:
            continue
        if isinstance(value, (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)) or callable(value):
            continue
        close = difflib.get_close_matches(name, list(spec), n=2)
        problems.append(f"unknown parameter {name!r}" + (f" (did you mean {' or '.join(map(repr, close))}?)" if close
                                                           else "") + f"; this chapter's parameters: {', '.join(spec)}")
    if problems:
        raise ParameterError("; ".join(problems))


Check = Callable[[Any], None]
T = TypeVar("T", bound="ChapterParams")


def param(check: Check, default: Any) -> Any:
    """A field of a chapter's ``Params``: its validator (one of :class:`P`) and its default (the value in the
    chapter's parameters cell; a list is copied for every instance)."""
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda d=default: type(d)(d), metadata={"check": check})
    return dataclasses.field(default=default, metadata={"check": check})


def chapter_params(cls: type[T]) -> type[T]:
    """Make ``cls`` (a :class:`ChapterParams` subclass) a frozen, keyword-only dataclass compared as a mapping."""
    return dataclasses.dataclass(frozen=True, kw_only=True, eq=False, repr=False)(cls)


class ChapterParams(Mapping):
    """Base of a chapter's parameters, one frozen dataclass per paper module (``Params``, declared with
    :func:`chapter_params` and :func:`param`). Built from keywords or with :meth:`of` from a mapping, it checks
    every field with its validator and :meth:`check` across fields, raising :class:`ParameterError` naming each bad
    or unknown parameter. It reads as a mapping of the chapter's names (``p["rounds"]``), so a notebook's names, a
    parameter file and a ``Params`` are interchangeable where a chapter's parameters are expected."""

    def __post_init__(self) -> None:
        check_parameters({f.name: getattr(self, f.name) for f in dataclasses.fields(self)}, self.spec())
        try:
            self.check()
        except ValueError as e:
            raise ParameterError(str(e)) from None

    def check(self) -> None:
        """What the fields' validators cannot say (relations between parameters); raise ValueError. None here."""

    @classmethod
    def spec(cls) -> dict[str, Check]:
        """Name -> validator, in the order of the chapter's parameters cell (what :func:`check_parameters` takes)."""
        return {f.name: f.metadata["check"] for f in dataclasses.fields(cls)}

    @classmethod
    def of(cls: type[T], p: Mapping[str, Any]) -> T:
        """``p`` as this chapter's parameters: every name must be one of them and all must be there (a notebook's
        ``globals()`` qualifies: modules, functions and names starting with "_" are ignored)."""
        if isinstance(p, cls):
            return p
        check_parameters(p, cls.spec())
        return cls(**{name: p[name] for name in cls.spec()})

    def replace(self: T, **changes: Any) -> T:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)

    def __getitem__(self, name: str) -> Any:
        if name not in self.spec():
            raise KeyError(name)
        return getattr(self, name)

    def __iter__(self) -> Iterator[str]:
        return iter(self.spec())

    def __len__(self) -> int:
        return len(dataclasses.fields(self))

    def __repr__(self) -> str:
        default = type(self)()
        changed = {k: v for k, v in self.items() if v != default[k]}
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in changed.items())})"

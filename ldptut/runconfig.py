"""Typed run configurations: one frozen dataclass per kind of run, the key of the run cache.

A :class:`RunConfig` holds everything that determines a training run's numbers (paper, data set,
model, clients, rounds, seed and the kind's own settings). It is

* the key of :class:`ldptut.runcache.RunCache` (:meth:`RunConfig.key`: SHA-256 of its canonical JSON);
* what builds the simulator call (each kind's :meth:`RunConfig.train_group`, given a :class:`TrainingEnv`: the
  device, progress bars and a memo for loaded data, never the runner that called it);
* what a paper module's ``compare(runs)`` filters on (``runs["config"]`` holds the objects).

Values are normalised when the object is made, so equal settings give one key whatever their Python
type: ``lr=1`` and ``lr=1.0`` are the same float, lists become tuples, numpy scalars plain numbers.
Fields equal to their default are left out of the key, so adding a field with a default to a kind later
keeps every stored key valid. Kinds register themselves by their ``kind`` name
(:func:`config_from_dict` rebuilds any of them); values that are themselves small frozen dataclasses (a
weight range rule) register with :func:`config_value`.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import itertools
import json
import numbers
import types
import typing
from typing import Any, Callable, ClassVar, Hashable, Mapping, Optional, Sequence

from . import _validate

__all__ = ["RunConfig", "TrainingEnv", "config_from_dict", "config_value", "config_key", "group_indices"]

_KINDS: dict[str, type["RunConfig"]] = {}
_VALUES: dict[str, type] = {}


def config_value(name: str) -> Callable[[type], type]:
    """Class decorator: a frozen dataclass usable as a field value of a RunConfig, stored as
    ``{"rule": name, <its fields>}`` (e.g. ``FixedRange`` as ``{"rule": "fixed", "center": 0.0, ...}``)."""
    def register(cls: type) -> type:
        if not (dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen):
            raise TypeError(f"{cls.__name__} must be a frozen dataclass to be a run-configuration value")
        if name in _VALUES and _VALUES[name] is not cls:
            raise ValueError(f"a configuration value named {name!r} is registered already ({_VALUES[name].__name__})")
        _VALUES[name] = cls
        cls.rule = name
        return cls
    return register


def _value_name(value: Any) -> Optional[str]:
    return next((n for n, c in _VALUES.items() if type(value) is c), None)


def _normalise(value: Any, hint: Any, where: str) -> Any:
    """``value`` converted to the canonical Python type of the annotation ``hint`` (or ValueError naming ``where``).

    The scalar types follow the rules of :mod:`ldptut._validate` (an int is no bool, a float is finite, ...), after
    the conversions that give equal settings one key: an int-valued float (``100.0`` from JSON or YAML) for an
    ``int`` field, 0 / 1 for a ``bool`` field, a numpy scalar or a one-element tensor as its Python number, a sequence
    as a tuple. A float must be finite because a key must equal itself (NaN != NaN)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None:
            if type(None) in args:
                return None
            raise ValueError(f"{where} may not be None")
        errors = []
        for a in args:
            if a is type(None):
                continue
            try:
                return _normalise(value, a, where)
            except (TypeError, ValueError) as e:
                errors.append(str(e))
        raise ValueError(f"{where}: {value!r} fits none of {hint}: {'; '.join(errors)}")
    if origin is tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
            raise ValueError(f"{where} must be a sequence, got {value!r}")
        item = args[0] if args else Any
        return tuple(_normalise(v, item, f"{where}[{i}]") for i, v in enumerate(value))
    if hint is Any:
        return value
    if hint is float:
        try:
            return _validate.real(value, where)
        except _validate.NotFiniteError as e:
            raise ValueError(f"{e}: a key must equal itself") from None
    if hint is int:
        if not isinstance(value, numbers.Integral):   # an int-valued float is that int
            with contextlib.suppress(ValueError):
                f = _validate.real(value, where)
                value = int(f) if f.is_integer() else value
        return _validate.integer(value, where)
    if hint is bool:
        if isinstance(value, numbers.Integral) and value in (0, 1):   # 0 / 1 (a bool too) is that bool
            value = bool(value)
        return _validate.boolean(value, where)
    if hint is str:
        return _validate.string(value, where)
    if isinstance(hint, type) and hint in _VALUES.values():
        if isinstance(value, Mapping):
            return _value_from_dict(value, where)
        if type(value) is not hint:
            raise ValueError(f"{where} must be a {hint.__name__}, got {value!r}")
        return value
    raise TypeError(f"{where}: unsupported annotation {hint!r} in a run configuration")


def _value_from_dict(d: Mapping[str, Any], where: str) -> Any:
    rule = d.get("rule")
    if rule not in _VALUES:
        raise ValueError(f"{where}: unknown rule {rule!r}; known: {sorted(_VALUES)}")
    cls = _VALUES[rule]
    return cls(**{k: v for k, v in d.items() if k != "rule"})


def _plain(value: Any) -> Any:
    """JSON form of a normalised value."""
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    name = _value_name(value)
    if name is not None:
        return {"rule": name, **{f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    return value


def config_key(doc: Mapping[str, Any]) -> str:
    """SHA-256 (first 16 hex digits) of the canonical JSON of a configuration dict (sorted keys, no spaces)."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Base of every kind of run: the fields all papers share. Subclasses add their own settings.

    ``paper``: the paper module (``ldptut.papers.<paper>``) or chapter whose experiment this is;
    ``dataset`` / ``model``: names known to :mod:`ldptut.data` / :mod:`ldptut.models` (or to the paper
    module); ``seed``: every random draw of the run derives from it (:mod:`ldptut.rng`).
    """

    kind: ClassVar[str] = ""

    paper: str
    dataset: str
    model: str
    n_clients: int
    rounds: int
    seed: int = 0

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("kind")
        if name:
            if name in _KINDS and _KINDS[name].__qualname__ != cls.__qualname__:
                raise ValueError(f"a run configuration kind named {name!r} is registered already")
            _KINDS[name] = cls

    def __post_init__(self) -> None:
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _normalise(getattr(self, f.name), hints[f.name],
                                                        f"{type(self).__name__}.{f.name}"))
        if self.n_clients < 1:
            raise ValueError(f"n_clients must be >= 1, got {self.n_clients}")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")
        if self.seed < 0:
            raise ValueError(f"seed must be >= 0, got {self.seed}")

    # ---- identity ---------------------------------------------------------------------------------
    def to_dict(self, *, defaults: bool = True) -> dict:
        """``{"kind": ..., field: JSON value}``; ``defaults=False`` leaves out fields at their default."""
        out: dict[str, Any] = {"kind": self.kind}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if not defaults and f.default is not dataclasses.MISSING and v == f.default:
                continue
            out[f.name] = _plain(v)
        return out

    def key(self) -> str:
        """The cache key: :func:`config_key` of :meth:`to_dict` without the fields at their default."""
        return config_key(self.to_dict(defaults=False))

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with ``changes`` (normalised like the constructor's arguments)."""
        return dataclasses.replace(self, **changes)

    # ---- training (each kind implements it) -------------------------------------------------------
    def group_key(self) -> Any:
        """Runs with equal group keys are trained together by :meth:`train_group` (default: each alone)."""
        return self

    @classmethod
    def train_group(cls, configs: Sequence["RunConfig"], *, env: "TrainingEnv") -> list:
        """Train ``configs`` (one group) in ``env`` and return one per-round history (``pandas.DataFrame``) each."""
        raise NotImplementedError(f"{cls.__name__} does not say how to train it")


def _no_memo(key: Hashable, make: Callable[[], Any]) -> Any:
    return make()


@dataclasses.dataclass(frozen=True)
class TrainingEnv:
    """What a run kind's :meth:`RunConfig.train_group` is given: the ``device`` to train on, whether to show
    ``progress`` bars, and ``memo(key, make)``, which returns ``make()`` once per key for as long as the caller keeps
    it (:class:`ldptut.experiments.Runner` shares its own, so a chapter's tables and its runs load a data set once;
    the default memo keeps nothing)."""

    device: Any = "cpu"
    progress: bool = True
    memo: Callable[[Hashable, Callable[[], Any]], Any] = _no_memo

    def dataset(self, name: str) -> Any:
        """The data set ``name`` (:func:`ldptut.data.load_dataset` on ``device``), once per memo."""
        from . import data

        return self.memo(("dataset", name), lambda: data.load_dataset(name, device=self.device))


def config_from_dict(doc: Mapping[str, Any]) -> RunConfig:
    """The typed configuration stored as ``doc`` (:meth:`RunConfig.to_dict`), of any registered kind.

    A kind registers when the module defining it is imported (:class:`ldptut.experiments.FedAvgConfig`, a paper's kinds
    in ``ldptut.papers.<paper>``); this module imports none of them (it is the lowest layer): whoever reads records
    imports the modules of the kinds it expects.
    """
    if not isinstance(doc, Mapping) or "kind" not in doc:
        raise ValueError(f"not a run configuration (no 'kind'): {doc!r}")
    name = doc["kind"]
    if name not in _KINDS:
        raise ValueError(f"unknown run configuration kind {name!r}: import the module that defines it (FedAvgConfig: "
                         f"ldptut.experiments; a paper's kinds: ldptut.papers.<paper>); registered: {sorted(_KINDS)}")
    cls = _KINDS[name]
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(doc) - names - {"kind"})
    if unknown:
        raise ValueError(f"{cls.__name__} has no field(s) {unknown}")
    return cls(**{k: v for k, v in doc.items() if k != "kind"})


def group_indices(configs: Sequence["RunConfig"]) -> list[list[int]]:
    """Indices of ``configs`` grouped by :meth:`RunConfig.group_key` (runs trained together), groups in the order
    of their keys' repr, indices in input order within a group."""
    order = sorted(range(len(configs)), key=lambda i: repr(configs[i].group_key()))
    return [list(g) for _, g in itertools.groupby(order, key=lambda i: repr(configs[i].group_key()))]

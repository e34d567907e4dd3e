"""Helpers for the book's notebooks: checking a chapter's parameters, and paper-scale run pages.

* :func:`check_parameters` runs in the cell right after a chapter's ``parameters`` cell: it checks the
  type and range of every parameter (papermill's ``-p`` passes strings where a list was meant) and
  rejects names the chapter does not have (a misspelt ``-p round 1`` would otherwise run the whole
  chapter with the default ``rounds`` and fail at the end, because ``round`` hides the builtin).
  The checks are small validators: :data:`P` holds them.
* ``python -m ldptut.notebooks mark-paper-run RUN.ipynb PARAMS.yaml`` puts a header cell on a
  papermill output (``make reproduce``) so the book renders it as the chapter's paper-scale page.
"""
from __future__ import annotations

import datetime as _dt
import difflib
import json
import math
import numbers
import sys
import types
from pathlib import Path
from typing import Any, Callable, Mapping

from .provenance import machine_summary

__all__ = ["mark_paper_run", "check_parameters", "P", "ParameterError"]


class ParameterError(ValueError):
    """A chapter parameter of the wrong type or range, or one the chapter does not have."""


def _fail(what: str) -> Callable[[Any], None]:
    def raise_(v: Any) -> None:
        hint = ""
        if isinstance(v, str) and v.lstrip().startswith(("[", "{")):
            hint = "; papermill's -p passes text: give lists and dicts with -y 'name: [1, 2]' or a parameter file (-f)"
        raise ValueError(f"must be {what}, got {v!r} ({type(v).__name__}){hint}")
    return raise_


class P:
    """Validators for :func:`check_parameters`: each takes a value and raises ValueError saying what it must be."""

    @staticmethod
    def integer(v: Any, *, minimum: int | None = None) -> None:
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or (minimum is not None and v < minimum):
            _fail("an integer" + (f" >= {minimum}" if minimum is not None else ""))(v)

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
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or (positive and v <= 0):
            _fail("a finite number" + (" > 0" if positive else ""))(v)
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
        if isinstance(v, bool) or not isinstance(v, numbers.Real) or not 0 < v <= 1:
            _fail("a number in (0, 1]")(v)

    @staticmethod
    def boolean(v: Any) -> None:
        if not isinstance(v, bool):
            _fail("True or False")(v)

    @staticmethod
    def string(v: Any) -> None:
        if not isinstance(v, str):
            _fail("a string")(v)

    @staticmethod
    def choice(*options: Any) -> Callable[[Any], None]:
        def check(v: Any) -> None:
            if v not in options:
                _fail("one of " + ", ".join(repr(o) for o in options))(v)
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


def mark_paper_run(notebook: str | Path, params: str | Path) -> None:
    """Insert (or replace) the header cell of a paper-scale run notebook: title, parameter file, date, machine."""
    notebook, params = Path(notebook), Path(params)
    nb = json.loads(notebook.read_text())
    # what this page runs, for its title (the sidebar shows it): a "# page title: ..." line of the parameter
    # file, else the variant in its name (<chapter>-<variant>-paper.yaml)
    what = next((line.split(":", 1)[1].strip() for line in params.read_text().splitlines()
                 if line.lower().startswith("# page title:")), None)
    if what is None:
        variant = params.name.removesuffix("-paper.yaml").split("-", 1)[1:]
        what = variant[0] if variant else None
    title = "Paper-scale run"
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            src = "".join(cell["source"]).lstrip()
            if src.startswith("# "):
                title = src.splitlines()[0][2:].strip() + ": paper-scale run"
                cell["source"] = "## " + src[2:]  # one page title only: demote the chapter title
                break
    if what:
        title += f" ({what})"
    meta = nb.get("metadata", {}).get("papermill", {})
    seconds = meta.get("duration")
    header = [
        f"# {title}\n", "\n",
        "This page is a committed papermill output (`make reproduce`), not re-executed when the book is built.\n",
        f"Parameters: `{params.as_posix()}` (shown in the cell tagged `injected-parameters` below).\n",
        f"Executed {_dt.date.today().isoformat()} on {machine_summary()}"
        + (f", {seconds / 60:.1f} minutes." if seconds else ".") + "\n",
    ]
    cells = [c for c in nb["cells"] if "paper-run-header" not in c.get("metadata", {}).get("tags", [])]
    cells.insert(0, {"cell_type": "markdown", "id": "paper-run-header", "metadata": {"tags": ["paper-run-header"]},
                     "source": header})
    nb["cells"] = cells
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "mark-paper-run":
        sys.exit("usage: python -m ldptut.notebooks mark-paper-run RUN.ipynb PARAMS.yaml")
    mark_paper_run(sys.argv[2], sys.argv[3])

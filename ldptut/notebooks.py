"""Helpers for the book's notebooks: every chapter's opening (:func:`setup`), paper-scale run pages (and,
re-exported from :mod:`ldptut.params`, the chapters' parameter checks).

* ``python -m ldptut.notebooks mark-paper-run RUN.ipynb PARAMS.yaml`` puts a header cell on a
  papermill output (``make reproduce``) so the book renders it as the chapter's paper-scale page.
"""
from __future__ import annotations

import ast
import datetime as _dt
import json
import sys
import re
from pathlib import Path
import textwrap
from typing import Any, Mapping, NamedTuple, Optional

from .params import ChapterParams, P, ParameterError, check_parameters  # noqa: F401  (re-exported)
from .provenance import machine_summary

__all__ = ["setup", "ChapterSetup", "mark_paper_run", "paper_run_header", "check_parameters", "P", "ParameterError"]


class ChapterSetup(NamedTuple):
    """What a chapter's opening cell unpacks: ``params, device, runner = setup(...)``."""

    params: ChapterParams
    device: str      # "cpu", "cuda" or "cuda:N" (resolved)
    runner: Any      # an ldptut.experiments.Runner


def setup(namespace: Mapping[str, Any], params: type[ChapterParams], *, cache: Optional[str | Path] = None,
          progress: bool = False, width: int = 72) -> ChapterSetup:
    """The opening of every chapter, right after its parameters cell.

    1. ``params.of(namespace)`` checks every parameter in the notebook's ``globals()`` before anything runs: a value
       of the wrong type or range, a misspelt name (papermill's ``-p`` injects it beside the default) or a missing one
       raises :class:`ParameterError` naming each (:meth:`ChapterParams.of`);
    2. the ``device`` parameter is resolved (:func:`ldptut.devices.resolve_device`: "auto" is CUDA when present, else
       the CPU; "cuda" on a machine without one raises);
    3. the machine is printed (:func:`ldptut.provenance.machine_summary`, wrapped to ``width`` columns);
    4. the chapter's :class:`~ldptut.experiments.Runner` is made over the run cache ``cache`` (None: every run is
       trained here, once, and kept in memory), on that device, with progress bars if ``progress``.
    """
    from .devices import resolve_device
    from .experiments import Runner

    p = params.of(namespace)
    device = resolve_device(p["device"])
    print(textwrap.fill(machine_summary(), width))
    return ChapterSetup(params=p, device=device, runner=Runner(cache, device=device, progress=progress))


SHOWN_CHANGES = 8  # a page header shows at most this many changed parameters; more go into a dropdown


def _parameters_cell_defaults(chapter: Path) -> dict[str, Any]:
    """The chapter's defaults: every ``name = literal`` of its ``parameters``-tagged cell (others as source text)."""
    nb = json.loads(chapter.read_text())
    cell = next((c for c in nb["cells"] if "parameters" in c.get("metadata", {}).get("tags", [])), None)
    if cell is None:
        return {}
    src = "".join(cell["source"])
    out: dict[str, Any] = {}
    for node in ast.parse(src).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                out[node.targets[0].id] = ast.get_source_segment(src, node.value)
    return out


def _short(value: Any, width: int = 28) -> str:
    """A parameter value in a few characters: lists longer than ``width`` as their first items and a count."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        if any(isinstance(v, (dict, list, tuple)) for v in value):
            return f"{len(value)} settings"
        items = [_short(v, width) for v in value]
        text = "[" + ", ".join(items) + "]"
        if len(text) <= width:
            return text
        head = []
        for it in items:
            if len("[" + ", ".join(head + [it]) + ", …]") > width - 12:
                break
            head.append(it)
        return "[" + ", ".join(head) + ", …]" + f" ({len(items)} values)"
    if isinstance(value, dict):
        return f"{len(value)} entries"
    text = str(value)
    return text if len(text) <= width else text[: width - 1] + "…"


def _run_store(directory: Path) -> dict[str, Any] | None:
    """What a page's run store holds: number of runs, hours of training, dates and devices (from each record's
    provenance; read as JSON, no run is decoded)."""
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    if not files:
        return None
    seconds, dates, devices = 0.0, [], {}
    for f in files:
        prov = json.loads(f.read_text()).get("provenance", {})
        seconds += float(prov.get("seconds") or 0.0)
        if prov.get("date"):
            dates.append(str(prov["date"])[:10])
        dev = str(prov.get("device") or "unknown device")
        devices[dev] = devices.get(dev, 0) + 1
    return {"runs": len(files), "hours": seconds / 3600, "first": min(dates) if dates else None,
            "last": max(dates) if dates else None, "devices": devices}


def paper_run_header(notebook: str | Path, params: str | Path, *,
                     executed: tuple[str, str] | None = None) -> list[str]:
    """The header of a paper-scale page (markdown lines): a short title for the sidebar ("Paper scale: <what>", from
    the parameter file's ``# page title:`` line), a link back to the chapter, the parameters that differ from the
    chapter's defaults, and, collapsed, where its runs came from (the run store's records) and this execution
    (``executed``: (date, machine) to state instead of today on this machine, for re-heading a committed page)."""
    import yaml  # the book and test extras have it; the base install does not need it

    notebook, params = Path(notebook), Path(params)
    nb = json.loads(notebook.read_text())
    text = params.read_text()
    what = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                 if line.lower().startswith("# page title:")), None)
    stem = params.name.removesuffix("-paper.yaml")
    chapter_name, _, variant = stem.partition("-")
    if what is None:
        what = variant or None
    chapter_title = None
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and "paper-run-header" not in cell.get("metadata", {}).get("tags", []):
            src = "".join(cell["source"]).lstrip()
            if src.startswith(("# ", "## ")):
                chapter_title = src.splitlines()[0].lstrip("#").strip()
                break
    chapter = params.parent.parent / f"{chapter_name}.ipynb"
    link = f"[{chapter_title or chapter_name}](../{chapter_name}.ipynb)"
    values = yaml.safe_load(text) or {}
    defaults = _parameters_cell_defaults(chapter) if chapter.exists() else {}
    changed = [(k, v) for k, v in values.items() if k not in defaults or defaults[k] != v]
    lines = [f"# Paper scale: {what}\n" if what else "# Paper scale\n", "\n",
             f"The chapter {link}, executed with the parameter file `{params.as_posix()}` in place of the chapter's "
             "defaults. Every number below comes from this execution; where the prose speaks of the defaults, it "
             "means the chapter's page.\n", "\n"]
    if changed:
        rows = ["| parameter | chapter default | this page |\n", "|---|---|---|\n"]
        rows += [f"| `{k}` | {_short(defaults[k]) if k in defaults else '–'} | {_short(v)} |\n" for k, v in changed]
        if len(changed) <= SHOWN_CHANGES:
            lines += ["What differs from the chapter's defaults:\n", "\n"] + rows + ["\n"]
        else:
            lines += [f"```{{dropdown}} The {len(changed)} parameters that differ from the chapter's defaults\n"]
            lines += rows + ["```\n", "\n"]
    stores = []
    for k, v in values.items():
        if isinstance(v, str) and v.startswith("runs/cache/") and v not in [s[0] for s in stores]:
            info = _run_store(params.parent.parent / v)
            if info:
                stores.append((v, info))
    meta = nb.get("metadata", {}).get("papermill", {})
    seconds = meta.get("duration")
    details = []
    for path, info in stores:
        span = (info["first"] if info["first"] == info["last"] else f"{info['first']} to {info['last']}") \
            if info["first"] else "undated"
        devices = "; ".join(f"{n} on {d}" for d, n in sorted(info["devices"].items(), key=lambda kv: -kv[1]))
        details.append(f"- Runs: the store `book/{path}` holds {info['runs']} runs, {info['hours']:.1f} h of "
                       f"training in all, trained {span} ({devices}). This page loads them; a run it needs and the "
                       "store lacks is trained and stored.\n")
    date, machine = executed or (_dt.date.today().isoformat(), machine_summary())
    details.append(f"- This execution: {date} on {machine}"
                   + (f", {seconds / 60:.1f} minutes" if seconds else "") + ".\n")
    details.append("- A committed papermill output (`make reproduce`), rendered as it is when the book is built, "
                   "never re-executed.\n")
    lines += ["```{dropdown} Where the numbers come from\n"] + details + ["```\n"]
    return lines


def _header_execution(notebook: Path) -> tuple[str, str] | None:
    """(date, machine) of the execution a page's present header states, old form ("Executed DATE on MACHINE, ...")
    or new ("This execution: DATE on MACHINE, ...")."""
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        if "paper-run-header" in cell.get("metadata", {}).get("tags", []):
            m = re.search(r"(?:Executed|This execution:) (\d{4}-\d{2}-\d{2}) on (.*?)(?:, [\d.]+ minutes)?\.\s*$",
                          "".join(cell["source"]), flags=re.M)
            return (m.group(1), m.group(2)) if m else None
    return None


def mark_paper_run(notebook: str | Path, params: str | Path, *, executed: tuple[str, str] | None = None) -> None:
    """Insert (or replace) the header cell of a paper-scale run notebook (:func:`paper_run_header`), demote the
    chapter's title to a section, and keep the page out of the search index (the chapter's prose is indexed once,
    on the chapter's page: notebook metadata ``nosearch``, which Sphinx honours)."""
    notebook = Path(notebook)
    header = paper_run_header(notebook, params, executed=executed)
    nb = json.loads(notebook.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown" and "paper-run-header" not in cell.get("metadata", {}).get("tags", []):
            src = "".join(cell["source"]).lstrip()
            if src.startswith("# "):
                cell["source"] = "## " + src[2:]  # one page title only: demote the chapter title
                break
            if src.startswith("## "):
                break
    cells = [c for c in nb["cells"] if "paper-run-header" not in c.get("metadata", {}).get("tags", [])]
    cells.insert(0, {"cell_type": "markdown", "id": "paper-run-header", "metadata": {"tags": ["paper-run-header"]},
                     "source": header})
    nb["cells"] = cells
    nb.setdefault("metadata", {})["nosearch"] = True
    notebook.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    # mark-paper-run RUN.ipynb PARAMS.yaml [--keep-date]: --keep-date re-heads a committed page without re-executing
    # it and keeps the execution date its header states
    args = sys.argv[1:]
    keep = "--keep-date" in args
    args = [a for a in args if a != "--keep-date"]
    if len(args) != 3 or args[0] != "mark-paper-run":
        sys.exit("usage: python -m ldptut.notebooks mark-paper-run RUN.ipynb PARAMS.yaml [--keep-date]")
    mark_paper_run(args[1], args[2], executed=_header_execution(Path(args[1])) if keep else None)

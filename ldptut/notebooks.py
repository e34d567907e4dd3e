"""Helpers for the book's notebooks: paper-scale run pages and stable printing of key results.

``python -m ldptut.notebooks mark-paper-run RUN.ipynb PARAMS.yaml`` puts a header cell on a
papermill output (``make reproduce``) so the book renders it as the chapter's paper-scale page.
"""
from __future__ import annotations

import datetime as _dt
import json
import sys
from pathlib import Path

from .provenance import machine_summary

__all__ = ["mark_paper_run"]


def mark_paper_run(notebook: str | Path, params: str | Path) -> None:
    """Insert (or replace) the header cell of a paper-scale run notebook: title, parameter file, date, machine."""
    notebook, params = Path(notebook), Path(params)
    nb = json.loads(notebook.read_text())
    title = "Paper-scale run"
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            src = "".join(cell["source"]).lstrip()
            if src.startswith("# "):
                title = src.splitlines()[0][2:].strip() + ": paper-scale run"
                cell["source"] = "## " + src[2:]  # one page title only: demote the chapter title
                break
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

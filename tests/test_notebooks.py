"""The paper-scale page header (ldptut.notebooks.mark_paper_run) on a tiny chapter, parameter file and run store."""
from __future__ import annotations

import json
from pathlib import Path

from ldptut.notebooks import _short, mark_paper_run, paper_run_header


def _nb(cells: list[dict]) -> dict:
    return {"cells": cells, "metadata": {"papermill": {"duration": 90.0}}, "nbformat": 4, "nbformat_minor": 5}


def _md(text: str, tags=()) -> dict:
    return {"cell_type": "markdown", "metadata": {"tags": list(tags)}, "source": text}


def _code(text: str, tags=()) -> dict:
    return {"cell_type": "code", "metadata": {"tags": list(tags)}, "source": text, "outputs": [],
            "execution_count": None}


def _book(tmp_path: Path) -> tuple[Path, Path, Path]:
    book = tmp_path / "book"
    (book / "params").mkdir(parents=True)
    (book / "runs" / "cache" / "toy").mkdir(parents=True)
    chapter = _nb([_md("# Toy chapter\n\nText."),
                   _code('seed = 0\nrounds = 4\nepsilons = [0.5, 1.0]\ncache = None\ndevice = "cpu"\n', ["parameters"]),
                   _code("print(rounds)")])
    (book / "toy.ipynb").write_text(json.dumps(chapter))
    params = book / "params" / "toy-mnist-paper.yaml"
    params.write_text("# page title: MNIST, tiny\nrounds: 50\nepsilons: [0.5, 1.0]\ncache: runs/cache/toy\n"
                      "seeds: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]\n")
    for i, (sec, date, dev) in enumerate([(3600, "2026-11-20T10:00:00", "cpu: A"), (1800, "2026-11-22T10:00:00", "cuda: H"),
                                          (1800, "2026-11-21T09:00:00", "cpu: A")]):
        (book / "runs" / "cache" / "toy" / f"{i}.json").write_text(
            json.dumps({"provenance": {"seconds": sec, "date": date, "device": dev}, "history": {}}))
    page = book / "runs" / "toy-mnist-paper.ipynb"
    page.write_text(json.dumps(chapter))
    return book, params, page


def test_header_title_link_changed_parameters_and_run_store(tmp_path):
    book, params, page = _book(tmp_path)
    text = "".join(paper_run_header(page, params, executed=("2026-11-01", "machine X")))
    assert text.startswith("# Paper scale: MNIST, tiny\n")
    assert "[Toy chapter](../toy.ipynb)" in text
    # only what differs from the chapter's parameters cell, both values shown; unchanged epsilons left out
    assert "| `rounds` | 4 | 50 |" in text and "| `cache` | none | runs/cache/toy |" in text
    assert "`epsilons`" not in text
    assert "| `seeds` | – | [0, 1, 2, 3, …] (12 values) |" in text
    assert "holds 3 runs, 2.0 h of training in all, trained 2026-11-20 to 2026-11-22 (2 on cpu: A; 1 on cuda: H)" in text
    assert "This execution: 2026-11-01 on machine X, 1.5 minutes." in text
    assert "```{dropdown} Where the numbers come from" in text and "What differs from" in text


def test_mark_paper_run_demotes_the_title_once_and_keeps_the_date(tmp_path):
    book, params, page = _book(tmp_path)
    mark_paper_run(page, params, executed=("2026-11-01", "machine X"))
    nb = json.loads(page.read_text())
    assert nb["metadata"]["nosearch"] is True
    assert nb["cells"][0]["metadata"]["tags"] == ["paper-run-header"]
    assert "".join(nb["cells"][1]["source"]).startswith("## Toy chapter")
    # re-heading the committed page (make reproduce, or --keep-date): still one header, one demotion
    from ldptut.notebooks import _header_execution
    assert _header_execution(page) == ("2026-11-01", "machine X")
    mark_paper_run(page, params, executed=_header_execution(page))
    nb2 = json.loads(page.read_text())
    assert sum("paper-run-header" in c["metadata"].get("tags", []) for c in nb2["cells"]) == 1
    assert "".join(nb2["cells"][1]["source"]).startswith("## Toy chapter")
    assert nb2["cells"][1:] == nb["cells"][1:]


def test_short_values():
    assert _short(None) == "none" and _short(True) == "true" and _short(2.0) == "2" and _short(0.05) == "0.05"
    assert _short([{"a": 1}, {"b": 2}]) == "2 settings"
    assert _short("x" * 40) == "x" * 27 + "…"


def test_many_changes_go_into_a_dropdown(tmp_path):
    book, params, page = _book(tmp_path)
    params.write_text(params.read_text() + "".join(f"extra_{i}: {i}\n" for i in range(8)))
    text = "".join(paper_run_header(page, params, executed=("2026-11-01", "machine X")))
    assert "```{dropdown} The 11 parameters that differ from the chapter's defaults" in text
    assert "What differs from" not in text

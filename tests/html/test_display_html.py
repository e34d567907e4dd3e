"""``ldptut.display`` in a real browser: on a synthetic page with the book's 688 px text column, the checker of
``make check-html`` (``tests/html/check_html.py``) finds a 10-column results table from ``table`` within the column
and a two-panel ``figure`` drawn at no less than half its width, while the same data printed as text or shown as a
pandas table, and a figure drawn 20 inches wide, fail. Skipped without selenium, chromium and chromedriver."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from ldptut.display import COLUMN_PX, figure, integer_rounds, table  # noqa: E402

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("check_html", HERE / "check_html.py")
ch = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("check_html", ch)
_spec.loader.exec_module(ch)

MISSING = ch.missing_requirements()
pytestmark = pytest.mark.skipif(MISSING is not None, reason=f"browser check unavailable: {MISSING}")


def results_frame() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame({
        "mechanism": ["Laplace", "Piecewise (Wang et al.)", "Hybrid", "Gaussian (exact calibration)", "Two-point"],
        "ε per coordinate": [0.5, 1.0, 2.0, 4.0, 8.0],
        "clients per round (count)": [10, 10, 100, 100, 1000],
        "final test accuracy (%)": rng.uniform(60, 98, 5),
        "accuracy drop vs no noise (pp)": rng.uniform(0, 30, 5),
        "variance of one report (closed form)": rng.uniform(0, 1e4, 5),
        "wall time per round (s)": rng.uniform(0.01, 20, 5),
        "rounds to target accuracy": [12, 40, 200, 25, 7],
        "seeds (runs averaged)": [3, 3, 3, 5, 5],
        "privacy loss over training (ε)": [50.0, 100.0, 200.0, 400.0, 800.0],
    })


def page(body: str) -> str:
    # the book's column: the content box of article.bd-article, 688 px at a 1280 px viewport
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>t</title><style>body {{margin: 0; '
            f'font-family: sans-serif}} .bd-article {{width: {COLUMN_PX}px; padding: 0 20px}} img {{max-width: 100%}}'
            f'.cell_output pre {{overflow: auto; white-space: pre}}</style></head><body><article class="bd-article">'
            f"{body}</article></body></html>")


def cell(output: str) -> str:
    return f'<div class="cell"><div class="cell_output"><div class="output text_html">{output}</div></div></div>'


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    root = tmp_path_factory.mktemp("display")
    df = results_frame()
    fmt = {"final test accuracy (%)": ".2f", "accuracy drop vs no noise (pp)": ".1f",
           "variance of one report (closed form)": ".3g", "wall time per round (s)": ".2f"}
    fig, (a, b) = figure(2)
    for i, eps in enumerate([0.5, 1, 4]):
        a.plot([1, 2, 3], [60 + 10 * i, 65 + 10 * i, 70 + 10 * i], marker="o", label=f"ε = {eps} per coordinate")
        b.plot([1, 2, 3], [1 / (i + 1), 0.5 / (i + 1), 0.3 / (i + 1)], marker="o", label=f"ε = {eps}")
    a.set(xlabel="communication round", ylabel="test accuracy (%)", title="Accuracy")
    b.set(xlabel="communication round", ylabel="training loss", title="Loss", yscale="log")
    a.legend()
    b.legend()
    integer_rounds([a, b])
    fig.savefig(root / "helpers.png", dpi=fig.dpi, bbox_inches="tight")   # as Jupyter's inline backend does
    plt.close(fig)
    wide, _ = plt.subplots(1, 3, figsize=(20, 4))
    wide.savefig(root / "wide.png", dpi=wide.dpi, bbox_inches="tight")
    plt.close(wide)
    (root / "helpers.html").write_text(page(cell(table(df, caption="Final accuracy", number_format=fmt).to_html())
                                            + cell('<img src="helpers.png">')))
    (root / "text.html").write_text(page(cell(f"<pre>{df.to_string()}</pre>")))
    (root / "pandas.html").write_text(page(cell(df.to_html())))
    (root / "widefig.html").write_text(page(cell('<img src="wide.png">')))
    return {r.page: r for r in ch.check_pages(root, ["helpers.html", "text.html", "pandas.html", "widefig.html"])}


def test_the_helpers_fit_the_column(checked):
    r = checked["helpers.html"]
    assert r.loaded and r.failures == [], r.line()
    assert r.column == pytest.approx(COLUMN_PX, abs=1) and r.images == 1


@pytest.mark.parametrize("name, kind", [("text.html", "wide"), ("pandas.html", "wide"), ("widefig.html", "shrunk-img")])
def test_the_old_ways_fail(checked, name, kind):
    assert checked[name].failures == [kind], checked[name].line()

"""``ldptut.display``: tables and figures that fit the book's 688 px text column, with outputs nbval can check.

nbval (``pytest --nbval-lax``) compares every MIME type of a checked cell's output but images, ``text/html``
included, so both representations of a table must be the same on every run (no random ids)."""
from __future__ import annotations

import io
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from ldptut import display  # noqa: E402
from ldptut.display import COLUMN_PX, figure, integer_rounds, table  # noqa: E402


def wide_frame() -> pd.DataFrame:
    """A results table shaped like the chapters' (10 columns, long headers with units)."""
    return pd.DataFrame({
        "mechanism": ["Laplace", "Piecewise (Wang et al.)", "Hybrid"],
        "ε per coordinate": [0.5, 1.0, 4.0],
        "clients per round": [10, 10, 100],
        "final test accuracy (%)": [91.23456, 88.5, np.nan],
        "accuracy drop (pp)": [-0.0004, 2.73456, 10.0],
        "variance (closed form)": [1.23456e-3, 0.5, 12345.678],
        "time per round (s)": [0.01234, 1.5, 12.0],
        "rounds_to_target": [12, 40, 200],
        "seeds": [3, 3, 3],
        "run key": ["a1b2c3d4e5f6", "0f9e8d7c6b5a", "deadbeef0123"],
    })


# ----------------------------------------------------------------------------------------------------- table
def test_html_is_the_same_on_every_call_and_has_no_ids():
    df = wide_frame()
    a, b = table(df)._repr_html_(), table(df.copy())._repr_html_()
    assert a == b
    assert not re.search(r"\bid\s*=", a), "an id attribute in the table's HTML"
    assert not re.search(r"\b(T_|uuid)", a, re.IGNORECASE), "pandas Styler ids in the table's HTML"
    # a display of the same frame in another order of calls gives the same bytes too
    table(pd.DataFrame({"x": [1.0]}))._repr_html_()
    assert table(df)._repr_html_() == a


def test_ipython_shows_exactly_html_and_plain_text():
    from IPython.core.formatters import DisplayFormatter

    t = table(wide_frame(), caption="Final accuracy")
    data, _ = DisplayFormatter().format(t)
    assert set(data) == {"text/html", "text/plain"}   # the two MIME types nbval will compare
    assert data["text/html"] == t.to_html()
    assert data["text/plain"] == t.to_text() == str(t) == repr(t)


def test_headers_wrap_units_stay_whole_numbers_right_aligned():
    h = table(wide_frame()).to_html()
    css = re.search(r"<style>(.*?)</style>", h, re.S).group(1)
    assert re.search(r"\.ldptut-table th\{[^}]*white-space:normal", css)        # headers wrap
    assert "th>div{max-width:var(--ldptut-header-width" in css                  # ... at about 12 characters
    assert ".ldptut-table .num{text-align:right}" in css                         # headers and cells
    assert ".ldptut-table td.num{white-space:nowrap}" in css                    # a number never wraps ...
    assert not re.search(r"[\s,](th|\.num|\.txt)\{[^}]*nowrap", css)            # ... but a header does
    assert "font-variant-numeric:tabular-nums" in css
    assert re.search(r"font-size:0\.75rem", css)
    assert re.search(r"\.ldptut-table\{overflow-x:auto", css)                   # scrolls in its own box only
    assert 'style="--ldptut-header-width:12ch"' in h
    assert "final test accuracy (%)" in h                                       # units kept in the header
    assert "time per round (s)" in h
    assert "time per round (s)" in h and "(closed form)" in h                  # units kept in the header
    h = table(wide_frame().rename(columns={"time per round (s)": "time (s / round)"})).to_html()
    assert "time (s\u00a0/\u00a0round)" in h                                   # a short unit wraps as one piece
    assert "rounds_<wbr>to_<wbr>target" in h                                    # snake_case can wrap too
    assert '<th class="num"><div>seeds</div></th>' in h
    assert '<th class="txt"><div>mechanism</div></th>' in h
    assert '<td class="num">91.23</td>' in h and '<td class="txt">Laplace</td>' in h


def test_number_formats():
    df = pd.DataFrame({"a": [1.23456, -0.0004], "b": [2.5, 1e-7], "n": [60000, 7], "s": ["x", "<y>"],
                       "m": [np.nan, None]})
    t = table(df)                                                    # default: ints as is, .4g
    assert t.rows == (("1.235", "2.5", "60000", "x", "–"), ("-0.0004", "1e-07", "7", "<y>", "–"))
    t = table(df, number_format=".2f")                               # one spec for every non-integer number
    assert [r[0] for r in t.rows] == ["1.23", "0.00"]                 # -0.00 shown as 0.00
    assert [r[2] for r in t.rows] == ["60000", "7"]                   # counts stay integers, not 7.00
    assert [r[2] for r in table(df, number_format="{:.1f} %").rows] == ["60000", "7"]
    assert [r[2] for r in table(df, number_format=lambda v: f"<{v}>").rows] == ["<60000>", "<7>"]   # a callable: all
    assert [r[0] for r in table(pd.DataFrame({"acc": [97.0, 5.0]}), number_format=".1f").rows] == ["97.0", "5.0"]
    t = table(df, number_format={"a": "{:.1f} %", "n": "{:,}", "b": lambda v: f"{v:.0e}"}, na_rep="n/a")
    assert t.rows[0] == ("1.2 %", "2e+00", "60,000", "x", "n/a")
    assert t.rows[1] == ("0.0 %", "1e-07", "7", "<y>", "n/a")
    assert t.numeric == (True, True, True, False, False)              # an all-missing column is not numeric
    assert "&lt;y&gt;" in t.to_html() and "<y>" not in t.to_html()   # values are escaped
    with pytest.raises(ValueError, match=r"\['accuracy'\]"):
        table(df, number_format={"accuracy": ".2f"})                 # a misspelt column is named
    with pytest.raises(TypeError, match="DataFrame"):
        table([[1, 2]])


def test_headers_rename_shown_columns():
    df = pd.DataFrame({"final test accuracy (%)": [91.234], "n": [3]})
    t = table(df, headers={"final test accuracy (%)": "acc. (%)"}, number_format={"final test accuracy (%)": ".1f"})
    assert t.headers == ("acc. (%)", "n") and t.rows == (("91.2", "3"),)
    with pytest.raises(ValueError, match=r"\['acc'\]"):
        table(df, headers={"acc": "a"})


def test_index_levels_become_columns():
    df = pd.DataFrame({"acc": [0.91, 0.88]}, index=pd.Index([0.5, 1.0], name="ε"))
    t = table(df, index=True, number_format={"ε": ".1f", "acc": ".3f"})
    assert t.headers == ("ε", "acc") and t.rows == (("0.5", "0.910"), ("1.0", "0.880"))
    assert table(df).headers == ("acc",)


def test_text_is_compact_stable_and_rounded():
    df = pd.DataFrame({"method": ["FedAvg", "LDP-FL (ε = 1)"], "accuracy (%)": [97.23456, 81.0449],
                       "time per round (s)": [0.5, 12.25], "rounds": [50, 50]})
    t = table(df, caption="Final accuracy", number_format={"accuracy (%)": ".2f", "time per round (s)": ".1f"})
    expected = "\n".join([
        "Final accuracy",
        "                               time per",   # numeric columns: headers right-aligned too
        "method          accuracy (%)  round (s)  rounds",
        "--------------  ------------  ---------  ------",
        "FedAvg                 97.23        0.5      50",
        "LDP-FL (ε = 1)         81.04       12.2      50",
    ])
    assert t.to_text() == expected
    # a change below the rounding does not change the checked text; one above it does
    assert table(df.assign(**{"accuracy (%)": [97.2301, 81.0401]}), caption="Final accuracy",
                 number_format={"accuracy (%)": ".2f", "time per round (s)": ".1f"}).to_text() == expected
    assert table(df.assign(**{"accuracy (%)": [97.2401, 81.0401]}), caption="Final accuracy",
                 number_format={"accuracy (%)": ".2f", "time per round (s)": ".1f"}).to_text() != expected
    assert all(line == line.rstrip() for line in expected.splitlines())


def test_text_headers_wrap_and_keep_units_whole():
    t = table(pd.DataFrame({"clients per round (count of devices)": [1]}), header_width=12)
    lines = t.to_text().splitlines()
    assert [ln.strip() for ln in lines[:-2]] == ["clients per", "round (count", "of devices)"]   # a long aside wraps
    t = table(pd.DataFrame({"wall time per round (s / round)": [1]}), header_width=12)
    assert [ln.strip() for ln in t.to_text().splitlines()[:-2]] == ["wall time", "per round", "(s / round)"]


# ---------------------------------------------------------------------------------------------------- figures
@pytest.mark.parametrize("ncols", [0, 3, 4, 2.5, True])
def test_figure_refuses_more_than_two_panels_per_row(ncols):
    with pytest.raises(ValueError, match=r"ncols"):
        figure(ncols)
    with pytest.raises(ValueError, match=r"nrows"):
        figure(1, 0)


def _drawn_width(fig) -> int:
    """Width in pixels of the PNG Jupyter's inline backend makes (fig.dpi, bbox_inches='tight')."""
    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=fig.dpi, bbox_inches="tight")
    return Image.open(io.BytesIO(buf.getvalue())).size[0]


@pytest.mark.parametrize("ncols", [1, 2])
def test_figure_is_drawn_between_one_and_two_column_widths(ncols):
    fig, axes = figure(ncols)
    try:
        for ax in np.atleast_1d(axes):
            ax.plot([1, 2, 3], [0.5, 0.7, 0.9], label="LDP-FL, ε = 1 per coordinate")
            ax.set(xlabel="communication round", ylabel="test accuracy (%)", title="Accuracy per round")
            ax.legend()
        w = _drawn_width(fig)
        assert COLUMN_PX <= w <= 2 * COLUMN_PX, w     # check_html fails an image drawn below half its width
        # saved at the default dpi (savefig.dpi 'figure') too
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        from PIL import Image
        assert COLUMN_PX <= Image.open(buf).size[0] <= 2 * COLUMN_PX
    finally:
        plt.close(fig)


def test_figure_text_is_legible_in_the_column():
    fig, axes = figure(2)
    try:
        fig.canvas.draw()
        natural = fig.get_figwidth() * fig.dpi
        scale = min(1.0, COLUMN_PX / natural)                    # how much the page shrinks the image
        tick = axes[0].get_xticklabels()[0]
        drawn_px = tick.get_fontsize() / 72 * fig.dpi * scale
        assert drawn_px >= 11, drawn_px                          # tick labels at >= 11 CSS px on the page
        assert len(axes) == 2 and fig.get_layout_engine() is not None
    finally:
        plt.close(fig)


def test_figure_height():
    for args, kw, h in [((1,), {}, display.ROW_HEIGHT_IN[1]), ((2, 2), {}, 2 * display.ROW_HEIGHT_IN[2]),
                        ((2,), {"height": 5.0}, 5.0)]:
        fig, _ = figure(*args, **kw)
        assert fig.get_figheight() == pytest.approx(h)
        plt.close(fig)
    with pytest.raises(ValueError, match="height"):
        figure(1, height=0)


def test_integer_rounds_on_a_three_round_axis():
    fig, (plain, ax) = figure(2)
    try:
        for a in (plain, ax):
            a.plot([1, 2, 3], [0.5, 0.7, 0.9])
        assert integer_rounds(ax) is ax
        fig.canvas.draw()
        lo, hi = ax.get_xlim()
        ticks = [t for t in ax.get_xticks() if lo <= t <= hi]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        assert {1, 2, 3} <= set(ticks)
        lo, hi = plain.get_xlim()   # without it matplotlib puts ticks at 1.25, 1.5, ...: the test would notice
        assert not all(float(t).is_integer() for t in plain.get_xticks() if lo <= t <= hi)
        integer_rounds(np.array([plain, ax]))                   # an array of axes
        assert isinstance(plain.xaxis.get_major_locator(), matplotlib.ticker.MaxNLocator)
    finally:
        plt.close(fig)

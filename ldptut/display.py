"""Showing results on the book's page: tables and figures that fit its text column.

The rendered book's text column is ``COLUMN_PX`` = 688 CSS px wide (sphinx-book-theme at a 1280 px desktop viewport,
measured by ``tests/html/check_html.py``).

* :func:`table` turns a DataFrame into a compact HTML table (short headers that wrap, numbers right-aligned in
  tabular digits, a smaller font, horizontal scrolling only inside its own box) whose ``text/plain`` form is a
  stable rounded text. Both forms are deterministic (no random ids), because ``pytest --nbval-lax`` compares every
  MIME type of a checked cell's output, ``text/html`` included (only images are skipped).
* :func:`figure` makes a matplotlib figure as wide as the column (``COLUMN_IN`` inches at ``FIGURE_DPI``), so it is
  drawn at 2/3 of its pixels rather than shrunk below half, with at most two panels per row;
  :func:`integer_rounds` gives an axis of communication rounds integer ticks.
"""
from __future__ import annotations

import html
import math
import numbers
import re
import textwrap
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import pandas as pd

__all__ = ["COLUMN_PX", "COLUMN_IN", "FIGURE_DPI", "Table", "table", "figure", "integer_rounds"]

COLUMN_PX = 688                  # the book's text column at a 1280 px desktop viewport (CSS px)
COLUMN_IN = COLUMN_PX / 100      # a figure's width in inches: 10 pt text is drawn at ~14 CSS px in the column
FIGURE_DPI = 150                 # 6.88 in x 150 dpi = 1032 px, drawn at 688 px (ratio 0.67; check_html fails < 0.5)
ROW_HEIGHT_IN = {1: 3.8, 2: 3.0}  # default height of one row of panels, by panels per row
HEADER_WIDTH = 12                # headers wrap at about this many characters

Format = str | Callable[[Any], str]

# One style block per table, scoped to its container class; fixed text, so the HTML is the same on every run.
_CSS = """\
.ldptut-table{overflow-x:auto;max-width:100%;margin:0 0 1em 0}
.ldptut-table table{border-collapse:collapse;width:auto;margin:0;font-size:0.75rem;line-height:1.3;\
font-variant-numeric:tabular-nums;border:none}
.ldptut-table caption{caption-side:top;text-align:left;font-weight:600;padding:0 0 0.3em 0}
.ldptut-table th,.ldptut-table td{padding:0.15em 0.35em;border:none;vertical-align:bottom}
.ldptut-table th{font-weight:600;white-space:normal;overflow-wrap:break-word;\
border-bottom:1px solid var(--pst-color-border,#bbb)}
.ldptut-table th>div{max-width:var(--ldptut-header-width,12ch)}
.ldptut-table th.num>div{margin-left:auto}
.ldptut-table td{vertical-align:top}
.ldptut-table .num{text-align:right}
.ldptut-table .txt{text-align:left}
.ldptut-table td.num{white-space:nowrap}
.ldptut-table td.txt{white-space:normal;overflow-wrap:break-word}
.ldptut-table tbody tr:nth-child(even){background:var(--pst-color-surface,rgba(127,127,127,0.08))}"""

_UNIT_RE = re.compile(r"\([^()]{1,10}\)|\[[^\[\]]{1,10}\]")   # a short unit, "(%)", "(s / round)", "[ms]": one piece


def _is_number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def _is_na(v: Any) -> bool:
    try:
        return v is None or bool(pd.isna(v))
    except (TypeError, ValueError):   # arrays, lists: not a missing scalar
        return False


def _default_format(v: Any) -> str:
    if isinstance(v, numbers.Integral):
        return str(int(v))
    return format(float(v), ".4g")


def _apply(fmt: Format, v: Any) -> str:
    if callable(fmt):
        return str(fmt(v))
    return fmt.format(v) if "{" in fmt else format(v, fmt)


def _no_negative_zero(s: str) -> str:
    """'-0.00' -> '0.00' (a tiny value's sign is not stable across machines; rounded away, it is noise)."""
    if s.startswith("-"):
        mantissa = re.split(r"[eE]", s, maxsplit=1)[0]
        if not re.search(r"[1-9]", mantissa) and re.search(r"0", mantissa):
            return s[1:]
    return s


def _header(name: Any) -> str:
    if isinstance(name, tuple):
        return " / ".join(str(p) for p in name if str(p) != "")
    return "" if name is None else str(name)


def _keep_units(header: str) -> str:
    """Non-breaking spaces inside a parenthesised or bracketed unit, so it wraps as one piece."""
    return _UNIT_RE.sub(lambda m: m.group(0).replace(" ", "\u00a0"), header)


@dataclass(frozen=True)
class Table:
    """A formatted table: ``text/html`` for the page, ``text/plain`` (also ``str``) for the checked output.

    Every cell is already formatted (strings), so both representations are pure functions of the data."""
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    numeric: tuple[bool, ...]          # right-aligned columns (every non-missing value a number)
    caption: str | None = None
    header_width: int = HEADER_WIDTH

    # ----------------------------------------------------------------------------------------- text/plain
    def to_text(self) -> str:
        """Fixed-width text: the caption, headers wrapped at ``header_width`` characters (units kept whole),
        a rule, then the rows; numbers right-aligned; columns separated by two spaces; no trailing spaces."""
        ncol = len(self.headers)
        wrapped = []
        for j, h in enumerate(self.headers):
            body = max((len(r[j]) for r in self.rows), default=0)
            lines = textwrap.wrap(_keep_units(h), max(self.header_width, body), break_long_words=False,
                                  break_on_hyphens=False) or [""]
            wrapped.append([ln.replace("\u00a0", " ") for ln in lines])
        widths = [max([len(r[j]) for r in self.rows] + [len(ln) for ln in wrapped[j]]) for j in range(ncol)]
        depth = max((len(w) for w in wrapped), default=1)

        def line(cells: Iterable[str]) -> str:
            out = [c.rjust(widths[j]) if self.numeric[j] else c.ljust(widths[j]) for j, c in enumerate(cells)]
            return "  ".join(out).rstrip()

        out = [self.caption] if self.caption else []
        for k in range(depth):   # headers bottom-aligned, like the HTML
            out.append(line(w[k - (depth - len(w))] if k >= depth - len(w) else "" for w in wrapped))
        out.append("  ".join("-" * w for w in widths))
        out += [line(r) for r in self.rows]
        return "\n".join(out)

    __str__ = to_text

    def __repr__(self) -> str:   # IPython's text/plain
        return self.to_text()

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(self.to_text())

    # ----------------------------------------------------------------------------------------- text/html
    def to_html(self) -> str:
        """The HTML table in a scrolling box (only used when the table cannot fit), with a fixed style block."""
        def cls(j: int) -> str:
            return "num" if self.numeric[j] else "txt"

        def head(h: str) -> str:
            # outside a short unit a line may also break after '_' or '/' (column names like final_accuracy)
            out, pos = [], 0
            for m in _UNIT_RE.finditer(h):
                out.append(re.sub(r"([_/])", r"\1<wbr>", html.escape(h[pos:m.start()], quote=False)))
                out.append(html.escape(m.group(0).replace(" ", "\u00a0"), quote=False))
                pos = m.end()
            out.append(re.sub(r"([_/])", r"\1<wbr>", html.escape(h[pos:], quote=False)))
            return "".join(out)

        parts = [f'<div class="ldptut-table" style="--ldptut-header-width:{self.header_width}ch">',
                 f"<style>{_CSS}</style>", "<table>"]
        if self.caption:
            parts.append(f"<caption>{html.escape(self.caption, quote=False)}</caption>")
        parts.append("<thead><tr>" + "".join(f'<th class="{cls(j)}"><div>{head(h)}</div></th>'
                                             for j, h in enumerate(self.headers)) + "</tr></thead>")
        parts.append("<tbody>")
        for r in self.rows:
            parts.append("<tr>" + "".join(f'<td class="{cls(j)}">{html.escape(c, quote=False)}</td>'
                                          for j, c in enumerate(r)) + "</tr>")
        parts.append("</tbody></table></div>")
        return "\n".join(parts)

    def _repr_html_(self) -> str:
        return self.to_html()


def table(df: pd.DataFrame, *, caption: str | None = None,
          number_format: Format | Mapping[Any, Format] | None = None, index: bool = False,
          headers: Mapping[Any, str] | None = None, na_rep: str = "–", header_width: int = HEADER_WIDTH) -> Table:
    """A DataFrame shown as a compact table that fits the book's column; display it as a cell's last expression.

    ``number_format``: a format spec (``".2f"``) or a template (``"{:.1f} %"``) for every non-integer number
    (integers, such as counts of rounds or seeds, stay integers: ``".1f"`` never shows ``5.0`` rounds), or a
    callable for every number; or a mapping column -> one of those, applied to every number of that column,
    integers included (other columns keep the default). Default: integers as they are, other numbers with 4 significant digits (``".4g"``). A rounded ``-0.00`` is shown as ``0.00``. Missing values show
    ``na_rep``. ``index=True`` shows the index levels as the first columns.

    Headers wrap between words at about ``header_width`` characters; a short unit in parentheses or brackets
    (``"accuracy (%)"``, up to 10 characters inside) stays whole. Words are never broken, so a table whose
    longest words do not fit side by side scrolls inside its own box (and ``make check-html`` reports it):
    ``headers`` maps columns to shorter shown names (``number_format`` still names the DataFrame's columns)."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"table() takes a pandas DataFrame, not {type(df).__name__}")
    if header_width < 1:
        raise ValueError(f"header_width must be >= 1, got {header_width}")
    frame = df
    if index:
        levels = df.index.to_frame(index=False)
        levels.columns = ["" if n is None else n for n in df.index.names]
        frame = pd.concat([levels, df.reset_index(drop=True)], axis=1)
    columns = list(frame.columns)
    if isinstance(number_format, Mapping):
        unknown = [k for k in number_format if k not in columns]
        if unknown:
            raise ValueError(f"number_format names columns the table does not have: {unknown}; columns: {columns}")
        formats = [number_format.get(c) for c in columns]
        to_integers = [True] * len(columns)
    else:
        formats = [number_format] * len(columns)
        to_integers = [callable(number_format)] * len(columns)
    headers = dict(headers or {})
    unknown = [k for k in headers if k not in columns]
    if unknown:
        raise ValueError(f"headers names columns the table does not have: {unknown}; columns: {columns}")

    cells, numeric = [], []
    for j in range(len(columns)):
        values = frame.iloc[:, j].tolist()
        fmt = formats[j]
        col = []
        for v in values:
            if _is_na(v):
                col.append(na_rep)
            elif _is_number(v):
                use = fmt is not None and (to_integers[j] or not isinstance(v, numbers.Integral))
                s = _apply(fmt, v) if use else _default_format(v)
                col.append(_no_negative_zero(s))
            else:
                col.append(str(v))
        present = [v for v in values if not _is_na(v)]
        numeric.append(bool(present) and all(_is_number(v) for v in present))
        cells.append(col)
    rows = tuple(tuple(cells[j][i] for j in range(len(columns))) for i in range(len(frame)))
    return Table(headers=tuple(str(headers[c]) if c in headers else _header(c) for c in columns), rows=rows, numeric=tuple(numeric),
                 caption=caption, header_width=header_width)


# --------------------------------------------------------------------------------------------------------- figures
def figure(ncols: int = 1, nrows: int = 1, *, height: float | None = None, sharex: bool | str = False,
           sharey: bool | str = False, squeeze: bool = True, **subplot_kw):
    """``(fig, axes)`` like ``plt.subplots``, sized for the book's column: ``COLUMN_IN`` wide at ``FIGURE_DPI``
    (1032 px, drawn at 688 px, so matplotlib's default 10 pt text reads at about 14 px), constrained layout.

    At most two panels per row (``ncols`` 1 or 2; more rows for more panels). ``height``: the whole figure's height
    in inches (default ``ROW_HEIGHT_IN[ncols]`` per row)."""
    import matplotlib.pyplot as plt

    if isinstance(ncols, bool) or not isinstance(ncols, numbers.Integral) or not 1 <= ncols <= 2:
        raise ValueError(f"figure(ncols={ncols!r}): at most two panels per row fit the {COLUMN_PX} px text column; "
                         "use ncols=1 or 2 and more rows (nrows) for more panels")
    if isinstance(nrows, bool) or not isinstance(nrows, numbers.Integral) or nrows < 1:
        raise ValueError(f"figure(nrows={nrows!r}): nrows must be an integer >= 1")
    if height is None:
        height = ROW_HEIGHT_IN[int(ncols)] * int(nrows)
    if not (isinstance(height, numbers.Real) and math.isfinite(height) and height > 0):
        raise ValueError(f"figure(height={height!r}): the height must be a positive number of inches")
    return plt.subplots(int(nrows), int(ncols), figsize=(COLUMN_IN, float(height)), dpi=FIGURE_DPI,
                        layout="constrained", sharex=sharex, sharey=sharey, squeeze=squeeze, **subplot_kw)


def integer_rounds(axes, *, axis: str = "x"):
    """Integer ticks on the rounds axis (``axis`` "x" or "y") of one Axes or of each in an array; returns ``axes``."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    if axis not in ("x", "y"):
        raise ValueError(f"axis must be 'x' or 'y', got {axis!r}")
    for ax in np.atleast_1d(np.asarray(axes, dtype=object)).flat:
        (ax.xaxis if axis == "x" else ax.yaxis).set_major_locator(MaxNLocator(integer=True))
    return axes

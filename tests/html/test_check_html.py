"""``tests/html/check_html.py`` (``make check-html``) on tiny synthetic pages shaped like the book's (an
``article.bd-article`` column, ``div.cell`` > ``div.cell_output`` outputs): a clean page passes, and each failure kind
(MathJax error, too-wide output, page wider than the viewport, broken image, shrunk figure, bookkeeping word) is
detected on its own page; at a phone's width, outputs scrolling in their own box are reported apart, and the book's figure
script keeps a figure at 0.6 of its drawn width.

The browser tests need selenium, chromium and chromedriver (Debian: apt-get install chromium chromium-driver) and
are skipped without them; the real-MathJax test needs the MathJax 3 bundle of sphinx-mathjax-offline (the ``book``
extra), the injected-``mjx-merror`` test does not."""
from __future__ import annotations

import importlib.util
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("check_html", HERE / "check_html.py")
ch = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("check_html", ch)  # dataclasses look their module up there
_spec.loader.exec_module(ch)

MISSING = ch.missing_requirements()
needs_browser = pytest.mark.skipif(MISSING is not None, reason=f"browser check unavailable: {MISSING}")

COLUMN = 700  # the synthetic text column, CSS px


def _mathjax_dir() -> Path | None:
    try:
        f = metadata.distribution("sphinx-mathjax-offline").locate_file("sphinx-mathjax-offline/static/mathjax")
    except metadata.PackageNotFoundError:
        return None
    f = Path(str(f))
    return f if (f / "tex-chtml.js").exists() else None


MATHJAX = _mathjax_dir()
# as Sphinx 7 writes it (mathjax3_config, then the deferred script)
MATHJAX_HEAD = ('<script>MathJax = {"options": {"processHtmlClass": "tex2jax_process|mathjax_process|math|output_area"}}'
                '</script><script defer="defer" src="mathjax/tex-chtml.js"></script>')


def page(body: str, head: str = "", column: int = COLUMN) -> str:
    # div.cell_output scrolls sideways as in myst-nb's CSS, so a wide output never widens the page itself
    return f"""<!DOCTYPE html><html><head><meta charset="utf-8"><title>t</title>
<style>body {{margin: 0; font-family: sans-serif}} .bd-article {{width: {column}px; padding: 0 20px}}
div.cell_output {{overflow-x: auto}}
.cell_output pre, .cell_input pre {{overflow: auto; white-space: pre; margin: 0}} img {{max-width: 100%}}</style>{head}</head>
<body><nav>TODO in the navigation is not article text</nav><article class="bd-article">{body}</article></body></html>"""


def cell(output: str, code: str = "x = 1") -> str:
    return (f'<div class="cell docutils container"><div class="cell_input docutils container"><pre>{code}</pre></div>'
            f'<div class="cell_output docutils container">{output}</div></div>')


def png(path: Path, width: int, height: int) -> None:
    from PIL import Image

    Image.new("RGB", (width, height), (200, 60, 60)).save(path)


def write_site(root: Path) -> dict[str, str]:
    """The synthetic pages; returns {page: what it must fail on ('' = clean)}."""
    png(root / "fig600.png", 600, 300)
    png(root / "fig1300.png", 1300, 400)
    png(root / "fig2000.png", 2000, 500)
    if MATHJAX:
        (root / "mathjax").symlink_to(MATHJAX, target_is_directory=True)
    math = ('<p>Inline <span class="math notranslate nohighlight">\\(\\varepsilon = \\ln 3\\)</span> and</p>'
            '<div class="math notranslate nohighlight">\\[\\frac{e^\\varepsilon}{1 + e^\\varepsilon}\\]</div>'
            if MATHJAX else "")
    pages = {
        "clean.html": (page(
            "<h1>Clean</h1><p>Prose about local differential privacy, 2026-11-27, 1.1920928955078125e-07, "
            "a defaced 20261127 number.</p>" + math
            + cell('<div class="output stream"><pre>accuracy 0.91\ncommit 8482bb5d0431 (a run key in code)</pre></div>')
            + cell('<img src="fig600.png" alt="fig">')
            + cell('<div class="output text_html"><table><tr><th>run</th><th>commit</th></tr>'
                   '<tr><td>1</td><td>abe6754ade43</td></tr></table></div>')
            + '<div style="display:none">TODO: session notes in NOTES.md, issue 12</div>'
            + '<details><summary>Show code cell source</summary><pre>print("TODO nbval session")</pre></details>'
            # a collapsed output (sphinx-togglebutton's hide-output: kept in the layout, 1.5em high) is not shown
            + '<div class="cell"><div class="toggle-hidden" style="height:1.5em;overflow:hidden;opacity:0">'
            + '<div class="cell_output"><pre>' + "w" * 400 + '</pre></div></div></div>'
            # and so is one in a closed <details>, as Jupyter Book renders a hide-output cell
            + '<div class="cell"><details class="admonition hide below-input"><summary>Show code cell output</summary>'
            + '<div class="cell_output"><pre>' + "w" * 400 + '</pre></div></details></div>'
            + '<p>A wide code <em>input</em> may scroll: </p>'
            + cell('<pre>ok</pre>', code="y = " + "1 + " * 100),
            MATHJAX_HEAD if MATHJAX else ""), ""),
        "wide.html": (page(cell("<pre>short</pre>") + cell("<pre>" + "w" * 400 + "</pre>")
                           + cell('<div class="output text_html"><table><tr>' + "<td>cell value</td>" * 80
                                  + "</tr></table></div>")), "wide"),
        "page_wide.html": (page(cell("<pre>short</pre>") + '<div style="width: 2000px">a wide banner</div>'),
                           "page-wide"),
        "broken.html": (page(cell('<img src="no-such-figure.png" alt="missing">')), "broken-img"),
        "shrunk.html": (page(cell('<img src="fig1300.png">') + cell('<img src="fig2000.png">')), "shrunk-img"),
        "merror_injected.html": (page(
            '<p><mjx-container class="MathJax" jax="CHTML"><mjx-math><mjx-merror data-mjx-error="Missing close brace"'
            ' title="Missing close brace"><mjx-mtext>Missing close brace</mjx-mtext></mjx-merror></mjx-math>'
            '</mjx-container></p>'), "mathjax"),
        "untypeset.html": (page('<p>No MathJax here: <span class="math notranslate nohighlight">\\(x^2\\)</span></p>'),
                           "mathjax"),
        "bookkeeping.html": (page(
            "<p>Checked by NBVAL_CHECK_OUTPUT and nbval; see issue 12 and NOTES.md; this session had no GPU. "
            "TODO: rerun. Trained at commit 0a84a54 on 2026-11-27.</p>"
            '<table><tr><td>run key 3f9a2b1c</td></tr></table>'), "bookkeeping"),
    }
    if MATHJAX:
        pages["merror_mathjax.html"] = (page('<p>Broken <span class="math notranslate nohighlight">'
                                             '\\(x^1^2\\)</span> formula.</p>', MATHJAX_HEAD), "mathjax")
    for name, (html, _) in pages.items():
        (root / name).write_text(html)
    return {name: kind for name, (_, kind) in pages.items()}


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("site")
    return root, write_site(root)


@pytest.fixture(scope="module")
def results(site):
    root, pages = site
    rs = ch.check_pages(root, list(pages) + ["absent.html"])
    return {r.page: r for r in rs}


# ----------------------------------------------------------------------------------------------- no browser
def test_bookkeeping_patterns_on_text():
    text = ("Checked by NBVAL_CHECK_OUTPUT; nbval-lax; issue 7, Issue #12; see notes.md; two sessions; TODO; FIXME; "
            "commit 0a84a54 and 8482bb5d0431-dirty.")
    hits, ignored = ch.find_bookkeeping({"": text, "table, pre, .cell_input": text})
    assert {h["pattern"] for h in hits} == {p.name for p in ch.BOOKKEEPING}
    assert [h["match"] for h in hits if h["pattern"] == "commit-like hex"] == ["0a84a54", "8482bb5d0431"]
    assert [h["match"] for h in hits if h["pattern"] == "issue N"] == ["issue 7", "Issue #12"]
    assert ignored == {"commit-like hex": 0}
    clean = ("Local differential privacy at 2026-11-27 (20261127), y = 1.1920928955078125e-07, 3e-05, a defaced "
             "facade, a 64-hex image name 14aeb4103276d9b0250ccf8e95a2ac35ca05a8dfa949f3950f8f2940d12a0815, "
             "x86_64, cuda:0, ab12cd (six).")
    assert ch.find_bookkeeping({"": clean, "table, pre, .cell_input": clean}) == ([], {"commit-like hex": 0})


def test_hex_in_excluded_parts_is_counted_not_failing():
    hits, ignored = ch.find_bookkeeping({"": "prose\nabe6754ade43 in a table", "table, pre, .cell_input": "prose"})
    assert hits == [] and ignored == {"commit-like hex": 1}


def test_toc_pages_in_book_order(tmp_path):
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: book/intro\nchapters:\n  - file: book/a\n    sections:\n"
                   "      - file: book/runs/a-paper.ipynb\n  - file: book/b\n")
    assert ch.toc_pages(toc) == ["book/intro", "book/a", "book/runs/a-paper", "book/b"]
    assert ch.select_pages(ch.toc_pages(toc), "book/runs/*") == ["book/runs/a-paper"]
    real = ch.toc_pages(ch.ROOT / "_toc.yml")
    assert real[0] == "book/intro" and any(p.startswith("book/runs/") for p in real)
    assert all((ch.ROOT / (p + ".ipynb")).exists() or (ch.ROOT / (p + ".md")).exists() for p in real)


def test_build_refuses_a_folder_it_did_not_make(tmp_path):
    """--build-dir deletes its folder before building: never a folder holding anything but an earlier check's build."""
    keep = tmp_path / "mine"
    keep.mkdir()
    (keep / "notes.txt").write_text("not a build")
    with pytest.raises(RuntimeError, match="refusing to delete"):
        ch.build_book(keep)
    assert (keep / "notes.txt").read_text() == "not a build"


# ----------------------------------------------------------------------------------------------- browser
@needs_browser
def test_the_clean_page_passes(results):
    r = results["clean.html"]
    assert r.loaded and r.failures == [], r.line()
    assert r.column == pytest.approx(COLUMN, abs=1)
    assert r.cells == 6 and r.images == 1 and r.outputs >= 4   # the two collapsed outputs count as cells
    # the hex in the pre output and in the table were seen and set aside
    assert r.ignored == {"commit-like hex": 2}
    if MATHJAX:
        assert r.mathjax == "typeset" and r.math == 2 and r.math_untypeset == 0


@needs_browser
@pytest.mark.parametrize("name", ["wide.html", "page_wide.html", "broken.html", "shrunk.html", "merror_injected.html",
                                  "untypeset.html", "bookkeeping.html", "merror_mathjax.html"])
def test_each_failure_kind_is_detected_and_only_it(site, results, name):
    _, pages = site
    if name not in pages:
        pytest.skip("no MathJax 3 bundle (sphinx-mathjax-offline) to load offline")
    r = results[name]
    assert r.loaded, r.error
    assert r.failures == [pages[name]], r.line()
    assert r.line().startswith("FAIL " + name)


@needs_browser
def test_wide_outputs_report_width_and_cell(results):
    r = results["wide.html"]
    assert [w["cell"] for w in r.wide] == [2, 1] or [w["cell"] for w in r.wide] == [1, 2]
    widest = r.wide[0]
    assert widest["width"] > COLUMN + 1000  # 400 monospace chars or 80 table cells
    assert all(w["width"] > COLUMN + ch.WIDE_TOLERANCE_PX for w in r.wide)
    assert f"widest {widest['width']}px > {COLUMN}px, cell {widest['cell']}" in r.line()


@needs_browser
def test_broken_and_shrunk_images(results):
    assert [b["src"] for b in results["broken.html"].broken] == ["no-such-figure.png"]
    shrunk = results["shrunk.html"].shrunk
    assert len(shrunk) == 1  # the 1300 px figure drawn at 700 px (0.54) is not below half
    assert shrunk[0]["cell"] == 1 and shrunk[0]["natural"] == 2000 and shrunk[0]["drawn"] == COLUMN
    assert shrunk[0]["ratio"] == pytest.approx(0.35, abs=0.01)


@needs_browser
def test_mathjax_errors(site, results):
    r = results["merror_injected.html"]
    assert [e["message"] for e in r.mathjax_errors] == ["Missing close brace"]
    assert results["untypeset.html"].math_untypeset == 1 and results["untypeset.html"].mathjax == "absent"
    if "merror_mathjax.html" in site[1]:
        r = results["merror_mathjax.html"]
        assert r.mathjax == "typeset" and len(r.mathjax_errors) == 1, r.line()
        assert "double exponent" in r.mathjax_errors[0]["message"].lower()


@needs_browser
def test_bookkeeping_words_in_visible_text_only(results):
    r = results["bookkeeping.html"]
    found = {h["pattern"]: h["match"] for h in r.bookkeeping}
    assert found == {"NBVAL_CHECK_OUTPUT": "NBVAL_CHECK_OUTPUT", "nbval": "nbval", "issue N": "issue 12",
                     "NOTES.md": "NOTES.md", "session": "session", "TODO": "TODO", "commit-like hex": "0a84a54"}
    assert len(r.bookkeeping) == 7
    assert r.ignored == {"commit-like hex": 1}  # the run key in the table
    # the clean page hides TODO/session/NOTES.md/issue in display:none and in a closed <details>, and has TODO in
    # the navigation outside the article: none of them counts
    assert results["clean.html"].bookkeeping == []


@needs_browser
def test_a_missing_page_fails(results):
    r = results["absent.html"]
    assert not r.loaded and r.failures == ["not loaded"]


@needs_browser
def test_cli_exit_status_lines_and_json(site, tmp_path, capsys):
    root, pages = site
    toc = tmp_path / "_toc.yml"
    toc.write_text("format: jb-book\nroot: clean\nchapters:\n  - file: wide\n  - file: bookkeeping\n")
    out = tmp_path / "check.json"
    args = ["--no-build", "--html-dir", str(root), "--toc", str(toc)]
    assert ch.main(args + ["--json", str(out)]) == 1
    lines = capsys.readouterr().out.splitlines()
    page_lines = [ln for ln in lines if re.match(r"^(ok  |FAIL) ", ln)]
    assert [ln.split()[1].rstrip(":") for ln in page_lines] == ["clean.html", "wide.html", "bookkeeping.html"]
    assert [ln[:4] for ln in page_lines] == ["ok  ", "FAIL", "FAIL"]
    assert any(ln.startswith("check-html: 2 of 3 pages fail at 1280x900") for ln in lines)
    data = json.loads(out.read_text())
    assert [p["failures"] for p in data["pages"]] == [[], ["wide"], ["bookkeeping"]]
    assert ch.main(args + ["--pages", "clean"]) == 0
    capsys.readouterr()
    # a phone-width check reports and passes unless --strict
    assert ch.main(args + ["--width", "420"]) == 0
    assert "report only" in capsys.readouterr().out
    assert ch.main(args + ["--width", "420", "--strict"]) == 1
    assert ch.main(args + ["--pages", "nothing*"]) == 2


# ----------------------------------------------------------------------------------------------- a phone
PHONE = 420          # viewport, CSS px
PHONE_COLUMN = 380   # the synthetic column at that viewport
LDPTUT_JS = HERE.parents[1] / "book" / "_static" / "ldptut.js"


@pytest.fixture(scope="module")
def phone_results(tmp_path_factory):
    """Two pages at a 420 px viewport: a 1,032 px figure and a wide code listing, without and with the book's
    figure script (book/_static/ldptut.js)."""
    root = tmp_path_factory.mktemp("phone")
    png(root / "fig1032.png", 1032, 400)
    body = cell('<img src="fig1032.png">') + cell("<pre>" + "w" * 120 + "</pre>")
    (root / "plain.html").write_text(page(body, column=PHONE_COLUMN))
    (root / "ldptut.js").write_text(LDPTUT_JS.read_text())
    (root / "script.html").write_text(page(body, head='<script src="ldptut.js"></script>', column=PHONE_COLUMN))
    rs = ch.check_pages(root, ["plain.html", "script.html"], width=PHONE, height=800)
    return {r.page: r for r in rs}


@needs_browser
def test_on_a_phone_outputs_scrolling_in_their_box_are_not_wide(phone_results):
    r = phone_results["plain.html"]
    assert r.column == pytest.approx(PHONE_COLUMN, abs=1)
    # the listing scrolls inside its box: reported, not wide; the figure shrinks to the column (380/1032 = 0.37)
    assert r.wide == [] and [o["cell"] for o in r.scrolls] == [1] and r.scrolls[0]["box"] <= PHONE_COLUMN + 1
    assert r.failures == ["shrunk-img"] and r.shrunk[0]["ratio"] == pytest.approx(PHONE_COLUMN / 1032, abs=0.01)
    assert "scrolls 1 (widest" in r.line()


@needs_browser
def test_the_book_script_keeps_a_figure_at_its_minimum_scale_on_a_phone(phone_results):
    r = phone_results["script.html"]
    # ldptut.js draws the figure at ceil(0.6 * 1032) = 620 px inside its output box, which scrolls sideways
    assert r.failures == [], r.line()
    assert sorted(o["cell"] for o in r.scrolls) == [0, 1]
    fig = next(o for o in r.scrolls if o["cell"] == 0)
    assert fig["width"] == 620 and fig["box"] <= PHONE_COLUMN + 1
    assert r.page_width <= PHONE


@needs_browser
def test_an_output_scrolling_in_its_box_is_wide_on_the_desktop(tmp_path):
    (tmp_path / "p.html").write_text(page(cell("<pre>" + "w" * 400 + "</pre>")))
    (r,) = ch.check_pages(tmp_path, ["p.html"])
    assert r.scrolls == [] and [o["cell"] for o in r.wide] == [0] and r.failures == ["wide"]

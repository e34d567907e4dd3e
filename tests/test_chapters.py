"""The book's structure: every paper has its module, chapter, parameter file, test file, _toc.yml entry and
introduction bullet; every chapter opens with one setup call that checks its parameters before it runs anything."""
import json
import re
from pathlib import Path

import pytest

from ldptut.notebooks import ParameterError
from ldptut.papers import PAPERS, paper_modules

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "book").glob("*.ipynb"))
#: Pages after the paper chapters that belong to no paper (in _toc.yml's order, before the back matter).
APPENDICES = ["book/flower"]


def _toc_files() -> list[str]:
    return [line.split("file:", 1)[1].strip() for line in (ROOT / "_toc.yml").read_text().splitlines()
            if "file:" in line]


@pytest.mark.parametrize("module", paper_modules(), ids=PAPERS)
def test_every_paper_has_the_same_face_and_its_files(module):
    paper = module.PAPER
    assert paper.key == module.__name__.rsplit(".", 1)[1]
    for name in ("SETTINGS", "REPORTED", "configs", "compare"):
        assert hasattr(module, name), f"ldptut.papers.{paper.key} lacks {name}"
    assert module.REPORTED and all(r.metric and r.source for r in module.REPORTED)
    assert (ROOT / f"{paper.chapter}.ipynb").is_file()
    assert paper.chapter in _toc_files()
    assert list((ROOT / "book" / "params").glob(f"{Path(paper.chapter).name}*-paper.yaml"))
    assert (ROOT / "tests" / f"test_{paper.key}.py").is_file()


@pytest.mark.parametrize("module", paper_modules(), ids=PAPERS)
def test_every_paper_module_has_the_same_signatures(module):
    """The face the sweep and the chapters use, checked by signature: ``Params`` (a frozen dataclass of the chapter's
    parameters cell: names, order, defaults, each with its check), ``grid(p, *, ...)`` (the whole grid from the parameters), ``compare(runs, *, ...)``
    (paper vs ours from runs), and, where a grid has a second stage, ``followup(p, table)``; extra parameters are
    keyword-only with defaults, so every module is called the same way."""
    import inspect

    from ldptut.sweep import notebook_parameters

    def positional(fn):
        ps = list(inspect.signature(fn).parameters.values())
        extra = [q for q in ps if q.kind is not inspect.Parameter.KEYWORD_ONLY]
        assert all(q.default is not inspect.Parameter.empty for q in ps if q.kind is inspect.Parameter.KEYWORD_ONLY), \
            f"{module.__name__}.{fn.__name__}: keyword-only parameters need defaults"
        return [q.name for q in extra]

    assert positional(module.grid) == ["p"], f"{module.__name__}.grid{inspect.signature(module.grid)}"
    assert positional(module.compare) == ["runs"], f"{module.__name__}.compare{inspect.signature(module.compare)}"
    if hasattr(module, "followup"):
        assert positional(module.followup)[:1] == ["p"] and len(positional(module.followup)) == 2
    # Params: a frozen dataclass whose fields are the chapter's parameters cell, names, order and default values
    from ldptut.params import ChapterParams

    assert issubclass(module.Params, ChapterParams) and module.Params.__dataclass_params__.frozen
    defaults = notebook_parameters(ROOT / f"{module.PAPER.chapter}.ipynb")
    assert list(module.Params()) == list(defaults), (
        f"{module.__name__}.Params and the chapter's parameters cell differ: {list(module.Params())} vs {list(defaults)}")
    assert dict(module.Params()) == defaults, {k: (module.Params()[k], v) for k, v in defaults.items()
                                               if module.Params()[k] != v}
    assert all(callable(v) for v in module.Params.spec().values())
    assert "p = Params.of(p)" in inspect.getsource(module.grid)   # grid checks what it is given


def _code_cells(notebook: Path) -> list[str]:
    nb = json.loads(notebook.read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


@pytest.mark.parametrize("chapter", ["foundations"] + [Path(m.PAPER.chapter).name for m in paper_modules()])
def test_every_chapter_opens_with_one_setup_call(chapter):
    """The cell after the parameters cell is the same in every chapter: one ``notebooks.setup(globals(), <its Params>)``
    (checks the parameters, resolves the device, prints the machine, makes the runner), and no chapter checks its
    parameters or builds its runner another way."""
    cells = _code_cells(ROOT / "book" / f"{chapter}.ipynb")
    opening = cells[1]
    assert re.search(r"^params, device, (runner|_) = setup\(globals\(\), \w+\.Params\b", opening, re.M), opening
    module = "ldptut.foundations" if chapter == "foundations" else next(
        m.__name__ for m in paper_modules() if Path(m.PAPER.chapter).name == chapter)
    assert re.search(rf"^from {module.rsplit('.', 1)[0]} import {module.rsplit('.', 1)[1]}\b", opening, re.M), opening
    rest = "\n".join(cells[1:])
    for other in ("check_parameters", "resolve_device(", "Runner(", "machine_summary()"):
        assert other not in rest, f"{chapter}: {other} outside setup"


def test_the_introduction_lists_every_chapter_in_book_order():
    """The intro's chapter list is checked against the paper modules (their one-line descriptions); a bullet may make
    its title a link to the chapter ([text](target) is read as its text)."""
    intro = " ".join((ROOT / "book" / "intro.md").read_text().split())  # bullets may wrap over lines
    intro = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", intro)
    bullets = [" ".join(m.PAPER.intro.split()) for m in paper_modules()]
    positions = [intro.find(f"- {b}") for b in bullets]
    assert all(p >= 0 for p in positions), [b for b, p in zip(bullets, positions) if p < 0]
    assert positions == sorted(positions)
    # the chapters are the notebooks of _toc.yml outside book/runs/; the back matter (glossary, references) comes last
    files = [f for f in _toc_files() if not f.startswith("book/runs/")]
    chapters = [f for f in files if (ROOT / f"{f}.ipynb").is_file() and f not in APPENDICES]
    assert chapters == ["book/foundations"] + [m.PAPER.chapter for m in paper_modules()]
    assert files == chapters + APPENDICES + ["book/glossary", "book/references"]
    for appendix in APPENDICES:   # linked from the introduction too
        assert f"]({Path(appendix).name}.ipynb)" in (ROOT / "book" / "intro.md").read_text()


def _run_parameter_cells(path: Path, **overrides) -> dict:
    """Execute a chapter's parameters cell, then papermill-style overrides, then the cell after it."""
    nb = json.loads(path.read_text())
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    params = next(i for i, c in enumerate(code) if "parameters" in c["metadata"].get("tags", []))
    assert params == 0, f"{path.name}: the parameters cell must be the first code cell"
    ns: dict = {}
    exec("".join(code[params]["source"]), ns)
    ns.update(overrides)
    check = "".join(code[params + 1]["source"])
    assert "setup(globals()" in check, f"{path.name}: the cell after parameters must check them (notebooks.setup)"
    exec(check, ns)
    return ns


@pytest.mark.parametrize("path", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_every_chapter_checks_its_parameters_first(path):
    ns = _run_parameter_cells(path)  # the defaults pass
    lists = [k for k, v in ns.items() if isinstance(v, list) and not k.startswith("_")]
    # a misspelt name (papermill -p round 1) fails at once, naming it
    with pytest.raises(ParameterError, match="unknown parameter 'round'"):
        _run_parameter_cells(path, round=1)
    # a list passed with -p arrives as text
    with pytest.raises(ParameterError, match=f"parameter '{lists[0]}' must be a list.*-y"):
        _run_parameter_cells(path, **{lists[0]: str(ns[lists[0]])})


PARAM_FILES = sorted((ROOT / "book" / "params").glob("*-paper.yaml"))


@pytest.mark.parametrize("path", PARAM_FILES, ids=[p.stem for p in PARAM_FILES])
def test_every_parameter_file_passes_its_chapters_check(path):
    """book/params/<chapter>[-<run>]-paper.yaml: every name is a parameter of the chapter, every value of its type."""
    import yaml

    chapter = ROOT / "book" / f"{path.stem.split('-')[0]}.ipynb"
    assert chapter.is_file(), f"{path.name} names no chapter"
    values = yaml.safe_load(path.read_text())
    _run_parameter_cells(chapter, **values)


def test_welchs_interval_against_scipys_and_its_edge_cases():
    import pandas as pd
    from scipy.stats import ttest_ind

    from ldptut.papers import welch_interval
    a, b = pd.Series([1.0, 2.0, 3.0]), pd.Series([2.0, 4.0, 6.0, 8.0])
    d, lo, hi = welch_interval(a, b)
    ci = ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert d == -3.0 and abs(lo - ci.low) < 1e-9 and abs(hi - ci.high) < 1e-9
    assert welch_interval(a[:1], b) is None and welch_interval(a, b[:1]) is None
    with pytest.raises(ValueError, match="level"):
        welch_interval(a, b, level=1.0)


def test_the_shared_t_interval_against_its_closed_form():
    import pandas as pd

    from ldptut.papers import format_interval, t_interval
    lo, hi = t_interval(pd.Series([1.0, 2.0, 3.0]))  # mean 2, s = 1, t(0.975, 2) = 4.302653
    assert (lo, hi) == pytest.approx((2 - 4.302653 / 3 ** 0.5, 2 + 4.302653 / 3 ** 0.5), abs=1e-5)
    lo90, hi90 = t_interval(pd.Series([1.0, 2.0, 3.0]), level=0.9)  # t(0.95, 2) = 2.919986
    assert hi90 - lo90 == pytest.approx(2 * 2.919986 / 3 ** 0.5, abs=1e-5)
    assert t_interval(pd.Series([5.0])) is None and format_interval(pd.Series([5.0])) == ""
    assert format_interval(pd.Series([1.0, 2.0, 3.0])) == "[-0.5, 4.5]"
    with pytest.raises(ValueError, match="level"):
        t_interval(pd.Series([1.0, 2.0]), level=95)


def test_the_shared_mean_and_std_format():
    import pandas as pd

    from ldptut.papers import mean_std
    v = pd.Series([1.0, 2.0, 4.0])  # mean 2.333..., sample std 1.5275
    assert mean_std(v) == "2.3 ± 1.5 (3 seeds)"
    assert mean_std(v, fmt=".2f") == "2.33 ± 1.53 (3 seeds)"        # the std at the mean's decimals
    assert mean_std(v, fmt="+.1f", count=False) == "+2.3 ± 1.5"     # a gain's sign, never on the std
    assert mean_std(v[:1], unit="run") == "1.0 (1 run)" and mean_std(v[:0]) == "not run"


def test_parameters_that_passed_the_check_and_failed_later_are_refused():
    """A range radius of 1e300 passed as 'a finite number' and overflowed float32 later; foundations' epsilons = []
    passed as 'a list' and failed in its plots."""
    from ldptut.notebooks import P, ParameterError, check_parameters

    with pytest.raises(ParameterError, match=r"parameter 'range_radius' must be a number of magnitude at most 1e\+30"):
        check_parameters({"range_radius": 1e300}, {"range_radius": P.pos_float})
    with pytest.raises(ParameterError, match=r"parameter 'epsilons' must be a non-empty list"):
        check_parameters({"epsilons": []}, {"epsilons": P.list_of(P.pos_float, nonempty=True)})
    check_parameters({"epsilons": []}, {"epsilons": P.list_of(P.pos_float)})  # an empty list that skips a section
    from ldptut import foundations

    with pytest.raises(ParameterError, match=r"parameter 'epsilons' must be a non-empty list"):
        foundations.Params(epsilons=[])


PAGES = CHAPTERS + sorted((ROOT / "book" / "runs").glob("*.ipynb"))
PACKAGE_SOURCE = "\n".join(p.read_text() for p in sorted((ROOT / "ldptut").rglob("*.py")))


@pytest.mark.parametrize("path", PAGES, ids=[p.stem for p in PAGES])
def test_every_source_listing_shown_is_the_packages_source_as_committed(path):
    """A chapter shows the package's own source (inspect.getsource): a listing committed with the notebook must still
    be, verbatim, in ldptut/, else the page shows code the package no longer has (re-execute or re-render it)."""
    stale = []
    for i, cell in enumerate(json.loads(path.read_text())["cells"]):
        if cell["cell_type"] != "code" or "getsource" not in "".join(cell["source"]):
            continue
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/plain")
            if text is not None and "".join(text) not in PACKAGE_SOURCE:
                stale.append(f"cell {i}: {''.join(text).splitlines()[0][:80]}")
    assert not stale, f"{path.name} shows source no longer in ldptut/: {stale}"

"""Real-browser check of the rendered book: ``make check-html``.

Builds the book from the notebooks' committed outputs (no execution: a generated copy of ``_config.yml`` with
``execute_notebooks: "off"`` is passed to ``jupyter-book build --config``; output in ``_build/check-html/``), serves
the HTML on 127.0.0.1 and opens every page listed in ``_toc.yml`` in headless Chromium (Selenium, with the system
chromedriver; Selenium Manager is never asked to download anything). For each page it prints one line with counts
and fails (exit 1) on any of:

1. MathJax errors: ``mjx-merror`` elements or ``data-mjx-error`` attributes once ``MathJax.startup.promise`` has
   resolved, and math elements MathJax left untypeset;
2. wide outputs: a cell output (``.cell_output`` pre, table, img or div.output) whose scrollWidth exceeds the width
   of the text column (the content box of ``article.bd-article``) by more than ``WIDE_TOLERANCE_PX`` (a page's
   line names the widest; "cell N" is the N-th code cell shown on the page, ``div.cell``, counted from 0). At a
   narrow viewport (below ``DESKTOP_MIN_WIDTH``) an output that scrolls sideways inside a box that fits the column
   (a code listing, a figure kept legible by ``book/_static/ldptut.js``) is counted as "scrolls", not as wide;
   on the desktop it is wide (its columns would be out of sight);
3. broken images: an img whose naturalWidth is 0 after loading (and whose ``decode()`` fails);
4. shrunk figures: an output img drawn below ``SHRINK_RATIO`` of its natural width;
5. bookkeeping words in the article's visible text (``innerText``, so collapsed and hidden parts do not count):
   the patterns in ``BOOKKEEPING``;
6. a page that scrolls sideways as a whole (the document wider than the viewport).

At a viewport narrower than ``DESKTOP_MIN_WIDTH`` (``--width 420``: a phone) it reports only and exits 0 unless
``--strict``.

    python tests/html/check_html.py                      # build, then check every page at 1280x900
    python tests/html/check_html.py --no-build --width 420
    python tests/html/check_html.py --no-build --pages 'book/runs/*' --json /tmp/check.json

Exit status: 0 all pages pass (or report-only), 1 a page fails, 2 the build or the browser could not run.
Not collected by pytest (no ``test_`` prefix); ``tests/html/test_check_html.py`` tests it on synthetic pages.
"""
from __future__ import annotations

import argparse
import fnmatch
import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_DIR = ROOT / "_build" / "check-html"          # ignored (.gitignore: _build/)
HTML_DIR = BUILD_DIR / "_build" / "html"

DESKTOP = (1280, 900)
DESKTOP_MIN_WIDTH = 1024          # narrower viewports report only (unless --strict)
WIDE_TOLERANCE_PX = 4             # an output may exceed the column by this much (sub-pixel rounding, borders)
SHRINK_RATIO = 0.5                # an output image drawn below this fraction of its natural width is "shrunk"
PAGE_TIMEOUT_S = 60               # page load, image load and MathJax typesetting, each


@dataclass(frozen=True)
class Pattern:
    """A bookkeeping pattern searched in the article's visible text (``innerText``).

    ``exclude`` is a CSS selector of parts of the article not searched for this pattern; matches there are counted
    and reported as ``ignored`` but do not fail the page."""
    name: str
    regex: str
    flags: int = 0
    exclude: str = ""


# Words that belong to the project's bookkeeping, not to the book. Adjust here: each entry is one Pattern.
# Commit-like hex strings are searched in prose only (paragraphs, lists, Markdown outputs): code (cell inputs, every
# pre) and tables are excluded because the provenance and run-key tables the chapters print (pandas to_string in a
# pre, or HTML tables) legitimately carry commit ids and run keys; those matches are counted as "ignored". A hex token needs a digit and a letter (so neither a date nor a word like "defaced"
# matches) and is not part of a decimal number or an exponent (1.19e-07).
HEX_RE = r"(?<![0-9A-Za-z_.])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![0-9A-Za-z_])(?!(?<=e)[-+]\d)"
BOOKKEEPING: tuple[Pattern, ...] = (
    Pattern("NBVAL_CHECK_OUTPUT", r"NBVAL_CHECK_OUTPUT", re.IGNORECASE),
    Pattern("nbval", r"\bnbval\b", re.IGNORECASE),
    Pattern("issue N", r"\bissues?\s+#?\d+", re.IGNORECASE),
    Pattern("NOTES.md", r"\bNOTES\.md\b", re.IGNORECASE),
    Pattern("session", r"\bsessions?\b", re.IGNORECASE),
    Pattern("TODO", r"\b(?:TODO|FIXME)\b"),
    Pattern("commit-like hex", HEX_RE, 0, exclude="table, pre, .cell_input"),
)


# --------------------------------------------------------------------------------------------- pages and build
def toc_pages(toc: Path) -> list[str]:
    """Docnames of ``_toc.yml`` in book order (root, then chapters with their sections, parts expanded)."""
    import yaml

    data = yaml.safe_load(toc.read_text())
    out: list[str] = []

    def walk(node):
        if isinstance(node, dict):
            if "file" in node or "root" in node:
                out.append(str(node.get("file") or node.get("root")))
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or []:
                    walk(child)
        elif isinstance(node, list):
            for child in node:
                walk(child)

    walk(data)
    return [re.sub(r"\.(ipynb|md|rst)$", "", p) for p in out]


def select_pages(docnames: list[str], pattern: str | None) -> list[str]:
    if not pattern:
        return docnames
    return [d for d in docnames if fnmatch.fnmatch(d, pattern) or fnmatch.fnmatch(d + ".html", pattern)]


def build_book(build_dir: Path = BUILD_DIR) -> tuple[float, list[str]]:
    """Build the HTML book from the committed outputs into ``build_dir``; returns (seconds, warning lines).

    Raises ``RuntimeError`` with the log's tail when jupyter-book fails."""
    import yaml

    marker = build_dir / "_config.yml"
    if build_dir.exists() and any(build_dir.iterdir()) and not (
            marker.is_file() and marker.read_text().startswith("# generated by tests/html/check_html.py")):
        raise RuntimeError(f"build folder {build_dir} exists and is not one of this check's builds: "
                           "refusing to delete it (give --build-dir an empty or new folder)")
    if build_dir.exists():
        shutil.rmtree(build_dir)
    build_dir.mkdir(parents=True)
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config.setdefault("execute", {})["execute_notebooks"] = "off"   # render the committed outputs, never execute
    cfg = build_dir / "_config.yml"
    cfg.write_text("# generated by tests/html/check_html.py from _config.yml: execution off\n"
                   + yaml.safe_dump(config, sort_keys=False))
    jb = Path(sys.executable).parent / "jupyter-book"
    cmd = [str(jb) if jb.exists() else "jupyter-book", "build", str(ROOT), "--all", "--builder", "html",
           "--keep-going", "--config", str(cfg), "--path-output", str(build_dir)]
    print("check-html: build:", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    log = build_dir / "build.log"
    with log.open("w") as fh:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - t0
    text = re.sub(r"\x1b\[[0-9;]*m", "", log.read_text(errors="replace"))
    if rc != 0 or not (build_dir / "_build" / "html" / "index.html").exists():
        raise RuntimeError(f"jupyter-book build failed (exit {rc}); {log}:\n" + "\n".join(text.splitlines()[-30:]))
    warnings = [ln.strip() for ln in text.splitlines() if "WARNING" in ln or "ERROR" in ln]
    return seconds, warnings


# --------------------------------------------------------------------------------------------- browser
def _find(names: list[str], env: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    return None


def browser_paths() -> tuple[str | None, str | None]:
    """(chromium, chromedriver) from $CHROMIUM / $CHROMEDRIVER or the PATH (Debian: apt-get install chromium
    chromium-driver)."""
    return (_find(["chromium", "chromium-browser", "google-chrome"], "CHROMIUM"),
            _find(["chromedriver"], "CHROMEDRIVER"))


def missing_requirements() -> str | None:
    """Why the browser check cannot run here, or None."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install -e '.[check]')"
    chromium, driver = browser_paths()
    if not chromium:
        return "no chromium on the PATH (apt-get install chromium chromium-driver, or set $CHROMIUM)"
    if not driver:
        return "no chromedriver on the PATH (apt-get install chromium-driver, or set $CHROMEDRIVER)"
    return None


def start_browser(width: int, height: int):
    os.environ["SE_OFFLINE"] = "true"   # Selenium Manager must never download a browser or a driver
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = browser_paths()
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--hide-scrollbars", "--force-device-scale-factor=1", f"--window-size={width},{height}",
                "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    d = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    # the layout viewport is exactly width x height CSS px, whatever the window decorations
    d.execute_cdp_cmd("Emulation.setDeviceMetricsOverride",
                      {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False})
    d.set_page_load_timeout(PAGE_TIMEOUT_S)
    d.set_script_timeout(PAGE_TIMEOUT_S)
    return d


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


class Server:
    """The HTML folder served on 127.0.0.1 (an ephemeral port) in a thread, so pages load as from a web server."""

    def __init__(self, directory: Path):
        handler = functools.partial(_QuietHandler, directory=str(directory))
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


# Wait for the document, its images and MathJax's first typesetting (MathJax 3: MathJax.startup.promise).
_WAIT_JS = r"""
const done = arguments[arguments.length - 1], timeout = arguments[0], t0 = Date.now();
const state = {mathjax: 'absent', images: 'ok'};
function images() {
  const imgs = Array.from(document.images);
  imgs.forEach(i => { if (i.loading === 'lazy') i.loading = 'eager'; });
  return Promise.race([
    Promise.all(imgs.map(i => i.complete ? null :
      new Promise(r => { i.addEventListener('load', r, {once: true}); i.addEventListener('error', r, {once: true}); }))),
    new Promise(r => setTimeout(() => { state.images = 'timeout'; r(); }, Math.max(1000, timeout - (Date.now() - t0))))]);
}
function mathjax() {
  return new Promise(resolve => {
    (function poll() {
      const tag = document.querySelector('script[src*="mathjax" i]');
      const MJ = window.MathJax;
      if (MJ && MJ.startup && MJ.startup.promise) {
        MJ.startup.promise.then(() => { state.mathjax = 'typeset'; resolve(); },
                                e => { state.mathjax = 'failed: ' + e; resolve(); });
      } else if (!tag && !(MJ && MJ.startup)) { state.mathjax = 'absent'; resolve(); }
      else if (Date.now() - t0 > timeout) { state.mathjax = 'timeout'; resolve(); }
      else setTimeout(poll, 50);
    })();
  });
}
(function ready() {
  if (document.readyState !== 'complete' && Date.now() - t0 < timeout) return setTimeout(ready, 50);
  Promise.all([images(), mathjax()]).then(() => done(state));
})();
"""

# Measure the page. Returns plain data; the Python side applies the thresholds.
_MEASURE_JS = r"""
const done = arguments[arguments.length - 1], excludes = arguments[0];
(async () => {
const art = document.querySelector('article.bd-article') || document.querySelector('article')
            || document.querySelector('[role=main]') || document.body;
const cs = getComputedStyle(art);
const column = art.clientWidth - parseFloat(cs.paddingLeft || 0) - parseFloat(cs.paddingRight || 0);
const cells = Array.from(art.querySelectorAll('div.cell'));
const cellOf = el => { const c = el.closest('div.cell'); return c ? cells.indexOf(c) : -1; };
const inClosed = el => {  // inside a closed <details> (Jupyter Book's hide-output) or a collapsed toggle
  if (el.closest('.toggle-hidden')) return true;
  for (let d = el.closest('details'); d; d = d.parentElement ? d.parentElement.closest('details') : null)
    if (!d.open) return true;
  return false;
};
const shown = el => el.getClientRects().length > 0 && !inClosed(el);
const desc = el => el.tagName.toLowerCase() + (el.classList.length ? '.' + Array.from(el.classList).slice(0, 3).join('.') : '');
const outs = Array.from(art.querySelectorAll(
  '.cell_output pre, .cell_output table, .cell_output img, .cell_output div.output')).filter(shown);
const scrollerOf = el => {  // the element itself or its nearest ancestor inside the output that scrolls sideways
  const stop = el.closest('.cell_output');
  for (let e = el; e; e = e === stop ? null : e.parentElement) {
    const ox = getComputedStyle(e).overflowX;
    if (ox === 'auto' || ox === 'scroll') return e;
  }
  return null;
};
const outputs = outs.map(el => { const s = scrollerOf(el); return {cell: cellOf(el), what: desc(el),
  width: Math.max(el.scrollWidth, Math.ceil(el.getBoundingClientRect().width)),
  box: s ? Math.ceil(s.getBoundingClientRect().width) : null}; });
const imgs = Array.from(document.images);
const images = [];
for (const i of imgs) {
  let decoded = true;
  if (i.naturalWidth === 0) { try { await i.decode(); } catch (e) { decoded = false; } }
  images.push({src: (i.getAttribute('src') || '').slice(-120), natural: i.naturalWidth, drawn: i.clientWidth,
               shown: shown(i), output: !!i.closest('.cell_output'), in_article: art.contains(i),
               cell: cellOf(i), broken: i.naturalWidth === 0 && !decoded});
}
const math = Array.from(art.querySelectorAll('.math'));
const errors = Array.from(document.querySelectorAll('mjx-merror, [data-mjx-error]'));
const errs = [];
const seen = new Set();
for (const e of errors) {
  const top = e.closest('mjx-container') || e;
  if (seen.has(top)) continue;
  seen.add(top);
  const m = e.closest('[data-mjx-error]');
  errs.push({message: (m ? m.getAttribute('data-mjx-error') : '') || e.textContent.slice(0, 120),
             cell: cellOf(e)});
}
const texts = {'': art.innerText};
for (const sel of excludes) {
  if (!sel) continue;
  const style = document.createElement('style');
  style.textContent = sel + ' {display: none !important}';
  document.head.appendChild(style);
  texts[sel] = art.innerText;
  style.remove();
}
done({page_width: document.documentElement.scrollWidth, column: column, article: art.tagName.toLowerCase() + (art.className ? '.' + art.className : ''),
      viewport: [window.innerWidth, window.innerHeight], cells: cells.length, outputs: outputs, images: images,
      math: math.length, math_typeset: math.filter(m => m.querySelector('mjx-container')).length,
      mjx_containers: document.querySelectorAll('mjx-container').length, mathjax_errors: errs, texts: texts});
})().catch(e => done({error: String(e && e.stack || e)}));
"""


# --------------------------------------------------------------------------------------------- results
@dataclass
class PageResult:
    page: str
    width: int
    loaded: bool = True
    error: str = ""
    mathjax: str = ""
    column: float = 0.0
    cells: int = 0
    outputs: int = 0
    images: int = 0
    math: int = 0
    math_untypeset: int = 0
    mathjax_errors: list = field(default_factory=list)
    wide: list = field(default_factory=list)        # [{cell, what, width, box}] one per cell, widest first
    scrolls: list = field(default_factory=list)     # narrow viewports: outputs scrolling inside a box that fits
    page_width: int = 0                             # the document's scrollWidth (0: not measured)
    broken: list = field(default_factory=list)
    shrunk: list = field(default_factory=list)      # [{cell, src, natural, drawn, ratio}] worst first
    bookkeeping: list = field(default_factory=list)  # [{pattern, match, context}]
    ignored: dict = field(default_factory=dict)     # pattern -> matches in excluded parts (not failing)

    @property
    def failures(self) -> list[str]:
        f = []
        if not self.loaded:
            f.append("not loaded")
        if self.mathjax_errors or self.math_untypeset:
            f.append("mathjax")
        if self.wide:
            f.append("wide")
        if self.page_width > self.width + WIDE_TOLERANCE_PX:
            f.append("page-wide")
        if self.broken:
            f.append("broken-img")
        if self.shrunk:
            f.append("shrunk-img")
        if self.bookkeeping:
            f.append("bookkeeping")
        return f

    def line(self) -> str:
        status = "FAIL" if self.failures else "ok  "
        if not self.loaded:
            return f"{status} {self.page}: not loaded: {self.error}"
        parts = [f"{self.cells} cells, {self.outputs} outputs, {self.images} imgs, {self.math} math, "
                 f"column {self.column:.0f}px"]
        mj = f"mathjax errors {len(self.mathjax_errors)}"
        if self.mathjax_errors:
            mj += f" (cell {self.mathjax_errors[0]['cell']}: {self.mathjax_errors[0]['message']!r})"
        if self.math_untypeset:
            mj += f", untypeset {self.math_untypeset}"
        if self.mathjax not in ("typeset", "absent"):
            mj += f" [MathJax {self.mathjax}]"
        parts.append(mj)
        w = f"wide {len(self.wide)}"
        if self.wide:
            top = self.wide[0]
            w += (f" (widest {top['width']}px > {self.column:.0f}px, cell {top['cell']} {top['what']}; cells "
                  + ",".join(str(x["cell"]) for x in self.wide) + ")")
        parts.append(w)
        if self.scrolls:
            parts.append(f"scrolls {len(self.scrolls)} (widest {self.scrolls[0]['width']}px in its "
                         f"{self.scrolls[0]['box']}px box)")
        if self.page_width > self.width + WIDE_TOLERANCE_PX:
            parts.append(f"page {self.page_width}px wide > viewport {self.width}px")
        b = f"broken img {len(self.broken)}"
        if self.broken:
            b += f" ({self.broken[0]['src']})"
        parts.append(b)
        s = f"shrunk img {len(self.shrunk)}"
        if self.shrunk:
            top = self.shrunk[0]
            s += f" (worst {top['ratio']:.2f} = {top['drawn']}/{top['natural']}px, cell {top['cell']})"
        parts.append(s)
        k = f"bookkeeping {len(self.bookkeeping)}"
        if self.bookkeeping:
            by: dict[str, list] = {}
            for h in self.bookkeeping:
                by.setdefault(h["pattern"], []).append(h)
            k += " (" + "; ".join(f"{p} x{len(hs)}: {hs[0]['context']!r}" for p, hs in by.items()) + ")"
        parts.append(k)
        if any(self.ignored.values()):
            parts.append("ignored " + ", ".join(f"{p} x{n} in code/tables" for p, n in self.ignored.items() if n))
        return f"{status} {self.page}: " + " | ".join(parts)


def _context(text: str, m: re.Match, width: int = 35) -> str:
    s = text[max(0, m.start() - width):m.end() + width]
    return re.sub(r"\s+", " ", s).strip()


def find_bookkeeping(texts: dict[str, str], patterns=BOOKKEEPING) -> tuple[list, dict]:
    """Bookkeeping hits in the visible text. ``texts`` maps each pattern's ``exclude`` selector ('' = nothing
    excluded) to the article's innerText with those parts hidden. Returns (hits, ignored counts)."""
    hits, ignored = [], {}
    for p in patterns:
        text = texts.get(p.exclude, texts[""])
        found = list(re.finditer(p.regex, text, p.flags))
        hits += [{"pattern": p.name, "match": m.group(0), "context": _context(text, m)} for m in found]
        if p.exclude:
            ignored[p.name] = max(0, len(re.findall(p.regex, texts[""], p.flags)) - len(found))
    return hits, ignored


def evaluate(page: str, width: int, state: dict, data: dict, patterns=BOOKKEEPING) -> PageResult:
    r = PageResult(page=page, width=width, mathjax=state.get("mathjax", ""), column=data["column"],
                   cells=data["cells"], outputs=len(data["outputs"]),
                   images=sum(1 for i in data["images"] if i["in_article"]), math=data["math"],
                   math_untypeset=data["math"] - data["math_typeset"] if state.get("mathjax") != "absent"
                   else data["math"])
    r.mathjax_errors = data["mathjax_errors"]
    r.page_width = int(data.get("page_width") or 0)
    limit = data["column"] + WIDE_TOLERANCE_PX
    per_cell: dict[int, dict] = {}
    scrolling: dict[int, dict] = {}
    for o in data["outputs"]:
        if o["width"] > limit:
            boxed = width < DESKTOP_MIN_WIDTH and o.get("box") is not None and o["box"] <= limit
            into = scrolling if boxed else per_cell
            if o["cell"] not in into or o["width"] > into[o["cell"]]["width"]:
                into[o["cell"]] = o
    r.wide = sorted(per_cell.values(), key=lambda o: -o["width"])
    r.scrolls = sorted((o for c, o in scrolling.items() if c not in per_cell), key=lambda o: -o["width"])
    r.broken = [i for i in data["images"] if i["broken"]]
    for i in data["images"]:
        if i["output"] and i["shown"] and i["natural"] > 0 and i["drawn"] < SHRINK_RATIO * i["natural"]:
            r.shrunk.append({**i, "ratio": i["drawn"] / i["natural"]})
    r.shrunk.sort(key=lambda i: i["ratio"])
    r.bookkeeping, r.ignored = find_bookkeeping(data["texts"], patterns)
    return r


def check_pages(html_dir: Path, pages: list[str], width: int = DESKTOP[0], height: int = DESKTOP[1],
                patterns=BOOKKEEPING, echo=None) -> list[PageResult]:
    """Open each page (docname, or a path ending in .html, relative to ``html_dir``) and measure it."""
    excludes = sorted({p.exclude for p in patterns if p.exclude})
    results = []
    with Server(Path(html_dir)) as server:
        driver = start_browser(width, height)
        try:
            for page in pages:
                rel = page if page.endswith(".html") else page + ".html"
                if not (Path(html_dir) / rel).exists():
                    r = PageResult(page=rel, width=width, loaded=False, error="no such file in " + str(html_dir))
                else:
                    try:
                        driver.get(server.url + rel)
                        state = driver.execute_async_script(_WAIT_JS, PAGE_TIMEOUT_S * 1000)
                        data = driver.execute_async_script(_MEASURE_JS, excludes)
                        if "error" in data:
                            raise RuntimeError("measuring script: " + data["error"])
                        r = evaluate(rel, width, state, data, patterns)
                    except Exception as e:  # a page that does not load is a failure of that page, not of the run
                        r = PageResult(page=rel, width=width, loaded=False, error=f"{type(e).__name__}: {e}"[:300])
                results.append(r)
                if echo:
                    echo(r.line())
        finally:
            driver.quit()
    return results


# --------------------------------------------------------------------------------------------- CLI
def _shown(path: Path) -> str:
    """``path`` relative to the repository when it lies inside it."""
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="check_html.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", action=argparse.BooleanOptionalAction, default=True,
                    help="build the book from the committed outputs first (default: yes)")
    ap.add_argument("--width", type=int, default=DESKTOP[0], help="viewport width in CSS px (default 1280)")
    ap.add_argument("--height", type=int, default=DESKTOP[1], help="viewport height in CSS px (default 900)")
    ap.add_argument("--pages", metavar="GLOB", help="only the pages whose docname matches, e.g. 'book/runs/*'")
    ap.add_argument("--json", metavar="OUT", type=Path, help="write every page's measurements to OUT")
    ap.add_argument("--strict", action="store_true",
                    help=f"fail below {DESKTOP_MIN_WIDTH} px too (narrow viewports report only by default)")
    ap.add_argument("--build-dir", type=Path, default=BUILD_DIR,
                    help="where to build (default _build/check-html); give two checks running at once their own")
    ap.add_argument("--html-dir", type=Path, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--toc", type=Path, default=ROOT / "_toc.yml", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    build_dir = args.build_dir.resolve()
    html_dir = args.html_dir if args.html_dir is not None else build_dir / "_build" / "html"

    pages = select_pages(toc_pages(args.toc), args.pages)
    if not pages:
        print(f"check-html: no page of {args.toc} matches {args.pages!r}")
        return 2
    build_s = None
    if args.build:
        try:
            build_s, warnings = build_book(build_dir)
        except RuntimeError as e:
            print(f"check-html: {e}")
            return 2
        print(f"check-html: built {_shown(html_dir)} in {build_s:.1f} s, {len(warnings)} Sphinx warnings")
        for w in warnings:
            print("  " + w)
    why = missing_requirements()
    if why:
        print(f"check-html: cannot run the browser check: {why}")
        return 2
    if not html_dir.is_dir():
        print(f"check-html: no HTML folder {html_dir} (run without --no-build)")
        return 2
    report_only = args.width < DESKTOP_MIN_WIDTH and not args.strict
    print(f"check-html: {len(pages)} pages at {args.width}x{args.height}"
          + (" (report only: narrower than a desktop; --strict to fail)" if report_only else ""), flush=True)
    t0 = time.perf_counter()
    try:
        results = check_pages(html_dir, pages, args.width, args.height, echo=lambda s: print(s, flush=True))
    except Exception as e:
        print(f"check-html: the browser could not run: {type(e).__name__}: {e}")
        return 2
    check_s = time.perf_counter() - t0
    failing = [r for r in results if r.failures]
    kinds = {k: sum(k in r.failures for r in results)
             for k in ("not loaded", "mathjax", "wide", "broken-img", "shrunk-img", "bookkeeping")}
    print(f"check-html: {len(failing)} of {len(results)} pages fail at {args.width}x{args.height} ("
          + ", ".join(f"{k} {n}" for k, n in kinds.items()) + f"); check {check_s:.1f} s"
          + (f", build {build_s:.1f} s" if build_s is not None else ""))
    if args.json:
        args.json.write_text(json.dumps({"width": args.width, "height": args.height, "report_only": report_only,
                                         "build_s": build_s, "check_s": check_s,
                                         "pages": [{**asdict(r), "failures": r.failures} for r in results]},
                                        indent=1))
    return 1 if failing and not report_only else 0


if __name__ == "__main__":
    sys.exit(main())

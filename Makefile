# Two commands on a fresh machine (see README.md):
#   make book   -> executes every chapter at its defaults and builds the HTML book into _build/html
#   make test   -> unit tests + nbval over every chapter notebook in book/ (make test-slow: the tests marked slow)
# Other targets: make reproduce CHAPTER=<name>, make bench, make data, make check-html, make clean.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
BOOK_STAMP := $(VENV)/.ldptut-book        # the package and the book extra
STAMP  := $(VENV)/.ldptut-installed       # and the test, sweep, check and flower extras
# Datasets the chapters' default runs read (converted once into data/).
BOOK_DATASETS ?= mnist fashion_mnist cifar10
# Chapter notebooks (paper-scale runs under book/runs/ are rendered, never re-executed).
CHAPTERS := $(filter-out book/runs/%,$(wildcard book/*.ipynb))
# Chapters `make book` executes at a time (0: one per CPU core), each kernel with its share of the cores
BOOK_JOBS ?= 0
# torch threads per chapter kernel and per test process in make book and make test: float sums depend on how many
# threads share them, and the committed outputs (which nbval checks) were computed with 2; more or fewer threads print
# other last digits in places (PD-LDPFL's attack and Table 1 at one thread). TORCH_THREADS= leaves torch's default.
TORCH_THREADS ?= 2
THREAD_ENV = $(if $(TORCH_THREADS),OMP_NUM_THREADS=$(TORCH_THREADS) MKL_NUM_THREADS=$(TORCH_THREADS)) OMP_WAIT_POLICY=$${OMP_WAIT_POLICY:-PASSIVE}

.PHONY: book test test-slow data reproduce bench clean venv check-html

venv: $(STAMP)

# make book installs the book's packages only (jupyter-book, papermill: 136 s on a fresh clone); the targets that
# test, sweep or check add the other extras (Ray, pytest, selenium, Flower).
$(BOOK_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[book]'
	touch $(BOOK_STAMP)

$(STAMP): $(BOOK_STAMP)
	$(BIN)/python -m pip install --quiet -e '.[book,test,sweep,check,flower]'
	touch $(STAMP)

data: $(BOOK_STAMP)
	$(BIN)/python -m ldptut.data $(BOOK_DATASETS)

book: data
	rm -rf _build/html _build/.jupyter_cache
	$(THREAD_ENV) $(BIN)/python book/_execute_chapters.py --jobs $(BOOK_JOBS) $(CHAPTERS)   # into _build/.jupyter_cache
	$(THREAD_ENV) $(BIN)/jupyter-book build . --all --builder html -W -n --keep-going  # renders the chapters from that cache
	@echo "Book built: _build/html/index.html"

# Test files run TEST_JOBS at a time (pytest-xdist; --dist loadfile keeps a file, and so a chapter's cells, in order
# on one worker), each process with TORCH_THREADS torch threads and OpenMP's passive waiting (as make book).
TEST_JOBS ?= auto
test: data $(STAMP)
	$(THREAD_ENV) $(BIN)/python -m pytest tests $(CHAPTERS) --nbval-lax --nbval-current-env \
	  -p no:cacheprovider -m "not slow" -n $(TEST_JOBS) --dist loadfile

# The tests marked slow (left out of make test: re-training the costliest stored runs' first round, 1.5-3 minutes each;
# the float32 enumerations at epsilon 0.1 and 5, 5-13 s each, where make test keeps epsilon 1)
test-slow: data $(STAMP)
	$(BIN)/python -m pytest tests -p no:cacheprovider -m slow

# Paper-scale run of one chapter: papermill with book/params/<CHAPTER>[-<RUN>]-paper.yaml
#   -> book/runs/<CHAPTER>[-<RUN>]-paper.ipynb   (RUN names a variant, e.g. a dataset: RUN=fmnist)
# LOAD_ONLY=1 re-renders the page from the stored runs and fails instead of training a missing one.
# DEVICE=cuda (or cpu, auto) overrides the chapter's device (default auto: CUDA when present).
# The kernel gets TORCH_THREADS torch threads and passive waiting, as make book and make test (the committed outputs
# were computed with 2 threads; some last digits depend on it).
# CHAPTER and the parameter file are checked before anything else runs; the page is written to a temporary file and
# replaces the committed page only when the whole execution succeeded (a failed run leaves the page as it was and
# keeps its partial output as book/runs/.<name>-paper.failed.ipynb).
RUN_NAME = $(CHAPTER)$(if $(RUN),-$(RUN))
PAGE     = book/runs/$(RUN_NAME)-paper.ipynb
PARTIAL  = book/runs/.$(RUN_NAME)-paper.partial.ipynb
reproduce:
	@test -n "$(CHAPTER)" || { echo "usage: make reproduce CHAPTER=<name> [RUN=<variant>] [LOAD_ONLY=1] [DEVICE=cuda] (see book/params/)"; exit 2; }
	@test -f "book/$(CHAPTER).ipynb" || { echo "no chapter book/$(CHAPTER).ipynb (CHAPTER=$(CHAPTER)); chapters: $(notdir $(basename $(CHAPTERS)))"; exit 2; }
	@test -f "book/params/$(RUN_NAME)-paper.yaml" || { echo "no parameter file book/params/$(RUN_NAME)-paper.yaml (CHAPTER=$(CHAPTER) RUN=$(RUN))"; exit 2; }
	$(MAKE) --no-print-directory data
	rm -f "$(PARTIAL)"
	cd book && $(THREAD_ENV) $(if $(LOAD_ONLY),LDPTUT_RUNS_LOAD_ONLY=1 )"$(abspath $(BIN))/papermill" "$(CHAPTER).ipynb" "runs/.$(RUN_NAME)-paper.partial.ipynb" \
		-f "params/$(RUN_NAME)-paper.yaml" $(if $(DEVICE),-p device "$(DEVICE)" )-k python3 --cwd . --request-save-on-cell-execute \
		|| { mv -f "runs/.$(RUN_NAME)-paper.partial.ipynb" "runs/.$(RUN_NAME)-paper.failed.ipynb" 2>/dev/null; \
		     echo "make reproduce: the execution failed; $(PAGE) is unchanged (partial output: book/runs/.$(RUN_NAME)-paper.failed.ipynb)"; exit 1; }
	"$(abspath $(BIN))/python" -m ldptut.notebooks mark-paper-run "$(PARTIAL)" "book/params/$(RUN_NAME)-paper.yaml"
	mv -f "$(PARTIAL)" "$(PAGE)"

# Real-browser check of the rendered book (tests/html/check_html.py, see README.md): builds the book from the
# committed outputs into _build/check-html (no execution, no data needed), opens every page of _toc.yml in headless
# Chromium at 1280x900 and fails on MathJax errors, outputs wider than the text column, broken or shrunk images and
# bookkeeping words. Needs chromium and chromedriver (Debian: apt-get install chromium chromium-driver).
# CHECK_HTML_ARGS="--no-build --width 420" reports a phone-width check without failing; --build-dir DIR lets two checks
# run at once (each builds into its own folder).
check-html: $(STAMP)
	$(BIN)/python tests/html/check_html.py $(CHECK_HTML_ARGS)

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_mechanisms.py
	$(BIN)/python benchmarks/bench_fl.py
	$(BIN)/python benchmarks/bench_paper_cost.py
	$(BIN)/python benchmarks/bench_corbin.py
	$(BIN)/python benchmarks/bench_fedsel.py
	$(BIN)/python benchmarks/bench_pd_ldpfl.py
	$(BIN)/python benchmarks/bench_flower.py

clean:
	rm -rf _build .pytest_cache

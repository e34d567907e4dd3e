"""The package's import structure, read from the source (every ``import`` statement, at module level or inside a
function): no cycle, and no arrow running back up. The storage layer (``runconfig``, ``runcache``) and the round engine
(``fl``) import nothing above them; only entry points (``sweep``, ``migrate``) and the paper modules themselves import
``ldptut.papers``. A run kind's training is given a :class:`~ldptut.runconfig.TrainingEnv`, never the runner."""
from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ldptut"


def _modules() -> dict[str, Path]:
    return {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
            for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The ldptut modules one import statement of ``module`` reaches."""
    package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            parts = package.split(".")
            base = ".".join(parts[:len(parts) - (node.level - 1)] + ([node.module] if node.module else []))
        else:
            base = node.module or ""
        if not base.startswith("ldptut"):
            return set()
        return {f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in node.names} & MODULES.keys()
    out = set()
    for a in node.names:
        name = a.name
        while name not in MODULES and "." in name:
            name = name.rsplit(".", 1)[0]
        if name in MODULES:
            out.add(name)
    return out


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for m, path in MODULES.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        graph[m] = set().union(*([_targets(m, n) for n in ast.walk(tree)
                                  if isinstance(n, (ast.Import, ast.ImportFrom))] or [set()])) - {m}
    return graph


GRAPH = import_graph()


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` as a path (first module repeated at the end), or []."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(v: str) -> list[str]:
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                return stack[stack.index(w):] + [w]
            if w not in state and (found := visit(w)):
                return found
        stack.pop()
        state[v] = 2
        return []

    for v in sorted(graph):
        if v not in state and (found := visit(v)):
            return found
    return []


def test_the_graph_is_read_from_every_module():
    assert {"ldptut.fl", "ldptut.runconfig", "ldptut.papers", "ldptut.papers.corbin"} <= GRAPH.keys()
    assert "ldptut.runcache" in GRAPH["ldptut.experiments"]                  # a module-level import
    assert "ldptut.papers.personalized_ldp_fl" in GRAPH["ldptut.migrate"]                 # one inside a function
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]   # the detector detects


def test_no_import_cycle():
    assert _cycle(GRAPH) == []


@pytest.mark.parametrize("module, forbidden", [
    ("ldptut.runconfig", {"ldptut.runcache", "ldptut.experiments", "ldptut.fl", "ldptut.sweep"}),
    ("ldptut.runcache", {"ldptut.experiments", "ldptut.fl", "ldptut.sweep"}),
    ("ldptut.fl", {"ldptut.runconfig", "ldptut.runcache", "ldptut.experiments", "ldptut.sweep"}),
    ("ldptut.data", {"ldptut.runconfig", "ldptut.runcache", "ldptut.experiments", "ldptut.fl", "ldptut.sweep"}),
])
def test_lower_layers_do_not_import_upper_ones(module, forbidden):
    """``module`` and, for a package (the round engine ``ldptut.fl``, the data ``ldptut.data``), each of its modules."""
    for m in [m for m in GRAPH if m == module or m.startswith(module + ".")]:
        up = {t for t in GRAPH[m] if t in forbidden or t.startswith("ldptut.papers")}
        assert not up, f"{m} imports {sorted(up)}"


def test_the_round_engine_is_a_package_of_rooms_that_import_no_cycle():
    rooms = {m for m in GRAPH if m.startswith("ldptut.fl.")}
    assert rooms >= {"ldptut.fl.engine", "ldptut.fl.privatizers", "ldptut.fl.aggregators", "ldptut.fl.ranges",
                     "ldptut.fl.checks", "ldptut.fl.layout", "ldptut.fl.context"}
    # the rooms import each other, never the package's __init__ (which re-exports them)
    assert not any("ldptut.fl" in GRAPH[m] for m in rooms)


def test_only_entry_points_and_paper_modules_import_the_papers():
    importers = {m for m, targets in GRAPH.items() if any(t.startswith("ldptut.papers") for t in targets)}
    # ldptut.flower.side_by_side is the Flower appendix's chapter module: it runs the comparison's benchmark setting
    # (the generic ldptut.flower modules import no paper)
    assert {m for m in importers if not m.startswith("ldptut.papers")} <= {"ldptut.sweep", "ldptut.migrate",
                                                                         "ldptut.flower.side_by_side"}


def test_every_run_kind_trains_in_an_environment_not_the_runner():
    from ldptut import experiments  # noqa: F401  (FedAvgConfig)
    from ldptut.papers import paper_modules
    from ldptut.runconfig import _KINDS

    paper_modules()
    assert {"fedavg"} <= _KINDS.keys() and len(_KINDS) >= 6
    for name, cls in _KINDS.items():
        params = inspect.signature(cls.train_group).parameters
        assert "env" in params and "runner" not in params, f"{name}: train_group{inspect.signature(cls.train_group)}"


def test_one_module_per_mechanism():
    """Each registered mechanism lives in a module of its own (formula, sampler, law and guarantee together), on the
    shared base; all are importable from ``ldptut.mechanisms``."""
    from ldptut import mechanisms

    homes = {name: cls.__module__ for name, cls in mechanisms.MECHANISMS.items()}
    assert len(set(homes.values())) == len(homes), homes
    assert all(m.startswith("ldptut.mechanisms.") and m != "ldptut.mechanisms.base" for m in homes.values())
    assert not any("ldptut.mechanisms" in GRAPH[m] for m in GRAPH if m.startswith("ldptut.mechanisms."))

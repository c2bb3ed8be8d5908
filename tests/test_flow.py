"""The flow rule, checked on the source: spec → plan → launch → run → track → collect → report,
nothing back; and the wings keep to their side (spec: the user's side, jobs: inside a job, stats:
arrays in, numbers out). Imports are read with `ast`, function-level ones included, so a lazy
back-import inside a function is caught too.

Two graphs: the runtime graph (`if TYPE_CHECKING:` blocks left out: they never run) and the full
graph, which adds the type-only imports and the package `__init__` an import of a submodule runs
first. The flow rules and the cycle check hold on the full graph: a type-only loop is a loop a
reader has to untangle too, and one of them becomes a runtime loop with the first annotation
evaluated at import."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("cancelctl", "losses")

# What runs jobs, stores their results or reports them: the user's side (the spec wing) imports none.
RUNS_JOBS = ("cancelctl.executors", "cancelctl.launch", "cancelctl.jobs", "cancelctl.backends", "cancelctl.tracking",
             "cancelctl.report", "cancelctl.stats", "cancelctl.cli", "cancelctl.bench", "cancelctl.workdir",
             "cancelctl.manifest", "cancelctl.runstate", "cancelctl.fileio", "cancelctl.smoke")
# Project modules that read or write files, stores or processes: the statistics import none.
DOES_IO = ("cancelctl.tracking", "cancelctl.workdir", "cancelctl.fileio", "cancelctl.manifest", "cancelctl.launch",
           "cancelctl.executors", "cancelctl.jobs", "cancelctl.backends", "cancelctl.report", "cancelctl.cli",
           "cancelctl.bench", "cancelctl.smoke", "cancelctl.models")

# (importer prefix, imported prefix, why): a module under the first may not import one under the second.
FORBIDDEN = [
    ("cancelctl.report", "cancelctl.launch", "the report never imports launch code"),
    ("cancelctl.report", "cancelctl.executors", "the report never imports an executor"),
    ("cancelctl.backends", "cancelctl.cli", "backends never import the CLI"),
    ("losses", "cancelctl", "losses never import cancelctl"),
    ("cancelctl.launch", "cancelctl.backends", "launch asks a backend through the spec's catalog of backends"),
    ("cancelctl.executors", "cancelctl.backends", "executors run jobs, they never import a backend"),
    ("cancelctl.jobs", "cancelctl.cli", "the job side never imports the CLI"),
    ("cancelctl.jobs", "cancelctl.report", "the job side never imports the report"),
    ("cancelctl.jobs", "cancelctl.launch", "the job side never imports the launcher"),
    ("cancelctl.jobs", "cancelctl.smoke", "the job side never imports the smoke (a smoke runs ordinary jobs)"),
    ("cancelctl.jobs", "cancelctl.backends", "the job side finds its backend through the spec's catalog of backends"),
    ("cancelctl.backends", "cancelctl.smoke", "backends never import the smoke, which drives them"),
    ("cancelctl.smoke", "cancelctl.cli", "the smoke is a library call; the CLI prints it"),
    *[("cancelctl.models", wing, "model preparation is a library: a wheel in, a folder out")
      for wing in ("cancelctl.cli", "cancelctl.launch", "cancelctl.jobs", "cancelctl.executors", "cancelctl.backends")],
    # modules with one job each: the parts a split made point one way
    ("losses.verl_adapter", "losses.verl_plugin", "importing the plugin registers and patches: the adapter never does"),
    ("losses.verl_metrics", "losses.verl_plugin", "importing the plugin registers and patches: the metrics never do"),
    ("cancelctl.backends.verl.forward", "cancelctl.backends.verl.supervisor", "forwarding never imports the child's supervision"),
    ("cancelctl.backends.verl.command", "cancelctl.backends.verl.supervisor", "the job command never imports its supervision"),
    ("cancelctl.backends.verl.command", "cancelctl.backends.verl.forward", "the job command never imports the forwarder"),
    ("cancelctl.jobs.children", "cancelctl", "stopping a child is a leaf: the verl job and the Ray cluster share it"),
    *[("cancelctl.spec", wing, "the spec wing imports nothing that runs jobs") for wing in RUNS_JOBS],
    # the CLI and the plan know no backend: what a backend adds to plan and render it says through the
    # `Backend` protocol, found by name in the registry
    *[(importer, f"cancelctl.backends.{name}", "the CLI, the plan and the registry import no backend by name")
      for importer in ("cancelctl.cli", "cancelctl.backends.plan_rows", "cancelctl.backends.registry",
                       "cancelctl.backends.protocol", "cancelctl.spec.backends")
      for name in ("lab", "verl")],
    *[("cancelctl.stats", wing, "the statistics do no I/O of their own") for wing in DOES_IO],
]

# Libraries and standard modules that reach files, stores, processes or the terminal: not in stats.
IO_MODULES = {"mlflow", "os", "io", "pathlib", "shutil", "sqlite3", "subprocess", "socket", "tempfile", "pickle",
              "json", "csv", "glob", "matplotlib", "rich", "yaml", "requests", "urllib", "submitit", "torch"}
# Calls that read or write by themselves: `open(...)`, `path.read_text()`, `frame.to_csv(...)`, ...
IO_CALLS = {"open", "print", "read_text", "write_text", "read_bytes", "write_bytes", "to_csv", "to_json",
            "to_parquet", "to_pickle", "read_csv", "read_json", "read_parquet", "read_pickle", "savefig", "load",
            "save", "savez", "loadtxt", "savetxt", "fromfile", "tofile"}


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _runtime_nodes(tree: ast.AST):
    """Every node except the bodies of `if TYPE_CHECKING:` blocks."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                stack.extend(child.orelse)
                continue
            stack.append(child)


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def import_graph(root: Path, packages=PACKAGES, *, full: bool = False) -> dict[str, set[str]]:
    """module -> the project modules it imports (at any depth of its code). `full`: type-only imports
    too, and the packages whose `__init__` an import runs first (those of the importer's own package
    chain are initialised already when it runs)."""
    files = {module_name(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in files.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        targets: set[str] = set()
        for node in ast.walk(tree) if full else _runtime_nodes(tree):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    child = f"{base}.{alias.name}"
                    targets.add(child if child in files else base)
        if full:
            initialised = {*_ancestors(name), *([name] if is_package else [])}
            targets |= {a for t in targets for a in _ancestors(t) if a in files and a not in initialised}
        graph[name] = {t for t in targets if t in files and t != name}
    return graph


def _under(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def flow_violations(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for importer, targets in sorted(graph.items()):
        for target in sorted(targets):
            for src, dst, why in FORBIDDEN:
                if _under(importer, src) and _under(target, dst):
                    found.append(f"{importer} imports {target}: {why}")
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def io_in_stats(root: Path) -> list[str]:
    """Imports of I/O libraries and I/O calls in cancelctl/stats: the statistics are handed arrays
    and frames by the report, and hand back numbers."""
    found = []
    for path in sorted((root / "cancelctl" / "stats").rglob("*.py")):
        where = path.relative_to(root)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in IO_MODULES]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module.split(".")[0] in IO_MODULES:
                found.append(f"{where}:{node.lineno}: from {node.module} import ...")
            elif isinstance(node, ast.Call):
                called = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if called in IO_CALLS:
                    found.append(f"{where}:{node.lineno}: {called}(...)")
    return found


# ------------------------------------------------------------------------------------- the tree


def test_no_module_imports_against_the_flow():
    assert flow_violations(import_graph(ROOT, full=True)) == []


def test_no_import_cycles_of_any_kind():
    """Runtime imports, type-only ones and package inits: the spec no longer reaches up into the
    executors (executors/base → plan → spec → executors/registry was a type-only loop)."""
    assert import_cycles(import_graph(ROOT, full=True)) == []


def test_the_statistics_do_no_io_of_their_own():
    assert io_in_stats(ROOT) == []


BACKEND_NAMES = ("lab", "verl")


def _names_a_backend(side: ast.AST) -> bool:
    """A backend's name as a constant ("verl", ("lab",)), or a `.backend` attribute (`run.spec.backend`)."""
    return any((isinstance(node, ast.Constant) and node.value in BACKEND_NAMES)
               or (isinstance(node, ast.Attribute) and node.attr == "backend") for node in ast.walk(side))


def backend_name_branches(root: Path) -> list[str]:
    """Comparisons (==, !=, in, not in) on a backend's name outside cancelctl/backends/: there a
    module asks the backend (`cancelctl.backends.protocol`) instead of branching on what it is called."""
    found = []
    for path in sorted((root / "cancelctl").rglob("*.py")):
        if (root / "cancelctl" / "backends") in path.parents:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare) and any(_names_a_backend(side) for side in (node.left, *node.comparators)):
                found.append(f"{path.relative_to(root).as_posix()}:{node.lineno}")
    return found


def test_no_module_outside_the_backends_branches_on_a_backend_name():
    """`run.spec.backend == "verl"` and the like belong to cancelctl/backends/: the spec, the CLI, launch,
    the jobs, the executors and the smoke ask the backend registered under the name."""
    assert backend_name_branches(ROOT) == []


def test_the_graph_sees_the_imports_it_guards():
    """The checker is not vacuous: known edges of the tree are in the graph, function-level ones,
    type-only ones and package inits too."""
    graph, full = import_graph(ROOT), import_graph(ROOT, full=True)
    assert "cancelctl.executors.registry" in graph["cancelctl.executors"]
    assert "cancelctl.workdir" in graph["cancelctl.report.sweep_report"]  # imported inside functions
    assert "cancelctl.launch.control" in graph["cancelctl.launch.launcher"]
    assert "cancelctl.executors.base" not in graph["cancelctl.executors.registry"]  # type-only
    assert "cancelctl.executors.base" in full["cancelctl.executors.registry"]
    assert "cancelctl.tracking" in full["cancelctl.jobs.runjob"]  # the package init its imports run
    assert "cancelctl.spec.expand" in graph["cancelctl.cli.common"]
    assert "cancelctl.stats.verdicts" in graph["cancelctl.report.build"]
    # the report's settings and the verdicts' modules, one job each: options → rules → types, no way back
    assert "cancelctl.report.options" in graph["cancelctl.report.build"]
    assert "cancelctl.stats.options" in graph["cancelctl.report.options"]
    assert {"cancelctl.stats.verdict_rules", "cancelctl.stats.verdict_types", "cancelctl.stats.outcomes"} <= graph[
        "cancelctl.stats.verdicts"]
    assert "cancelctl.stats.claim_values" in graph["cancelctl.stats.verdict_rules"]
    assert "cancelctl.stats.verdicts" not in full["cancelctl.stats.verdict_rules"] | full["cancelctl.stats.outcomes"]
    assert {"cancelctl.installed"} <= graph["cancelctl.backends.verl.render"]
    # one catalog of backends: the spec, launch, the jobs, the local executor and the registry ask it
    assert {"cancelctl.spec.backends"} <= (graph["cancelctl.spec.experiment"] & graph["cancelctl.launch.preflight"]
                                           & graph["cancelctl.jobs.runjob"] & graph["cancelctl.jobs.time_limit"]
                                           & graph["cancelctl.executors.local"] & graph["cancelctl.backends.registry"])
    assert {"cancelctl.backends.registry", "cancelctl.backends.protocol"} <= graph["cancelctl.backends.plan_rows"]
    assert "cancelctl.backends.protocol" in graph["cancelctl.backends.lab.backend"] & graph["cancelctl.backends.verl.backend"]
    assert "cancelctl.spec.metric_keys" in graph["cancelctl.spec.claim_metric"] and "cancelctl.spec.metric_keys" in graph[
        "cancelctl.spec.monitor"]
    assert io_in_stats(ROOT) == [] and (ROOT / "cancelctl" / "stats" / "intervals.py").exists()
    # one table of what each claim direction predicts, read by the tests and the e-values alike
    assert {"cancelctl.spec.directions"} <= graph["cancelctl.stats.evidence"] & graph["cancelctl.stats.sequential"]
    # the modules split by job and who uses them
    assert {"losses.verl_adapter", "losses.verl_metrics"} <= graph["losses.verl_plugin"]
    assert "losses.verl_adapter" not in graph["losses.verl_metrics"] and "losses.verl_adapter" in full["losses.verl_metrics"]
    assert {"cancelctl.backends.verl.command", "cancelctl.backends.verl.forward", "cancelctl.jobs.children"} <= graph[
        "cancelctl.backends.verl.supervisor"]
    assert "cancelctl.jobs.children" in graph["cancelctl.jobs.raycluster"]
    # one metric logger protocol, in tracking: the lab's, verl's and the Ray cluster's train/tag through it
    assert {"cancelctl.tracking.logger"} <= (full["cancelctl.jobs.raycluster"] & full["cancelctl.backends.lab.train"]
                                             & full["cancelctl.backends.verl.supervisor"])
    assert "cancelctl.backends.plan_rows" in graph["cancelctl.cli.inspecting"]


# ------------------------------------------------------------------------------------- planted


def _copy_tree(tmp_path: Path) -> Path:
    for pkg in PACKAGES:
        shutil.copytree(ROOT / pkg, tmp_path / pkg, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


def test_a_planted_back_import_fails_the_check(tmp_path):
    """A copy of the tree with `report.sweep_report` importing launch inside a function, and a backend
    importing the CLI: both are reported; a cycle planted between two modules is found."""
    root = _copy_tree(tmp_path)
    _append(root / "cancelctl" / "report" / "sweep_report.py", "\n\ndef _planted():\n    from cancelctl.launch import launch_sweep\n")
    _append(root / "cancelctl" / "backends" / "lab" / "__init__.py", "\nimport cancelctl.cli\n")
    _append(root / "cancelctl" / "workdir.py", "\n\ndef _planted():\n    from cancelctl.report import sweep_report\n")
    graph = import_graph(root)
    violations = flow_violations(graph)
    assert "cancelctl.report.sweep_report imports cancelctl.launch: the report never imports launch code" in violations
    assert "cancelctl.backends.lab imports cancelctl.cli: backends never import the CLI" in violations
    assert any({"cancelctl.workdir", "cancelctl.report.sweep_report"} <= set(c) for c in import_cycles(graph))


def test_planted_wing_crossings_fail_the_check(tmp_path):
    """The spec importing an executor (type-only, as it once did), a statistic reading a file, the
    job side importing the report: each is reported."""
    root = _copy_tree(tmp_path)
    _append(root / "cancelctl" / "spec" / "experiment.py",
            "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cancelctl.executors.registry import get_executor\n")
    _append(root / "cancelctl" / "stats" / "curves.py", "\n\ndef _planted(path):\n    return open(path).read()\n")
    _append(root / "cancelctl" / "jobs" / "monitor.py", "\n\ndef _planted():\n    from cancelctl.report.live import watch\n")
    violations = flow_violations(import_graph(root, full=True))
    assert ("cancelctl.spec.experiment imports cancelctl.executors.registry: the spec wing imports nothing that runs jobs"
            in violations)
    assert "cancelctl.jobs.monitor imports cancelctl.report.live.watch: the job side never imports the report" in violations
    assert flow_violations(import_graph(root)) != violations  # the type-only import is seen by the full graph only
    (found,) = io_in_stats(root)
    assert found.startswith("cancelctl/stats/curves.py:") and found.endswith(": open(...)")


def test_a_planted_branch_on_a_backend_name_is_found(tmp_path):
    """A name compared in the spec, a `.backend` tested for membership in launch: both found; the
    same comparison inside cancelctl/backends/ is the backend's own business."""
    root = _copy_tree(tmp_path)
    _append(root / "cancelctl" / "spec" / "run.py", "\n\ndef _planted(spec):\n    return spec.backend == 'verl'\n")
    _append(root / "cancelctl" / "launch" / "preflight.py", "\n\ndef _planted(run, names):\n    return run.spec.backend in names\n")
    _append(root / "cancelctl" / "backends" / "plan_rows.py", "\n\ndef _planted(run):\n    return run.spec.backend == 'lab'\n")
    found = backend_name_branches(root)
    assert len(found) == 2
    assert found[0].startswith("cancelctl/launch/preflight.py:") and found[1].startswith("cancelctl/spec/run.py:")


def test_a_type_only_cycle_is_found_by_the_full_graph_only(tmp_path):
    """executors/base → (type-only) spec.run, spec.run → executors.registry → (type-only) executors.base:
    the loop the spec once had. The runtime graph does not see it; the full graph does."""
    root = _copy_tree(tmp_path)
    _append(root / "cancelctl" / "spec" / "run.py", "\n\ndef _planted():\n    from cancelctl.executors.registry import get_executor\n")
    _append(root / "cancelctl" / "executors" / "base.py",
            "\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cancelctl.spec.run import RunSpec\n")
    assert import_cycles(import_graph(root)) == []
    cycles = import_cycles(import_graph(root, full=True))
    assert any({"cancelctl.executors.base", "cancelctl.executors.registry", "cancelctl.spec.run"} <= set(c) for c in cycles)


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"losses.pg": {"cancelctl.spec.expand"}, "cancelctl.spec.expand": set()}, ["losses.pg imports cancelctl.spec.expand"]),
        ({"cancelctl.launch.launcher": {"cancelctl.backends.verl.render"}}, ["cancelctl.launch.launcher imports cancelctl.backends.verl.render"]),
        ({"cancelctl.report.tables": {"cancelctl.executors.slurm"}}, ["cancelctl.report.tables imports cancelctl.executors.slurm"]),
        ({"cancelctl.report.sweep_report": {"cancelctl.workdir"}, "cancelctl.launch": {"cancelctl.workdir"}}, []),
        ({"cancelctl.spec.run": {"cancelctl.tracking.tags"}}, ["cancelctl.spec.run imports cancelctl.tracking.tags"]),
        ({"cancelctl.stats.verdicts": {"cancelctl.spec.claims", "cancelctl.workdir"}}, ["cancelctl.stats.verdicts imports cancelctl.workdir"]),
        ({"cancelctl.jobs.runjob": {"cancelctl.cli.common", "cancelctl.tracking"}}, ["cancelctl.jobs.runjob imports cancelctl.cli.common"]),
        ({"cancelctl.report.live.state": {"cancelctl.jobs.monitor"}}, []),
    ],
)
def test_rules_on_synthetic_graphs(graph, expected):
    assert [v.split(":")[0] for v in flow_violations(graph)] == expected


def test_cycle_finder_on_a_synthetic_graph():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []

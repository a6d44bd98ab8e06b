"""The architecture, checked: base, stages, app, and every import pointing down.

    base    core                                          imports no stage and no app
    stages  infra, provision, llamacpp, loadtest, quality, analysis, hardware  import only the base (and themselves)
    app     rigbench, fabfile.py                           composes stages

Imports are read from the source (every ``import`` and ``from ... import``, also inside
functions), so a lazy import that runs back up is found like any other. There is no list of
allowed exceptions: an arrow up or sideways fails here until the code moves.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BASE = {"core"}
STAGES = {"infra", "provision", "llamacpp", "loadtest", "quality", "analysis", "hardware"}
APP = {"rigbench", "fabfile"}
LAYERS = BASE | STAGES | APP
# Files that run alone with the standard library on a bare rig (copied there one by one).
STANDALONE = {"core/hub_download.py", "llamacpp/build_script.py", "provision/rig_agent.py"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def shipped_files() -> dict[str, Path]:
    files = {module_name(ROOT / "fabfile.py"): ROOT / "fabfile.py"}
    for package in sorted(BASE | STAGES | {"rigbench"}):
        for path in sorted((ROOT / package).rglob("*.py")):
            files[module_name(path)] = path
    return files


FILES = shipped_files()


def imported_modules(path: Path) -> set[str]:
    """Project modules a file imports: ``from a.b import c`` names a.b.c when that is a module."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                child = f"{node.module}.{alias.name}"
                found.add(child if child in FILES else node.module)
    return {name for name in found if name.split(".")[0] in LAYERS}


GRAPH = {name: imported_modules(path) for name, path in FILES.items()}


def layer(module: str) -> str:
    top = module.split(".")[0]
    return "base" if top in BASE else "stage" if top in STAGES else "app"


def test_every_package_is_in_a_layer() -> None:
    folders = {p.parent.relative_to(ROOT).parts[0] for p in ROOT.glob("*/__init__.py")}
    assert folders == BASE | STAGES | {"rigbench"}, "a new top-level package must be given its layer here"


def test_the_base_imports_no_stage_and_no_app() -> None:
    wrong = sorted(f"{a} -> {b}" for a, targets in GRAPH.items() if layer(a) == "base"
                   for b in targets if layer(b) != "base")
    assert not wrong, "the base imports up: " + "; ".join(wrong)


def test_a_stage_imports_only_the_base_and_itself() -> None:
    wrong = sorted(
        f"{a} -> {b}" for a, targets in GRAPH.items() if layer(a) == "stage"
        for b in targets if layer(b) == "app" or (layer(b) == "stage" and b.split(".")[0] != a.split(".")[0])
    )
    assert not wrong, "a stage imports another stage or the app (meet in the run directory): " + "; ".join(wrong)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: the groups of modules that import each other, directly or not."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

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
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph.get(node, ()):
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def test_no_circles() -> None:
    assert strongly_connected(GRAPH) == []


def test_the_circle_finder_finds_one() -> None:
    """The check above can fail: a made-up pair of modules importing each other is a circle."""
    assert strongly_connected({"a": {"b"}, "b": {"c", "a"}, "c": set()}) == [["a", "b"]]


def required_imports(source: str) -> set[str]:
    """The top-level modules a file imports, less those it imports inside ``try: … except ImportError``
    (the file runs without them: the build script asks pip for its default index only where pip is)."""
    tree = ast.parse(source)
    optional: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
            isinstance(handler.type, ast.Name) and handler.type.id in ("ImportError", "ModuleNotFoundError")
            for handler in node.handlers
        ):
            optional.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    modules = set()
    for node in ast.walk(tree):
        if id(node) in optional:
            continue
        if isinstance(node, ast.Import):
            modules.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules.add(node.module.split(".")[0])
    return modules - {"__future__"}


@pytest.mark.parametrize("name", sorted(STANDALONE))
def test_standalone_files_import_only_the_standard_library(name: str) -> None:
    outside = sorted(required_imports((ROOT / name).read_text()) - set(sys.stdlib_module_names))
    assert not outside, f"{name} must run alone on a bare rig, with the standard library only: {outside}"


def test_only_an_import_guarded_by_import_error_is_optional() -> None:
    source = ("import json\nimport httpx\ntry:\n    import pip\nexcept ImportError:\n    pip = None\n"
              "try:\n    import gguf\nexcept ValueError:\n    pass\n")
    assert required_imports(source) == {"json", "httpx", "gguf"}


def test_no_shipped_module_edits_sys_path() -> None:
    edits = sorted(
        f"{path.relative_to(ROOT)}:{number}"
        for path in FILES.values()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"sys\.path\s*(\.|\[|=)|[\"']PYTHONPATH[\"']", line) and not line.lstrip().startswith("#")
    )
    assert not edits, "shipped modules import through the installed packages, not sys.path: " + ", ".join(edits)


def test_no_two_test_files_share_a_name() -> None:
    names = defaultdict(list)
    for path in (ROOT / "tests").rglob("test_*.py"):
        names[path.name].append(str(path.relative_to(ROOT)))
    assert {name: paths for name, paths in names.items() if len(paths) > 1} == {}


# Imported where they are used, each for its reason.
CALL_SITE_IMPORTS = {
    # clients of AWS and Pulumi: boto3 alone takes most of a second to import, which every report,
    # plan and sweep would pay though only the cloud paths call them
    "boto3": "AWS", "botocore": "AWS", "pulumi": "Pulumi",
    # the socket client's event-loop read runs only inside Locust; a pre-flight check in the CLI's
    # own process uses the blocking read and never starts a gevent hub
    "gevent": "Locust's event loop",
}


def imports_inside_functions(source: str) -> list[int]:
    """Lines of imports inside functions, but for TYPE_CHECKING-only ones, optional dependencies (inside
    a ``try`` that catches ImportError) and CALL_SITE_IMPORTS."""
    found: list[int] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Try) and any(
                handler.type is not None and "ImportError" in ast.unparse(handler.type) for handler in child.handlers
            ):
                continue
            if isinstance(child, ast.Import | ast.ImportFrom) and in_function:
                names = [alias.name for alias in child.names] if isinstance(child, ast.Import) else [child.module or ""]
                if not all(name.split(".")[0] in CALL_SITE_IMPORTS for name in names):
                    found.append(child.lineno)
            visit(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    visit(ast.parse(source), False)
    return found


def test_imports_sit_at_the_top_of_each_module() -> None:
    # `rigbench --help` stays quick by loading each command's module only when it is run (rigbench.cli),
    # not by hiding imports in functions, where an import error or a cycle shows only when the path runs
    inside = sorted(
        f"{path.relative_to(ROOT)}:{line}"
        for path in FILES.values()
        if str(path.relative_to(ROOT)) not in STANDALONE
        for line in imports_inside_functions(path.read_text())
    )
    assert not inside, "imports inside functions: " + ", ".join(inside)


def test_the_function_import_finder_finds_one() -> None:
    source = ("import json\nfrom typing import TYPE_CHECKING\n\n\ndef f():\n    import httpx\n    if TYPE_CHECKING:\n"
              "        import pandas\n    try:\n        import gguf\n    except ImportError:\n        gguf = None\n"
              "    import boto3\n")
    assert imports_inside_functions(source) == [6]

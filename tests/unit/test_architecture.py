"""The architecture as the code is written, not as the docs say: imports run one way.

`lint-imports` (pyproject.toml) checks the layers and cycles between sibling packages; this
test adds the module-level rule across every project package, counting imports inside
functions too: no module imports itself back through others, and the few imports left inside
functions each say why.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("console", "strategies", "traces", "context_runtime")
MAX_FUNCTION_IMPORTS = 25


def _project_files():
    for package in ("console", "strategies", "traces", "sdk/context_runtime"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                yield path


def test_imports__every_project_module__no_module_imports_itself_back():
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    dependencies = {
        module: {m for m in graph.find_modules_directly_imported_by(module)}
        for module in graph.modules
    }
    try:
        graphlib.TopologicalSorter(dependencies).prepare()
    except graphlib.CycleError as error:
        cycle = " → ".join(error.args[1])
        raise AssertionError(f"Modules import each other in a circle: {cycle}") from None


def test_imports_inside_functions__few_and_each_with_its_reason():
    inside = []
    for path in _project_files():
        source = path.read_text()
        lines = source.splitlines()
        for node in ast.walk(ast.parse(source)):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for sub in ast.walk(node):
                if isinstance(sub, ast.Import | ast.ImportFrom):
                    reason = lines[sub.lineno - 1].partition("#")[2].strip()
                    above = lines[sub.lineno - 2].strip() if sub.lineno > 1 else ""
                    if not reason and above.startswith("#"):
                        reason = above.lstrip("# ")
                    inside.append((f"{path.relative_to(ROOT)}:{sub.lineno}", reason))
    assert len(inside) < MAX_FUNCTION_IMPORTS, inside
    assert [where for where, reason in inside if not reason] == []

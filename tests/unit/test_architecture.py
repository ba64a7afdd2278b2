"""The architecture as the code is written, not as the docs say: imports run one way.

`lint-imports` (pyproject.toml) checks the layers and cycles between sibling packages; this
test adds the module-level rule across every project package, counting imports inside
functions too: no module imports itself back through others, and the few imports left inside
functions each say why. And the map stays true: every module the layers contract names
exists, every product module is in a layer (a new module fails here until it has its line),
every module path docs/architecture.md names exists, and every `docs/background.md § <section>`
a comment or page cites is a section there.
"""

from __future__ import annotations

import ast
import graphlib
import importlib
import re
import tomllib
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


# --- the layers contract and docs/architecture.md name what exists ------------------------------
# Modules no layer needs to name: package markers, app configs and migrations hold no behaviour.
EXEMPT_FROM_LAYERS = {"__init__.py", "apps.py"}
# Backticked words in docs/architecture.md that are not paths of this repository.
RUN_TIME_PATHS = (".data/",)  # made by the launchers on first run


def _layer_modules() -> list[str]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [
        contract["layers"]
        for contract in config["tool"]["importlinter"]["contracts"]
        if contract["type"] == "layers" and contract["name"].startswith("Layers:")
    ]
    return [name.strip() for layer in layers for name in re.split(r"[:|]", layer) if name.strip()]


def _module_file(dotted: str) -> Path | None:
    """The file or package directory of a project module, or None."""
    parts = dotted.split(".")
    base = ROOT / "sdk" if parts[0] == "context_runtime" else ROOT
    path = base.joinpath(*parts)
    if path.with_suffix(".py").is_file():
        return path.with_suffix(".py")
    if (path / "__init__.py").is_file():
        return path
    return None


def _product_modules():
    for package in ("console", "strategies", "traces"):
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts or path.name in EXEMPT_FROM_LAYERS:
                continue
            yield ".".join(path.relative_to(ROOT).with_suffix("").parts)


def test_layers_contract__every_module_it_names__exists():
    missing = [name for name in _layer_modules() if _module_file(name) is None]
    assert not missing, f"the layers contract names what does not exist: {', '.join(missing)}"


def test_layers_contract__every_product_module__is_in_a_layer():
    named = set(_layer_modules())
    uncovered = [
        module
        for module in _product_modules()
        if not any(module == name or module.startswith(f"{name}.") for name in named)
    ]
    assert not uncovered, (
        f"in no layer of pyproject.toml (add each, and to docs/architecture.md): "
        f"{', '.join(uncovered)}"
    )


def _expand_braces(token: str) -> list[str]:
    match = re.search(r"\{([^{}]*)\}", token)
    if match is None:
        return [token]
    return [
        expanded
        for choice in match.group(1).split(",")
        for expanded in _expand_braces(token[: match.start()] + choice + token[match.end() :])
    ]


def _dotted_exists(dotted: str) -> bool:
    """`package.module` or `package.module.attribute…`: the module exists, and so does the
    attribute."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        if _module_file(".".join(parts[:cut])) is not None:
            target = importlib.import_module(".".join(parts[:cut]))
            for attribute in parts[cut:]:
                if not hasattr(target, attribute):
                    return False
                target = getattr(target, attribute)
            return True
    return False


def _reference_exists(token: str) -> bool:
    if any(mark in token for mark in "*?"):
        return any(ROOT.glob(token))
    if "/" not in token and token.endswith(".py"):  # `forms.py`: one in some package
        return any(path.name == token for path in _project_files())
    if (ROOT / token).exists():
        return True
    # `console/kernel/policy.refuse`: a module path and a name in it
    return _dotted_exists(token.removesuffix(".py").replace("/", "."))


def _named_in_backticks(text: str):
    """The backticked module paths of a page: paths (`a/b.py`, `a/b/`, `a/*/c.py`, `a/{b,c}.py`),
    dotted names under a project package, bare `*.py` names. URLs (`/api/…`), commands
    (with spaces) and plain words are not paths."""
    for token in re.findall(r"`([^`\n]+)`", text):
        if " " in token or token.startswith("/") or token.startswith(RUN_TIME_PATHS):
            continue
        first = re.split(r"[./]", token)[0]
        if "/" in token or token.endswith(".py") or ("." in token and first in PACKAGES):
            yield from _expand_braces(token)


def test_architecture_doc__every_module_path_it_names__exists():
    text = (ROOT / "docs" / "architecture.md").read_text()
    missing = sorted({token for token in _named_in_backticks(text) if not _reference_exists(token)})
    assert not missing, f"docs/architecture.md names what does not exist: {', '.join(missing)}"


def _unknown_background_citations(text: str, sections: list[str]):
    """What each `background.md § <section>` of a text cites that is not a section there
    (comment markers and line breaks between the words are allowed; `§ A, § B` cites both)."""
    flat = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
    for match in re.finditer(r"background\.md ?§ ?", flat):
        rest = flat[match.end() :]
        while True:
            known = [section for section in sections if rest.startswith(section)]
            if not known:
                if not rest.startswith("<"):  # `§ <section>`: how to cite, not a citation
                    yield rest[:40]
                break
            rest = rest[len(max(known, key=len)) :]
            if not re.match(r", ?§ ?", rest):
                break
            rest = re.sub(r"^, ?§ ?", "", rest)


def test_background_citations__each_names_a_section_of_background_md():
    page = (ROOT / "docs" / "background.md").read_text()
    sections = [line.lstrip("#").strip() for line in page.splitlines() if line.startswith("##")]
    sources = [*_project_files(), *(ROOT / "docs").glob("*.md"), ROOT / "sdk" / "README.md"]
    sources += [*(ROOT / "sdk").rglob("*.py"), *(ROOT / "tests").rglob("*.py")]
    unknown = sorted(
        f"{path.relative_to(ROOT)}: § {cited}"
        for path in set(sources)
        for cited in _unknown_background_citations(path.read_text(), sections)
    )
    assert unknown == []


def _product_module_paths() -> list[str]:
    """Every product module as a repository path (`strategies/releases/selectors/golive.py`),
    without package markers, app configs and migrations."""
    return sorted(
        str(path.relative_to(ROOT))
        for path in _project_files()
        if path.name not in EXEMPT_FROM_LAYERS and not str(path).startswith(str(ROOT / "sdk"))
    )


def _named_by(module: str, tokens: set[str]) -> bool:
    """Whether a backticked token names `module`: its path, its dotted name, a glob or brace
    form that matches it, or a folder (`strategies/releases/`, `traces/previews`) holding it."""
    dotted = module.removesuffix(".py").replace("/", ".")
    for token in tokens:
        if token in (module, dotted, module.removesuffix(".py")):
            return True
        if any(mark in token for mark in "*?"):
            pattern = token.rstrip("/")
            if Path(module).match(pattern) or any(p.match(pattern) for p in Path(module).parents):
                return True
        # A job's folder (`strategies/releases/`, `traces/previews/`) names what is in it; a
        # top-level package (`console/`, `traces/`) is too wide to name anything.
        folder = token.rstrip("/")
        if "/" in folder and not token.endswith(".py") and module.startswith(folder + "/"):
            return True
    return False


def test_architecture_doc__every_product_module__is_named_by_path_or_folder():
    text = (ROOT / "docs" / "architecture.md").read_text()
    tokens = {
        expanded for token in re.findall(r"`([^`\n]+)`", text) for expanded in _expand_braces(token)
    }
    unnamed = [module for module in _product_module_paths() if not _named_by(module, tokens)]
    assert not unnamed, (
        "docs/architecture.md names neither these modules nor a folder of theirs (add a row "
        f"or a mention): {', '.join(unnamed)}"
    )

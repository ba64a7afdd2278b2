"""What a runtime may import: the public modules and each one's ``__all__``; a module whose
name starts with an underscore is internal. And the package tells type checkers it is typed."""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import context_runtime
import pytest

DISTRIBUTION = "context-console-runtime"


def installed_wheel() -> importlib.metadata.Distribution:
    """The distribution pip installed (it has a RECORD; the source tree's egg-info, found first
    from sdk/, has none)."""
    for distribution in importlib.metadata.distributions(name=DISTRIBUTION):
        if distribution.read_text("RECORD") is None:
            continue
        if "editable" in (distribution.read_text("direct_url.json") or ""):
            pytest.skip("an editable install has no wheel to look into; scripts/test.sh has one")
        return distribution
    pytest.skip(f"{DISTRIBUTION} is not installed from a wheel")


def public_modules() -> list[str]:
    return sorted(
        info.name
        for info in pkgutil.walk_packages(context_runtime.__path__, "context_runtime.")
        if not any(part.startswith("_") for part in info.name.split("."))
    )


def test_package__every_public_top_level_module__declared_in_all():
    top_level = {name.split(".")[1] for name in public_modules()}

    # adk is public too, left out of __all__ so a star import needs no google-adk.
    assert top_level == {*context_runtime.__all__, "adk"} - {"__version__"}


@pytest.mark.parametrize("module", public_modules())
def test_public_module__declares_all__and_every_name_exists(module):
    if module == "context_runtime.adk":
        pytest.importorskip("google.adk", reason="the sdk's [adk] extra is not installed")
    imported = importlib.import_module(module)

    assert "__all__" in vars(imported), f"{module} declares no __all__"
    assert len(imported.__all__) == len(set(imported.__all__))
    missing = [name for name in imported.__all__ if not hasattr(imported, name)]
    assert missing == []


def test_package__star_import__gives_the_public_modules():
    code = "from context_runtime import *; print(sorted(k for k in dir() if not k.startswith('_')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)

    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.replace("'", '"')) == sorted(
        name for name in context_runtime.__all__ if name != "__version__"
    )


def test_installed_package__ships_py_typed():
    distribution = installed_wheel()

    shipped = [str(path) for path in distribution.files or ()]

    assert "context_runtime/py.typed" in shipped


def test_installed_package__ships_only_modules_of_the_source_tree():
    # A stale build directory once shipped modules renamed since (engine/selection.py).
    distribution = installed_wheel()
    source = Path(context_runtime.__file__).parent

    shipped = [
        str(path).removeprefix("context_runtime/")
        for path in distribution.files or ()
        if str(path).startswith("context_runtime/") and str(path).endswith(".py")
    ]

    assert [name for name in shipped if not (source / name).is_file()] == []


@pytest.mark.parametrize(
    ("module", "name"),
    [
        ("context_runtime.client", "UNAUTHORIZED"),
        ("context_runtime.manifest_report", "ManifestReporter"),
        ("context_runtime.reporter", "TraceReporter"),
    ],
)
def test_public_surface__issue_21_names__public(module, name):
    assert name in importlib.import_module(module).__all__


def test_package__version__is_the_distribution_s():
    assert context_runtime.__version__ == "0.4.0"
    distribution = installed_wheel()

    assert distribution.version == context_runtime.__version__

"""The layering contract (pyproject.toml, docs/architecture.md): lower layers never import higher ones.

``python3 dev.py test`` runs ``lint-imports`` on the package; these tests show that the contract
catches what it is there to catch, on a copy of the package with a planted edge, and that no module
hides an import from it behind importlib.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import PACKAGE, ROOT

#: Modules that may import by name at run time, and why. Anything else would hide an edge from the
#: contract, which reads only import statements.
DYNAMIC_IMPORTS_ALLOWED = {
    "graphkit/__init__.py": "the package entry: each public name is imported on first use",
    "graphkit/cli/__init__.py": "the CLI loads the one verb module it runs, inside the cli layer",
}


def _lint_imports(folder: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on the package and the pyproject.toml in ``folder`` (no cache, no logo)."""
    exe = Path(sys.executable).parent / "lint-imports"
    env = {**os.environ, "PYTHONPATH": str(folder)}
    return subprocess.run([str(exe), "--no-cache", "--no-logo"], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    """A copy of the package and its pyproject.toml; returns the folder holding both."""
    shutil.copytree(PACKAGE, tmp_path / "graphkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_the_package_copy_keeps_the_contract(package_copy: Path) -> None:
    done = _lint_imports(package_copy)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_planted_upward_imports_and_an_unplaced_module_break_the_contract(package_copy: Path) -> None:
    package = package_copy / "graphkit"
    errors, model = package / "errors.py", package / "_model.py"
    errors.write_text(errors.read_text() + "\n\ndef _planted() -> None:\n    from graphkit.cli import main  # noqa\n")
    model.write_text(model.read_text() + "\nimport typing\n\nif typing.TYPE_CHECKING:\n    from graphkit._extract import Extraction\n")
    (package / "stray.py").write_text('"""Nobody placed me in a layer."""\n')
    done = _lint_imports(package_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "graphkit.errors is not allowed to import graphkit.cli" in done.stdout  # inside a function
    assert "graphkit._model is not allowed to import graphkit._extract" in done.stdout  # under TYPE_CHECKING
    assert "graphkit.stray" in done.stdout  # every module is in a layer
    assert "1 kept, 1 broken" in done.stdout


def test_a_planted_upward_import_between_edit_families_breaks_the_contract(package_copy: Path) -> None:
    common = package_copy / "graphkit" / "_edit" / "_common.py"
    common.write_text(common.read_text() + "\n\ndef _planted() -> None:\n    from graphkit._edit.structure import remove_node  # noqa\n")
    done = _lint_imports(package_copy)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "graphkit._edit._common is not allowed to import graphkit._edit.structure" in done.stdout
    assert "1 kept, 1 broken" in done.stdout


def _dynamic_imports(path: Path) -> list[int]:
    """Lines of ``path`` that import by name at run time (importlib.import_module, __import__)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in ("import_module", "__import__"):
                lines.append(node.lineno)
    return lines


def test_no_module_hides_an_import_behind_importlib() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := _dynamic_imports(path))
    }
    known = set(DYNAMIC_IMPORTS_ALLOWED)
    hidden = {file: lines for file, lines in found.items() if file not in known}
    assert hidden == {}, "import these modules with an import statement, in a layer that may import them"
    assert set(DYNAMIC_IMPORTS_ALLOWED) <= set(found)  # entries nothing needs any more are removed


def test_the_dynamic_import_scan_sees_both_spellings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import importlib\n\ndef f():\n    importlib.import_module('x')\n    return __import__('y')\n")
    assert _dynamic_imports(sample) == [4, 5]


#: The edit package's modules stay small enough to read in one sitting (issue 12: a few hundred lines).
EDIT_MODULE_MAX_LINES = 400


def test_every_edit_module_stays_small() -> None:
    sizes = {path.name: len(path.read_text().splitlines()) for path in sorted((PACKAGE / "_edit").glob("*.py"))}
    assert len(sizes) >= 10  # the package, its shared module and the families
    assert {name: n for name, n in sizes.items() if n > EDIT_MODULE_MAX_LINES} == {}


def _imported_modules(path: Path) -> set[str]:
    """Top-level names of the modules ``path`` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_graphsurgeon_bridge_imports_onnx_graphsurgeon() -> None:
    importers = [str(path.relative_to(ROOT)) for path in sorted(PACKAGE.rglob("*.py"))
                 if "onnx_graphsurgeon" in _imported_modules(path)]
    assert importers == ["graphkit/_edit/graphsurgeon.py"]


def test_no_edit_module_is_named_like_a_public_function() -> None:
    import graphkit

    modules = {path.stem for path in (PACKAGE / "_edit").glob("*.py")}
    assert modules & set(graphkit.__all__) == set()


#: The verbs of the top library layer: none reaches into another's private names (what two of them
#: share lives in a module of its own, as ``_backends.side_settings`` does for compare and reduce).
VERB_MODULES = ("_chain", "_compare", "_mixed", "_reduce", "_report")

#: Known reaches into another verb's private names, each to be moved to a shared module by its owner.
PRIVATE_IMPORTS_KNOWN = {
    "_mixed imports graphkit._compare._Graph": "auto-mixed captures float32 values with compare's walker",
    "_mixed imports graphkit._compare._Walker": "(the same)",
    "_mixed imports graphkit._compare._value_info": "(the same)",
}


def test_no_verb_module_imports_another_verbs_private_names() -> None:
    found = []
    for name in VERB_MODULES:
        tree = ast.parse((PACKAGE / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module in {f"graphkit.{v}" for v in VERB_MODULES}:
                found += [f"{name} imports {node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    assert sorted(set(found) - set(PRIVATE_IMPORTS_KNOWN)) == []
    assert sorted(set(PRIVATE_IMPORTS_KNOWN) - set(found)) == []  # (a fixed one leaves the list)

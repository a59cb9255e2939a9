"""The package itself: ``import graphkit`` is lazy, yet every public name is there and means the same.

What matters is what a fresh interpreter imports, so most checks run in a subprocess.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from conftest import ROOT, fixture

import graphkit as gk
from graphkit.cli import VERBS, main

#: Functions whose names were once modules too; ``graphkit.<name>`` is the function, ``graphkit._<name>`` the module.
SHADOWED = ("compare", "diff", "extract", "run", "split", "validate")
#: Modules none of the common paths (load, extract, save, inspect, check, toposort) need.
NOT_NEEDED = ("graphkit._compare", "graphkit._diff", "graphkit._edit", "graphkit._recipe",
              "graphkit._run", "graphkit._chain", "graphkit._split", "graphkit._feeds", "graphkit._reference_ops",
              "onnxruntime", "onnx_graphsurgeon", "onnx.reference")
WHOLE = str(fixture("whole_model.onnx"))
C12 = "/convs1/convs1.2/Conv_output_0"
C40 = "/convs4/convs4.0/Conv_output_0"


def _python(code: str, *args: str) -> list[str]:
    """Run ``code`` in a fresh interpreter (cwd and PYTHONPATH: the worktree); return its stdout lines."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, *args, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()


def _loaded_after(code: str) -> set[str]:
    """The graphkit modules and heavy dependencies loaded in a fresh interpreter after running ``code``."""
    report = (
        "\nimport json as _json, sys as _sys\n"
        "print(_json.dumps(sorted(m for m in _sys.modules if m.split('.')[0] in "
        "('graphkit', 'onnxruntime', 'onnx_graphsurgeon') or m.startswith('onnx.reference'))))\n"
    )
    return set(json.loads(_python(code + report)[-1]))


def test_import_graphkit_loads_no_submodule() -> None:
    assert _loaded_after("import graphkit") == {"graphkit"}


def test_load_extract_save_loads_only_what_it_needs(tmp_path: Path) -> None:
    out = tmp_path / "cut.onnx"
    loaded = _loaded_after(
        "import graphkit\n"
        f"model = graphkit.load({WHOLE!r})\n"
        f"cut = graphkit.extract(model, inputs=[{C12!r}], outputs=[{C40!r}])\n"
        f"graphkit.save(cut, {str(out)!r})\n"
    )
    assert out.is_file()
    assert {"graphkit._io", "graphkit._extract"} <= loaded
    assert loaded.isdisjoint(NOT_NEEDED)


def test_every_public_name_resolves_to_its_definition() -> None:
    assert set(gk._EXPORTS) | {"__version__"} == set(gk.__all__)
    for name in gk.__all__:
        value = getattr(gk, name)
        if name == "__version__":
            assert isinstance(value, str)
            continue
        assert value is getattr(importlib.import_module(gk._EXPORTS[name]), name), name
        assert not isinstance(value, types.ModuleType), name


def test_every_public_name_resolves_in_a_fresh_interpreter() -> None:
    lines = _python(
        "import graphkit, types\n"
        "print(sorted(n for n in graphkit.__all__ if isinstance(getattr(graphkit, n), types.ModuleType)))\n"
        "ns = {}\n"
        "exec('from graphkit import *', ns)\n"
        "print(sorted(set(graphkit.__all__) - set(ns)))\n"
    )
    assert lines == ["[]", "[]"]


def test_dir_lists_every_public_name_before_anything_is_loaded() -> None:
    listed = set(json.loads(_python("import graphkit, json; print(json.dumps(dir(graphkit)))")[-1]))
    assert set(gk.__all__) <= listed
    assert set(gk.__all__) <= set(dir(gk))


@pytest.mark.parametrize("order", ["submodules first", "functions first"])
def test_function_names_stay_functions_whatever_was_imported(order: str) -> None:
    touch = "assert all(callable(getattr(graphkit, n)) for n in SHADOWED)\n"
    load_submodules = (
        "import graphkit._extract, graphkit._split, graphkit._validate\n"
        "from graphkit._compare import Tolerance\n"
        "from graphkit._diff import ModelDiff\n"
        "from graphkit._run import RunResult\n"
        "import graphkit._extract as gx\n"
        "from graphkit._extract import extract_with_report\n"
    )
    body = load_submodules + touch if order == "submodules first" else touch + load_submodules
    lines = _python(
        f"SHADOWED = {SHADOWED!r}\n"
        "import sys, types, graphkit\n" + body
        + "for n in SHADOWED:\n"
        "    module = sys.modules['graphkit._' + n]\n"
        "    assert isinstance(module, types.ModuleType), n\n"
        "    assert getattr(graphkit, '_' + n) is module, n\n"
        "    assert getattr(graphkit, n) is getattr(module, n), n\n"
        "    assert getattr(graphkit, n).__module__ == 'graphkit._' + n, n\n"
        "from graphkit import extract\n"
        "assert extract is sys.modules['graphkit._extract'].extract\n"
        "assert gx is sys.modules['graphkit._extract'] and gx is not extract\n"
        "assert extract_with_report is sys.modules['graphkit._extract'].extract_with_report\n"
        "assert type(sys.modules['graphkit']) is types.ModuleType  # no module-class swap\n"
        "print('ok')\n"
    )
    assert lines[-1] == "ok"


def test_function_names_are_functions_in_this_process() -> None:
    import graphkit._extract  # noqa: F401  (binds the package attribute again: it must stay the function)
    from graphkit._split import Fragment  # noqa: F401

    for name in SHADOWED:
        assert getattr(gk, name) is getattr(sys.modules[f"graphkit._{name}"], name)
        assert callable(getattr(gk, name))
    assert type(sys.modules["graphkit"]) is types.ModuleType  # no module-class swap


def test_no_public_module_but_errors_and_cli() -> None:
    package = ROOT / "graphkit"
    public = sorted(p.stem if p.is_file() else p.name for p in package.iterdir()
                    if not p.name.startswith(("_", ".")) and (p.suffix == ".py" or (p / "__init__.py").is_file()))
    assert public == ["cli", "errors"]
    assert all(module.startswith(("graphkit._", "graphkit.errors")) for module in gk._EXPORTS.values())


def test_the_extract_function_works_after_the_submodule_is_imported() -> None:
    import graphkit._extract  # noqa: F401

    cut = gk.extract(gk.load(WHOLE), inputs=[C12], outputs=[C40])
    assert [i.name for i in cut.proto.graph.input] == [C12]
    assert [o.name for o in cut.proto.graph.output] == [C40]


def test_monkeypatching_a_function_name_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    original = gk.extract
    monkeypatch.setattr(gk, "extract", len)
    assert gk.extract is len
    monkeypatch.undo()
    assert gk.extract is original


def test_the_public_submodules_are_attributes_and_the_private_ones_are_not_names() -> None:
    lines = _python("import graphkit, types\n"
                    "print(all(isinstance(getattr(graphkit, n), types.ModuleType) for n in ('errors', 'cli')))\n"
                    "print([n for n in ('io', 'edit', 'model', 'graph', 'summary', 'build', 'recipe', 'feeds')\n"
                    "       if hasattr(graphkit, n)])\n")
    assert lines == ["True", "[]"]


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="'graphkit' has no attribute 'no_such_thing'"):
        gk.no_such_thing  # noqa: B018
    assert not hasattr(gk, "_private_nothing")
    assert not hasattr(gk, "cli_nothing")


def test_python_m_extract_loads_no_other_verb(tmp_path: Path) -> None:
    out = tmp_path / "cut.onnx"
    loaded = _loaded_after(
        "import runpy, sys\n"
        f"sys.argv = ['graphkit', 'extract', {WHOLE!r}, {str(out)!r}, '--inputs', {C12!r}, '--outputs', {C40!r}]\n"
        "try:\n"
        "    runpy.run_module('graphkit', run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0, done.code\n"
    )
    assert out.is_file()
    assert "graphkit.cli.extract" in loaded
    assert loaded.isdisjoint(NOT_NEEDED)
    assert loaded.isdisjoint({f"graphkit.cli.{v.replace('-', '_')}" for v in VERBS if v != "extract"})


@pytest.mark.parametrize("verb", ["inspect", "check", "toposort"])
def test_python_m_inspect_check_toposort_load_little(verb: str, tmp_path: Path) -> None:
    out = [str(tmp_path / "sorted.onnx")] if verb == "toposort" else []
    loaded = _loaded_after(
        "import runpy, sys\n"
        f"sys.argv = ['graphkit', {verb!r}, {WHOLE!r}, *{out!r}]\n"
        "try:\n"
        "    runpy.run_module('graphkit', run_name='__main__')\n"
        "except SystemExit as done:\n"
        "    assert done.code == 0, done.code\n"
    )
    assert loaded.isdisjoint(NOT_NEEDED)
    assert loaded.isdisjoint({f"graphkit.cli.{v.replace('-', '_')}" for v in VERBS if v != verb})


def test_top_level_help_and_errors_still_list_every_verb(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert all(verb in out for verb in VERBS)
    assert main(["-h", "extract"]) == 0  # -h before the verb: the top-level help
    out = capsys.readouterr().out
    assert all(verb in out for verb in VERBS)
    assert main(["extrct", WHOLE]) == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'extrct'" in err
    assert "'extract'" in err and "'run-chain'" in err


def test_options_before_the_verb_still_work(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-v", "--traceback", "inspect", WHOLE]) == 0
    assert "whole_model" in capsys.readouterr().out
    assert main(["-vv", "toposort", "--help"]) == 0
    assert "usage: graphkit toposort" in capsys.readouterr().out


def _hints(obj: object) -> dict[str, object]:
    """Type hints, resolving names that modules import only for type checkers by the public names."""
    import typing

    public = {name: getattr(gk, name) for name in gk.__all__}
    return typing.get_type_hints(obj, globalns={**vars(sys.modules[obj.__module__]), **public})


def _graphkit_classes(hint: object) -> set[type]:
    """The graphkit classes a type hint names, through unions, generics and dataclass fields."""
    import dataclasses
    import typing

    found: set[type] = set()
    todo = [hint]
    while todo:
        item = todo.pop()
        if isinstance(item, type) and item.__module__.startswith("graphkit") and item not in found:
            found.add(item)
            if dataclasses.is_dataclass(item):
                todo.extend(_hints(item).values())
        todo.extend(typing.get_args(item))
    return found


def test_every_class_a_public_function_returns_is_exported() -> None:
    import inspect

    returned: set[type] = set()
    for name in gk.__all__:
        value = getattr(gk, name)
        if inspect.isfunction(value):
            returned |= _graphkit_classes(_hints(value).get("return"))
    assert returned, "no return annotations found"
    assert {c.__name__ for c in returned} <= set(gk.__all__), {c.__name__ for c in returned} - set(gk.__all__)


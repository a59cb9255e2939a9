"""The CLI's conventions: exit codes, one-line errors with hints, --json, --help on every verb."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT, fixture, folder_digest

from graphkit.cli import VERBS, main


def test_every_verb_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    for verb in VERBS:
        assert main([verb, "--help"]) == 0
        assert "usage: graphkit " + verb in capsys.readouterr().out


def test_no_verb_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "inspect" in capsys.readouterr().out


def test_bad_flag_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--nope", str(fixture("linear_func.onnx"))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphkit: error: unrecognized arguments: --nope")
    assert "Traceback" not in err


@pytest.mark.parametrize("verb", ["inspect", "check"])
def test_missing_file_is_one_line_and_exit_2(verb: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([verb, str(tmp_path / "missing.onnx")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0] == f"graphkit: error: no such file: {tmp_path / 'missing.onnx'}"
    assert err[1].startswith("hint: ")


def test_corrupt_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(fixture("whole_model.onnx").read_bytes()[:100])
    assert main(["check", str(bad)]) == 2
    assert "graphkit: error:" in capsys.readouterr().err


def test_inspect_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(fixture("model_dynamic_0.onnx"))]) == 0
    out = capsys.readouterr().out
    assert "in  float32  [batch, 3, 10, 10]" in out
    assert main(["inspect", "--json", str(fixture("dcn.onnx"))]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["custom_domains"] == ["custom"]
    assert data["op_types"] == {"Conv": 1, "custom::deform_conv2d": 1}
    assert data["inputs"] == [{"name": "input", "dtype": "float32", "shape": [1, 3, 10, 10]}]
    assert data["opsets"]["custom"] == 1


def test_inspect_reports_external_data_and_subgraphs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", "--json", str(fixture("ext_weights/model.onnx"))]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["external_files"] == ["model.data"]
    assert data["external_bytes"] == data["initializer_bytes"] == (64 * 128 + 128 + 128 * 16 + 16) * 4
    assert main(["inspect", "--json", str(fixture("if_outer_scope.onnx"))]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["subgraphs"]) == 4 and data["node_count"] > len(data["op_types"])


def test_check_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(fixture("whole_model.onnx"))]) == 0
    assert "OK" in capsys.readouterr().out
    import onnx

    proto = onnx.load(str(fixture("whole_model.onnx")))
    proto.graph.node[3].input[0] = "/convs1/convs1.2/Conv_outptu_0"
    onnx.save(proto, str(tmp_path / "broken.onnx"))
    assert main(["check", "--json", str(tmp_path / "broken.onnx")]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    issue = data["issues"][0]
    assert issue["code"] == "dangling-input" and issue["tensor"] == "/convs1/convs1.2/Conv_outptu_0"
    assert issue["node"] == "/convs2/convs2.0/Conv"
    assert "did you mean '/convs1/convs1.2/Conv_output_0'" in issue["hint"]


def test_toposort_cli_and_input_untouched(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import onnx

    proto = onnx.load(str(fixture("whole_model.onnx")))
    nodes = list(proto.graph.node)[::-1]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    shuffled = tmp_path / "shuffled.onnx"
    onnx.save(proto, str(shuffled))
    before = shuffled.read_bytes()
    assert main(["check", str(shuffled)]) == 1
    capsys.readouterr()
    assert main(["toposort", str(shuffled), str(tmp_path / "sorted.onnx")]) == 0
    assert "moved" in capsys.readouterr().out
    assert main(["check", str(tmp_path / "sorted.onnx")]) == 0
    assert shuffled.read_bytes() == before


def test_writing_over_the_input_needs_overwrite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "m.onnx"
    target.write_bytes(fixture("whole_model.onnx").read_bytes())
    assert main(["toposort", str(target), str(target)]) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert main(["toposort", str(target), str(target), "--overwrite"]) == 0
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_cli_verbs_leave_fixtures_untouched(tmp_path: Path) -> None:
    before = folder_digest(FIXTURES)
    for path in sorted(FIXTURES.rglob("*.onnx")):
        for verb in ("inspect", "check"):
            main([verb, str(path)])
        main(["toposort", str(path), str(tmp_path / path.name)])
    assert folder_digest(FIXTURES) == before


def test_python_dash_m_graphkit_runs_as_a_process(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "graphkit", "inspect", str(fixture("linear_func.onnx"))],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0 and "linear_func" in done.stdout
    done = subprocess.run([sys.executable, "-m", "graphkit", "check", str(tmp_path / "x.onnx")],
                          capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 2 and done.stderr.startswith("graphkit: error:") and "Traceback" not in done.stderr


def test_internal_errors_are_exit_3_with_traceback(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import graphkit.cli.inspect as verb

    monkeypatch.setattr(verb, "summarize", lambda m: 1 / 0)
    assert main(["inspect", str(fixture("linear_func.onnx"))]) == 3
    assert "ZeroDivisionError" in capsys.readouterr().err
    with pytest.raises(ZeroDivisionError):
        main(["--traceback", "inspect", str(fixture("linear_func.onnx"))])


def test_inspect_and_check_import_neither_onnxruntime_nor_graphsurgeon() -> None:
    code = (
        "import sys\n"
        "from graphkit.cli import main\n"
        f"assert main(['inspect', {str(fixture('whole_model.onnx'))!r}]) == 0\n"
        f"assert main(['check', {str(fixture('whole_model.onnx'))!r}]) == 0\n"
        "print(sorted(m for m in ('onnxruntime', 'onnx_graphsurgeon') if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_output_piped_into_head_is_not_an_error(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone, as when `| head -1` has read its line
    with capsys.disabled(), os.fdopen(write_end, "w") as broken:
        monkeypatch.setattr(sys, "stdout", broken)
        code = main(["inspect", str(fixture("whole_model.onnx"))])
        monkeypatch.undo()
    assert code == 141


@pytest.mark.parametrize("argv", [["inspect", ""], ["compare", ""], ["run", ""], ["extract", "", "x.onnx", "--inputs",
                                                                               "a", "--outputs", "b"]])
def test_an_empty_model_path_is_refused_in_the_command_lines_words(argv: list[str],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("graphkit: error: the model's path is empty ('')") and "path=" not in err

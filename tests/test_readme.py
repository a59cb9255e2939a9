"""The README's examples run as written: every `python -m graphkit …` line and every Python block."""

from __future__ import annotations

import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from conftest import FIXTURES, ROOT

from graphkit.cli import main

README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```(\w+)\n(.*?)```", README, flags=re.S)


def _commands() -> list[tuple[str, int]]:
    found = []
    for lang, body in BLOCKS:
        if lang != "sh":
            continue
        for line in body.splitlines():
            if line.startswith("mkdir -p "):
                found.append((line, 0))
            if not line.startswith("python -m graphkit "):
                continue
            code = re.search(r"#\s*exit\s+(\d+)", line)
            command = line.split("#", 1)[0].strip()
            found.append((command, int(code.group(1)) if code else 0))
    return found


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(FIXTURES, tmp_path / "fixtures")
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)  # out/ is not made here: the README says to make it, as a fresh clone needs
    return tmp_path


def test_readme_has_examples() -> None:
    assert len(_commands()) >= 5


def test_readme_commands_run(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for command, expected in _commands():
        if command.startswith("mkdir -p "):
            for folder in shlex.split(command)[2:]:
                os.makedirs(folder, exist_ok=True)
            continue
        args = shlex.split(command)[3:]
        code = main(args)
        captured = capsys.readouterr()
        assert code == expected, f"{command!r} exited {code}:\n{captured.out}\n{captured.err}"


def test_readme_makes_the_output_folder_before_its_first_write() -> None:
    commands = [c for c, _ in _commands()]
    first_write = next(i for i, c in enumerate(commands) if " out/" in c)
    assert "mkdir -p out" in commands[:first_write]


def test_readme_python_blocks_run(workdir: Path) -> None:
    os.makedirs("out", exist_ok=True)
    for lang, body in BLOCKS:
        if lang == "python":
            exec(compile(body, "README.md", "exec"), {"__name__": "readme"})


def test_quick_start_is_exactly_two_commands() -> None:
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    block = re.search(r"```sh\n(.*?)```", quick, flags=re.S)
    assert block is not None
    lines = [ln for ln in block.group(1).splitlines() if ln.strip()]
    assert [ln.split("#")[0].strip() for ln in lines] == ["python3 dev.py tour", "python3 dev.py test"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 dev.py test" in ci
    assert os.access(ROOT / ".ci" / "run", os.X_OK)


@pytest.mark.slow
def test_tour_runs(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "tour.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "tour finished" in done.stdout
    from graphkit.cli import VERBS

    shown = set(re.findall(r"^\$ python -m graphkit (\S+)", done.stdout, flags=re.M))
    assert shown == set(VERBS) - {"view"}, "the README says the tour walks through every verb but view"
    assert "Traceback" not in done.stderr

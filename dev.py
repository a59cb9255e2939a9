"""Developer entry point that needs nothing but Python 3.10+ and the package index.

    python3 dev.py tour   # set up .venv, then run graphkit on the bundled fixtures
    python3 dev.py test   # set up .venv with every extra and the dev tools, then ruff, mypy, lint-imports, pytest
    python3 dev.py test -m "not slow"   # the quick loop: the same checks, pytest without the slow tests

Each command creates (or reuses) the virtual environment ``.venv`` beside this file and installs
graphkit into it, so it works on a fresh machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = Path(os.environ.get("GRAPHKIT_VENV", ROOT / ".venv"))
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / "python"


def sh(*cmd: str | Path) -> None:
    print("+", " ".join(str(c) for c in cmd), flush=True)
    subprocess.run([str(c) for c in cmd], check=True, cwd=ROOT)


def setup(extras: str) -> None:
    if not PY.exists():
        venv.EnvBuilder(with_pip=True).create(VENV)
    marker = VENV / f".graphkit-installed-{extras or 'base'}"
    stamp = (ROOT / "pyproject.toml").stat().st_mtime_ns
    if marker.exists() and marker.read_text() == str(stamp):
        return
    sh(PY, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "-e", f".[{extras}]" if extras else ".")
    marker.write_text(str(stamp))


def main() -> int:
    verb = sys.argv[1] if len(sys.argv) > 1 else "help"
    rest = sys.argv[2:]
    try:
        if verb == "tour":
            setup("")
            sh(PY, ROOT / "examples" / "tour.py", *rest)
        elif verb == "test":
            setup("all,dev")
            lint = [p for p in ("graphkit", "tests", "fixtures", "bench", "examples", "dev.py") if (ROOT / p).exists()]
            sh(PY, "-m", "ruff", "check", *lint)
            sh(PY, "-m", "mypy")
            sh(BIN / "lint-imports", "--no-logo", "--no-cache")  # the layering contract in pyproject.toml
            sh(PY, "-m", "pytest", *rest)
        else:
            print(__doc__)
            return 2
    except subprocess.CalledProcessError as err:
        return err.returncode or 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""check MODEL [--json]: onnx.checker plus graphkit's structural checks. Exit 0 clean, 1 problems."""

from __future__ import annotations

import argparse

from graphkit._validate import validate
from graphkit.cli import _common, _render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="validate a model (onnx.checker + structural checks)", description=__doc__)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--no-checker", dest="checker", action="store_false", help="skip onnx.checker")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = validate(_common.load(args.model), checker=args.checker)
    if args.json:
        _render.json_out(report.to_dict())
    else:
        for issue in report.issues:
            _render.text(f"{issue.severity}: [{issue.code}] {issue.message}" + (
                f" (in {issue.graph})" if issue.graph != "main graph" else ""))
            if issue.hint:
                _render.text(f"  hint: {issue.hint}")
        verdict = "OK" if report.passed else "FAILED"
        _render.text(f"{verdict}: {report.model}: {len(report.errors)} error(s), {len(report.warnings)} warning(s); "
                     f"onnx.checker {report.checker}")
    failed = not report.passed or (args.strict and report.warnings)
    return 1 if failed else 0

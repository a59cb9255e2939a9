"""check MODEL [--json]: onnx.checker plus graphkit's structural checks. Exit 0 clean, 1 problems."""

from __future__ import annotations

import argparse
from dataclasses import replace

from graphkit._validate import Issue, validate
from graphkit.cli import _common, _render


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="validate a model (onnx.checker + structural checks)", description=__doc__)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--json", action="store_true", help="print a JSON report")
    p.add_argument("--no-checker", dest="checker", action="store_false", help="skip onnx.checker")
    p.add_argument("--strict", action="store_true", help="exit 1 on warnings too")
    p.add_argument("--all", dest="show_all", action="store_true", help="list every issue, however many")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    report = validate(_common.load(args.model), checker=args.checker)
    if args.json:
        data = report.to_dict()
        for issue in data["issues"]:  # (the command line's words)
            issue["hint"] = issue.pop("cli_hint") or issue["hint"]
        _render.json_out(data)
    else:
        issues = _fold_unsorted(list(report.issues), show_all=args.show_all)
        shown = _render.capped(issues, LIMIT, show_all=args.show_all)
        for issue in shown:
            _render.text(f"{issue.severity}: [{issue.code}] {issue.message}" + (
                f" (in {issue.graph})" if issue.graph != "main graph" else ""))
            if issue.cli_hint or issue.hint:
                _render.text(f"  hint: {issue.cli_hint or issue.hint}")
        _render.more(len(shown), len(issues))
        verdict = "OK" if report.passed else "FAILED"
        _render.text(f"{verdict}: {report.model}: {len(report.errors)} error(s), {len(report.warnings)} warning(s); "
                     f"onnx.checker {report.checker}")
    failed = not report.passed or (args.strict and report.warnings)
    return 1 if failed else 0


#: Issues listed before "… N more (--all)".
LIMIT = 40


def _fold_unsorted(issues: list[Issue], *, show_all: bool) -> list[Issue]:
    """Many "unsorted" issues of one graph are one line: the nodes are out of order, toposort fixes it."""
    by_graph: dict[str, list[Issue]] = {}
    for issue in issues:
        if issue.code == "unsorted":
            by_graph.setdefault(issue.graph, []).append(issue)
    folded = {graph: found for graph, found in by_graph.items() if len(found) > 1 and not show_all}
    out: list[Issue] = []
    for issue in issues:
        found = folded.get(issue.graph) if issue.code == "unsorted" else None
        if found is None:
            out.append(issue)
        elif issue is found[0]:
            out.append(replace(issue, message=f"{len(found)} nodes are out of order (the first: {issue.message})",
                               hint="run 'python -m graphkit toposort IN OUT'; --all lists each node", cli_hint=None))
    return out

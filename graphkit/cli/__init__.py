"""The command line: ``python -m graphkit <verb> ...``; ``main(argv)`` returns the exit code.

Exit codes: 0 ok; 1 a check ran and found problems; 2 a user or input error (one line
``graphkit: error: …`` and a hint, no traceback); 3 a bug (traceback). ``--traceback`` re-raises.
Each verb is a module with ``add_parser(subparsers)`` and ``run(args) -> int``.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
from collections.abc import Sequence

from graphkit.cli import _render
from graphkit.errors import GraphkitError

__all__ = ["VERBS", "build_parser", "main"]

#: Verb modules, in the order ``--help`` lists them.
VERBS = ["inspect", "check", "infer-shapes", "toposort", "extract", "expose", "split", "run", "run-chain", "edit", "merge",
         "compare", "reduce", "markers", "diff", "convert", "simplify", "view"]

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, EXIT_BUG = 0, 1, 2, 3


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors follow graphkit's format (exit 2, one line + hint)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        # One line of hint (the usage text runs to several): where the full usage is.
        raise _ArgError(message, f"see 'python -m {self.prog} --help'")


class _ArgError(Exception):
    def __init__(self, message: str, usage: str) -> None:
        super().__init__(message)
        self.usage = usage


def build_parser(verbs: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser, with one subcommand per verb module.

    Args:
        verbs: the verbs to register (default: all of ``VERBS``). ``main`` registers only the verb
            it is asked to run, so that a verb does not import every other verb's modules.
    """
    parser = _Parser(
        prog="graphkit",
        description="Pure-ONNX graph surgery and debugging: inspect, check, extract, split, run, edit, compare.",
    )
    parser.add_argument("--traceback", action="store_true", help="show the full traceback on errors")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    sub = parser.add_subparsers(dest="verb", metavar="VERB", parser_class=_Parser)
    for name in VERBS if verbs is None else verbs:
        module = importlib.import_module(f"graphkit.cli.{name.replace('-', '_')}")
        module.add_parser(sub)
    return parser


def _requested_verb(args: Sequence[str]) -> str | None:
    """The verb ``args`` ask for, if they name a known one after nothing but ``--traceback`` / ``-v``.

    The top-level options take no value, so the first positional argument is the verb. Anything
    else (no verb, an unknown or abbreviated verb, ``-h`` before the verb, an abbreviated option,
    ``--``) gives None: then the full parser, whose help and errors list every verb, is built.
    """
    for arg in args:
        if not arg.startswith("-"):
            return arg if arg in VERBS else None
        if arg not in ("--traceback", "--verbose") and set(arg[1:]) != {"v"}:  # -v, -vv, ...
            return None
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    verb = _requested_verb(args_list)
    parser = build_parser(None if verb is None else [verb])
    try:
        args = parser.parse_args(args_list)
    except _ArgError as err:
        _render.error(str(err), hint=err.usage)
        return EXIT_USAGE
    except SystemExit as exit_:  # --help
        return int(exit_.code or 0)
    if not args.verb:
        _render.text(parser.format_help())
        return EXIT_USAGE
    logging.basicConfig(
        level=logging.WARNING - 10 * min(args.verbose, 2), format="graphkit: %(levelname)s: %(message)s"
    )
    try:
        return int(args.func(args))
    except GraphkitError as err:
        if args.traceback:
            raise
        _render.error(err.message, hint=err.cli_hint or err.hint)
        return EXIT_USAGE
    except BrokenPipeError:  # output piped into e.g. `head`, which stopped reading: not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        _render.error("interrupted", hint=None)
        return 130
    except Exception:
        if args.traceback:
            raise
        import traceback

        _render.error("internal error (a bug in graphkit):\n" + traceback.format_exc(), hint="please report it")
        return EXIT_BUG
    finally:
        _render.progress_done()

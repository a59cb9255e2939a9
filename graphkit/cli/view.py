"""view MODEL [--around NODE|TENSOR --depth N] [--port P] [--no-browser]: show the model, or the
neighbourhood of a node or tensor, in Netron served on localhost (the view extra); Ctrl-C stops it.

Netron is imported here and nowhere else."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from graphkit import _io as io
from graphkit._view import neighbourhood
from graphkit.cli import _common, _render
from graphkit.cli._args import whole
from graphkit.errors import UsageError


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("view", help="show a model (or the neighbourhood of a node) in Netron", description=__doc__)
    p.add_argument("model", help="the .onnx file")
    p.add_argument("--around", metavar="NODE|TENSOR",
                   help="show only the nodes near this node or tensor (cut out; the cut is listed)")
    p.add_argument("--depth", type=whole(lo=0, hi=1000), default=2,
                   help="with --around: steps up and down the graph (default 2)")
    p.add_argument("--port", type=whole(lo=0, hi=65535), default=0, help="port on localhost (default: a free one)")
    p.add_argument("--no-browser", dest="browse", action="store_false",
                   help="print the URL instead of opening a browser")
    p.set_defaults(func=run)


def netron_module() -> Any:
    """The netron package, or a UsageError naming the extra that installs it."""
    try:
        import netron
    except ImportError as err:
        raise UsageError("view needs Netron, which is not installed", hint="pip install graphkit[view]") from err
    return netron


def run(args: argparse.Namespace) -> int:
    netron = netron_module()
    model = _common.load(args.model)
    with tempfile.TemporaryDirectory(prefix="graphkit-view-") as folder:
        path = Path(args.model)
        if args.around is not None:
            cut = neighbourhood(model, args.around, depth=args.depth)
            path = Path(folder) / f"around_{_safe(cut.centre)}.onnx"
            io.save(cut.model, path)
            _render.text(f"showing {cut.nodes} of {cut.total} nodes within {args.depth} steps of {cut.centre!r}")
            _render.text("  cut at inputs: " + (", ".join(repr(n) for n in cut.inputs) or "(the graph inputs)"))
            _render.text("  outputs: " + ", ".join(repr(n) for n in cut.outputs))
        elif args.depth != 2:
            raise UsageError("--depth applies to --around", hint="add --around NODE, or leave --depth out")
        address = serve(netron, path, args.port, browse=args.browse)
        _render.text(f"Netron: {url(address)}   (Ctrl-C stops it)")
        try:
            while True:
                time.sleep(0.5)
        except KeyboardInterrupt:
            netron.stop(address)
            _render.text("stopped")
    return 0


def serve(netron: Any, path: Path, port: int, *, browse: bool) -> tuple[str, int]:
    """Serve ``path`` on localhost; returns the (host, port) it listens on."""
    # Netron's page reports usage to Google Analytics when its version tag says it is a packaged
    # release (not 0.0.0): graphkit serves it as 0.0.0, so that looking at a model sends nothing
    # off this machine. (The page still asks for a one-time cookie notice.)
    server = getattr(netron, "server", None)
    if server is not None and hasattr(server, "__version__"):
        server.__version__ = "0.0.0"
    try:
        return tuple(netron.start(str(path), address=("localhost", port), browse=browse))  # type: ignore[return-value]
    except OSError as err:
        raise UsageError(f"cannot serve on localhost:{port}: {err.strerror or err}",
                         hint="choose another --port, or leave it out for a free one") from err


def url(address: tuple[str, int]) -> str:
    """The page's URL."""
    return f"http://{address[0]}:{address[1]}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")[:60] or "node"

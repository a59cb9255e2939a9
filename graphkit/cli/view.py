"""view MODEL [--around NODE|TENSOR --depth N] [--port P] [--no-browser]: show the model, or the
neighbourhood of a node or tensor, in Netron served on localhost (the view extra); Ctrl-C stops it.

Netron is imported here and nowhere else. Its server is a thread of this process (there is no child
process to outlive it); Ctrl-C, SIGTERM and SIGHUP stop it the same way, so the folder holding an
``--around`` cut is removed whichever ends the command.

What Netron's page sends off the machine, and what graphkit does about it (netron 9.3):

- Usage and error reports to Google Analytics (page views with the page's title, which is the model's
  file name, and the text of any error), when the page's version tag is a release number: graphkit
  serves it as 0.0.0, which Netron treats as a development build and reports nothing.
- A request to a geolocation service (ipinfo.io) on first load, to decide whether to show a cookie
  notice, unless a ``consent`` cookie is set: graphkit's server sets that cookie, so the page neither
  asks nor shows the notice (there is no usage reporting to consent to).
- Whatever else: every response carries a Content-Security-Policy header allowing requests to
  localhost only, so the browser refuses any other (links the user clicks still open).
"""

from __future__ import annotations

import argparse
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
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
            if cut.inside is not None:
                _render.text(f"{cut.inside!r} is inside a body of {cut.centre!r}: showing that node "
                             "(Netron opens its body when you click it)")
            _render.text(f"showing {cut.nodes} of {cut.total} nodes within {args.depth} steps of {cut.centre!r}")
            _render.text("  cut at inputs: " + (", ".join(repr(n) for n in cut.inputs) or "(the graph inputs)"))
            _render.text("  outputs: " + ", ".join(repr(n) for n in cut.outputs))
        elif args.depth != 2:
            raise UsageError("--depth applies to --around", hint="add --around NODE, or leave --depth out")
        with _stopped_by_signals():
            address: tuple[str, int] | None = None
            try:
                address = serve(netron, path, args.port, browse=args.browse)
                _render.text(f"Netron: {url(address)}   (Ctrl-C stops it)")
                while True:
                    time.sleep(0.5)
            except (KeyboardInterrupt, _Stop):
                netron.stop(address)  # (None: every server of this process, if the signal came while starting)
                _render.text("stopped")
    return 0


class _Stop(Exception):
    """SIGTERM or SIGHUP arrived: stop serving as Ctrl-C does."""


#: Signals that stop the server like Ctrl-C (SIGINT raises KeyboardInterrupt already).
_SIGNALS = tuple(s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None)


@contextmanager
def _stopped_by_signals() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``_Stop`` in the main thread while serving (their default would end
    the process without removing the ``--around`` folder); the previous handlers come back after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise _Stop(signal.Signals(signum).name)

    previous = {s: signal.signal(s, stop) for s in _SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def serve(netron: Any, path: Path, port: int, *, browse: bool) -> tuple[str, int]:
    """Serve ``path`` on localhost; returns the (host, port) it listens on.

    The page sends nothing off the machine (see the module docstring).
    """
    _keep_page_local(netron)
    try:
        return tuple(netron.start(str(path), address=("localhost", port), browse=browse))  # type: ignore[return-value]
    except OSError as err:
        raise UsageError(f"cannot serve on localhost:{port}: {err.strerror or err}",
                         hint="choose another --port, or leave it out for a free one") from err


#: The Netron release whose page the browser test checks sends nothing off the machine.
CHECKED_NETRON = "9.3.3"
#: Requests the page may make: this server only (and data:/blob: URLs it builds itself).
CONTENT_POLICY = "default-src 'self' 'unsafe-inline' data: blob:; form-action 'self'"


def _keep_page_local(netron: Any) -> None:
    """Serve Netron's page as a development build (no usage reports), with its consent cookie set
    (no geolocation request) and a Content-Security-Policy that allows requests to this server only.

    Raises:
        UsageError: This Netron's server is not built as these settings expect (the page could
            report usage): graphkit refuses to serve it.
    """
    server = getattr(netron, "server", None)
    handler = getattr(server, "_HTTPRequestHandler", None)
    if server is None or not hasattr(server, "__version__") or not isinstance(handler, type):
        raise UsageError(f"this Netron ({getattr(netron, '__version__', 'unknown version')}) cannot be served "
                         "with its usage reporting off",
                         hint=f"pip install netron=={CHECKED_NETRON} (the release graphkit's view is checked with)")
    server.__version__ = "0.0.0"
    if getattr(handler, "graphkit_local", False):
        return

    class LocalOnly(handler):  # type: ignore[misc, valid-type]
        graphkit_local = True

        def end_headers(self) -> None:
            self.send_header("Content-Security-Policy", CONTENT_POLICY)
            self.send_header("Set-Cookie", f"consent={int(time.time() * 1000)}; Path=/; SameSite=Strict")
            super().end_headers()

    server._HTTPRequestHandler = LocalOnly


def url(address: tuple[str, int]) -> str:
    """The page's URL."""
    return f"http://{address[0]}:{address[1]}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name).strip("._")[:60] or "node"

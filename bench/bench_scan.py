"""The lazy scan on large inline models: time and peak memory against onnx.load, at growing sizes.

    python bench/bench_scan.py [--sizes 64,128,256] [--repeat 1] [--kinds raw,unpacked,liar,explicit]

Kinds (each model generated once into ``$GRAPHKIT_BENCH_DIR/scan``, never committed):
  raw       inline float weights in raw_data (what exporters write): graphkit borrows them.
  unpacked  the same values as unpacked float_data fields (one field per value, a writer's choice
            that protobuf accepts): graphkit parses them, as onnx.load does.
  liar      a raw model whose first initializer claims a length past the end of the file: graphkit
            must refuse it at once, whatever the size.
  explicit  a raw model whose initializers carry an explicit ``data_location: DEFAULT`` (what onnx
            leaves after loading external data): inline data, borrowed like ``raw``.

For each size: graphkit.load and graphkit.summarize (what inspect reports) against onnx.load, each
in its own process (see _measure.py). ``work s`` is the wall time after imports and ``cpu s`` the
process's CPU time over the same span (steadier on a shared machine); a refused file counts as
done: the liar's figure is the time to the error. ``cpu s/GiB`` shows whether time grows linearly
with the file; ``peak MiB`` is the process's peak RSS.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _measure
import numpy as np
import onnx
from onnx import TensorProto, helper

ROOT = Path(__file__).resolve().parent.parent
FOLDER = Path(os.environ.get("GRAPHKIT_BENCH_DIR", "/tmp/graphkit-bench")) / "scan"
_TENSOR_MIB = 4  # each weight: 1 Mi floats


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _skeleton(count: int) -> onnx.ModelProto:
    """A chain y = ((x + w0) + w1) ... over ``count`` weights of 1 Mi floats, without the weights."""
    side = _TENSOR_MIB * 2**20 // 4
    nodes = [helper.make_node("Add", ["x" if i == 0 else f"t{i - 1}", f"w{i}"], [f"t{i}" if i < count - 1 else "y"])
             for i in range(count)]
    graph = helper.make_graph(nodes, "scan", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [side])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [side])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _tensor_bytes(kind: str, name: str, values: np.ndarray) -> bytes:
    head = _varint(1 << 3) + _varint(values.size) + b"\x10\x01" + _field(8, name.encode())
    if kind == "unpacked":
        fields = np.empty((values.size, 5), np.uint8)
        fields[:, 0] = 0x25  # field 4 (float_data), wire type 5, once per value
        fields[:, 1:] = values.view(np.uint8).reshape(-1, 4)
        return head + fields.tobytes()
    data = head + _field(9, values.tobytes())
    if kind == "explicit":
        data += b"\x70\x00"  # field 14 (data_location), varint 0: DEFAULT, set explicitly
    return data


def generate(kind: str, mib: int) -> Path:
    """Write (once) a model of about ``mib`` MiB of weights of ``kind``."""
    path = FOLDER / f"{kind}_{mib}.onnx"
    if path.exists():
        return path
    FOLDER.mkdir(parents=True, exist_ok=True)
    count = max(1, mib // _TENSOR_MIB)
    model = _skeleton(count)
    rng = np.random.default_rng(0)
    values = rng.standard_normal(_TENSOR_MIB * 2**20 // 4, dtype=np.float32)
    graph = model.graph.SerializeToString()
    tmp = path.with_suffix(".tmp")
    shape = "raw" if kind == "liar" else kind
    delta = len(_tensor_bytes(shape, "w", values)) - len(_tensor_bytes(shape, "w", values[:0]))
    body_lengths = [len(_tensor_bytes(shape, f"w{i}", values[:0])) + delta for i in range(count)]
    length = sum(1 + len(_varint(n)) + n for n in body_lengths)
    with open(tmp, "wb") as out:
        model.ClearField("graph")
        out.write(model.SerializeToString())
        out.write(_varint(7 << 3 | 2) + _varint(len(graph) + length))
        out.write(graph)
        for i in range(count):
            body = _tensor_bytes(shape, f"w{i}", values)
            claimed = 2**40 if kind == "liar" and i == 0 else len(body)  # the liar: a terabyte in a file of MiBs
            out.write(_varint(5 << 3 | 2) + _varint(claimed) + body)
    tmp.replace(path)
    return path


_TIMED = (
    "import json,sys,time\n{imports}\nstart,cpu=time.perf_counter(),time.process_time()\n"
    "try:\n    {call}\nexcept Exception as err:\n    print(type(err).__name__, file=sys.stderr)\n"
    "print({mark!r} + json.dumps({{'work_s': time.perf_counter() - start, 'cpu_s': time.process_time() - cpu}}))\n"
)
SNIPPETS = {
    "onnx.load": _TIMED.format(imports="import onnx", call="onnx.load(sys.argv[1])", mark=_measure.RESULT_MARK),
    "graphkit.load": _TIMED.format(imports="import graphkit, graphkit._io", call="graphkit.load(sys.argv[1])",
                                   mark=_measure.RESULT_MARK),
    "graphkit summarize": _TIMED.format(imports="import graphkit, graphkit._io, graphkit._summary",
                                        call="graphkit.summarize(graphkit.load(sys.argv[1]))",
                                        mark=_measure.RESULT_MARK),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64,128,256", help="MiB of weights, comma-separated")
    parser.add_argument("--kinds", default="raw,unpacked,liar,explicit")
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    env = _measure.child_env(ROOT)
    print(f"{'model':<22}{'MiB':>6}  {'what':<20}{'work s':>8}{'cpu s':>8}{'cpu s/GiB':>10}{'peak MiB':>10}")
    try:
        for kind in args.kinds.split(","):
            for mib in sizes:
                path = generate(kind, mib)
                size = path.stat().st_size
                jobs = [_measure.Job(name, (sys.executable, "-c", code, str(path)), env=env)
                        for name, code in SNIPPETS.items() if not (kind == "liar" and name == "onnx.load")]
                for job in jobs:
                    runs = []
                    for _ in range(args.repeat):
                        _measure.warm_cache([path])
                        runs.append(_measure.run(job, timeout=1800))
                    done = [r for r in runs if "work_s" in r.result]
                    if not done:
                        print(f"{path.name:<22}{size / 2**20:>6.0f}  {job.name:<20} failed: {runs[-1].error}")
                        continue
                    work = statistics.median(float(r.result["work_s"]) for r in done)  # type: ignore[arg-type]
                    cpu = statistics.median(float(r.result["cpu_s"]) for r in done)  # type: ignore[arg-type]
                    peak = statistics.median(r.peak_mb for r in done)
                    print(f"{path.name:<22}{size / 2**20:>6.0f}  {job.name:<20}{work:>8.2f}{cpu:>8.2f}"
                          f"{cpu * 2**30 / size:>10.2f}{peak:>10.0f}", flush=True)
    finally:
        _measure.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

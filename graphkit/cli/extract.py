"""extract IN OUT --inputs A [B ...] --outputs C [D ...]: write the submodel computing C, D from A, B.

Any tensor of the main graph may be an input or an output. The cut is checked first: if an output
cannot be computed from the inputs, nothing is written and the error names the node and tensor
where the cut leaks. A boundary tensor nothing can type takes its type from the flag:
``--inputs 'name:float32:[1,3,224,224]'``. Only the weights the submodel uses are written.
"""

from __future__ import annotations

import argparse

from graphkit._extract import TensorType, extract_with_report, parse_tensor_spec
from graphkit._graph import GraphIndex
from graphkit._model import Model
from graphkit.cli import _common, _render
from graphkit.cli._custom import add_custom_op_options, custom_op_reads, runtime_kwargs


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("extract", help="extract the submodel between given tensors", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input", help="the source .onnx file")
    p.add_argument("output", help="where to write the submodel")
    p.add_argument("--inputs", nargs="+", metavar="TENSOR",
                   help="tensors that become the inputs (NAME or NAME:DTYPE:[DIMS]); default: the model's inputs")
    p.add_argument("--outputs", nargs="+", metavar="TENSOR",
                   help="tensors that become the outputs (NAME or NAME:DTYPE:[DIMS]); default: the model's outputs")
    p.add_argument("--no-observe", dest="observe", action="store_false",
                   help="never run ONNX Runtime to observe the types of boundary tensors")
    p.add_argument("--json", action="store_true", help="print what was kept as JSON")
    add_custom_op_options(p)
    _common.add_output_options(p)
    _common.add_noop_option(p)
    p.set_defaults(func=run)


def split_specs(model: Model, specs: list[str] | None) -> tuple[list[str] | None, dict[str, TensorType]]:
    """Names and user-given types from NAME / NAME:DTYPE:[DIMS] arguments."""
    if specs is None:
        return None, {}
    known: set[str] | None = None  # (every tensor name: only a spec with a colon needs them)
    names: list[str] = []
    types: dict[str, TensorType] = {}
    for spec in specs:
        if ":" not in spec:
            names.append(spec)
            continue
        if known is None:
            known = _tensor_names(model)
        name, given = parse_tensor_spec(spec, known)
        names.append(name)
        if given is not None:
            types[name] = given
    return names, types


def _tensor_names(model: Model) -> set[str]:
    return set(GraphIndex(model.lazy_proto.graph).tensor_names)


def run(args: argparse.Namespace) -> int:
    if args.inputs is None and args.outputs is None:
        raise_usage()
    model = _common.load(args.input)
    plan = _common.plan(args, model, output=args.output, reads=custom_op_reads(args))
    plan.check()
    inputs, in_types = split_specs(model, args.inputs)
    outputs, out_types = split_specs(model, args.outputs)
    report = extract_with_report(model, inputs, outputs, check=args.check, types=in_types | out_types,
                                 observe=args.observe, **runtime_kwargs(args))
    if _keeps_everything(model, report.model):
        _common.refuse_noop(args, f"this extraction changes nothing: it keeps all of {model.name}, every node, the same inputs and outputs",
                            "choose inner tensors with --inputs/--outputs")
    saved = _common.write_model(report.model, args.output, args, plan, validated=True)
    for name in report.unused_inputs:
        _render.warn(f"input {name!r} is not needed to compute the outputs; it is kept as an unused input")
    for note in report.notes:
        _render.warn(note)
    if args.json:
        _render.json_out({"output": str(saved.path), **report.to_dict()})
        return 0
    _render.text(f"wrote {args.output}: {report.nodes} nodes, {len(report.inputs)} input(s), "
                 f"{len(report.outputs)} output(s), {report.initializers} initializers "
                 f"({_render.human_bytes(report.weight_bytes)} of weights)")
    _render.table([("input", s.name, s.dtype, s.shape_text()) for s in report.inputs]
                  + [("output", s.name, s.dtype, s.shape_text()) for s in report.outputs], indent=2)
    return 0


def _keeps_everything(source: Model, result: Model) -> bool:
    def names(values: object) -> set[str]:
        return {v.name for v in values}  # type: ignore[attr-defined]

    return (
        len(result.lazy_proto.graph.node) == len(source.lazy_proto.graph.node)
        and names(result.lazy_proto.graph.input) - {t.name for t in result.lazy_proto.graph.initializer}
        == names(source.lazy_proto.graph.input) - {t.name for t in source.lazy_proto.graph.initializer}
        and names(result.lazy_proto.graph.output) == names(source.lazy_proto.graph.output)
    )


def raise_usage() -> None:
    from graphkit.errors import UsageError

    raise UsageError("nothing to extract: give --inputs, --outputs or both",
                     hint="e.g. graphkit extract in.onnx out.onnx --inputs A --outputs B")



"""ONNX Runtime, imported here and nowhere else: the module, sessions, one run, symbolic shape inference.

This is the one owner of the onnxruntime dependency. It sits low (it needs only errors, model and
io) so that the typing engine can observe a run and use ONNX Runtime's symbolic shape inference
without importing the verbs above it; ``graphkit.run`` builds feeds, runs and chains on top of it.

Models with external weights run from where their weights lie: the session reads the ModelProto from
memory and the weights from the model's folder (``session.model_external_initializers_file_folder_path``),
so no weight is copied into memory twice.
"""

from __future__ import annotations

import functools
import gc
import json
import logging
import os
import re
import shlex
import sys
import tempfile
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from graphkit import _check_args as argcheck
from graphkit._custom_ops import INSTALL_HINT, CustomOp, attribute_values, check_python_ops
from graphkit._io import load, runtime_bytes
from graphkit._model import Model
from graphkit._numbers import MAX_THREADS_PER_CORE, check_int, max_threads
from graphkit.errors import ArgumentTypeError, RuntimeFailure, UsageError

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = [
    "MIN_OPSET", "OPT_LEVELS", "PROVIDERS", "Settings", "available_providers", "onnxruntime", "provider_name", "refusal", "run_session", "session",
    "symbolic_shapes",
]

log = logging.getLogger(__name__)

#: Optimization level → the name of its ``onnxruntime.GraphOptimizationLevel`` member.
OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider",
             "openvino": "OpenVINOExecutionProvider", "directml": "DmlExecutionProvider",
             "coreml": "CoreMLExecutionProvider", "rocm": "ROCMExecutionProvider"}
_FULL_BY_LOWER = {v.lower(): v for v in PROVIDERS.values()}
#: The oldest ai.onnx opset ONNX Runtime has kernels for: an older model loads only if none of its
#: operators changed since (Relu(6) does, Add(6) with its ``broadcast`` attribute does not).
MIN_OPSET = 7


def session(model: Model, *, provider: str = "cpu", opt_level: str = "all", threads: int = 0,
            provider_options: Mapping[str, str] | None = None, custom_ops: Sequence[str | os.PathLike[str]] = (),
            python_ops: Sequence[CustomOp] = (), arena: bool = True,
            save_optimized: str | os.PathLike[str] | None = None) -> ort.InferenceSession:
    """An ONNX Runtime session for ``model``, reading external weights from the model's folder.

    Args:
        model: The model to load.
        provider: "cpu", "cuda", "tensorrt" or a full ONNX Runtime provider name.
        opt_level: Graph optimization level: disable, basic, extended or all.
        threads: Intra-op threads (0: ONNX Runtime's default).
        provider_options: The provider's options (``device_id``, ...), as ONNX Runtime takes them.
        custom_ops: Custom-operator libraries (``.so``/``.dll``) to register.
        python_ops: Python implementations of operators; nodes using them run through
            onnxruntime-extensions, in an in-memory copy of the model (``model`` is not changed).
        arena: Use ONNX Runtime's CPU memory arena. The arrays a run returns share its memory, and
            one output still alive keeps the whole arena (every buffer of the run) alive after the
            session is gone: pieces whose outputs outlive their session (a compare walk keeps
            values across hundreds of them) run without it (light_densenet121's comparison: 538 MB
            peak with it, 321 MB without).
        save_optimized: Where ONNX Runtime writes the model as it optimized it (its weights in a
            file beside it): which nodes it fused, which tensors no longer exist.

    Raises:
        UsageError: Unknown optimization level, a provider this ONNX Runtime does not have, more
            threads than a small multiple of the cores, a custom-op library that is missing, or
            Python operators without onnxruntime-extensions.
        RuntimeFailure: ONNX Runtime refuses the model or a library (the message names what it says).
    """
    if opt_level not in OPT_LEVELS:
        raise UsageError(f"unknown optimization level {opt_level!r}", hint="use one of " + ", ".join(OPT_LEVELS))
    ort = onnxruntime()
    full_provider = provider_name(provider)
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise ArgumentTypeError(f"threads must be a whole number, not {threads!r}",
                                hint="pass threads=0 for ONNX Runtime's default")
    check_int(threads, what="threads", lo=0, hi=max_threads(),
              hint=f"use at most {MAX_THREADS_PER_CORE} threads per core (0: ONNX Runtime's default)")
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[opt_level])
    options.log_severity_level = _runtime_log_severity()
    if threads:
        options.intra_op_num_threads = threads
    if not arena:
        options.enable_cpu_mem_arena = False
    if save_optimized is not None:
        options.optimized_model_filepath = os.fspath(save_optimized)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name",
                                         Path(save_optimized).name + ".data")
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "0")
    for library in custom_ops:
        _register_library(options, library)
    target = model
    if python_ops and _uses_any(model.lazy_proto, python_ops):
        target = _with_python_ops(model, python_ops)
        _register_library(options, _extensions().get_library_path(), what="onnxruntime-extensions' library")
    data, folder = runtime_bytes(target)  # (checks every external tensor first)
    if folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    try:
        sess = ort.InferenceSession(data, options, providers=[full_provider],
                                    provider_options=[dict(provider_options or {})])
    except Exception as err:  # onnxruntime raises its own exception types
        hint, cli_hint = _load_hint(model, python_ops)
        raise RuntimeFailure(f"ONNX Runtime cannot load {model.name}: {first_line(err)}",
                             hint=hint, cli_hint=cli_hint) from err
    if _holds_extension_ops(target is not model, custom_ops):
        _extension_sessions.add(sess)
    return sess


def _holds_extension_ops(python: bool, custom_ops: Sequence[str | os.PathLike[str]]) -> bool:
    """Whether a session just made points into the extensions' table of Python operators."""
    ext = sys.modules.get("onnxruntime_extensions")
    if ext is None or not _extension_op_count(ext):
        return False
    if python:
        return True
    library = Path(ext.get_library_path()).resolve()
    return any(Path(path).resolve() == library for path in custom_ops)


@dataclass(frozen=True)
class Settings:
    """How every session of one side of a run is made: provider (with its options), optimization
    level, threads, and the custom operators registered (libraries and Python implementations)."""

    provider: str = "cpu"
    opt_level: str = "all"
    threads: int = 0
    provider_options: Mapping[str, str] = field(default_factory=dict)
    custom_ops: tuple[str, ...] = ()
    python_ops: tuple[CustomOp, ...] = ()

    def session(self, model: Model, *, opt_level: str | None = None, arena: bool = True) -> ort.InferenceSession:
        """``session(model, ...)`` with these settings (``opt_level`` overrides theirs)."""
        return session(model, provider=self.provider, opt_level=opt_level or self.opt_level, threads=self.threads,
                       provider_options=self.provider_options, custom_ops=self.custom_ops,
                       python_ops=self.python_ops, arena=arena)

    def optimized(self, model: Model, *, opt_level: str | None = None) -> onnx.ModelProto:
        """The graph ONNX Runtime runs for ``model`` with these settings, as it optimized it (fused
        nodes, layout changes; its weights are not kept): a session made and dropped.

        Raises:
            RuntimeFailure: ONNX Runtime refuses the model.
        """
        with tempfile.TemporaryDirectory(prefix="graphkit-optimized-") as folder:
            path = Path(folder) / "optimized.onnx"
            sess = session(model, provider=self.provider, opt_level=opt_level or self.opt_level, threads=self.threads,
                           provider_options=self.provider_options, custom_ops=self.custom_ops,
                           python_ops=self.python_ops, arena=False, save_optimized=path)
            del sess
            return load(path, lazy=True).lazy_proto

    @classmethod
    def for_custom_ops(cls, custom_ops: Any = (), python_ops: Any = ()) -> Settings | None:
        """The settings of a run that types a model (no provider choice): None without custom operators.

        Raises:
            ArgumentTypeError, UsageError: ``custom_ops`` not a list of paths; ``python_ops`` not
                CustomOp functions or loadable ``.py`` files.
        """
        if isinstance(custom_ops, (str, bytes, os.PathLike)) or not isinstance(custom_ops, Sequence):
            raise ArgumentTypeError(f"custom_ops= must be a list of library paths, not {type(custom_ops).__name__}",
                                    hint="e.g. custom_ops=['libcustom_ops.so']")
        libraries = tuple(os.fspath(argcheck.path(p, f"custom_ops[{k}]")) for k, p in enumerate(custom_ops))
        ops = check_python_ops(python_ops)
        return cls(custom_ops=libraries, python_ops=ops) if libraries or ops else None

    def label(self) -> str:
        """The provider as shown to users ("cpu", "cuda (device_id=1)")."""
        options = ", ".join(f"{k}={v}" for k, v in self.provider_options.items())
        return self.provider + (f" ({options})" if options else "")


_GPU_NOTE = "a GPU provider needs its ONNX Runtime package (onnxruntime-gpu for cuda and tensorrt) and a GPU"


def provider_name(provider: str) -> str:
    """ONNX Runtime's name of a provider ("cuda" → "CUDAExecutionProvider").

    Raises:
        UsageError: This ONNX Runtime has no such provider; the message lists the ones it has.
    """
    full = PROVIDERS.get(provider.lower(), provider)
    if full.lower() in _FULL_BY_LOWER:
        full = _FULL_BY_LOWER[full.lower()]
    available = onnxruntime().get_available_providers()
    if full not in available:
        short = {v: k for k, v in PROVIDERS.items()}
        names = ", ".join(f"{short[a]} ({a})" if a in short else a for a in available)
        raise UsageError(
            f"ONNX Runtime here has no provider {provider!r}; it has {names}",
            hint="pick one of these with provider= (compare's sides: reference_provider=, candidate_provider=); "
                 + _GPU_NOTE,
            cli_hint="pick one of these with --provider (compare's sides: --reference-provider, "
                     "--candidate-provider); " + _GPU_NOTE,
        )
    return full


def available_providers() -> list[str]:
    """The providers this ONNX Runtime has, by ONNX Runtime's names."""
    return list(onnxruntime().get_available_providers())


def _register_library(options: Any, library: str | os.PathLike[str], *, what: str = "custom-op library") -> None:
    path = Path(library)
    try:
        found = path.is_file()
    except OSError as err:  # (a name too long for the file system, a link loop)
        raise UsageError(f"cannot use {what} {path}: {err.strerror or err}",
                         hint="give the path of a compiled library in custom_ops=",
                         cli_hint="give the path of a compiled library with --custom-ops LIB.so") from err
    if not found:
        raise UsageError(f"no such {what}: {path}", hint="give the path of a compiled library in custom_ops=",
                         cli_hint="give the path of a compiled library with --custom-ops LIB.so")
    try:
        options.register_custom_ops_library(str(path))
    except Exception as err:  # onnxruntime raises its own exception types
        raise RuntimeFailure(f"ONNX Runtime cannot load the {what} {path}: {first_line(err)}",
                             hint="give a custom-op library built for this ONNX Runtime "
                                  f"({onnxruntime().__version__}) and this platform") from err


def _load_hint(model: Model, python_ops: Sequence[CustomOp]) -> tuple[str, str]:
    """The hint of a model ONNX Runtime refused, in the API's and the command line's words: the
    custom-domain operators nothing implements, if any."""
    covered = {op.key for op in python_ops}
    custom = sorted({f"{n.domain}::{n.op_type}" for n in _all_nodes(model.lazy_proto)
                     if n.domain not in ("", "ai.onnx", "ai.onnx.ml", "com.microsoft")
                     and (n.domain, n.op_type) not in covered})
    if custom:
        uses = f"the model uses custom operators ({', '.join(custom[:5])}): "
        return (uses + "register their library (custom_ops=['LIB.so']), or give Python implementations (python_ops=)",
                uses + "register their library with --custom-ops LIB.so, or give Python implementations with "
                       "--python-ops FILE.py")
    opset = next((o.version for o in model.lazy_proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is not None and opset < MIN_OPSET:
        where = shlex.quote(str(model.path)) if model.path is not None else "MODEL.onnx"
        old = f"the model has ai.onnx opset {opset} and ONNX Runtime runs opset {MIN_OPSET} and later: "
        return (old + "convert it first (gk.convert_opset(model, 13)), or compare it on onnx's ReferenceEvaluator "
                "(compare(..., backend='reference'))",
                old + f"convert it first ('python -m graphkit convert {where} OUT.onnx --opset 13'), or compare it "
                "on onnx's ReferenceEvaluator (compare --backend reference)")
    return "gk.validate(model) checks the model", "run 'python -m graphkit check' on the model"


# ------------------------------------------------------------------------------ Python operators
#
# onnxruntime-extensions runs a Python function as an operator of its own domain (ai.onnx.contrib),
# looked up by op type in a registry of the process. A session therefore loads an in-memory copy of
# the model whose Python-operator nodes call one registered dispatcher per signature (input count and
# output dtypes), with the operator and every attribute carried as one JSON attribute: the extensions
# pass only int, float and string attributes on, and deform_conv2d's stride=[1, 1] is a list.
#
# The extensions keep their operators in a C++ vector and hand ONNX Runtime pointers into it, so a
# registration that grows the vector leaves every open session that registered the extensions'
# library pointing at freed memory: running or destroying such a session then crashes the process,
# often later, inside the garbage collector (measured: with MALLOC_PERTURB_ set, the first run of
# such a session after 39 more registrations segfaults). Hence one dispatcher per signature (a few
# registrations per process, not one per operator and model), spare room made at the first one, and
# at each growth the garbage sessions collected first and a clear refusal while a live one remains.

_PYOP_DOMAIN = "ai.onnx.contrib"
_CALL_ATTRIBUTE = "graphkit_call"
#: Registered dispatchers by signature (input count, output dtypes) → op type.
_registered: dict[tuple[int, tuple[str, ...]], str] = {}
#: The Python operators dispatched to, by the index the nodes carry (kept alive for the process).
_python_ops: list[CustomOp] = []
_python_op_index: dict[int, int] = {}
#: The size the extensions' operator vector is brought to (with placeholders) at the first registration:
#: it then has room up to 16, so 7 signatures need no growth. Each operator costs every session that
#: registers the library about 0.65 ms (measured: 30 ms with 1, 72 ms with 65).
_ROOM = 9
#: Open sessions that hold pointers into the extensions' operator vector.
_extension_sessions: weakref.WeakSet[Any] = weakref.WeakSet()
#: Failures of Python operators during the current ``run_session``: the extensions abort the process
#: when an exception escapes an operator, so the operator returns empty outputs and its error is
#: raised once ONNX Runtime returns (or fails on the empty values).
_failures: list[RuntimeFailure] = []


def _extensions() -> ModuleType:
    try:
        import onnxruntime_extensions
    except ImportError as err:
        raise UsageError("running Python custom operators in ONNX Runtime needs onnxruntime-extensions, "
                         "which is not installed", hint=INSTALL_HINT) from err
    return onnxruntime_extensions


def _uses_any(proto: onnx.ModelProto, python_ops: Sequence[CustomOp]) -> bool:
    keys = {op.key for op in python_ops}
    return any(_key(n) in keys for n in _all_nodes(proto))


def _key(node: onnx.NodeProto) -> tuple[str, str]:
    return ("" if node.domain == "ai.onnx" else node.domain, node.op_type)


def _all_nodes(proto: onnx.ModelProto) -> Iterator[onnx.NodeProto]:
    """Every node of the model: main graph, subgraph bodies at any depth, local functions."""
    stack: list[Sequence[onnx.NodeProto]] = [proto.graph.node, *(f.node for f in proto.functions)]
    while stack:
        for node in stack.pop():
            yield node
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    stack.append(attr.g.node)
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    stack.extend(g.node for g in attr.graphs)


def _with_python_ops(model: Model, python_ops: Sequence[CustomOp]) -> Model:
    """A copy of ``model`` whose Python-operator nodes call dispatchers registered with the extensions."""
    by_key = {op.key: op for op in python_ops}
    proto = onnx.ModelProto()
    proto.CopyFrom(model.lazy_proto)
    for node in _all_nodes(proto):
        op = by_key.get(_key(node))
        if op is None:
            continue
        values = attribute_values(node)
        call = {"op": _python_op_number(op), "attributes": {k: _jsonable(v) for k, v in values.items()}}
        del node.attribute[:]
        node.attribute.append(onnx.helper.make_attribute(_CALL_ATTRIBUTE, json.dumps(call)))
        node.op_type = _dispatcher(op, len(node.input))
        node.domain = _PYOP_DOMAIN
    if not any(o.domain == _PYOP_DOMAIN for o in proto.opset_import):
        proto.opset_import.append(onnx.helper.make_opsetid(_PYOP_DOMAIN, 1))
    return model.derive(proto)


def _jsonable(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


def _python_op_number(op: CustomOp) -> int:
    number = _python_op_index.get(id(op))
    if number is None:  # (the op stays in _python_ops, so its id is never reused)
        number = _python_op_index[id(op)] = len(_python_ops)
        _python_ops.append(op)
    return number


def _dispatch(*inputs: Any, **attrs: str) -> Any:
    call = json.loads(attrs[_CALL_ATTRIBUTE])
    op = _python_ops[call["op"]]
    where = f"{op.label} in ONNX Runtime"
    try:
        values = op.compute(inputs, call["attributes"], where)
    except Exception as err:  # (an exception escaping into the extensions aborts the process)
        _failures.append(err if isinstance(err, RuntimeFailure) else RuntimeFailure(
            f"{where}: {type(err).__name__}: {err}", hint="check the Python operator (python_ops=)",
            cli_hint="check the --python-ops file"))
        values = tuple(np.zeros((0,), dtype) for dtype in op.outputs)
    return values if len(values) > 1 else values[0]


def _dispatcher(op: CustomOp, inputs: int) -> str:
    """The op type of the dispatcher registered with the extensions for ``op``'s signature."""
    signature = (inputs, tuple(op.outputs))
    if signature in _registered:
        return _registered[signature]
    ext = _extensions()
    dtypes = {np.dtype(k).name: v for k, v in _EXTENSION_DTYPES.items()}
    outputs = []
    for dtype in op.outputs:
        if dtype not in dtypes:
            raise UsageError(f"{op.label}: onnxruntime-extensions cannot return {dtype} from a Python operator",
                             hint="return one of " + ", ".join(sorted(dtypes)))
        outputs.append(getattr(ext.PyCustomOpDef, dtypes[dtype]))
    _make_room(ext)
    name = f"graphkit_call_{len(_registered)}"
    # (input types left undefined: the extensions then take every input as it comes)
    ext.onnx_op(op_type=name, inputs=[0] * inputs, outputs=outputs,
                attrs={_CALL_ATTRIBUTE: ext.PyCustomOpDef.dt_string})(_dispatch)
    _registered[signature] = name
    return name


def _make_room(ext: ModuleType) -> None:
    """Make the next registration safe for open sessions (see the comment above ``_PYOP_DOMAIN``)."""
    count = _extension_op_count(ext)
    first = not _registered
    if not first and count & (count - 1):  # (libstdc++'s vector moves its elements when its size is 2**k)
        return
    gc.collect()  # (sessions that are garbage go now, while what they point to still exists)
    if len(_extension_sessions):
        raise RuntimeFailure(
            f"cannot register another Python operator signature while {len(_extension_sessions)} ONNX Runtime "
            "session(s) using onnxruntime-extensions are open: the extensions would move the operators those "
            "sessions point to, which crashes the process",
            hint="run models with Python operators of other signatures in a separate process, or close the "
                 "open sessions first")
    if first:
        for number in range(count, _ROOM):
            ext.onnx_op(op_type=f"graphkit_spare_{number}", inputs=[0], outputs=[ext.PyCustomOpDef.dt_float])(_dispatch)


def _extension_op_count(ext: ModuleType) -> int:
    """How many operators the extensions hold in their default domain, registered by anyone in this process."""
    registry = getattr(getattr(ext, "Opdef", None), "_odlist", None)
    if not isinstance(registry, dict):  # (an extensions version that keeps them elsewhere: count ours)
        return len(_registered) + (_ROOM if _registered else 0)
    return sum(1 for opdef in registry.values() if "::" not in str(getattr(opdef, "op_type", "")))


_EXTENSION_DTYPES = {
    "float32": "dt_float", "float64": "dt_double", "float16": "dt_float16", "int8": "dt_int8", "int16": "dt_int16",
    "int32": "dt_int32", "int64": "dt_int64", "uint8": "dt_uint8", "uint16": "dt_uint16", "uint32": "dt_uint32",
    "uint64": "dt_uint64", "bool": "dt_bool",
}


def onnxruntime() -> ModuleType:
    """The onnxruntime module, imported on first use (importing it costs ~0.1 s; most verbs never run it)."""
    import onnxruntime

    return onnxruntime


def _runtime_log_severity() -> int:
    """ONNX Runtime's own log lines (printed to stderr by its C++ logger, before graphkit can report the
    error they describe) are shown only when graphkit's log shows info (``-v``): warnings and up then,
    else fatal only, so a failure reaches the user as graphkit's one line and hint."""
    return 2 if log.isEnabledFor(logging.INFO) else 4


_RUNTIME_PREFIX = re.compile(r"^\[ONNXRuntimeError\] : \d+ : \w+ : ")
_OUT_OF_BOUNDS = re.compile(r"out of (data )?bounds|out of range|must be within the inclusive range", re.I)
_ALLOCATION = re.compile(r"Failed to allocate memory for requested buffer of size (\d+)")


def first_line(err: BaseException) -> str:
    """The first line of an exception's text, without ONNX Runtime's error-code prefix."""
    text = _RUNTIME_PREFIX.sub("", str(err).strip())
    return text.splitlines()[0] if text else type(err).__name__


def run_session(sess: ort.InferenceSession, names: Sequence[str], feeds: Mapping[str, Any], label: str) -> list[Any]:
    """``sess.run`` with ONNX Runtime's errors turned into a RuntimeFailure naming ``label``.

    Values come back as ONNX Runtime gives them: arrays for tensors, lists for sequences, dicts for maps.
    """
    del _failures[:]
    try:
        values = list(sess.run(list(names), dict(feeds)))
    except MemoryError as err:
        _raise_python_op_failure()
        raise RuntimeFailure(f"out of memory running {label}",
                             hint="give smaller inputs (FeedOptions shapes=, dims=) or run it in fragments (split)",
                             cli_hint="give smaller inputs (--shape, --dim) or run it in fragments (split)") from err
    except Exception as err:  # onnxruntime raises its own exception types
        _raise_python_op_failure()
        allocation = _ALLOCATION.search(str(err))
        if allocation:
            node = re.search(r"running (\w+) node\. Name:'([^']*)'", str(err))
            where = f" in node {node.group(2)!r} ({node.group(1)})" if node else ""
            raise RuntimeFailure(
                f"ONNX Runtime ran out of memory running {label}{where}: it asked for {int(allocation.group(1))} bytes",
                hint="give smaller inputs (FeedOptions shapes=, dims=), or check the shapes the node computes",
                cli_hint="give smaller inputs (--shape, --dim), or check the shapes the node computes",
            ) from err
        hint = "check the input shapes and values; gk.validate(model) checks the model"
        cli_hint = "check the input shapes and values; run 'python -m graphkit check' on the model"
        if _OUT_OF_BOUNDS.search(str(err)):
            hint = ("an index is out of range: give the indices' input a range within the table it indexes "
                    "(FeedOptions ranges={NAME: (0, N-1)}) or its value in feeds=")
            cli_hint = ("an index is out of range: give the indices' input a range within the table it indexes "
                        "(--range NAME=0,N-1), a fixed value (--value NAME=…) or a file (--input NAME=FILE)")
        raise RuntimeFailure(f"ONNX Runtime failed running {label}: {first_line(err)}", hint=hint,
                             cli_hint=cli_hint) from err
    _raise_python_op_failure()
    return values


def _raise_python_op_failure() -> None:
    if _failures:
        failure = _failures[0]
        del _failures[:]
        raise failure


def symbolic_shapes(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    """``proto`` with value_info from ONNX Runtime's symbolic shape inference, or None.

    None when this onnxruntime has no ``tools.symbolic_shape_infer``, when sympy (which it needs)
    is missing, or when it fails on the model. Dims it cannot size become symbolic expressions of
    the input dims (``floor(H/8)``) or fresh names, never guesses. Where it types only part of the
    graph, that part is returned: its own ``infer_shapes`` would instead write the model into the
    working directory (``sym_shape_infer_temp.onnx``) and raise, so its steps are run here.
    """
    try:
        onnxruntime()
        from onnxruntime.tools.symbolic_shape_infer import get_opset
    except ImportError as err:
        log.debug("ONNX Runtime's symbolic shape inference is not available: %s", err)
        return None
    try:
        opset = get_opset(proto)
        if not opset or opset < 7:
            return None
        # (int_max, auto_merge, guess_output_rank, verbose): without auto_merge, two dims of different
        # names meeting in a broadcast are not declared one (Add of [batch, 4] and [seq, 4] was typed
        # [batch, 4], wrong where batch is 1 and seq is not); inference stops there instead
        inference = _proven_inference()(2**31 - 1, False, False, 0)
        inference._preprocess(proto)
        while inference.run_:
            inference._infer_impl()
        inference._update_output_from_vi()
        result: onnx.ModelProto = inference.out_mp_
        return result
    except Exception as err:  # it raises whatever its handlers raise
        log.info("ONNX Runtime's symbolic shape inference failed: %s", first_line(err))
        return None


@functools.cache
def _proven_inference() -> type:
    """ONNX Runtime's SymbolicShapeInference without its one guess: a Split whose sizes come from a
    value it cannot compute was split evenly (the expanded RotaryEmbedding of the onnx wheel's tests
    splits [8, 0] from the head size: it wrote [.., 4] and [.., 4] where ONNX Runtime makes [.., 8] and
    [.., 0], and the model typed so failed in ONNX Runtime). Its outputs now stay unknown, which
    stops the inference there."""
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_attribute, get_opset

    class Proven(SymbolicShapeInference):  # type: ignore[misc]
        def _infer_Split_Common(self, node: onnx.NodeProto, make_value_info_func: Any) -> None:
            if get_opset(self.out_mp_) >= 13 and len(node.input) > 1 and node.input[1] \
                    and self._try_get_value(node, 1) is None:
                return
            count = get_attribute(node, "num_outputs")
            if count is not None and (len(node.input) < 2 or not node.input[1]):
                return  # (18's chunks: the last may be smaller, which an even split does not say)
            super()._infer_Split_Common(node, make_value_info_func)

    return Proven


def refusal(data: bytes) -> str:
    """Why ONNX Runtime's CPU provider refuses the serialized model ``data`` ("" when it loads it).

    Asks whether ONNX Runtime can run an operator with a type signature (a one-node model): kernels
    are resolved when the session is built. (Where the CPU provider lacks a float16 kernel but has a
    float32 one, it runs the node in float32 between Casts it inserts itself, and loads the model.)
    """
    ort = onnxruntime()
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    try:
        ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as err:  # onnxruntime raises its own exception types
        return first_line(err)
    return ""

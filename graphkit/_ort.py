"""ONNX Runtime, imported here and nowhere else: the module, sessions, one run, symbolic shape inference.

This is the one owner of the onnxruntime dependency. It sits low (it needs only errors, model and
io) so that the typing engine can observe a run and use ONNX Runtime's symbolic shape inference
without importing the verbs above it; ``graphkit.run`` builds feeds, runs and chains on top of it.

Models with external weights run from where their weights lie: the session reads the ModelProto from
memory and the weights from the model's folder (``session.model_external_initializers_file_folder_path``),
so no weight is copied into memory twice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import onnx

from graphkit._io import runtime_bytes
from graphkit._model import Model
from graphkit._numbers import MAX_THREADS_PER_CORE, check_int, max_threads
from graphkit.errors import RuntimeFailure, UsageError

if TYPE_CHECKING:
    import onnxruntime as ort

__all__ = ["OPT_LEVELS", "PROVIDERS", "onnxruntime", "run_session", "session", "symbolic_shapes"]

log = logging.getLogger(__name__)

#: Optimization level → the name of its ``onnxruntime.GraphOptimizationLevel`` member.
OPT_LEVELS = {
    "disable": "ORT_DISABLE_ALL",
    "basic": "ORT_ENABLE_BASIC",
    "extended": "ORT_ENABLE_EXTENDED",
    "all": "ORT_ENABLE_ALL",
}
PROVIDERS = {"cpu": "CPUExecutionProvider", "cuda": "CUDAExecutionProvider", "tensorrt": "TensorrtExecutionProvider"}


def session(model: Model, *, provider: str = "cpu", opt_level: str = "all", threads: int = 0) -> ort.InferenceSession:
    """An ONNX Runtime session for ``model``, reading external weights from the model's folder.

    Args:
        model: The model to load.
        provider: "cpu", "cuda", "tensorrt" or a full ONNX Runtime provider name.
        opt_level: Graph optimization level: disable, basic, extended or all.
        threads: Intra-op threads (0: ONNX Runtime's default).

    Raises:
        UsageError: Unknown optimization level, a provider this ONNX Runtime does not have, or more
            threads than a small multiple of the cores.
        RuntimeFailure: ONNX Runtime refuses the model (the message names what it says).
    """
    if opt_level not in OPT_LEVELS:
        raise UsageError(f"unknown optimization level {opt_level!r}", hint="use one of " + ", ".join(OPT_LEVELS))
    ort = onnxruntime()
    full_provider = PROVIDERS.get(provider.lower(), provider)
    available = ort.get_available_providers()
    if full_provider not in available:
        raise UsageError(
            f"ONNX Runtime here has no provider {provider!r}",
            hint="available: " + ", ".join(available) + " (install onnxruntime-gpu for cuda)",
        )
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise UsageError(f"threads must be a whole number, not {threads!r}", hint="pass threads=0 for ONNX Runtime's default")
    check_int(threads, what="threads", lo=0, hi=max_threads(),
              hint=f"use at most {MAX_THREADS_PER_CORE} threads per core (0: ONNX Runtime's default)")
    options = ort.SessionOptions()
    options.graph_optimization_level = getattr(ort.GraphOptimizationLevel, OPT_LEVELS[opt_level])
    options.log_severity_level = _runtime_log_severity()
    if threads:
        options.intra_op_num_threads = threads
    data, folder = runtime_bytes(model)  # (checks every external tensor first)
    if folder is not None:
        options.add_session_config_entry("session.model_external_initializers_file_folder_path", str(folder))
    try:
        return ort.InferenceSession(data, options, providers=[full_provider])
    except Exception as err:  # onnxruntime raises its own exception types
        raise RuntimeFailure(
            f"ONNX Runtime cannot load {model.name}: {first_line(err)}",
            hint="run 'python -m graphkit check' on the model; custom-domain ops need their library",
        ) from err


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
_ALLOCATION = re.compile(r"Failed to allocate memory for requested buffer of size (\d+)")


def first_line(err: BaseException) -> str:
    """The first line of an exception's text, without ONNX Runtime's error-code prefix."""
    text = _RUNTIME_PREFIX.sub("", str(err).strip())
    return text.splitlines()[0] if text else type(err).__name__


def run_session(sess: ort.InferenceSession, names: Sequence[str], feeds: Mapping[str, Any], label: str) -> list[Any]:
    """``sess.run`` with ONNX Runtime's errors turned into a RuntimeFailure naming ``label``.

    Values come back as ONNX Runtime gives them: arrays for tensors, lists for sequences, dicts for maps.
    """
    try:
        return list(sess.run(list(names), dict(feeds)))
    except MemoryError as err:
        raise RuntimeFailure(f"out of memory running {label}",
                             hint="give smaller inputs (--shape, --dim) or run it in fragments (split)") from err
    except Exception as err:  # onnxruntime raises its own exception types
        allocation = _ALLOCATION.search(str(err))
        if allocation:
            node = re.search(r"running (\w+) node\. Name:'([^']*)'", str(err))
            where = f" in node {node.group(2)!r} ({node.group(1)})" if node else ""
            raise RuntimeFailure(
                f"ONNX Runtime ran out of memory running {label}{where}: it asked for {int(allocation.group(1))} bytes",
                hint="give smaller inputs (--shape, --dim), or check the shapes the node computes",
            ) from err
        raise RuntimeFailure(
            f"ONNX Runtime failed running {label}: {first_line(err)}",
            hint="check the input shapes and values; run 'python -m graphkit check' on the model",
        ) from err


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
        from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference, get_opset
    except ImportError as err:
        log.debug("ONNX Runtime's symbolic shape inference is not available: %s", err)
        return None
    try:
        opset = get_opset(proto)
        if not opset or opset < 7:
            return None
        inference = SymbolicShapeInference(2**31 - 1, True, False, 0)  # (int_max, auto_merge, guess_output_rank, verbose)
        inference._preprocess(proto)
        while inference.run_:
            inference._infer_impl()
        inference._update_output_from_vi()
        result: onnx.ModelProto = inference.out_mp_
        return result
    except Exception as err:  # it raises whatever its handlers raise
        log.info("ONNX Runtime's symbolic shape inference failed: %s", first_line(err))
        return None

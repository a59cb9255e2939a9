"""The option objects and option types the public functions share.

``Tolerance`` is the one tolerance type of compare, run_chain and diff; ``FeedOptions`` says how every
function that runs a model generates the inputs it is not given. Both check their fields when built,
so a bad value fails where it is written. The Literal types name the values a keyword takes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from graphkit import _check_args as argcheck

__all__ = [
    "DEFAULT_ATOL",
    "DEFAULT_RTOL",
    "DTYPE_FLOORS",
    "BACKENDS",
    "OPT_LEVELS",
    "Backend",
    "Balance",
    "FeedOptions",
    "OptLevel",
    "Provider",
    "Tolerance",
]

DEFAULT_ATOL = 1e-5
DEFAULT_RTOL = 1e-3

#: Where a side of a comparison runs: ONNX Runtime with all graph optimizations, with none, or
#: onnx's ReferenceEvaluator.
Backend = Literal["ort", "ort-noopt", "reference"]
BACKENDS: tuple[Backend, ...] = ("ort", "ort-noopt", "reference")
#: ONNX Runtime's graph optimization levels.
OptLevel = Literal["disable", "basic", "extended", "all"]
OPT_LEVELS: tuple[OptLevel, ...] = ("disable", "basic", "extended", "all")
#: An execution provider by short name; a full ONNX Runtime name ("CUDAExecutionProvider") works too.
Provider = Union[Literal["cpu", "cuda", "tensorrt"], str]  # noqa: UP007 (a runtime alias on 3.10)
#: What split's balanced cuts balance: node counts or weight bytes.
Balance = Literal["nodes", "weights"]


@dataclass(frozen=True)
class Tolerance:
    """A value passes when ``|candidate - reference| <= atol + rtol * |reference|`` everywhere.

    Attributes:
        atol: Absolute tolerance (>= 0; infinite passes everything).
        rtol: Relative tolerance (>= 0).

    Raises:
        UsageError: A tolerance that is negative, NaN, or not a number.
    """

    atol: float = DEFAULT_ATOL
    rtol: float = DEFAULT_RTOL

    def __post_init__(self) -> None:
        object.__setattr__(self, "atol", argcheck.real(self.atol, "atol", minimum=0.0, finite=False))
        object.__setattr__(self, "rtol", argcheck.real(self.rtol, "rtol", minimum=0.0, finite=False))

    def to_dict(self) -> dict[str, float]:
        """A JSON-ready dict."""
        return {"atol": self.atol, "rtol": self.rtol}

    def for_dtype(self, dtype: str) -> Tolerance:
        """This tolerance, loosened to at least the floor of a low-precision float dtype
        (``DTYPE_FLOORS``); itself for any other dtype."""
        floor = DTYPE_FLOORS.get(str(dtype))
        if floor is None or (self.atol >= floor.atol and self.rtol >= floor.rtol):
            return self
        return Tolerance(max(self.atol, floor.atol), max(self.rtol, floor.rtol))


#: The tightest tolerance that means anything for a low-precision float. ONNX Runtime computes many
#: float16 operators in float32 (it inserts casts around the ones without a float16 kernel), so where
#: a cut or a fusion rounds an intermediate value to float16 in one run and not in the other, results
#: differ by a few units in the last place (float16's is 2**-10 ≈ 9.8e-4 near 1).
DTYPE_FLOORS: dict[str, Tolerance] = {}


def _dim_value(value: Any, keyword: str) -> int:
    return argcheck.integer(value, keyword, minimum=0, maximum=argcheck.INT64_MAX)


def _name_key(value: Any, keyword: str) -> str:
    return argcheck.name(value, keyword, what="input name")


@dataclass(frozen=True)
class FeedOptions:
    """How the inputs that are not given are generated: seeded, of the right dtype, in a range.

    A dynamic dim takes its value from ``shapes`` (the input's whole shape), else from ``dims`` (by
    the dim's name, for every input that has it), else from a given value or shape with the same dim
    name, else ``default_dim``.

    Attributes:
        seed: Seed of the generated values (the same seed gives the same values).
        shapes: Input name → shape, for inputs with dynamic dims.
        dims: Dim name → value (``{"batch": 4}``).
        ranges: Input name → (lo, hi), the range of its values.
        default_dim: The value of a dynamic dim that nothing else fixes.

    Raises:
        UsageError: A field of the wrong type or out of range (names the field).
    """

    seed: int = 0
    shapes: Mapping[str, Sequence[int]] = field(default_factory=dict)
    dims: Mapping[str, int] = field(default_factory=dict)
    ranges: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    default_dim: int = 1

    def __post_init__(self) -> None:
        fields = {
            "seed": argcheck.integer(self.seed, "seed"),
            "shapes": argcheck.mapping(self.shapes, "shapes", key=_name_key, item=argcheck.shape),
            "dims": argcheck.mapping(self.dims, "dims", key=lambda v, k: argcheck.name(v, k, what="dim name"),
                                  item=_dim_value),
            "ranges": argcheck.mapping(self.ranges, "ranges", key=_name_key, item=argcheck.value_range),
            "default_dim": argcheck.integer(self.default_dim, "default_dim", minimum=0, maximum=argcheck.INT64_MAX),
        }
        for name, value in fields.items():
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"seed": self.seed, "shapes": {k: list(v) for k, v in self.shapes.items()}, "dims": dict(self.dims),
                "ranges": {k: list(v) for k, v in self.ranges.items()}, "default_dim": self.default_dim}


DTYPE_FLOORS.update({"float16": Tolerance(1e-2, 1e-2), "bfloat16": Tolerance(1e-1, 5e-2)})

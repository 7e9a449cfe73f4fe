"""The case model: one RNN configuration, how its data is obtained, its tolerances (pydantic),
and the JSON Schema of a case file.

Reading case files (YAML, ``matrix:`` expansion, discovery, the names a case refers to) is
:mod:`harness.cases`; this module imports nothing of the adapters or layouts, so every part of
the harness can use the model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StrictBool, model_validator


def _not_bool(value: Any) -> Any:
    # YAML reads `yes`/`true` as a bool, which pydantic would quietly turn into 1 or 1.0
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got the boolean {str(value).lower()}")
    return value


def _int(value: Any) -> Any:
    # strict: a YAML integer only; pydantic would take "4" (a string) and 4.0 as 4
    _not_bool(value)
    if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
        raise ValueError(f"expected a valid integer, got {value!r}, which has a fractional part")
    if not isinstance(value, int):
        raise ValueError(f"expected a valid integer, got {type(value).__name__} {value!r}"[:200])
    if value.bit_length() > 62:
        raise ValueError(f"expected an integer below 2**62, got one of {len(str(value))} digits")
    return value


# (constraints before the validator, or the JSON Schema loses them)
Float = Annotated[float, BeforeValidator(_not_bool)]
PositiveFloat = Annotated[float, Field(gt=0), BeforeValidator(_not_bool)]
NonNegativeFloat = Annotated[float, Field(ge=0), BeforeValidator(_not_bool)]
PositiveInt = Annotated[int, Field(ge=1), BeforeValidator(_int)]
NonNegativeInt = Annotated[int, Field(ge=0), BeforeValidator(_int)]


class FieldError(ValueError):
    """A cross-field check that knows which field is wrong (for the message and YAML line)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


class _Strict(BaseModel):
    # NaN or Inf in a size, clip or tolerance is always a mistake
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class GeneratedTensors(_Strict):
    """Tensors drawn from the case seed."""

    init: Literal["uniform", "normal"] = "uniform"
    scale: PositiveFloat | None = Field(
        None, description="default: 1/sqrt(hidden_size) for weights, 1.0 for inputs")


class TensorFile(_Strict):
    """Tensors read from an .npz file (allow_pickle=False), relative to the case file."""

    file: str
    layout: str | None = Field(None, description="native layout of a weights file, e.g. torch")


class Tol(_Strict):
    atol: NonNegativeFloat | None = None
    rtol: NonNegativeFloat | None = None


class Tolerance(_Strict):
    """Overrides of the per-dtype default tolerances: top level, per dtype, per adapter."""

    atol: NonNegativeFloat | None = None
    rtol: NonNegativeFloat | None = None
    float64: Tol | None = None
    float32: Tol | None = None
    float16: Tol | None = None
    bfloat16: Tol | None = None
    adapters: dict[str, Tol] = Field(default_factory=dict)


class Case(_Strict):
    """One RNN configuration plus how to obtain its data, and its tolerances."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$", max_length=200)
    description: str = ""
    cell: Literal["lstm", "gru"]
    input_size: PositiveInt
    hidden_size: PositiveInt
    num_layers: PositiveInt = 1
    bidirectional: StrictBool | None = None
    direction: Literal["forward", "reverse", "bidirectional"] | None = None
    proj_size: NonNegativeInt = 0
    peepholes: StrictBool = False
    cell_clip: PositiveFloat | None = None
    proj_clip: PositiveFloat | None = None
    gate_clip: PositiveFloat | None = None
    input_forget: StrictBool = False
    forget_bias: Float = 0.0
    recurrent_activation: Literal["sigmoid", "hard_sigmoid_tf_keras",
                                  "hard_sigmoid_keras3"] = "sigmoid"
    reset_after: StrictBool = True
    batch: PositiveInt = 2
    seq_len: PositiveInt = 5
    seq_lengths: list[PositiveInt] | None = None
    initial_state: Literal["zeros", "random"] = "zeros"
    dtype: Literal["float64", "float32", "float16", "bfloat16"] = "float32"
    seed: NonNegativeInt = 0
    weights: GeneratedTensors | TensorFile = Field(default_factory=GeneratedTensors)
    inputs: GeneratedTensors | TensorFile = Field(default_factory=GeneratedTensors)
    adapters: list[str] = Field(default_factory=lambda: ["all"])
    exclude: list[str] = Field(default_factory=list)
    tolerance: Tolerance = Field(default_factory=Tolerance)
    gradients: StrictBool = False
    # Where the case came from (not a YAML key): the file, for paths and messages.
    source: str | None = Field(None, exclude=True, json_schema_extra={"readOnly": True})

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        if self.bidirectional is not None and self.direction is not None:
            if self.bidirectional != (self.direction == "bidirectional"):
                raise FieldError("direction", f"direction {self.direction} disagrees with "
                                 f"bidirectional: {str(self.bidirectional).lower()}; "
                                 "give one of them")
        if self.cell == "gru":
            lstm_only = {
                "proj_size": self.proj_size != 0,
                "peepholes": self.peepholes,
                "cell_clip": self.cell_clip is not None,
                "proj_clip": self.proj_clip is not None,
                "input_forget": self.input_forget,
                "forget_bias": self.forget_bias != 0.0,
            }
            bad = [k for k, used in lstm_only.items() if used]
            if bad:
                raise FieldError(bad[0], f"{', '.join(bad)} only apply to cell: lstm")
        if self.proj_clip is not None and self.proj_size == 0:
            raise FieldError("proj_clip", "proj_clip needs proj_size > 0")
        if self.proj_size >= self.hidden_size:
            if self.proj_size:
                raise FieldError("proj_size", f"proj_size must be < hidden_size "
                                 f"({self.hidden_size}), got {self.proj_size}")
        if self.seq_lengths is not None:
            if len(self.seq_lengths) != self.batch:
                raise FieldError("seq_lengths", f"seq_lengths has {len(self.seq_lengths)} entries, "
                                 f"batch is {self.batch}")
            if max(self.seq_lengths, default=0) > self.seq_len:
                raise FieldError("seq_lengths", f"seq_lengths entries must be <= seq_len "
                                 f"({self.seq_len}), got {max(self.seq_lengths)}")
        if isinstance(self.inputs, TensorFile) and self.inputs.layout is not None:
            raise FieldError("inputs.layout", "only a weights file has a layout; an inputs file "
                             "holds x, h0, c0, seq_lengths in the harness conventions")
        if isinstance(self.weights, TensorFile) and not self.weights.layout:
            raise FieldError("weights.layout", "weights.file needs weights.layout (the native "
                             "layout of the file, e.g. torch)")
        return self

    # Derived sizes -------------------------------------------------------------------------
    @property
    def dir_mode(self) -> str:
        if self.direction is not None:
            return self.direction
        return "bidirectional" if self.bidirectional else "forward"

    @property
    def num_directions(self) -> int:
        return 2 if self.dir_mode == "bidirectional" else 1

    @property
    def directions(self) -> tuple[int, ...]:
        """Canonical direction indices run: 0 forward, 1 reverse."""
        return {"forward": (0,), "reverse": (1,), "bidirectional": (0, 1)}[self.dir_mode]

    @property
    def out_size(self) -> int:
        """Size of h (P with a projection, else H)."""
        return self.proj_size or self.hidden_size

    def layer_input_size(self, layer: int) -> int:
        return self.input_size if layer == 0 else self.out_size * self.num_directions

    @property
    def gates(self) -> tuple[str, ...]:
        return ("i", "f", "g", "o") if self.cell == "lstm" else ("r", "z", "n")

    @property
    def path(self) -> Path:
        return Path(self.source).parent if self.source else Path(".")

    def resolve(self, relative: str) -> Path:
        return self.path / relative


def json_schema() -> dict[str, Any]:
    """JSON Schema of one case file: a case, or a case with a ``matrix:`` of lists."""
    case = Case.model_json_schema()
    case["properties"].pop("source", None)
    matrix = {
        "type": "object",
        "description": "key -> list of values; the cartesian product expands the case",
        "propertyNames": {"enum": sorted(k for k in case["properties"] if k != "name")},
        "additionalProperties": {"type": "array", "minItems": 1},
    }
    case["properties"]["matrix"] = matrix
    # keys a matrix varies may be absent from the case body
    required = [k for k in case.pop("required", []) if k != "name"]
    case["required"] = ["name"]
    case["if"] = {"not": {"required": ["matrix"]}}
    case["then"] = {"required": required}
    case["title"] = "rnn-harness case"
    case["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    return case

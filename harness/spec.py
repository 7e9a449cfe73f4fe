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

from harness.cells import CELLS, Cell, cell_named


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

    init: Literal["uniform", "normal"] = Field("uniform", description="the distribution drawn")
    scale: PositiveFloat | None = Field(
        None, description="default: 1/sqrt(hidden_size) for weights, 1.0 for inputs")


class TensorFile(_Strict):
    """Tensors read from a file, relative to the case file: inputs from an .npz
    (allow_pickle=False); weights from an .npz or a framework's own file (docs/cases.md,
    Weights from a model file)."""

    file: str = Field(description="relative to the case file: an .npz; for weights also a "
                      "PyTorch .pt/.pth state_dict, a Keras .keras/.h5/.weights.h5 file, an "
                      ".onnx model or flax .msgpack parameters")
    layout: str | None = Field(None, description="native layout of a weights file, e.g. torch "
                               "(default: the layout the file's type or tensors make unambiguous)")
    select: str | None = Field(None, description="weights only: which torch module (name "
                               "prefix), Keras layers or ONNX nodes (names, comma-separated) of "
                               "a model file hold the RNN; for an .npz, the group of its names "
                               "(prefix before / or .) that holds its tensors")


class ShippedFile(_Strict):
    """A deployed file the case runs as it is, in its own runtime (docs/cases.md, A shipped
    file): a .tflite in LiteRT (``litert-shipped``), an OpenVINO IR .xml in OpenVINO
    (``openvino-shipped``)."""

    file: str = Field(description="relative to the case file: a .tflite or an OpenVINO IR "
                      ".xml (its .bin beside it)")
    select: str | None = Field(None, description="which recurrent layer of the file runs (its "
                               "name, as compare lists it); default: the file's only one")


class Tol(_Strict):
    atol: NonNegativeFloat | None = Field(None, description="absolute tolerance")
    rtol: NonNegativeFloat | None = Field(None, description="relative tolerance")


class Tolerance(_Strict):
    """Overrides of the per-dtype default tolerances: top level, per dtype, per adapter."""

    atol: NonNegativeFloat | None = Field(None, description="absolute tolerance, every dtype")
    rtol: NonNegativeFloat | None = Field(None, description="relative tolerance, every dtype")
    float64: Tol | None = Field(None, description="tolerance for float64 cases")
    float32: Tol | None = Field(None, description="tolerance for float32 cases")
    float16: Tol | None = Field(None, description="tolerance for float16 cases")
    bfloat16: Tol | None = Field(None, description="tolerance for bfloat16 cases")
    adapters: dict[str, Tol] = Field(default_factory=dict,
                                     description="adapter name -> tolerance for that adapter")


class Quantization(_Strict):
    """How the quantized adapters (``litert-int8``, ``litert-int8-ref``, ``litert-dynamic``)
    quantize the case: their presence marks the cases they run (docs/quantization.md)."""

    calibration_batches: Annotated[int, Field(ge=1, le=1000), BeforeValidator(_int)] = Field(8,
        description="batches of the case's own input distribution, at its batch and sequence "
                    "length, the converter calibrates on (drawn from seeds of their own)")
    min_sqnr_db: Float | None = Field(None,
        description="a floor: a quantized pair whose SQNR (dB) over y is below it is DIVERGED")


class Signature(_Strict):
    """What a declared divergence looks like, checked on the pair's rows and reason: a
    divergence with another signature is not the declared bug (it stays DIVERGED)."""

    first_step: Annotated[int, Field(ge=0)] | None = Field(None,
        description="the step t of the pair's first diverging y row, e.g. 0: wrong from the "
                    "first step")
    says: list[Annotated[str, Field(min_length=1, pattern=r"\S")]] | None = Field(None,
        min_length=1, description="texts the pair's reason holds word for word, e.g. the "
                                  "conflicting grids its adapter names")

    @model_validator(mode="after")
    def _something(self) -> Signature:
        if self.first_step is None and self.says is None:
            raise ValueError("a signature names first_step, says or both")
        return self


class Expected(_Strict):
    """What an adapter is known to do on a case because of a bug upstream (in the framework,
    not in the harness): reported as a known upstream bug, not a failure, until it is fixed."""

    verdict: Literal["DIVERGED"] = Field(
        description="the verdict the open upstream bug gives: DIVERGED")
    upstream: str = Field(min_length=1, pattern=r"\S",
        description="the upstream issue, e.g. pytorch/pytorch#12345 or its URL")
    when: dict[str, StrictBool | int | float | str | None] | None = Field(None,
        description="case key -> value, e.g. {cell: gru}: the expectation holds only for the "
                    "cases (matrix entries) whose keys have these values; default: every case "
                    "of the file")
    signature: Signature | None = Field(None,
        description="where and how the pair diverges: a DIVERGED pair with another signature "
                    "stays DIVERGED; default: any divergence")

    def holds_for(self, case: Case) -> bool:
        """Whether this expectation applies to ``case`` (every key of ``when`` matches, type
        and value: ``seed: true`` is not ``seed: 1``, as Python's ``True == 1`` would have it)."""
        return all(_same(getattr(case, key), value) for key, value in (self.when or {}).items())


def _same(actual: object, wanted: object) -> bool:
    """A case key's value equal to a ``when`` value: a boolean matches only a boolean; numbers
    match numbers by value (``seq_len: 4.0`` is 4)."""
    if isinstance(actual, bool) or isinstance(wanted, bool):
        return type(actual) is type(wanted) and actual == wanted
    return actual == wanted


class Case(_Strict):
    """One RNN configuration plus how to obtain its data, and its tolerances."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.=+-]*$", max_length=200,
        description="the case's name: letters, digits and _ . = + -; a matrix appends its values")
    description: str = Field("", description="free text shown in the report")
    cell: Literal["lstm", "gru"] = Field(description="lstm or gru (docs/equations.md)")
    input_size: PositiveInt = Field(description="I, features of each input step")
    hidden_size: PositiveInt = Field(description="H, units of each layer")
    num_layers: PositiveInt = Field(1,
        description="stacked layers; layer k+1 reads layer k's output (both directions)")
    bidirectional: StrictBool | None = Field(None,
        description="true: a forward and a reverse direction (same as direction: bidirectional)")
    direction: Literal["forward", "reverse", "bidirectional"] | None = Field(None,
        description="forward, reverse or bidirectional (default: forward, or bidirectional)")
    proj_size: NonNegativeInt = Field(0,
        description="LSTM only: P > 0 projects h to P units (P < hidden_size); 0: no projection")
    peepholes: StrictBool = Field(False,
        description="LSTM only: peephole connections from the cell state to i, f, o")
    cell_clip: PositiveFloat | None = Field(None,
        description="LSTM only: clip the cell state to [-cell_clip, cell_clip]")
    proj_clip: PositiveFloat | None = Field(None,
        description="LSTM only: clip the projected h to [-proj_clip, proj_clip] (needs proj_size)")
    gate_clip: PositiveFloat | None = Field(None,
        description="clip gate pre-activations to [-gate_clip, gate_clip] (ONNX clip)")
    input_forget: StrictBool = Field(False,
        description="LSTM only: coupled input-forget gate, i = 1 - f")
    forget_bias: Float = Field(0.0,
        description="LSTM only: added to the forget gate at run time (TF1 cells add 1.0)")
    recurrent_activation: Literal["sigmoid", "hard_sigmoid_tf_keras",
                                  "hard_sigmoid_keras3"] = Field(
        "sigmoid", description="the gate activation: sigmoid, or tf_keras' / Keras 3's "
                               "hard_sigmoid (docs/equations.md, Recurrent activations)")
    reset_after: StrictBool = Field(True,
        description="GRU only: the reset gate applied after the recurrent matmul (torch, cuDNN, "
                    "Keras 2+ default) or before it (false)")
    batch: PositiveInt = Field(2, description="B, sequences in the batch")
    seq_len: PositiveInt = Field(5, description="T, time steps")
    seq_lengths: list[PositiveInt] | None = Field(None,
        description="valid steps of each sequence (B entries, each <= seq_len); padded steps "
                    "follow")
    initial_state: Literal["zeros", "random", "none"] = Field("zeros",
        description="zeros (given to every adapter as zero tensors), random h0 (and c0) drawn "
                    "from the seed, or none: zeros, omitted by the adapters that can omit "
                    "an initial state (the framework's own zero-state branch runs)")
    export_seq_len: PositiveInt | None = Field(None,
        description="the exporting adapters (the ONNX exporters, ExecuTorch, litert-torch) "
                    "export the model at this sequence length, then run it at seq_len; "
                    "absent: each at its own (executorch at seq_len, the ONNX exporters at "
                    "another short length)")
    dtype: Literal["float64", "float32", "float16", "bfloat16"] = Field("float32",
        description="the precision every adapter computes in; the reference is float64")
    seed: NonNegativeInt = Field(0,
        description="seed for generated weights, inputs and initial state")
    weights: GeneratedTensors | TensorFile = Field(default_factory=GeneratedTensors,
        description="generated from the seed, or a native weights file with its layout")
    inputs: GeneratedTensors | TensorFile = Field(default_factory=GeneratedTensors,
        description="generated from the seed, or an .npz file (x, optionally h0, c0, seq_lengths)")
    shipped: ShippedFile | None = Field(None,
        description="{file: model.tflite | model.xml, select?}: a deployed file its runtime's "
                    "adapter runs as it is, judged against the reference on the case's weights")
    adapters: list[str] = Field(default_factory=lambda: ["all"],
        description="adapters to run (default all), by name, framework or device")
    exclude: list[str] = Field(default_factory=list, description="adapters not to run")
    tolerance: Tolerance = Field(default_factory=Tolerance,
        description="overrides of the per-dtype default tolerances (docs/cases.md, Tolerances)")
    gradients: StrictBool = Field(False,
        description="also compare gradients of the outputs w.r.t. inputs, states and weights")
    expected: dict[str, Expected] = Field(default_factory=dict,
        description="adapter name -> {verdict: DIVERGED, upstream: ISSUE, optionally when: "
                    "{KEY: VALUE}}: a known upstream bug (docs/cases.md, Known upstream bugs)")
    quantization: Quantization | None = Field(None,
        description="{calibration_batches: N, min_sqnr_db: X}: the quantized LiteRT adapters "
                    "run the case (docs/quantization.md); absent: they do not")
    allow_vacuous: StrictBool = Field(False,
        description="true: the case is meant to be blind to every plausible layout mistake "
                    "(otherwise that is a case error; docs/cases.md, Blind spots)")
    # Where the case came from (not a YAML key): the file, for paths and messages.
    source: str | None = Field(None, exclude=True, json_schema_extra={"readOnly": True})

    @model_validator(mode="after")
    def _consistent(self) -> Case:
        if self.bidirectional is not None and self.direction is not None:
            if self.bidirectional != (self.direction == "bidirectional"):
                raise FieldError("direction", f"direction {self.direction} disagrees with "
                                 f"bidirectional: {str(self.bidirectional).lower()}; "
                                 "give one of them")
        used = {  # the fields of one cell kind that this case sets (reset_after has a default)
            "proj_size": self.proj_size != 0,
            "peepholes": self.peepholes,
            "cell_clip": self.cell_clip is not None,
            "proj_clip": self.proj_clip is not None,
            "input_forget": self.input_forget,
            "forget_bias": self.forget_bias != 0.0,
        }
        bad = [k for k, on in used.items() if on and not self.cell_kind.reads(k)]
        if bad:
            owners = sorted({c.name for c in CELLS.values() for k in bad if c.reads(k)})
            raise FieldError(bad[0], f"{', '.join(bad)} only apply to cell: "
                                     f"{' or '.join(owners)}")
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
        if isinstance(self.inputs, TensorFile):
            for key in ("layout", "select"):
                if getattr(self.inputs, key) is not None:
                    raise FieldError(f"inputs.{key}", f"only a weights file has a {key}; an "
                                     "inputs file holds x, h0, c0, seq_lengths in the harness "
                                     "conventions")
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
    def cell_kind(self) -> Cell:
        """The cell kind (:mod:`harness.cells`): ask it, not the name."""
        return cell_named(self.cell)

    @property
    def gates(self) -> tuple[str, ...]:
        return self.cell_kind.gates

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

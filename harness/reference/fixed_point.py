"""Integer arithmetic as TFLite's integer kernels do it, in NumPy: gemmlowp's fixed-point
primitives (``gemmlowp/fixedpoint/fixedpoint.h``, the scalar code the portable kernels call)
and TFLite's quantized multipliers (``tensorflow/lite/kernels/internal/common.h`` and
``quantization_util.cc``).

Every function takes and returns int64 arrays holding values of the C++ type named by
``bits`` (16 or 32): NumPy's int64 holds every intermediate product exactly, and :func:`wrap`
gives C++'s conversion back to the narrow type (two's complement, as every compiler TFLite is
built with does it) where the C++ code narrows without saturating.

A fixed-point value ``Qm.n`` (gemmlowp's ``FixedPoint<int16_t, m>``) is an int16 whose real
value is ``raw / 2^(15 - m)``: ``m`` integer bits, ``15 - m`` fractional bits.
"""

from __future__ import annotations

import math

import numpy as np

Ints = np.ndarray

INT16_MIN, INT16_MAX = -(1 << 15), (1 << 15) - 1


def ints(a) -> Ints:
    """``a`` as an int64 array (the working type of this module)."""
    return np.asarray(a, dtype=np.int64)


def wrap(x: Ints, bits: int) -> Ints:
    """C++'s conversion of ``x`` to a signed ``bits``-bit integer (modulo 2^bits)."""
    half = 1 << (bits - 1)
    return ((ints(x) + half) & ((1 << bits) - 1)) - half


def saturate(x: Ints, bits: int) -> Ints:
    """``x`` clamped to the signed ``bits``-bit range."""
    half = 1 << (bits - 1)
    return np.clip(ints(x), -half, half - 1)


def _divide_toward_zero(n: Ints, d: int) -> Ints:
    """C++'s integer division ``n / d`` (d > 0): the quotient truncated toward zero."""
    return np.sign(n) * (np.abs(n) // d)


def saturating_rounding_doubling_high_mul(a: Ints, b: Ints, bits: int = 32) -> Ints:
    """gemmlowp's ``SaturatingRoundingDoublingHighMul`` (ARM's VQRDMULH): ``a * b / 2^(bits-1)``
    rounded to nearest, ties away from zero, with ``min * min`` saturated to ``max``."""
    a, b = ints(a), ints(b)
    low = -(1 << (bits - 1))
    overflow = (a == b) & (a == low)
    ab = a * b
    nudge = np.where(ab >= 0, 1 << (bits - 2), 1 - (1 << (bits - 2)))
    high = wrap(_divide_toward_zero(ab + nudge, 1 << (bits - 1)), bits)
    return np.where(overflow, (1 << (bits - 1)) - 1, high)


def rounding_divide_by_pot(x: Ints, exponent: int) -> Ints:
    """gemmlowp's ``RoundingDivideByPOT``: ``x / 2^exponent`` rounded to nearest, ties away from
    zero (an arithmetic shift plus one where the remainder is past half)."""
    x = ints(x)
    mask = (1 << exponent) - 1
    remainder = x & mask
    threshold = (mask >> 1) + (x < 0)
    return (x >> exponent) + (remainder > threshold)


def quantize_multiplier(real: float) -> tuple[int, int]:
    """TFLite's ``QuantizeMultiplier``: ``real`` as ``(multiplier, shift)``, ``real`` ≈
    ``multiplier / 2^31 * 2^shift`` with ``multiplier`` in [2^30, 2^31) (0 for 0), the
    mantissa rounded half away from zero (``TfLiteRound``)."""
    if real == 0.0:
        return 0, 0
    mantissa, shift = math.frexp(real)
    scaled = mantissa * (1 << 31)  # exact: a power-of-two scaling of a double
    fixed = int(math.copysign(math.floor(abs(scaled) + 0.5), scaled))
    if fixed == 1 << 31:
        fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return fixed, shift


def multiply_by_quantized_multiplier(x: Ints, multiplier: int, shift: int) -> Ints:
    """TFLite's ``MultiplyByQuantizedMultiplier`` (int32; the double-rounding form, the
    default where ``TFLITE_SINGLE_ROUNDING`` is not defined): a left shift for a positive
    ``shift``, the rounding doubling high product with ``multiplier``, then a rounding right
    shift for a negative one."""
    left, right = max(shift, 0), max(-shift, 0)
    high = saturating_rounding_doubling_high_mul(wrap(ints(x) * (1 << left), 32), multiplier)
    return rounding_divide_by_pot(high, right)


# ---- gemmlowp's FixedPoint<int16_t, m> ----------------------------------------------------

def _mul(a: Ints, b: Ints) -> Ints:
    """Qa x Qb -> Q(a+b): the raw values' rounding doubling high product."""
    return saturating_rounding_doubling_high_mul(a, b, 16)


def _add(a: Ints, b: Ints) -> Ints:
    return wrap(ints(a) + b, 16)


def _sub(a: Ints, b: Ints) -> Ints:
    return wrap(ints(a) - b, 16)


def _neg(a: Ints) -> Ints:
    return wrap(-ints(a), 16)


def _constant(raw32: int) -> Ints:
    """``GEMMLOWP_CHECKED_FIXEDPOINT_CONSTANT`` in 16 bits: the 32-bit raw value rounded by
    16 bits."""
    return rounding_divide_by_pot(ints(raw32), 16)


def _one(integer_bits: int) -> int:
    """``FixedPoint::One()``: the largest value for Q0.15, else 1."""
    return INT16_MAX if integer_bits == 0 else 1 << (15 - integer_bits)


def _rescale(x: Ints, source_bits: int, target_bits: int) -> Ints:
    """``Rescale<target>`` of a Q``source`` value: a saturating left shift or a rounding right
    shift of the raw value by the difference of integer bits."""
    exponent = source_bits - target_bits
    if exponent > 0:
        return saturate(ints(x) << exponent, 16)
    if exponent < 0:
        return rounding_divide_by_pot(x, -exponent)
    return ints(x)


def _rounding_half_sum(a: Ints, b: int) -> Ints:
    total = ints(a) + b
    return wrap(_divide_toward_zero(total + np.where(total >= 0, 1, -1), 2), 16)


def _exp_on_interval_between_negative_one_quarter_and_0_excl(a: Ints) -> Ints:
    """exp(a) for Q0.15 ``a`` in [-1/4, 0): a Taylor expansion around -1/8."""
    constant_term = _constant(1895147668)  # exp(-1/8)
    one_third = _constant(715827883)
    x = _add(a, 1 << 12)  # a + 1/8
    x2 = _mul(x, x)
    x3 = _mul(x2, x)
    x4 = _mul(x2, x2)
    x4_over_4 = rounding_divide_by_pot(x4, 2)
    x4_over_24_plus_x3_over_6_plus_x2_over_2 = rounding_divide_by_pot(
        _add(_mul(_add(x4_over_4, x3), one_third), x2), 1)
    return saturate(constant_term + _mul(constant_term,
                                         _add(x, x4_over_24_plus_x3_over_6_plus_x2_over_2)), 16)


# exp(-2^k) in Q0.31, for the barrel shifter of exp_on_negative_values
_EXP_OF_MINUS_POWERS = ((-2, 1672461947), (-1, 1302514674), (0, 790015084), (1, 290630308),
                        (2, 39332535), (3, 720401), (4, 242))


def exp_on_negative_values(a: Ints, integer_bits: int) -> Ints:
    """exp(a) in Q0.15 for Q``integer_bits`` ``a`` <= 0: the expansion on ``a`` mod 1/4, times
    exp(-2^k) for each bit k of the rest."""
    fractional = 15 - integer_bits
    one_quarter = 1 << (fractional - 2)
    a = ints(a)
    a_mod_quarter_minus_one_quarter = _sub(a & (one_quarter - 1), one_quarter)
    result = _exp_on_interval_between_negative_one_quarter_and_0_excl(
        _rescale(a_mod_quarter_minus_one_quarter, integer_bits, 0))
    remainder = _sub(a_mod_quarter_minus_one_quarter, a)
    for exponent, multiplier in _EXP_OF_MINUS_POWERS:
        if integer_bits > exponent:
            bit = remainder & (1 << (fractional + exponent))
            result = np.where(bit != 0, _mul(result, _constant(multiplier)), result)
    if integer_bits > 5:
        clamp = _constant(-(1 << (36 - integer_bits)))  # -32
        result = np.where(a < clamp, 0, result)
    return np.where(a == 0, _one(0), result)


def _newton_raphson_reciprocal(half_denominator: Ints) -> Ints:
    """1 / half_denominator in Q2.13, three Newton-Raphson steps from 48/17 - 32/17 d."""
    x = _add(_constant(1515870810), _mul(half_denominator, _constant(-1010580540)))
    for _ in range(3):
        one_minus_half_denominator_times_x = _sub(_one(2), _mul(half_denominator, x))
        x = _add(x, _rescale(_mul(x, one_minus_half_denominator_times_x), 4, 2))
    return x


def _one_over_one_plus_x_for_x_in_0_1(a: Ints) -> Ints:
    x = _newton_raphson_reciprocal(_rounding_half_sum(a, _one(0)))
    return _rescale(x, 1, 0)  # ExactMulByPot<-1>: Q2.13 read as Q1.14, then to Q0.15


def _one_minus_x_over_one_plus_x_for_x_in_0_1(a: Ints) -> Ints:
    x = _newton_raphson_reciprocal(_rounding_half_sum(a, _one(0)))
    return _rescale(_sub(x, _one(2)), 2, 0)


def logistic(a: Ints, integer_bits: int) -> Ints:
    """gemmlowp's ``logistic``: 1 / (1 + exp(-a)) in Q0.15 for Q``integer_bits`` ``a``."""
    a = ints(a)
    positive = a > 0
    abs_input = np.where(positive, a, _neg(a))
    result_if_positive = _one_over_one_plus_x_for_x_in_0_1(
        exp_on_negative_values(_neg(abs_input), integer_bits))
    result_if_negative = _sub(_one(0), result_if_positive)
    one_half = _constant(1 << 30)
    return np.where(a == 0, one_half,
                    np.where(positive, result_if_positive, result_if_negative))


def tanh(a: Ints, integer_bits: int) -> Ints:
    """gemmlowp's ``tanh``: tanh(a) in Q0.15 for Q``integer_bits`` ``a``, as
    (1 - exp(-2|a|)) / (1 + exp(-2|a|)) with the sign of ``a``."""
    a = ints(a)
    negative = a < 0
    n = np.where(negative, a, _neg(a))  # -|a|
    # exp(2n): the same raw value read with one more integer bit (ExactMulByPot<1>)
    t = _one_minus_x_over_one_plus_x_for_x_in_0_1(exp_on_negative_values(n, integer_bits + 1))
    return np.where(a == 0, 0, np.where(negative, _neg(t), t))

"""A NumPy stand-in for :class:`harness.reference.cuda_device.CupyDevice`: the kernels of
``harness/reference/fast_cuda_steps.cu`` transcribed line by line, vectorised over a step's
[B, H], and NumPy products. With it the fast path's drivers (buffers, directions, lengths,
layers, the backward's bookkeeping) run on CPU and are checked against the reference; the CUDA
kernels themselves are checked on a GPU (``tests/reference/test_fast_cuda.py``, marker ``gpu``)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import numpy as np


def sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


class _Stream:
    def record(self) -> None:
        return None

    def wait_event(self, event: None) -> None:
        pass


def _split(a: np.ndarray, t: int, n: int) -> list[np.ndarray]:
    """Step t's [B, H] blocks of a [T, B, n*H] buffer (views: writes reach the buffer)."""
    H = a.shape[-1] // n
    return [a[t, :, k * H:(k + 1) * H] for k in range(n)]


class NumpyDevice:
    xp = np

    def stream(self, k: int) -> _Stream:
        return _Stream()

    def current_stream(self) -> _Stream:
        return _Stream()

    def on(self, stream: _Stream) -> contextlib.AbstractContextManager:
        return contextlib.nullcontext()

    def after(self, stream: _Stream, other: _Stream) -> None:
        pass

    def gemm(self, a: np.ndarray, b: np.ndarray, out: np.ndarray, beta: float = 0.0) -> None:
        assert a.flags.c_contiguous and b.flags.c_contiguous and out.flags.c_contiguous
        assert beta in (0.0, 1.0)
        out[...] = (out + a @ b) if beta else a @ b

    def capture(self, stream: _Stream, steps: Callable[[], None]) -> Callable[[], None]:
        return steps

    def step(self, name: str, B: int, H: int, *args: object) -> None:
        getattr(self, name)(*args)

    # the kernels, in the .cu file's order and words ----------------------------------------

    @staticmethod
    def lstm_step(gates, c_states, h_states, y, lengths, t, B, H):
        a_i, a_f, a_g, a_o = _split(gates, t, 4)
        i, f, g, o = sigmoid(a_i), sigmoid(a_f), np.tanh(a_g), sigmoid(a_o)
        c_prev = c_states[t]
        c = f * c_prev + i * g
        h = o * np.tanh(c)
        valid = (t < lengths)[:, None]
        c_states[t + 1] = np.where(valid, c, c_prev)
        h_states[t + 1] = np.where(valid, h, h_states[t])
        y[t] = np.where(valid, h, 0.0)
        a_i[...], a_f[...], a_g[...], a_o[...] = i, f, g, o

    @staticmethod
    def lstm_step_backward(gates, c_states, dy, dh, dc, dA, lengths, t, B, H):
        valid = (t < lengths)[:, None]
        i, f, g, o = _split(gates, t, 4)
        c_prev = c_states[t]
        tanh_c = np.tanh(c_states[t + 1])
        dh_t = dh + dy[t]
        d_o = dh_t * tanh_c
        da_o = d_o * (o * (1.0 - o))
        dc_new = dc + (dh_t * o) * (1.0 - tanh_c * tanh_c)
        da_i = (dc_new * g) * (i * (1.0 - i))
        da_f = (dc_new * c_prev) * (f * (1.0 - f))
        da_g = (dc_new * i) * (1.0 - g * g)
        dc[...] = np.where(valid, dc_new * f, dc)
        dh[...] = np.where(valid, 0.0, dh)
        for block, value in zip(_split(dA, t, 4), (da_i, da_f, da_g, da_o), strict=True):
            block[...] = np.where(valid, value, 0.0)

    @staticmethod
    def gru_step_after(gates, rec, bR, u, h_states, y, lengths, t, B, H):
        a_r, a_z, a_n = _split(gates, t, 3)
        Rh_r, Rh_z, Rh_n = (rec[:, k * H:(k + 1) * H] for k in range(3))
        b_r, b_z, b_n = (bR[k * H:(k + 1) * H] for k in range(3))
        r = sigmoid(a_r + (Rh_r + b_r))
        z = sigmoid(a_z + (Rh_z + b_z))
        u_t = Rh_n + b_n
        n = np.tanh(a_n + r * u_t)
        h_prev = h_states[t]
        h = (1.0 - z) * n + z * h_prev
        valid = (t < lengths)[:, None]
        h_states[t + 1] = np.where(valid, h, h_prev)
        y[t] = np.where(valid, h, 0.0)
        u[t] = u_t
        a_r[...], a_z[...], a_n[...] = r, z, n

    @staticmethod
    def gru_step_before_rz(gates, rec, bR, u, h_states, t, B, H):
        a_r, a_z, _ = _split(gates, t, 3)
        r = sigmoid(a_r + (rec[:, :H] + bR[:H]))
        z = sigmoid(a_z + (rec[:, H:2 * H] + bR[H:2 * H]))
        u[t] = r * h_states[t]
        a_r[...], a_z[...] = r, z

    @staticmethod
    def gru_step_before_n(gates, rec_n, bR, h_states, y, lengths, t, B, H):
        _, z, a_n = _split(gates, t, 3)
        n = np.tanh(a_n + (rec_n + bR[2 * H:]))
        h_prev = h_states[t]
        h = (1.0 - z) * n + z * h_prev
        valid = (t < lengths)[:, None]
        h_states[t + 1] = np.where(valid, h, h_prev)
        y[t] = np.where(valid, h, 0.0)
        a_n[...] = n

    @staticmethod
    def gru_step_backward_after(gates, u, h_states, dy, dh, dA, d_rec, lengths, t, B, H):
        valid = (t < lengths)[:, None]
        r, z, n = _split(gates, t, 3)
        h_prev = h_states[t]
        dh_t = dh + dy[t]
        dn = dh_t * (1.0 - z)
        dz = dh_t * (h_prev - n)
        da_n = dn * (1.0 - n * n)
        da_z = dz * (z * (1.0 - z))
        dr = da_n * u[t]
        dn_rec = da_n * r
        da_r = dr * (r * (1.0 - r))
        dh[...] = np.where(valid, dh_t * z, dh)
        for block, value in zip(_split(dA, t, 3), (da_r, da_z, da_n), strict=True):
            block[...] = np.where(valid, value, 0.0)
        for block, value in zip(_split(d_rec, t, 3), (da_r, da_z, dn_rec), strict=True):
            block[...] = np.where(valid, value, 0.0)

    @staticmethod
    def gru_step_backward_before_zn(gates, h_states, dy, dh, dA, da_n_t, lengths, t, B, H):
        valid = (t < lengths)[:, None]
        _, z, n = _split(gates, t, 3)
        h_prev = h_states[t]
        dh_t = dh + dy[t]
        dn = dh_t * (1.0 - z)
        dz = dh_t * (h_prev - n)
        da_n = dn * (1.0 - n * n)
        da_z = dz * (z * (1.0 - z))
        dh[...] = np.where(valid, dh_t * z, dh)
        _, dA_z, dA_n = _split(dA, t, 3)
        dA_z[...] = np.where(valid, da_z, 0.0)
        dA_n[...] = np.where(valid, da_n, 0.0)
        da_n_t[...] = np.where(valid, da_n, 0.0)

    @staticmethod
    def gru_step_backward_before_r(gates, h_states, du, dh, dA, d_rz, lengths, t, B, H):
        valid = (t < lengths)[:, None]
        r = _split(gates, t, 3)[0]
        dr = du * h_states[t]
        dh[...] = np.where(valid, dh + du * r, dh)
        da_r = dr * (r * (1.0 - r))
        dA_r, dA_z, _ = _split(dA, t, 3)
        dA_r[...] = np.where(valid, da_r, 0.0)
        d_rz[:, :H] = dA_r
        d_rz[:, H:] = np.where(valid, dA_z, 0.0)

"""A bias half the file lacks, fitted to the expected outputs (Levenberg-Marquardt on the
float64 reference): the one mistake no transformation of the file can undo."""

from __future__ import annotations

import numpy as np

from harness.doctor.findings import Finding
from harness.mistakes.budget import Budget
from harness.mistakes.mistake import Trial
from harness.mistakes.scoring import Scorer
from harness.mistakes.value_families import missing_bias_half
from harness.params import key, layer_dirs


def fit_missing_bias(doctor: Scorer, budget_s: float = 20.0) -> Finding | None:
    """The bias half a file may lack (:func:`~harness.mistakes.value_families.missing_bias_half`),
    fitted to the expected outputs by Levenberg-Marquardt on the float64 reference
    (forward-difference Jacobian): a Finding when the claimed weights plus the fitted half
    reproduce the outputs.

    Only tried where the outputs hold at least twice as many values as the half has (else any
    outputs could be fitted) and no state mixes time and batch (time-major / swapped states are
    data mistakes the catalogue tries)."""
    case = doctor.case
    keys = [key(la, d, f"bR_{g}") for la, d in layer_dirs(case) for g in case.gates]
    if case.cell_kind.separate_biases(case.reset_after):
        keys += [key(la, d, "bW_n") for la, d in layer_dirs(case)]
    H = case.hidden_size
    n = len(keys) * H
    names = [k for k in doctor.expected if k in ("y", "h_n", "c_n")]
    m = sum(doctor.expected[k].size for k in names)
    if m < 2 * n:
        return None
    doctor.budget.restart(budget_s)

    def run(theta: np.ndarray) -> dict[str, np.ndarray]:
        c = dict(doctor.claimed)
        for i, k in enumerate(keys):
            c[k] = doctor.claimed[k] + theta[i * H:(i + 1) * H]
        doctor.budget.count()
        return doctor.outputs(Trial(doctor.native, c, case))

    def resid(theta: np.ndarray) -> np.ndarray:
        out = run(theta)
        return np.concatenate([(out[k] - doctor.expected[k]).ravel() for k in names])

    theta = least_squares(resid, n, doctor.budget)
    score = doctor.score(run(theta))
    if not score.ok:
        return None
    theta, score = _keep_what_the_file_has(theta, score, len(keys), H, doctor, run)
    delta = {k: theta[i * H:(i + 1) * H] for i, k in enumerate(keys)
             if theta[i * H:(i + 1) * H].any()}
    return Finding((missing_bias_half(case, delta),), score)


def _keep_what_the_file_has(theta: np.ndarray, score, blocks: int, H: int, doctor: Scorer, run):
    """``theta`` with each block's fitted change dropped where the outputs do not need it,
    smallest first: the fit moves every block it may (GRU reset-after's ``bW_n`` with the
    ``bR`` blocks) by at least its rounding noise, and a block the file holds right would
    otherwise read as changed, in the corrected weights and in the mapping."""
    order = sorted(range(blocks), key=lambda i: float(np.abs(theta[i * H:(i + 1) * H]).max()))
    for i in order:
        trial = theta.copy()
        trial[i * H:(i + 1) * H] = 0.0
        s = doctor.score(run(trial))
        if s.ok:
            theta, score = trial, s
    return theta, score


def least_squares(resid, n: int, budget: Budget, iterations: int = 60) -> np.ndarray:
    """The ``n`` parameters that minimise ``resid``'s sum of squares from zero, by
    Levenberg-Marquardt with a forward-difference Jacobian, within ``budget``'s time."""
    theta, r, lam = np.zeros(n), resid(np.zeros(n)), 1e-3
    for _ in range(iterations):
        if budget.expired():
            break
        eps = 1e-6
        J = np.empty((r.size, n))
        for j in range(n):
            t = theta.copy()
            t[j] += eps
            J[:, j] = (resid(t) - r) / eps
        A, g = J.T @ J, J.T @ r
        improved = False
        while lam < 1e10:
            step = np.linalg.solve(A + lam * (np.diag(np.diag(A)) + 1e-12 * np.eye(n)), -g)
            r2 = resid(theta + step)
            if r2 @ r2 < r @ r:
                theta, r, lam, improved = theta + step, r2, lam / 3, True
                break
            lam *= 4
        if not improved or np.abs(step).max() < 1e-12 or np.abs(r).max() < 1e-12:
            break
    return theta

"""``--save-outputs``: each adapter's outputs as outputs/<case>/<adapter>.npz, and the model
files an adapter made and ran (``Outputs.models``) as outputs/<case>/<adapter>.<suffix>."""

from __future__ import annotations

from pathlib import Path

from harness.npz import save_npz


def save_outputs(result, folder: Path) -> None:
    for p in result.pairs:
        if p.outputs is not None:
            save_npz(folder / p.case / f"{p.adapter}.npz", p.outputs.saved())
            for suffix, data in p.outputs.models.items():
                (folder / p.case / f"{p.adapter}.{suffix}").write_bytes(data)

"""``--save-outputs``: each adapter's outputs as outputs/<case>/<adapter>.npz, and the model
files an adapter made and ran (``Outputs.models``) as outputs/<case>/<adapter>.<suffix>."""

from __future__ import annotations

from pathlib import Path

from harness import safe_files
from harness.npz import save_npz


def save_outputs(result, folder: Path) -> None:
    for p in result.pairs:
        if p.outputs is not None:
            save_npz(folder / p.case / f"{p.adapter}.npz", p.outputs.saved(), folder)
            for suffix, data in p.outputs.models.items():
                safe_files.write_bytes(folder / p.case / f"{p.adapter}.{suffix}", data, folder)

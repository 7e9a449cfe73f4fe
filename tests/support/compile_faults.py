"""``torch-compile`` with the mechanisms of two cited Inductor bugs planted in what its backend
makes of the captured graph, for tests/adapters/test_adapter_torch_compile.py.

Inductor's C++ code generation (tens of seconds a compile on 2 cores) is left out: the captured
graph runs as is (as the test file's ``DynamoOnly``), then the planted fault acts on it. They
live in a module of their own because ``--isolate`` pickles an adapter by reference to its
class and a spawned worker imports it by module name.
"""

from __future__ import annotations

import os

import numpy as np

from harness.adapters.torch_compile import TorchCompile

# pytorch#175830: compiled with shape padding, nn.LSTM's outputs were 2.4e-4 off eager's in
# relative L2 (float32, CUDA)
PADDING_REL_L2 = 2.4e-4


class CompiledOffByPadding(TorchCompile):
    """pytorch#175830's outcome: every output the compiled graph returns off the captured
    graph's by a relative L2 of :data:`PADDING_REL_L2` (a fixed-seed perturbation, as a padded
    GEMM's other summation order leaves)."""

    name = "torch-compile-padded"

    def compile_graph(self, gm, example_inputs):
        import torch

        def run(*args):
            outs = gm.forward(*args)
            rng = np.random.default_rng(0)
            off = []
            for t in outs:
                noise = torch.from_numpy(rng.standard_normal(tuple(t.shape))).to(t.dtype)
                off.append(t + noise * (PADDING_REL_L2 * t.norm() / noise.norm()))
            return type(outs)(off) if isinstance(outs, (tuple, list)) else off[0]

        return run


class CompiledAborts(TorchCompile):
    """pytorch#181690's outcome: the compiled code corrupts the heap and glibc aborts the
    process (SIGABRT) at the first call."""

    name = "torch-compile-aborts"

    def compile_graph(self, gm, example_inputs):
        def run(*args):
            os.abort()

        return run

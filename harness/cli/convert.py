"""``rnn-harness convert``: native weights from one layout to another."""

from __future__ import annotations

import argparse

from harness.cli.checks import check_layout
from harness.errors import printable


def add_parser(commands: argparse._SubParsersAction, epilog: str) -> argparse.ArgumentParser:
    cv = commands.add_parser("convert", help="convert native weights between layouts")
    cv.add_argument("--case", help="the case file (sizes and semantics); default: read from IN "
                    "where it holds them (.pt, .onnx, .h5, .keras, .msgpack)")
    cv.add_argument("--from", dest="src", metavar="LAYOUT",
                    help="layout of IN (default: the file's own, or the one layout an .npz's "
                    "tensors fit)")
    cv.add_argument("--to", dest="dst", metavar="LAYOUT",
                    help="layout of an .npz OUT (default: IN's layout; a .pt, .onnx, "
                    ".weights.h5 or .msgpack OUT is the framework's own)")
    cv.add_argument("input", metavar="IN", help="weights: .npz, or a PyTorch .pt/.pth state_dict, "
                    "a Keras .h5/.keras model, an ONNX model, flax .msgpack parameters")
    cv.add_argument("output", metavar="OUT", help="the converted weights: .pt (state_dict for "
                    "torch.nn.LSTM/GRU.load_state_dict), .onnx (a model of the LSTM/GRU "
                    "nodes), .weights.h5 (Keras 3 model.load_weights), .msgpack "
                    "(flax.serialization.from_bytes) or .npz (native tensors)")
    cv.add_argument("--name", help="the case to use when the file expands to several")
    cv.add_argument("--select", help="which module (torch prefix), layers (Keras names) or "
                    "nodes (ONNX names) of IN to read")
    return cv


def handle(args: argparse.Namespace) -> int:
    from harness.convert import convert_file

    check_layout(args.src, "--from")
    check_layout(args.dst, "--to")
    for line in convert_file(args.case, args.src, args.dst, args.input, args.output,
                             name=args.name, select=args.select):
        print(printable(line))  # file names and the names read from the file
    return 0

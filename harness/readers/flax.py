"""flax parameter files (``.msgpack``, layouts ``flax``, ``flax-nnx``):
``flax.serialization.to_bytes`` of a parameter tree, decoded here with ``msgpack.unpackb`` under
limits and flax's array encoding read by :func:`read_flax_msgpack` itself (no flax import;
``flax.serialization.msgpack_restore`` has no size, entry or dtype limits).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from harness.cells import CELLS, cell_with_gates
from harness.errors import WeightsError
from harness.readers.limits import check_size
from harness.spec import Case

SUFFIXES = (".msgpack",)
LAYOUTS = ("flax", "flax-nnx")


def read(path: Path, layout: str, case: Case, *, select: str | None, max_bytes: int | None
         ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The tree's arrays (:func:`read_flax_msgpack`); a layout other than flax's is refused."""
    if layout not in LAYOUTS:
        raise WeightsError(f"a flax .msgpack file holds `flax` or `flax-nnx` tensors, not "
                           f"{layout!r}; use --from flax", file=path)
    return read_flax_msgpack(path, max_bytes=max_bytes)


# flax.serialization's msgpack extension codes (flax/serialization.py _MsgpackExtType)
_EXT_NDARRAY, _EXT_COMPLEX, _EXT_NPSCALAR = 1, 2, 3
# what a flax parameter file may hold: float arrays only (bfloat16 comes back as float32, exact)
_FLAX_DTYPES = {"float16": np.float16, "float32": np.float32, "float64": np.float64,
                "bfloat16": None}
_FLAX_MAX_DEPTH = 16  # layer/direction/gate/kind under a few module levels
_FLAX_MAX_ENTRIES = 100_000  # map keys and arrays in all
# msgpack objects (maps, keys, values) before anything is unpacked: an entry is a key and a
# value, so 100000 entries are ~200000 objects; each costs Python up to ~256 bytes however few
# it takes in the file (an empty map is 1 byte there, a 64-byte dict and a pair here)
_FLAX_MAX_OBJECTS = 2 * _FLAX_MAX_ENTRIES + 1000
_BYTES_PER_OBJECT = 256


def _flax_array(data: bytes, path: Path) -> np.ndarray:
    """One ``_ndarray_to_bytes`` payload: msgpack (shape, dtype name, C-order bytes), the dtype
    checked against :data:`_FLAX_DTYPES` and the bytes against the shape before any view."""
    import msgpack

    try:
        shape, name, buffer = msgpack.unpackb(data, raw=True, max_array_len=64,
                                              max_map_len=0, max_str_len=64)
    except Exception as exc:
        raise WeightsError(f"a malformed array entry ({type(exc).__name__})", file=path) from None
    name = name.decode("ascii", "replace") if isinstance(name, bytes) else str(name)
    if name not in _FLAX_DTYPES:
        raise WeightsError(f"an array of dtype {name!r}: only "
                           f"{', '.join(_FLAX_DTYPES)} are read", file=path)
    if (not isinstance(shape, list | tuple) or len(shape) > 8
            or not all(isinstance(n, int) and 0 <= n < 2**40 for n in shape)
            or not isinstance(buffer, bytes)):
        raise WeightsError("a malformed array entry (shape or data)", file=path)
    if name == "bfloat16":
        words = np.frombuffer(buffer, dtype="<u2") if len(buffer) % 2 == 0 else None
        if words is None or words.size != int(np.prod(shape, dtype=np.int64)):
            raise WeightsError(f"an array of shape {list(shape)} with {len(buffer)} bytes",
                               file=path)
        # bfloat16 is the top half of a float32: widen exactly
        return (words.astype("<u4") << 16).view("<f4").reshape(shape)
    dtype = np.dtype(_FLAX_DTYPES[name])
    if len(buffer) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
        raise WeightsError(f"an array of shape {list(shape)} and dtype {name} with "
                           f"{len(buffer)} bytes", file=path)
    return np.frombuffer(buffer, dtype=dtype).reshape(shape).copy()


def read_flax_msgpack(path: Path, *, max_bytes: int | None = None
                      ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The float arrays of a ``flax.serialization.to_bytes`` file, flattened to ``a/b/c`` names.

    A leading ``params`` collection and ``cell`` levels (nn.RNN's) are dropped, so the tree of a
    harness file (``layer0/forward/ii/kernel``) and a model's ``{"params": ...}`` read alike; a
    bare cell tree (``ii/kernel``, ...) is read as ``layer0/forward``. flax's chunked arrays
    (``__msgpack_chunked_array__``) are joined. Anything but maps, float arrays and the chunk
    bookkeeping is refused, as are trees deeper than 16 levels or with more than 100000
    entries, counted in the encoded bytes before msgpack builds anything (:func:`_scan`), and
    a map with a key twice or two names that read as one."""
    check_size(path, path.stat().st_size, max_bytes, "is")
    data = path.read_bytes()
    check_size(path, len(data), max_bytes, "is")
    # msgpack builds every object before a hook could look: count them first, in the bytes
    room = _FLAX_MAX_OBJECTS if max_bytes is None else max(
        0, min(_FLAX_MAX_OBJECTS, (max_bytes - len(data)) // _BYTES_PER_OBJECT))
    _scan(data, path, room)
    return _short_names(_flatten(_unpack(data, path), path), path)


def _unpack(data: bytes, path: Path) -> dict:
    """The tree msgpack decodes (its size counted by :func:`_scan` already): maps whose keys
    are unique, arrays decoded by :func:`_flax_array`, no other extension."""
    import msgpack

    def ext(code: int, payload: bytes) -> object:
        if code == _EXT_NDARRAY:
            return _flax_array(payload, path)
        kind = {_EXT_COMPLEX: "a complex number", _EXT_NPSCALAR: "a scalar"}.get(code, "unknown")
        raise WeightsError(f"a msgpack extension of type {code} ({kind}): only arrays are "
                           "read", file=path)

    def pairs(items: list[tuple[object, object]]) -> dict:
        tree = dict(items)
        if len(tree) != len(items):  # msgpack's own dict would keep the last quietly
            seen: set = set()
            twice = next(k for k, _ in items if k in seen or seen.add(k))
            raise WeightsError(f"a map holds the key {str(twice)[:40]!r} twice: which value "
                               "counts is ambiguous, refused", file=path)
        return tree

    try:
        tree = msgpack.unpackb(data, raw=False, ext_hook=ext, strict_map_key=True,
                               object_pairs_hook=pairs, max_map_len=_FLAX_MAX_ENTRIES,
                               max_array_len=_FLAX_MAX_ENTRIES, max_str_len=_MAX_STR,
                               max_bin_len=len(data), max_ext_len=len(data))
    except WeightsError:
        raise
    except Exception as exc:
        raise WeightsError(f"not a flax .msgpack file ({type(exc).__name__}: "
                           f"{(str(exc).splitlines() or [''])[0][:200]})", file=path) from None
    if not isinstance(tree, dict):
        raise WeightsError(f"expected a map of parameters at the top, got {type(tree).__name__}",
                           file=path)
    return tree


def _flatten(tree: dict, path: Path) -> dict[str, np.ndarray]:
    """The tree's arrays by ``a/b/c`` name, chunked arrays joined; a tree too deep or too
    large, a key that is not a plain name or a leaf that is not an array is refused."""
    flat: dict[str, np.ndarray] = {}
    stack: list[tuple[str, object, int]] = [("", tree, 0)]
    entries = 0
    while stack:
        where, node, depth = stack.pop()
        entries += 1
        if depth > _FLAX_MAX_DEPTH or entries > _FLAX_MAX_ENTRIES:
            raise WeightsError(f"a tree deeper than {_FLAX_MAX_DEPTH} levels or with more than "
                               f"{_FLAX_MAX_ENTRIES} entries: refused", file=path)
        if isinstance(node, dict) and node.get("__msgpack_chunked_array__") is True:
            node = _flax_unchunk(node, path, where)
        if isinstance(node, np.ndarray):
            flat[where] = node
        elif isinstance(node, dict):
            for k, v in node.items():
                if not isinstance(k, str) or not k or "/" in k:
                    raise WeightsError(f"a key {str(k)[:40]!r} that is not a plain name",
                                       file=path, field=where or None)
                stack.append((f"{where}/{k}" if where else k, v, depth + 1))
        else:
            raise WeightsError(f"holds a {type(node).__name__}, not an array or a map",
                               file=path, field=where or None)
    return flat


def _short_names(flat: dict[str, np.ndarray], path: Path
                 ) -> tuple[dict[str, np.ndarray], list[str]]:
    """The arrays named as the layouts name them: a leading ``params`` collection and ``cell``
    levels dropped (two names that then read as one are refused), a bare cell's tree read as
    ``layer0/forward``; and the notes saying so."""
    notes = []
    names: dict[str, np.ndarray] = {}
    origin: dict[str, str] = {}
    for name, arr in flat.items():
        parts = name.split("/")
        if parts[0] == "params" and all(n.startswith("params/") for n in flat):
            parts = parts[1:]
        parts = [p for p in parts if p != "cell"]
        short = "/".join(parts)
        if short in origin:
            raise WeightsError(f"the arrays {origin[short]!r} and {name!r} both read as "
                               f"{short!r} (a `params` collection and `cell` levels are "
                               "dropped): ambiguous, refused", file=path)
        names[short], origin[short] = arr, name
    if names and not any(n.startswith("layer") for n in names):
        names = {f"layer0/forward/{n}": a for n, a in names.items()}
        notes.append("a single cell's tree: read as layer0/forward")
    notes.append(f"read {len(names)} arrays")
    return names, notes


_MAX_STR = 1000  # a key


def _scan(data: bytes, path: Path, max_objects: int) -> None:
    """Walk the msgpack encoding of ``data`` without building anything: refuse more than
    ``max_objects`` objects, nesting past the tree's depth, a string over 1000 bytes, a length
    past the end, or bytes after the top object. What msgpack then builds is bounded by the
    count (and the payloads by the file's size)."""
    def refuse(why: str) -> WeightsError:
        return WeightsError(f"not a flax .msgpack file ({why})", file=path)

    end, pos, objects = len(data), 0, 0
    left = [1]  # objects still to read in each open container, the top object's first
    while left:
        if left[-1] == 0:
            left.pop()
            continue
        left[-1] -= 1
        objects += 1
        if objects > max_objects:
            raise WeightsError(f"holds more than {max_objects} msgpack objects (maps, keys, "
                               "values), more than the memory limit allows (~"
                               f"{_BYTES_PER_OBJECT} bytes each once unpacked) or the "
                               f"{_FLAX_MAX_ENTRIES} entries read: refused before unpacking",
                               file=path)
        if pos >= end:
            raise refuse(f"it ends inside an object, at byte {pos}")
        b = data[pos]
        pos += 1
        children = size = 0
        if b <= 0x7F or b >= 0xE0 or b in (0xC0, 0xC2, 0xC3):  # fixint, nil, bools
            pass
        elif b <= 0x8F:
            children = 2 * (b & 0x0F)
        elif b <= 0x9F:
            children = b & 0x0F
        elif b <= 0xBF:
            size = b & 0x1F
        elif b in _FIXED:
            size = _FIXED[b]
        elif b in _SIZED:  # str, bin, ext: a length of 1, 2 or 4 bytes, then an ext's type
            width, extra, is_str = _SIZED[b]
            if pos + width > end:
                raise refuse(f"it ends inside an object, at byte {pos}")
            size = int.from_bytes(data[pos:pos + width], "big") + extra
            if is_str and size > _MAX_STR:
                raise refuse(f"a string of {size} bytes, more than {_MAX_STR}")
            pos += width
        elif b in _CONTAINERS:  # array16/32, map16/32
            width, per = _CONTAINERS[b]
            if pos + width > end:
                raise refuse(f"it ends inside an object, at byte {pos}")
            children = per * int.from_bytes(data[pos:pos + width], "big")
            pos += width
        else:  # 0xc1: never used
            raise refuse(f"byte {b:#x} at {pos - 1} starts no msgpack object")
        pos += size
        if pos > end:
            raise refuse("a length past the end of the file")
        if children:
            if len(left) > _FLAX_MAX_DEPTH + 1:
                raise WeightsError(f"a tree deeper than {_FLAX_MAX_DEPTH} levels: refused",
                                   file=path)
            left.append(children)
    if pos != end:
        raise refuse(f"{end - pos} bytes after the top map")


# msgpack's type bytes: payloads of a fixed size (floats, ints, fixext: type byte and data)
_FIXED = {0xCA: 4, 0xCB: 8, 0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8, 0xD0: 1, 0xD1: 2, 0xD2: 4,
          0xD3: 8, 0xD4: 2, 0xD5: 3, 0xD6: 5, 0xD7: 9, 0xD8: 17}
# (bytes of the length, bytes after it besides the payload, a string) of bin, ext and str
_SIZED = {0xC4: (1, 0, False), 0xC5: (2, 0, False), 0xC6: (4, 0, False),
          0xC7: (1, 1, False), 0xC8: (2, 1, False), 0xC9: (4, 1, False),
          0xD9: (1, 0, True), 0xDA: (2, 0, True), 0xDB: (4, 0, True)}
# (bytes of the count, objects per count) of array16/32 and map16/32
_CONTAINERS = {0xDC: (2, 1), 0xDD: (4, 1), 0xDE: (2, 2), 0xDF: (4, 2)}


def _flax_unchunk(node: dict, path: Path, where: str) -> np.ndarray:
    """flax's chunked array: ``shape`` and ``chunks`` as {"0": ..., "1": ...} maps."""
    try:
        shape = [node["shape"][str(i)] for i in range(len(node["shape"]))]
        chunks = [node["chunks"][str(i)] for i in range(len(node["chunks"]))]
        if not all(isinstance(c, np.ndarray) and c.ndim == 1 for c in chunks) or not all(
                isinstance(n, int) and n >= 0 for n in shape):
            raise ValueError
        flat = np.concatenate(chunks) if chunks else np.zeros(0)
        return flat.reshape(shape)
    except (KeyError, TypeError, ValueError):
        raise WeightsError("a malformed chunked array", file=path, field=where or None) from None



def infer(path: Path, select: str | None, max_bytes: int | None) -> tuple[dict, str, list[str]]:
    """Sizes from a flax tree: the cell from its gate names (``ii``: LSTM, ``ir``: GRU, flax's
    only GRU being reset-after; ``dense_i``: the nnx tree, 4H or 3H columns), ``H`` from a
    recurrent kernel [H, .], the input size from layer 0's input kernel, layers and directions
    from the names."""
    native, notes = read_flax_msgpack(path, max_bytes=max_bytes)

    def get(name: str) -> np.ndarray:
        t = native.get(f"layer0/forward/{name}")
        if t is None or t.ndim != 2 or 0 in t.shape:
            raise WeightsError(f"no matrix layer0/forward/{name}: cannot tell the sizes",
                               file=path)
        return t

    names = {n.split("/")[2] for n in native if n.count("/") == 3}
    if "dense_i" in names:
        layout, H = "flax-nnx", get("dense_h/kernel").shape[0]
        gates = get("dense_i/kernel").shape[1] // H
        kind = cell_with_gates(gates)
        cell = kind.name if kind else None
        I = get("dense_i/kernel").shape[0]
    else:
        layout = "flax"
        # linen names each gate's dense layers i<gate> and h<gate>: the first gate tells
        kind = next((c for c in CELLS.values() if f"i{c.gates[0]}" in names), None)
        cell = kind.name if kind else None
        H = get(f"h{kind.gates[0]}/kernel").shape[0] if kind else 0
        I = get(f"i{kind.gates[0]}/kernel").shape[0] if kind else 0
    if cell is None:
        raise WeightsError("neither an LSTM (ii, hi, ...) nor a GRU (ir, hr, ...) tree",
                           file=path)
    layers = 1 + max(int(m.group(1)) for m in map(re.compile(r"layer(\d+)/").match, native)
                     if m)
    fields = {"cell": cell, "input_size": int(I), "hidden_size": int(H), "num_layers": layers,
              "bidirectional": any("/backward/" in n for n in native)}
    return fields, layout, notes


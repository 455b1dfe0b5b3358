"""Reads parameter files in worker/runtime/param_io.h's format (dapple-reference's outputs and
dapple-worker --dump-dir files): repeated {u32 name length, name bytes, u64 element count,
float32 values}, little-endian. Standard library only."""
import array
import struct
import sys


def load_params(path):
    """{name: array('f') of the values}, in file order. Raises ValueError naming the path for a
    truncated file."""
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    off = 0
    while off < len(data):
        if off + 4 > len(data):
            raise ValueError("%s: truncated name length at byte %d" % (path, off))
        (n,) = struct.unpack_from("<I", data, off)
        off += 4
        name = data[off:off + n].decode()
        off += n
        if off + 8 > len(data):
            raise ValueError("%s: truncated header of %s" % (path, name))
        (count,) = struct.unpack_from("<Q", data, off)
        off += 8
        if off + 4 * count > len(data):
            raise ValueError("%s: truncated values of %s" % (path, name))
        values = array.array("f")
        values.frombytes(data[off:off + 4 * count])
        if sys.byteorder != "little":
            values.byteswap()
        out[name] = values
        off += 4 * count
    return out

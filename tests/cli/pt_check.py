#!/usr/bin/env python3
"""Checks SGLang rotation files written by `oscar-bundle export --format sglang` against their
bundle, with Python's standard library only (no torch): an independent reader of the zip and
pickle layers.

  pt_check.py BUNDLE.safetensors K.pt V.pt [--version 1|2]

Checks: zip CRCs and 64-byte aligned records; the pickle uses only opcodes and globals that
torch.load(weights_only=True) accepts; the dicts have the layout SGLang's loader reads (format_version,
objective, source_grouping, every layer keyed by its int id with layer_id, float32 rotation [d, d] or
[H, d, d], ascending eigenvalues); every value equals the bundle's bit for bit.
"""
import argparse
import collections
import json
import pickle
import pickletools
import struct
import sys
import zipfile

# What torch's weights_only unpickler implements (torch/_weights_only_unpickler.py), protocol 2.
WEIGHTS_ONLY_OPCODES = {
    "PROTO", "STOP", "MARK", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "TUPLE", "TUPLE1", "TUPLE2",
    "TUPLE3", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "BININT", "BININT1", "BININT2", "LONG1",
    "BINFLOAT", "BINUNICODE", "SHORT_BINSTRING", "NONE", "NEWTRUE", "NEWFALSE", "BINPUT",
    "LONG_BINPUT", "BINGET", "LONG_BINGET", "GLOBAL", "REDUCE", "BUILD", "BINPERSID", "NEWOBJ",
    "EMPTY_SET",
}
ALLOWED_GLOBALS = {"torch._utils _rebuild_tensor_v2", "torch FloatStorage", "collections OrderedDict"}


class Tensor:
    def __init__(self, values, shape, dtype):
        self.values, self.shape, self.dtype = values, tuple(shape), dtype


class StorageType:
    def __init__(self, name):
        self.name = name


def read_pt(path):
    z = zipfile.ZipFile(path)
    assert z.testzip() is None, f"{path}: CRC error"
    names = z.namelist()
    pkl = [n for n in names if n.endswith("/data.pkl")]
    assert len(pkl) == 1, names
    prefix = pkl[0][: -len("data.pkl")]
    assert z.read(prefix + "version").strip() == b"3"
    assert z.read(prefix + "byteorder") == b"little"
    raw = open(path, "rb").read()
    for info in z.infolist():
        name_len, extra_len = struct.unpack("<HH", raw[info.header_offset + 26: info.header_offset + 30])
        start = info.header_offset + 30 + name_len + extra_len
        assert info.compress_type == zipfile.ZIP_STORED, info.filename
        assert start % 64 == 0, f"{info.filename} data at {start} is not 64-byte aligned"
    data = z.read(pkl[0])
    for opcode, arg, _ in pickletools.genops(data):
        assert opcode.name in WEIGHTS_ONLY_OPCODES, f"opcode {opcode.name} not weights_only-safe"
        if opcode.name == "GLOBAL":
            assert arg in ALLOWED_GLOBALS, f"global {arg} not allowed"

    class Unpickler(pickle.Unpickler):
        def find_class(self, module, name):
            if (module, name) == ("collections", "OrderedDict"):
                return collections.OrderedDict
            if (module, name) == ("torch", "FloatStorage"):
                return StorageType("float32")
            if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
                return rebuild
            raise pickle.UnpicklingError(f"global {module}.{name}")

        def persistent_load(self, pid):
            kind, storage_type, key, location, numel = pid
            assert kind == "storage" and location == "cpu" and storage_type.name == "float32"
            blob = z.read(prefix + "data/" + key)
            assert len(blob) == 4 * numel
            return list(struct.unpack(f"<{numel}f", blob))

    def rebuild(storage, offset, size, stride, requires_grad, hooks):
        expect, step = [], 1
        for s in reversed(size):
            expect.insert(0, step)
            step *= s
        assert offset == 0 and tuple(stride) == tuple(expect) and not requires_grad and not hooks
        return Tensor(storage, size, "float32")

    import io
    return Unpickler(io.BytesIO(data)).load()


def read_bundle(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8: 8 + n])
    manifest = json.loads(header["__metadata__"]["oscar"])
    base = 8 + n
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        count = (e - b) // 4
        tensors[name] = list(struct.unpack(f"<{count}f", raw[base + b: base + e]))
    return manifest, tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("bundle")
    ap.add_argument("k")
    ap.add_argument("v")
    ap.add_argument("--version", type=int, default=0)
    args = ap.parse_args()
    manifest, tensors = read_bundle(args.bundle)
    model = manifest["model"]
    layers, h, d = model["num_layers"], model["num_kv_heads"], model["head_dim"]
    for kind, path in (("k", args.k), ("v", args.v)):
        state = read_pt(path)
        version = state["format_version"]
        assert version in (1, 2) and (args.version in (0, version)), version
        assert state["source_grouping"] == ("layer" if version == 1 else "head")
        assert isinstance(state["objective"], str)
        assert sorted(state["layers"].keys()) == list(range(layers)), state["layers"].keys()
        heads = 1 if version == 1 else h
        for i in range(layers):
            entry = state["layers"][i]
            assert entry["layer_id"] == i
            rot, eig = entry["rotation"], entry["eigenvalues"]
            assert rot.shape == ((d, d) if version == 1 else (h, d, d)), rot.shape
            assert eig.shape == ((d,) if version == 1 else (h, d)), eig.shape
            ref_rot = tensors[f"layers.{i}.{kind}_rotation"]
            ref_eig = tensors[f"layers.{i}.{kind}_eigenvalues"]
            assert rot.values == ref_rot[: heads * d * d], f"layer {i} {kind} rotation differs"
            if version == 1:  # a per-layer file is only written when every head holds the same
                for head in range(h):
                    assert ref_rot[head * d * d: (head + 1) * d * d] == rot.values
            for head in range(heads):
                got = eig.values[head * d: (head + 1) * d]
                assert got == sorted(got), "eigenvalues not ascending"
                assert got == list(reversed(ref_eig[head * d: (head + 1) * d]))
        prov = state["oscar"]
        assert prov["model"]["config_sha256"] == model["config_sha256"]
        assert prov["bundle_tensor_sha256"] == manifest["tensor_sha256"]
        assert prov["clip"].shape == (layers, h)
    print(f"ok: {args.k} and {args.v} match {args.bundle}")


if __name__ == "__main__":
    try:
        main()
    except AssertionError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)

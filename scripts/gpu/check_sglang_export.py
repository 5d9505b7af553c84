#!/usr/bin/env python3
"""Loads the SGLang rotation files written by `oscar-bundle export --format sglang` with real torch,
the way SGLang's OSCAR loader does, and compares them with the bundle they came from (read with the
`safetensors` package). Optionally checks the GGUF export with the `gguf` package when installed.

  check_sglang_export.py --bundle B.safetensors --dir EXPORT_DIR [--gguf FILE.gguf]

Checks, for the key and the value file:
  - torch.load(path, map_location="cpu") with default arguments (weights_only=True since torch 2.6)
    and with weights_only=True explicitly: the files need no unsafe globals;
  - format_version 1 or 2, source_grouping, objective; every layer 0..L-1 present under its int id
    (the loaders also accept str ids), layer_id;
  - rotation float32 [d, d] (v1) or [n_kv_heads, d, d] (v2), eigenvalues float32 [d] / [H, d],
    ascending (the order torch.linalg.eigh returns);
  - the anchor's per-layer loader logic (stack [L, d, d], shape checks) for v1, rank dispatch for v2;
  - equality with the bundle, bit for bit (v1: every KV head of the bundle equals the one rotation);
  - orthogonality |R R^T - I| < 1e-5; the provenance entry names the bundle's model and checksum.
Exit status 1 on any failure.
"""
import argparse
import glob
import json
import os
import sys

import torch
from safetensors import safe_open


def fail(msg):
    print(f"FAILED: {msg}")
    sys.exit(1)


def load_like_sglang(path):
    # SGLang's loader calls torch.load(path, map_location="cpu") and nothing else.
    state = torch.load(path, map_location="cpu")
    strict = torch.load(path, map_location="cpu", weights_only=True)
    if state.keys() != strict.keys():
        fail(f"{path}: weights_only load differs")
    return state


def anchor_per_layer_loader(state, layer_num, head_dim):
    """The anchor's load_oscar_rotations: one [head_dim, head_dim] rotation per layer, stacked."""
    layers = state["layers"]
    out = torch.empty((layer_num, head_dim, head_dim), dtype=torch.float32)
    for lid in range(layer_num):
        if lid not in layers and str(lid) not in layers:
            fail(f"missing layer {lid}")
        r = layers.get(lid, layers.get(str(lid)))["rotation"]
        if tuple(r.shape) != (head_dim, head_dim):
            fail(f"layer {lid} has shape {tuple(r.shape)}")
        out[lid] = r.to(torch.float32)
    return out


def check_side(path, kind, bundle, manifest):
    model = manifest["model"]
    layers, h, d = model["num_layers"], model["num_kv_heads"], model["head_dim"]
    state = load_like_sglang(path)
    version = state.get("format_version")
    if version not in (1, 2):
        fail(f"{path}: format_version {version}")
    grouping = state.get("source_grouping")
    if grouping != ("layer" if version == 1 else "head"):
        fail(f"{path}: source_grouping {grouping} with format_version {version}")
    if not isinstance(state.get("objective"), str):
        fail(f"{path}: objective missing")
    ids = sorted(state["layers"].keys())
    if ids != list(range(layers)) or not all(isinstance(i, int) for i in ids):
        fail(f"{path}: layer ids {ids}")
    if version == 1:
        stacked = anchor_per_layer_loader(state, layers, d)
    for i in range(layers):
        entry = state["layers"][i]
        if entry["layer_id"] != i:
            fail(f"{path}: layer {i} layer_id {entry['layer_id']}")
        r, e = entry["rotation"], entry["eigenvalues"]
        if r.dtype != torch.float32 or e.dtype != torch.float32:
            fail(f"{path}: layer {i} dtypes {r.dtype} {e.dtype}")
        want_r = (d, d) if version == 1 else (h, d, d)
        want_e = (d,) if version == 1 else (h, d)
        if tuple(r.shape) != want_r or tuple(e.shape) != want_e:
            fail(f"{path}: layer {i} shapes {tuple(r.shape)} {tuple(e.shape)}")
        if not torch.all(e[..., 1:] >= e[..., :-1]):
            fail(f"{path}: layer {i} eigenvalues not ascending")
        ref_r = bundle.get_tensor(f"layers.{i}.{kind}_rotation")  # [H, d, d]
        ref_e = bundle.get_tensor(f"layers.{i}.{kind}_eigenvalues")  # [H, d], descending
        rr = r.unsqueeze(0).expand(h, d, d) if version == 1 else r
        if not torch.equal(rr, ref_r):
            fail(f"{path}: layer {i} rotation differs from the bundle")
        ee = e.unsqueeze(0).expand(h, d) if version == 1 else e
        if not torch.equal(ee, ref_e.flip(-1)):
            fail(f"{path}: layer {i} eigenvalues differ from the bundle")
        if version == 1 and not torch.equal(stacked[i], r):
            fail(f"{path}: per-layer loader disagrees at layer {i}")
        eye = torch.eye(d, dtype=torch.float64)
        err = (rr.double() @ rr.double().transpose(-1, -2) - eye).abs().max().item()
        if err > 1e-5:
            fail(f"{path}: layer {i} not orthogonal ({err:.2e})")
    prov = state.get("oscar")
    if prov is None or prov["model"]["config_sha256"] != model["config_sha256"]:
        fail(f"{path}: provenance missing or names another model")
    if prov["bundle_tensor_sha256"] != manifest["tensor_sha256"]:
        fail(f"{path}: provenance names another bundle")
    if tuple(prov["clip"].shape) != (layers, h):
        fail(f"{path}: provenance clip shape {tuple(prov['clip'].shape)}")
    print(f"ok  {path}: format_version {version}, {layers} layers, rotation {tuple(r.shape)}, "
          f"torch {torch.__version__} (weights_only load)")


def check_gguf(path, bundle, manifest):
    try:
        from gguf import GGUFReader
    except ImportError:
        print(f"skip {path}: the gguf package is not installed")
        return
    model = manifest["model"]
    d = model["head_dim"]
    reader = GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    for i in range(model["num_layers"]):
        for kind in ("k", "v"):
            t = tensors[f"blk.{i}.attn_{kind}_rot.weight"]
            data = torch.from_numpy(t.data.copy()).reshape(d, d)  # memory rows = R^T rows
            ref = bundle.get_tensor(f"layers.{i}.{kind}_rotation")[0]
            if not torch.equal(data.t().contiguous(), ref):
                fail(f"{path}: blk.{i}.attn_{kind}_rot.weight is not R^T of the bundle")
    print(f"ok  {path}: {len(tensors)} rotation tensors, data = R^T (ggml_mul_mat(rot, x) = x @ R)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bundle", required=True)
    ap.add_argument("--dir", required=True, help="directory with k_rotation_*.pt and v_rotation_*.pt")
    ap.add_argument("--gguf", help="GGUF export of the same bundle (per-layer bundles)")
    args = ap.parse_args()
    with safe_open(args.bundle, framework="pt") as bundle:
        manifest = json.loads(bundle.metadata()["oscar"])
        for kind in ("k", "v"):
            files = glob.glob(os.path.join(args.dir, f"{kind}_rotation_*.pt"))
            if len(files) != 1:
                fail(f"{args.dir}: {len(files)} {kind}_rotation_*.pt files")
            check_side(files[0], kind, bundle, manifest)
        if args.gguf:
            check_gguf(args.gguf, bundle, manifest)


if __name__ == "__main__":
    main()

// Rotation bundles to and from serving engines' formats: SGLang's rotation checkpoints (.pt) and
// the llama.cpp OSCAR port's GGUF rotation tensors. What a target cannot express is reported.
#pragma once

#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/gguf.h"
#include "oscar/torch_archive.h"

namespace oscar {

// What a bundle carries that an export target cannot express (key/value means, key smoothing,
// per-head clip ratios, ...), one sentence each, stating what the engine will do instead. Empty
// when the export is faithful. `target` is "sglang" or "gguf".
std::vector<std::string> export_losses(const Bundle& bundle, const std::string& target);

// True when every KV head of every layer holds the same K and V rotations (grouping "layer", or a
// single KV head): what a per-layer format can express exactly.
bool rotations_shared_per_layer(const Bundle& bundle);

// ---- SGLang (the OSCAR anchor's rotation checkpoints, read with torch.load) -------------------

struct SglangFiles {
  int format_version = 1;      // 1: rotation [d, d] per layer; 2: [n_kv_heads, d, d] per layer
  std::string k_name, v_name;  // file names: k_rotation_<objective>.pt, v_rotation_<objective>.pt
  PickleValue k, v;            // the two dicts
};

// Builds the two dicts the SGLang loader reads:
//   {"format_version": 1|2, "objective": str, "source_grouping": "layer"|"head",
//    "layers": {layer_id: {"layer_id": int, "rotation": f32 [d, d] | [H, d, d],
//                          "eigenvalues": f32 [d] | [H, d] (ascending, as eigh returns them)}},
//    "oscar": {provenance: model identity, calibration, clip ratios [L, H], bundle checksum}}
// `format_version` 0 picks 1 when rotations are shared per layer, else 2; asking for 1 when heads
// differ is an error. The "oscar" entry is ignored by SGLang and lets import restore the bundle.
SglangFiles sglang_export(const Bundle& bundle, int format_version = 0);

// Writes both files into `directory` (atomically each); returns their paths.
std::vector<std::string> write_sglang_export(const SglangFiles& files,
                                             const std::string& directory);

struct SglangImportOptions {
  // Clip ratios for every head when > 0; otherwise the files' "oscar" provenance, else 0.96 / 0.92.
  double clip_k = 0.0, clip_v = 0.0;
  std::string composition;      // r_h_pbr | r | r_h | h; empty: from the objective or provenance
  std::string value_objective;  // attn | keyweight; empty: from provenance, "sst*" = keyweight
  bool check_hashes = true;     // provenance naming another checkpoint is an error
};

// The bundle that the two SGLang files describe, for `model` (dimensions and, when the files carry
// provenance, hashes are checked). Format 1 rotations are copied to every KV head. Key means and
// smoothing cannot be carried by these files, so the bundle has none: it evaluates what SGLang
// runs. `warnings` receives what was assumed or dropped.
Bundle sglang_import(const PickleValue& k, const PickleValue& v, const std::string& k_origin,
                     const std::string& v_origin, const ModelIdentity& model,
                     const SglangImportOptions& options, std::vector<std::string>* warnings);

// sglang_import on files: reads them (read_torch_archive) and records their sha256 in the
// provenance when they carry none of their own.
Bundle import_sglang_files(const std::string& k_path, const std::string& v_path,
                           const ModelIdentity& model, const SglangImportOptions& options,
                           std::vector<std::string>* warnings);

// ---- GGUF (the llama.cpp OSCAR port) ------------------------------------------------------------

// Tensors blk.{i}.attn_k_rot.weight and blk.{i}.attn_v_rot.weight, F32, ne = [d, d], data R^T in
// row-major order (R in column-major), so that ggml_mul_mat(rot, x) = x R for row vectors x, as the
// port applies them; plus oscar.* metadata (identity, grouping, clip ratios, quantizer). The port
// loads one [d, d] rotation per layer: bundles whose heads differ are refused unless
// `allow_per_head`, which writes ne = [d, d, n_kv_heads] (head h at ne[2] index h) for loaders
// that understand it.
GgufWriter gguf_export(const Bundle& bundle, bool allow_per_head = false);

}  // namespace oscar

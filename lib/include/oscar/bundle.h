// The OSCAR rotation bundle (formats v1 and v2): in-memory form, atomic writer, validating reader,
// checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/config.h"

namespace oscar {

inline constexpr const char* kBundleFormatName = "oscar-rotation-bundle";
// The safetensors metadata entry holding sha256 of the manifest text (metadata entry "oscar").
inline constexpr const char* kManifestChecksumKey = "oscar_manifest_sha256";
// The newest version this build reads and writes. Version 2 adds key smoothing (k_smooth); a
// bundle without smoothing is still written as version 1 so that version-1 readers load it.
inline constexpr int kBundleFormatVersion = 2;

// What a bundle was computed for. Two hashes pin the exact checkpoint: the sha256 of config.json
// and the sha256 of the safetensors headers (shapes, dtypes and offsets of every tensor, shards in
// name order), which changes whenever the weights are re-exported but costs no pass over the data.
struct ModelIdentity {
  std::string architecture;  // e.g. "Qwen3ForCausalLM"
  std::string model_type;    // llama | mistral | qwen2 | qwen3
  std::string name;          // the model directory's base name
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  RopeConfig rope;
  std::string config_sha256;
  std::string weights_header_sha256;
};

// Identity of the model directory `model_dir` (reads config.json and the safetensors headers only).
ModelIdentity model_identity(const std::string& model_dir);

// How the KV cache is meant to be quantized with this bundle (informational for engines; the
// quantizer of the evaluation and the kernels read these).
struct QuantizationParams {
  int bits = 2;
  std::int64_t group_size = 0;               // channels per scale/zero group; 0 = head_dim
  std::int64_t sink_tokens = 64;             // S0: first tokens kept in BF16
  std::int64_t recent_tokens = 256;          // W: most recent tokens kept in BF16
  std::string scale_dtype = "bf16";          // bf16 | f16 | f32
  std::string row_packing = "int2-strided";  // byte j: elements j, j+d/4, j+d/2, j+3d/4 (2 bits)
};

struct CalibrationProvenance {
  std::string dataset_name;
  std::string dataset_sha256;
  std::int64_t tokens = 0;
  std::int64_t seq_len = 0;
  std::uint64_t seed = 0;
  std::string grouping = "head";         // head | layer
  std::string value_objective = "attn";  // attn | keyweight
  std::string composition = "r_h_pbr";   // r_h_pbr | r | r_h | h
  bool center_keys = false;
  bool center_values = false;
  double smooth_keys = 0.0;           // key smoothing strength alpha (0: none; format v2)
  std::string clip_method = "fixed";  // fixed | search
  std::string eigen_backend;          // lapack | cusolver | torch
  std::string device;                 // cpu | cuda
};

// One layer's tensors, float32, row-major, heads outermost.
struct LayerRotations {
  std::vector<float> k_rotation, v_rotation;        // [n_kv_heads, d, d]
  std::vector<float> k_eigenvalues, v_eigenvalues;  // [n_kv_heads, d], descending
  std::vector<float> k_clip, v_clip;                // [n_kv_heads]
  std::vector<float> k_mean;  // [n_kv_heads, d] when keys are centred, else {}
  std::vector<float> v_mean;  // [n_kv_heads, d] when values are centred, else {}
  // [n_kv_heads, d] when keys are smoothed (v2), else {}: keys are stored as ((k - k_mean) / s) R_K
  // and queries enter as (q * s) R_K.
  std::vector<float> k_smooth;
};

struct Bundle {
  ModelIdentity model;
  QuantizationParams quantization;
  CalibrationProvenance calibration;
  std::string tool_version, git_commit;
  std::string created;        // ISO-8601 UTC; the only clock-dependent field
  std::string tensor_sha256;  // filled by write_bundle / checked by read_bundle
  // The manifest checksum (sha256 hex of the manifest text): filled by write_bundle, and by
  // read_bundle after checking it; empty for bundles written before manifest checksums.
  std::string manifest_sha256;
  std::vector<LayerRotations> layers;

  std::int64_t d() const { return model.head_dim; }
  std::int64_t n_kv_heads() const { return model.num_kv_heads; }
  // R of layer `layer`, KV head `head`, kind 'k' or 'v': pointer to d*d floats, row-major.
  const float* rotation(std::int64_t layer, std::int64_t head, char kind) const;
};

// Checks internal consistency (counts, shapes, finite values, clip ratios in (0, 1]) and throws
// oscar::Error naming the layer and tensor at fault.
void validate_bundle(const Bundle& bundle, const std::string& origin);

// Writes `bundle` as one safetensors file, atomically, with the manifest's checksum beside it.
// Fills bundle.tensor_sha256.
void write_bundle(const std::string& path, Bundle& bundle);

// Reads and fully validates a bundle: safetensors header, manifest format name and version (newer
// versions are rejected), the manifest checksum when the manifest has one, every expected tensor
// present with its dtype and shape and nothing unexpected, the tensor checksum.
Bundle read_bundle(const std::string& path);

// read_bundle on the bytes of a whole bundle file already in memory; `origin` names it in errors.
Bundle parse_bundle(const std::uint8_t* bytes, std::size_t size, const std::string& origin);

// The manifest as JSON text (what `__metadata__["oscar"]` holds).
std::string bundle_manifest_json(const Bundle& bundle, int indent = -1);

// sha256 (hex) of the manifest text exactly as stored: what write_bundle puts in the metadata
// entry kManifestChecksumKey, and what read_bundle checks when that entry is present.
std::string manifest_checksum(std::string_view manifest_json);

// The format version the bundle's content needs (1, or 2 when keys are smoothed): what
// write_bundle writes, and what a bundle read from a file was.
int bundle_format_version(const Bundle& bundle);

// sha256 over the tensors in ascending name order: for each, its name, a NUL byte, then its raw
// little-endian bytes. Independent of the file layout, so it identifies the content.
struct NamedBytes {
  std::string name;
  const void* data = nullptr;
  std::size_t nbytes = 0;
};
std::string tensor_checksum(std::vector<NamedBytes> tensors);

// Largest |R R^T - I| entry over all layers and heads of `kind` ('k' or 'v').
double max_orthogonality_error(const Bundle& bundle, char kind);

// Throws oscar::Error, naming each mismatch, when `bundle` was not computed for `model`: layer and
// head counts, head_dim, architecture and RoPE always; the config and weights hashes unless
// `check_hashes` is false (e.g. a re-exported but identical checkpoint).
void check_bundle_matches_model(const Bundle& bundle, const ModelIdentity& model,
                                bool check_hashes = true);

}  // namespace oscar

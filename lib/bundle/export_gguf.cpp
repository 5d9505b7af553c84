// GGUF rotation tensors for the llama.cpp OSCAR port: blk.{i}.attn_{k,v}_rot.weight plus oscar.*
// metadata.
#include <fmt/format.h>

#include "oscar/bundle_export.h"
#include "oscar/error.h"
#include "oscar/version.h"

namespace oscar {
namespace {

// ggml_mul_mat(a, b) contracts both operands over their ne[0]: out[j][i] = sum_k a[i][k] b[j][k]
// with a[i][k] the element at ne = (k, i), i.e. row i of a's memory. For out = x R (row vector x)
// row i of a's memory must be column i of R: the data is R^T in row-major order.
std::vector<float> transposed(const float* r, std::int64_t d) {
  std::vector<float> t(static_cast<std::size_t>(d * d));
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t k = 0; k < d; ++k) t[static_cast<std::size_t>(i * d + k)] = r[k * d + i];
  }
  return t;
}

}  // namespace

GgufWriter gguf_export(const Bundle& b, bool allow_per_head) {
  validate_bundle(b, "bundle to export");
  const bool shared = rotations_shared_per_layer(b);
  OSCAR_CHECK(shared || allow_per_head,
              "this bundle has a different rotation per KV head (grouping {}), but the llama.cpp "
              "OSCAR port loads one [head_dim, head_dim] rotation per layer: calibrate with "
              "--grouping layer, or pass --allow-per-head to write [d, d, n_kv_heads] tensors "
              "that the port does not load",
              b.calibration.grouping);
  const ModelIdentity& m = b.model;
  const CalibrationProvenance& c = b.calibration;
  const QuantizationParams& q = b.quantization;
  const std::int64_t d = b.d(), h = b.n_kv_heads();
  GgufWriter w;
  w.add_string("general.architecture", "oscar");
  w.add_string("general.type", "oscar-kv-rotations");
  w.add_string("general.name", fmt::format("{} OSCAR KV rotations", m.name));
  w.add_uint32("general.alignment", GgufWriter::kAlignment);
  w.add_string("oscar.format", "oscar-kv-rotations-gguf");
  w.add_uint32("oscar.format_version", 1);
  w.add_string("oscar.rotation.convention",
               "x_rot = x @ R for row vectors; tensor data is R^T row-major (ne = [d, d]), so "
               "ggml_mul_mat(rot, x) = x @ R; queries and keys use attn_k_rot, values attn_v_rot "
               "and the attention output its transpose");
  w.add_string("oscar.model.name", m.name);
  w.add_string("oscar.model.architecture", m.architecture);
  w.add_string("oscar.model.config_sha256", m.config_sha256);
  w.add_string("oscar.model.weights_header_sha256", m.weights_header_sha256);
  w.add_uint32("oscar.block_count", static_cast<std::uint32_t>(m.num_layers));
  w.add_uint32("oscar.attention.head_count", static_cast<std::uint32_t>(m.num_heads));
  w.add_uint32("oscar.attention.head_count_kv", static_cast<std::uint32_t>(h));
  w.add_uint32("oscar.attention.key_length", static_cast<std::uint32_t>(d));
  w.add_string("oscar.rotation.grouping", shared ? "layer" : "head");
  w.add_bool("oscar.rotation.per_head", !shared);
  w.add_string("oscar.rotation.composition", c.composition);
  w.add_string("oscar.rotation.value_objective", c.value_objective);
  w.add_string("oscar.bundle.tensor_sha256", b.tensor_sha256);
  w.add_uint32("oscar.bundle.format_version", static_cast<std::uint32_t>(bundle_format_version(b)));
  std::vector<float> k_clip, v_clip;
  for (const LayerRotations& l : b.layers) {
    k_clip.insert(k_clip.end(), l.k_clip.begin(), l.k_clip.end());
    v_clip.insert(v_clip.end(), l.v_clip.begin(), l.v_clip.end());
  }
  w.add_float32_array("oscar.quantization.k_clip", k_clip);  // [layer][kv head]
  w.add_float32_array("oscar.quantization.v_clip", v_clip);
  w.add_uint32("oscar.quantization.bits", static_cast<std::uint32_t>(q.bits));
  w.add_uint32("oscar.quantization.group_size",
               static_cast<std::uint32_t>(q.group_size == 0 ? d : q.group_size));
  w.add_uint32("oscar.quantization.sink_tokens", static_cast<std::uint32_t>(q.sink_tokens));
  w.add_uint32("oscar.quantization.recent_tokens", static_cast<std::uint32_t>(q.recent_tokens));
  w.add_string("oscar.quantization.scale_dtype", q.scale_dtype);
  w.add_bool("oscar.calibration.center_keys", c.center_keys);
  w.add_bool("oscar.calibration.center_values", c.center_values);
  w.add_float32("oscar.calibration.smooth_keys", static_cast<float>(c.smooth_keys));
  w.add_string("oscar.calibration.dataset_name", c.dataset_name);
  w.add_string("oscar.calibration.dataset_sha256", c.dataset_sha256);
  w.add_int64("oscar.calibration.tokens", c.tokens);
  w.add_string("oscar.tool", fmt::format("oscar {} ({})", version(), git_commit()));

  const auto du = static_cast<std::uint64_t>(d);
  for (std::int64_t i = 0; i < m.num_layers; ++i) {
    const LayerRotations& l = b.layers[static_cast<std::size_t>(i)];
    for (const char kind : {'k', 'v'}) {
      const auto& r = kind == 'k' ? l.k_rotation : l.v_rotation;
      const std::string name = fmt::format("blk.{}.attn_{}_rot.weight", i, kind);
      if (shared) {
        w.add_tensor_f32(name, {du, du}, transposed(r.data(), d));
      } else {
        std::vector<float> all;
        for (std::int64_t head = 0; head < h; ++head) {
          const auto t = transposed(r.data() + head * d * d, d);
          all.insert(all.end(), t.begin(), t.end());
        }
        w.add_tensor_f32(name, {du, du, static_cast<std::uint64_t>(h)}, std::move(all));
      }
    }
  }
  return w;
}

}  // namespace oscar

// C++ API of the OSCAR runtime loader: a header-only RAII layer over the C ABI (oscar_runtime.h).
#pragma once

#if __cplusplus < 201703L
#error "oscar/runtime.h needs C++17; C code includes oscar/oscar_runtime.h"
#endif

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "oscar/oscar_runtime.h"

// Everything here is inline over the exported C functions, so the shared library's binary
// interface is the C one alone: engines built with another C++ standard library or compiler
// version link it safely. Failures throw oscar::runtime::Error carrying the C status.
namespace oscar::runtime {

class Error : public std::runtime_error {
 public:
  Error(oscar_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  oscar_status status() const noexcept { return status_; }

 private:
  oscar_status status_;
};

// Throws Error with the calling thread's last message unless `status` is OSCAR_STATUS_OK.
inline void check(oscar_status status) {
  if (status != OSCAR_STATUS_OK) {
    std::string message = oscar_runtime_last_error();
    if (message.empty()) message = oscar_status_string(status);
    throw Error(status, message);
  }
}

enum class Kind { kKey = OSCAR_KV_KEY, kValue = OSCAR_KV_VALUE };

enum class Transform {
  kKey = OSCAR_TRANSFORM_KEY,
  kQuery = OSCAR_TRANSFORM_QUERY,
  kValue = OSCAR_TRANSFORM_VALUE,
  kOutput = OSCAR_TRANSFORM_OUTPUT,
  kKeyInverse = OSCAR_TRANSFORM_KEY_INVERSE,
  kValueInverse = OSCAR_TRANSFORM_VALUE_INVERSE,
};

enum class Layout { kRowMajor = OSCAR_LAYOUT_ROW_MAJOR, kTransposed = OSCAR_LAYOUT_TRANSPOSED };

// oscar_runtime_params with the library's defaults.
struct Params : oscar_runtime_params {
  Params() : oscar_runtime_params(oscar_runtime_default_params()) {}
};

// The engine's model; empty strings and rope_theta 0 are not compared.
struct ModelDescription {
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::string architecture;
  std::string config_sha256;
  std::string weights_header_sha256;
  double rope_theta = 0.0;
};

// A folded affine map: out = in * matrix + bias ([d, d] in the requested layout, [d]).
struct Affine {
  std::vector<float> matrix;
  std::vector<float> bias;
};

// One INT2 row: d / 4 packed bytes, one scale and zero per group.
struct Int2Row {
  std::vector<std::uint8_t> packed;
  std::vector<float> scales;
  std::vector<float> zeros;
};

// A loaded rotation bundle. Move-only; const methods may be called from several threads at once.
class Runtime {
 public:
  static Runtime open(const std::string& path, const oscar_runtime_params& params = Params()) {
    oscar_runtime* rt = nullptr;
    check(oscar_runtime_open(path.c_str(), &params, &rt));
    return Runtime(rt);
  }
  static Runtime open_memory(const void* data, std::size_t size, const std::string& name,
                             const oscar_runtime_params& params = Params()) {
    oscar_runtime* rt = nullptr;
    check(oscar_runtime_open_memory(data, size, name.c_str(), &params, &rt));
    return Runtime(rt);
  }

  const oscar_runtime_info& info() const {
    const oscar_runtime_info* i = oscar_runtime_get_info(handle_.get());
    if (i == nullptr) check(OSCAR_STATUS_INVALID_ARGUMENT);  // a moved-from object
    return *i;
  }
  int format_version() const { return info().format_version; }
  std::int64_t num_layers() const { return info().num_layers; }
  std::int64_t num_kv_heads() const { return info().num_kv_heads; }
  std::int64_t head_dim() const { return info().head_dim; }
  std::string manifest_json() const {
    const char* json = oscar_runtime_manifest_json(handle_.get());
    if (json == nullptr) check(OSCAR_STATUS_INVALID_ARGUMENT);
    return json;
  }

  // Throw Error (status OSCAR_STATUS_MODEL_MISMATCH naming every difference) unless the bundle
  // belongs to the model.
  void validate(const ModelDescription& model) const {
    oscar_model_desc desc = oscar_runtime_default_model_desc();
    desc.num_layers = model.num_layers;
    desc.num_heads = model.num_heads;
    desc.num_kv_heads = model.num_kv_heads;
    desc.head_dim = model.head_dim;
    desc.architecture = model.architecture.c_str();
    desc.config_sha256 = model.config_sha256.c_str();
    desc.weights_header_sha256 = model.weights_header_sha256.c_str();
    desc.rope_theta = model.rope_theta;
    check(oscar_runtime_validate(handle_.get(), &desc));
  }
  void validate_config(const std::string& config_json_path, bool check_hash = true) const {
    check(oscar_runtime_validate_config(handle_.get(), config_json_path.c_str(), check_hash));
  }
  void validate_model_dir(const std::string& model_dir, bool check_hashes = true) const {
    check(oscar_runtime_validate_model_dir(handle_.get(), model_dir.c_str(), check_hashes));
  }

  // [d, d] row-major (x_rot = x R); the layer's heads follow contiguously.
  const float* rotation(Kind kind, std::int64_t layer, std::int64_t kv_head) const {
    const float* p = nullptr;
    check(oscar_runtime_rotation(handle_.get(), c_kind(kind), layer, kv_head, &p));
    return p;
  }
  // [d], descending.
  const float* eigenvalues(Kind kind, std::int64_t layer, std::int64_t kv_head) const {
    const float* p = nullptr;
    check(oscar_runtime_eigenvalues(handle_.get(), c_kind(kind), layer, kv_head, &p));
    return p;
  }
  float clip_ratio(Kind kind, std::int64_t layer, std::int64_t kv_head) const {
    float clip = 0.0f;
    check(oscar_runtime_clip_ratio(handle_.get(), c_kind(kind), layer, kv_head, &clip));
    return clip;
  }
  // [d]; nullptr when that side is not centred.
  const float* mean(Kind kind, std::int64_t layer, std::int64_t kv_head) const {
    const float* p = nullptr;
    check(oscar_runtime_mean(handle_.get(), c_kind(kind), layer, kv_head, &p));
    return p;
  }
  // [d]; nullptr when keys are not smoothed.
  const float* key_smoothing(std::int64_t layer, std::int64_t kv_head) const {
    const float* p = nullptr;
    check(oscar_runtime_key_smoothing(handle_.get(), layer, kv_head, &p));
    return p;
  }

  Affine transform(Transform which, std::int64_t layer, std::int64_t kv_head,
                   Layout layout = Layout::kRowMajor) const {
    const auto d = static_cast<std::size_t>(head_dim());
    Affine a{std::vector<float>(d * d), std::vector<float>(d)};
    check(oscar_runtime_transform_matrix(handle_.get(), static_cast<oscar_transform>(which), layer,
                                         kv_head, static_cast<oscar_layout>(layout),
                                         a.matrix.data(), a.bias.data()));
    return a;
  }

  // `rows` contiguous rows of head_dim floats; `out` may equal `in`.
  void apply(Transform which, std::int64_t layer, std::int64_t kv_head, const float* in, float* out,
             std::int64_t rows = 1) const {
    check(oscar_runtime_apply(handle_.get(), static_cast<oscar_transform>(which), layer, kv_head,
                              in, out, rows));
  }
  // apply() on whole rows held in a vector (its size a multiple of head_dim).
  std::vector<float> apply(Transform which, std::int64_t layer, std::int64_t kv_head,
                           const std::vector<float>& rows) const {
    const std::int64_t d = head_dim();
    if (d <= 0 || static_cast<std::int64_t>(rows.size()) % d != 0) {
      throw Error(OSCAR_STATUS_INVALID_ARGUMENT, "apply: " + std::to_string(rows.size()) +
                                                     " values are not whole rows of head_dim " +
                                                     std::to_string(d));
    }
    std::vector<float> out(rows.size());
    apply(which, layer, kv_head, rows.data(), out.data(),
          static_cast<std::int64_t>(rows.size()) / d);
    return out;
  }

  Int2Row quantize_int2(Kind kind, std::int64_t layer, std::int64_t kv_head,
                        const float* row_rot) const {
    Int2Row row;
    row.packed.resize(static_cast<std::size_t>(oscar_runtime_int2_row_bytes(handle_.get())));
    row.scales.resize(static_cast<std::size_t>(oscar_runtime_int2_row_groups(handle_.get())));
    row.zeros.resize(row.scales.size());
    check(oscar_runtime_quantize_int2(handle_.get(), c_kind(kind), layer, kv_head, row_rot,
                                      row.packed.data(), row.scales.data(), row.zeros.data()));
    return row;
  }
  std::vector<float> dequantize_int2(const Int2Row& row) const {
    if (static_cast<std::int64_t>(row.packed.size()) !=
            oscar_runtime_int2_row_bytes(handle_.get()) ||
        static_cast<std::int64_t>(row.scales.size()) !=
            oscar_runtime_int2_row_groups(handle_.get()) ||
        row.zeros.size() != row.scales.size()) {
      throw Error(OSCAR_STATUS_INVALID_ARGUMENT,
                  "dequantize_int2: the row's sizes do not match this bundle's head_dim and group "
                  "size");
    }
    std::vector<float> out(static_cast<std::size_t>(head_dim()));
    check(oscar_runtime_dequantize_int2(handle_.get(), row.packed.data(), row.scales.data(),
                                        row.zeros.data(), out.data()));
    return out;
  }

  // The C handle, for calls this layer does not wrap. Owned by this object.
  oscar_runtime* get() const noexcept { return handle_.get(); }

 private:
  struct Close {
    void operator()(oscar_runtime* rt) const noexcept { oscar_runtime_close(rt); }
  };
  explicit Runtime(oscar_runtime* rt) : handle_(rt) {}
  static oscar_kv c_kind(Kind kind) { return static_cast<oscar_kv>(kind); }

  std::unique_ptr<oscar_runtime, Close> handle_;
};

}  // namespace oscar::runtime

// The runtime loader's C ABI over the Torch-free bundle reader and the INT2 reference.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/config.h"
#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/int2.h"
#include "oscar/oscar_runtime.h"
#include "oscar/sha256.h"
#include "oscar/version.h"

// Immutable after oscar_runtime_open: the info strings point into `bundle`.
struct oscar_runtime {
  oscar::Bundle bundle;
  std::string origin;
  std::string manifest_json;
  oscar_runtime_info info{};
  std::int64_t group_size = 0;  // effective INT2 group (head_dim when the manifest says 0)
  oscar::int2::ScaleDType scale_dtype = oscar::int2::ScaleDType::kBF16;
  std::string int2_problem;  // why this bundle's INT2 rows cannot be produced here; empty: they can
};

namespace {

// Per thread, so that concurrent calls never see each other's messages.
thread_local std::string t_last_error;
thread_local const char* t_static_error = nullptr;  // used when the message could not be stored

void set_last_error(const char* message) noexcept {
  t_static_error = nullptr;
  try {
    t_last_error = message;
  } catch (...) {
    t_last_error.clear();
    t_static_error = "out of memory (while recording an error message)";
  }
}

void clear_last_error() noexcept {
  t_last_error.clear();
  t_static_error = nullptr;
}

// A failure whose status is decided where it is raised.
class StatusError : public oscar::Error {
 public:
  StatusError(oscar_status status, const std::string& message)
      : oscar::Error(message), status_(status) {}
  oscar_status status() const { return status_; }

 private:
  oscar_status status_;
};

template <typename... Args>
[[noreturn]] void raise(oscar_status status, fmt::format_string<Args...> format, Args&&... args) {
  throw StatusError(status, fmt::format(format, std::forward<Args>(args)...));
}

// Runs `body` and turns whatever it throws into a status plus the thread's last error, so that no
// exception crosses the C ABI. An oscar::Error from the library maps to `library_status`.
template <typename Body>
oscar_status guarded(oscar_status library_status, Body&& body) noexcept {
  try {
    body();
    clear_last_error();
    return OSCAR_STATUS_OK;
  } catch (const StatusError& e) {
    set_last_error(e.what());
    return e.status();
  } catch (const oscar::Error& e) {
    set_last_error(e.what());
    return library_status;
  } catch (const std::bad_alloc&) {
    set_last_error("out of memory");
    return OSCAR_STATUS_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_last_error(e.what());
    return OSCAR_STATUS_INTERNAL_ERROR;
  } catch (...) {
    set_last_error("unknown internal error");
    return OSCAR_STATUS_INTERNAL_ERROR;
  }
}

const oscar_runtime& handle(const oscar_runtime* rt, const char* function) {
  if (rt == nullptr) raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: the handle is NULL", function);
  return *rt;
}

void require(const void* pointer, const char* function, const char* name) {
  if (pointer == nullptr) raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: {} is NULL", function, name);
}

bool is_set(const char* s) { return s != nullptr && *s != '\0'; }

// The int a C caller passed for an enum parameter. Any int is a valid value of a C enum, but C++
// code must not load one outside the enumerators' range as the enum type, so it is read as bytes.
template <typename Enum>
int raw(const Enum& value) {
  static_assert(sizeof(Enum) == sizeof(int), "the C enums are int-sized");
  int v = 0;
  std::memcpy(&v, &value, sizeof(v));
  return v;
}

oscar_kv checked_kind(const oscar_kv& kind, const char* function) {
  const int v = raw(kind);
  if (v != OSCAR_KV_KEY && v != OSCAR_KV_VALUE) {
    raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: kind {} is neither OSCAR_KV_KEY nor OSCAR_KV_VALUE",
          function, v);
  }
  return v == OSCAR_KV_KEY ? OSCAR_KV_KEY : OSCAR_KV_VALUE;
}

void check_head(const oscar_runtime& rt, std::int64_t layer, std::int64_t kv_head,
                const char* function) {
  const oscar::ModelIdentity& m = rt.bundle.model;
  if (layer < 0 || layer >= m.num_layers) {
    raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: layer {} is out of range (the bundle has {} layers)",
          function, layer, m.num_layers);
  }
  if (kv_head < 0 || kv_head >= m.num_kv_heads) {
    raise(OSCAR_STATUS_INVALID_ARGUMENT,
          "{}: KV head {} is out of range (the bundle has {} KV heads)", function, kv_head,
          m.num_kv_heads);
  }
}

// One layer and KV head of a bundle: the tensors an engine applies; optional ones may be null.
struct HeadView {
  std::int64_t d = 0;
  const float* k_rotation = nullptr;
  const float* v_rotation = nullptr;
  const float* k_mean = nullptr;
  const float* v_mean = nullptr;
  const float* k_smooth = nullptr;
};

const float* slice(const std::vector<float>& tensor, std::int64_t index, std::int64_t stride) {
  return tensor.empty() ? nullptr : tensor.data() + index * stride;
}

HeadView head_view(const oscar_runtime& rt, std::int64_t layer, std::int64_t kv_head) {
  const oscar::LayerRotations& l = rt.bundle.layers[static_cast<std::size_t>(layer)];
  HeadView v;
  v.d = rt.bundle.d();
  v.k_rotation = slice(l.k_rotation, kv_head, v.d * v.d);
  v.v_rotation = slice(l.v_rotation, kv_head, v.d * v.d);
  v.k_mean = slice(l.k_mean, kv_head, v.d);
  v.v_mean = slice(l.v_mean, kv_head, v.d);
  v.k_smooth = slice(l.k_smooth, kv_head, v.d);
  return v;
}

void check_params(const oscar_runtime_params& params, const char* function) {
  if (params.check_orthogonality && !(params.orthogonality_tolerance > 0.0)) {
    raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: orthogonality_tolerance must be positive (got {})",
          function, params.orthogonality_tolerance);
  }
}

void fill_info(oscar_runtime& rt) {
  const oscar::Bundle& b = rt.bundle;
  const oscar::ModelIdentity& m = b.model;
  const oscar::QuantizationParams& q = b.quantization;
  const oscar::CalibrationProvenance& c = b.calibration;
  oscar_runtime_info& i = rt.info;
  i.format_version = oscar::bundle_format_version(b);
  i.origin = rt.origin.c_str();
  i.architecture = m.architecture.c_str();
  i.model_type = m.model_type.c_str();
  i.model_name = m.name.c_str();
  i.num_layers = m.num_layers;
  i.num_heads = m.num_heads;
  i.num_kv_heads = m.num_kv_heads;
  i.head_dim = m.head_dim;
  i.rope_type = m.rope.type.c_str();
  i.rope_theta = m.rope.theta;
  i.rope_factor = m.rope.factor;
  i.config_sha256 = m.config_sha256.c_str();
  i.weights_header_sha256 = m.weights_header_sha256.c_str();
  i.bits = q.bits;
  i.group_size = rt.group_size;
  i.sink_tokens = q.sink_tokens;
  i.recent_tokens = q.recent_tokens;
  i.scale_dtype = q.scale_dtype.c_str();
  i.row_packing = q.row_packing.c_str();
  i.keys_centered = c.center_keys;
  i.values_centered = c.center_values;
  i.keys_smoothed = c.smooth_keys > 0.0;
  i.smooth_keys = c.smooth_keys;
  i.grouping = c.grouping.c_str();
  i.value_objective = c.value_objective.c_str();
  i.composition = c.composition.c_str();
  i.clip_method = c.clip_method.c_str();
  i.dataset_name = c.dataset_name.c_str();
  i.dataset_sha256 = c.dataset_sha256.c_str();
  i.calibration_tokens = c.tokens;
  i.calibration_seq_len = c.seq_len;
  i.eigen_backend = c.eigen_backend.c_str();
  i.calibration_device = c.device.c_str();
  i.tool_version = b.tool_version.c_str();
  i.git_commit = b.git_commit.c_str();
  i.created = b.created.c_str();
  i.tensor_sha256 = b.tensor_sha256.c_str();
  i.manifest_sha256 = b.manifest_sha256.c_str();
}

// The checks read_bundle does not make, then the derived fields. `rt.bundle` is final after this.
void finish_open(oscar_runtime& rt, const oscar_runtime_params& params) {
  if (params.check_orthogonality) {
    for (const char kind : {'k', 'v'}) {
      const double error = oscar::max_orthogonality_error(rt.bundle, kind);
      if (!(error <= params.orthogonality_tolerance)) {
        raise(OSCAR_STATUS_FORMAT_ERROR,
              "{}: the {} rotations are not orthogonal: max |R R^T - I| = {:.3g} exceeds the "
              "tolerance {:.3g}",
              rt.origin, kind == 'k' ? "key" : "value", error, params.orthogonality_tolerance);
      }
    }
  }
  const oscar::QuantizationParams& q = rt.bundle.quantization;
  const std::int64_t d = rt.bundle.d();
  rt.group_size = q.group_size > 0 ? q.group_size : d;
  // A bundle whose quantizer this build does not know still serves its rotations; only the INT2
  // helpers refuse it.
  try {
    rt.scale_dtype = oscar::int2::parse_scale_dtype(q.scale_dtype);
    oscar::int2::QuantParams p;
    p.group_size = rt.group_size;
    p.scale_dtype = rt.scale_dtype;
    oscar::int2::check_row_params(d, p);
    OSCAR_CHECK(q.row_packing == "int2-strided", "unknown row packing '{}'", q.row_packing);
  } catch (const oscar::Error& e) {
    rt.int2_problem = e.what();
  }
  rt.manifest_json = oscar::bundle_manifest_json(rt.bundle);
  fill_info(rt);
}

oscar_runtime_params resolve(const oscar_runtime_params* params) {
  return params != nullptr ? *params : oscar_runtime_default_params();
}

void compare_identity(const oscar_runtime& rt, const oscar::ModelIdentity& model,
                      bool check_hashes) {
  try {
    oscar::check_bundle_matches_model(rt.bundle, model, check_hashes);
  } catch (const oscar::Error& e) {
    raise(OSCAR_STATUS_MODEL_MISMATCH, "{}: {}", rt.origin, e.what());
  }
}

bool is_sha256_hex(const std::string& s) {
  if (s.size() != 64) return false;
  for (const char c : s) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool has_bias(const HeadView& v, oscar_transform which) {
  switch (which) {
    case OSCAR_TRANSFORM_KEY:
    case OSCAR_TRANSFORM_KEY_INVERSE:
      return v.k_mean != nullptr;
    case OSCAR_TRANSFORM_VALUE:
    case OSCAR_TRANSFORM_OUTPUT:
    case OSCAR_TRANSFORM_VALUE_INVERSE:
      return v.v_mean != nullptr;
    case OSCAR_TRANSFORM_QUERY:
      return false;
  }
  return false;
}

oscar_transform checked_transform(const oscar_transform& which, const char* function) {
  const int v = raw(which);
  if (v < OSCAR_TRANSFORM_KEY || v > OSCAR_TRANSFORM_VALUE_INVERSE) {
    raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: transform {} is not an oscar_transform value",
          function, v);
  }
  return static_cast<oscar_transform>(v);
}

oscar_layout checked_layout(const oscar_layout& layout, const char* function) {
  const int v = raw(layout);
  if (v != OSCAR_LAYOUT_ROW_MAJOR && v != OSCAR_LAYOUT_TRANSPOSED) {
    raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: layout {} is not an oscar_layout value", function, v);
  }
  return static_cast<oscar_layout>(v);
}

// acc = x R (row vector times matrix), each output summed over i in index order in float32.
void times_matrix(const float* x, const float* r, std::int64_t d, float* acc) {
  std::fill(acc, acc + d, 0.0f);
  for (std::int64_t i = 0; i < d; ++i) {
    const float xi = x[i];
    const float* row = r + i * d;
    for (std::int64_t j = 0; j < d; ++j) acc[j] += xi * row[j];
  }
}

// acc = x R^T, each output summed over j in index order in float32.
void times_transpose(const float* x, const float* r, std::int64_t d, float* acc) {
  for (std::int64_t i = 0; i < d; ++i) {
    const float* row = r + i * d;
    float sum = 0.0f;
    for (std::int64_t j = 0; j < d; ++j) sum += x[j] * row[j];
    acc[i] = sum;
  }
}

void apply_row(const HeadView& v, oscar_transform which, const float* x, float* pre, float* acc,
               float* y) {
  const std::int64_t d = v.d;
  switch (which) {
    case OSCAR_TRANSFORM_KEY:
      for (std::int64_t i = 0; i < d; ++i) {
        float t = x[i];
        if (v.k_mean != nullptr) t -= v.k_mean[i];
        if (v.k_smooth != nullptr) t /= v.k_smooth[i];
        pre[i] = t;
      }
      times_matrix(pre, v.k_rotation, d, acc);
      break;
    case OSCAR_TRANSFORM_QUERY:
      for (std::int64_t i = 0; i < d; ++i)
        pre[i] = v.k_smooth != nullptr ? x[i] * v.k_smooth[i] : x[i];
      times_matrix(pre, v.k_rotation, d, acc);
      break;
    case OSCAR_TRANSFORM_VALUE:
      for (std::int64_t i = 0; i < d; ++i) pre[i] = v.v_mean != nullptr ? x[i] - v.v_mean[i] : x[i];
      times_matrix(pre, v.v_rotation, d, acc);
      break;
    case OSCAR_TRANSFORM_OUTPUT:
    case OSCAR_TRANSFORM_VALUE_INVERSE:
      times_transpose(x, v.v_rotation, d, acc);
      if (v.v_mean != nullptr) {
        for (std::int64_t i = 0; i < d; ++i) acc[i] += v.v_mean[i];
      }
      break;
    case OSCAR_TRANSFORM_KEY_INVERSE:
      times_transpose(x, v.k_rotation, d, acc);
      for (std::int64_t i = 0; i < d; ++i) {
        if (v.k_smooth != nullptr) acc[i] *= v.k_smooth[i];
        if (v.k_mean != nullptr) acc[i] += v.k_mean[i];
      }
      break;
  }
  std::copy(acc, acc + d, y);
}

// M and b of out = in M + b (M indexed [in][out]), in float64 from the float32 tensors.
void affine_of(const HeadView& v, oscar_transform which, std::vector<double>& m,
               std::vector<double>& b) {
  const std::int64_t d = v.d;
  m.assign(static_cast<std::size_t>(d * d), 0.0);
  b.assign(static_cast<std::size_t>(d), 0.0);
  auto s = [&](std::int64_t i) { return v.k_smooth != nullptr ? double(v.k_smooth[i]) : 1.0; };
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t j = 0; j < d; ++j) {
      double& mij = m[static_cast<std::size_t>(i * d + j)];
      switch (which) {
        case OSCAR_TRANSFORM_KEY:
          mij = double(v.k_rotation[i * d + j]) / s(i);
          break;
        case OSCAR_TRANSFORM_QUERY:
          mij = double(v.k_rotation[i * d + j]) * s(i);
          break;
        case OSCAR_TRANSFORM_VALUE:
          mij = double(v.v_rotation[i * d + j]);
          break;
        case OSCAR_TRANSFORM_OUTPUT:
        case OSCAR_TRANSFORM_VALUE_INVERSE:
          mij = double(v.v_rotation[j * d + i]);
          break;
        case OSCAR_TRANSFORM_KEY_INVERSE:
          mij = double(v.k_rotation[j * d + i]) * s(j);
          break;
      }
    }
  }
  for (std::int64_t j = 0; j < d; ++j) {
    double& bj = b[static_cast<std::size_t>(j)];
    switch (which) {
      case OSCAR_TRANSFORM_KEY:
        if (v.k_mean != nullptr) {
          for (std::int64_t i = 0; i < d; ++i) {
            bj -= double(v.k_mean[i]) / s(i) * double(v.k_rotation[i * d + j]);
          }
        }
        break;
      case OSCAR_TRANSFORM_VALUE:
        if (v.v_mean != nullptr) {
          for (std::int64_t i = 0; i < d; ++i) {
            bj -= double(v.v_mean[i]) * double(v.v_rotation[i * d + j]);
          }
        }
        break;
      case OSCAR_TRANSFORM_OUTPUT:
      case OSCAR_TRANSFORM_VALUE_INVERSE:
        if (v.v_mean != nullptr) bj = v.v_mean[j];
        break;
      case OSCAR_TRANSFORM_KEY_INVERSE:
        if (v.k_mean != nullptr) bj = v.k_mean[j];
        break;
      case OSCAR_TRANSFORM_QUERY:
        break;
    }
  }
}

const char* transform_name(oscar_transform which) {
  switch (which) {
    case OSCAR_TRANSFORM_KEY:
      return "key";
    case OSCAR_TRANSFORM_QUERY:
      return "query";
    case OSCAR_TRANSFORM_VALUE:
      return "value";
    case OSCAR_TRANSFORM_OUTPUT:
      return "output";
    case OSCAR_TRANSFORM_KEY_INVERSE:
      return "key inverse";
    case OSCAR_TRANSFORM_VALUE_INVERSE:
      return "value inverse";
  }
  return "unknown";
}

void check_int2(const oscar_runtime& rt, const char* function) {
  if (!rt.int2_problem.empty()) {
    raise(OSCAR_STATUS_UNSUPPORTED, "{}: {}: INT2 rows are not supported for this bundle: {}",
          function, rt.origin, rt.int2_problem);
  }
}

}  // namespace

extern "C" {

int oscar_runtime_abi_version(void) { return OSCAR_RUNTIME_ABI_VERSION; }

const char* oscar_runtime_version(void) { return oscar::version(); }

const char* oscar_status_string(oscar_status status) {
  switch (raw(status)) {
    case OSCAR_STATUS_OK:
      return "ok";
    case OSCAR_STATUS_INVALID_ARGUMENT:
      return "invalid argument";
    case OSCAR_STATUS_IO_ERROR:
      return "I/O error";
    case OSCAR_STATUS_FORMAT_ERROR:
      return "format error";
    case OSCAR_STATUS_MODEL_MISMATCH:
      return "model mismatch";
    case OSCAR_STATUS_UNSUPPORTED:
      return "unsupported";
    case OSCAR_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case OSCAR_STATUS_INTERNAL_ERROR:
      return "internal error";
  }
  return "unknown status";
}

const char* oscar_runtime_last_error(void) {
  return t_static_error != nullptr ? t_static_error : t_last_error.c_str();
}

oscar_runtime_params oscar_runtime_default_params(void) {
  oscar_runtime_params p;
  p.check_orthogonality = true;
  p.orthogonality_tolerance = 1e-5;
  return p;
}

oscar_model_desc oscar_runtime_default_model_desc(void) {
  oscar_model_desc d;
  d.num_layers = 0;
  d.num_heads = 0;
  d.num_kv_heads = 0;
  d.head_dim = 0;
  d.architecture = nullptr;
  d.config_sha256 = nullptr;
  d.weights_header_sha256 = nullptr;
  d.rope_theta = 0.0;
  return d;
}

oscar_status oscar_runtime_open(const char* path, const oscar_runtime_params* params,
                                oscar_runtime** out) {
  return guarded(OSCAR_STATUS_FORMAT_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_open";
    require(out, fn, "out");
    *out = nullptr;
    if (!is_set(path)) raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: path is NULL or empty", fn);
    const oscar_runtime_params p = resolve(params);
    check_params(p, fn);
    if (!oscar::file_exists(path)) {
      raise(OSCAR_STATUS_IO_ERROR, "bundle '{}' does not exist", path);
    }
    if (oscar::is_directory(path)) {
      raise(OSCAR_STATUS_IO_ERROR, "bundle '{}' is a directory, not a bundle file", path);
    }
    if (std::FILE* f = std::fopen(path, "rb")) {
      std::fclose(f);
    } else {
      raise(OSCAR_STATUS_IO_ERROR, "cannot read bundle '{}': {}", path,
            std::error_code(errno, std::generic_category()).message());
    }
    auto rt = std::make_unique<oscar_runtime>();
    rt->origin = path;
    rt->bundle = oscar::read_bundle(path);
    finish_open(*rt, p);
    *out = rt.release();
  });
}

oscar_status oscar_runtime_open_memory(const void* data, size_t size, const char* name,
                                       const oscar_runtime_params* params, oscar_runtime** out) {
  return guarded(OSCAR_STATUS_FORMAT_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_open_memory";
    require(out, fn, "out");
    *out = nullptr;
    if (data == nullptr && size > 0) raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: data is NULL", fn);
    const oscar_runtime_params p = resolve(params);
    check_params(p, fn);
    auto rt = std::make_unique<oscar_runtime>();
    rt->origin = is_set(name) ? name : "<memory>";
    static const std::uint8_t kEmpty = 0;
    const auto* bytes = data != nullptr ? static_cast<const std::uint8_t*>(data) : &kEmpty;
    rt->bundle = oscar::parse_bundle(bytes, size, rt->origin);
    finish_open(*rt, p);
    *out = rt.release();
  });
}

void oscar_runtime_close(oscar_runtime* rt) { delete rt; }

oscar_status oscar_runtime_validate(const oscar_runtime* rt, const oscar_model_desc* model) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_validate";
    const oscar_runtime& h = handle(rt, fn);
    require(model, fn, "model");
    const std::pair<const char*, std::int64_t> dims[] = {{"num_layers", model->num_layers},
                                                         {"num_heads", model->num_heads},
                                                         {"num_kv_heads", model->num_kv_heads},
                                                         {"head_dim", model->head_dim}};
    for (const auto& [name, value] : dims) {
      if (value <= 0) {
        raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: model description: {} must be positive (got {})",
              fn, name, value);
      }
    }
    if (!(model->rope_theta >= 0.0)) {
      raise(OSCAR_STATUS_INVALID_ARGUMENT,
            "{}: model description: rope_theta must be positive, or 0 to skip it (got {})", fn,
            model->rope_theta);
    }
    // Fields the engine leaves unset are taken from the bundle, so they compare equal.
    oscar::ModelIdentity id = h.bundle.model;
    id.name = "described by the engine";
    id.num_layers = model->num_layers;
    id.num_heads = model->num_heads;
    id.num_kv_heads = model->num_kv_heads;
    id.head_dim = model->head_dim;
    if (is_set(model->architecture)) id.architecture = model->architecture;
    if (model->rope_theta > 0.0) id.rope.theta = model->rope_theta;
    const std::pair<const char*, std::string*> hashes[] = {
        {model->config_sha256, &id.config_sha256},
        {model->weights_header_sha256, &id.weights_header_sha256}};
    for (const auto& [given, field] : hashes) {
      if (!is_set(given)) continue;
      if (!is_sha256_hex(given)) {
        raise(OSCAR_STATUS_INVALID_ARGUMENT,
              "{}: model description: '{}' is not a sha256 (64 hexadecimal digits)", fn, given);
      }
      *field = lower(given);
    }
    compare_identity(h, id, true);
  });
}

oscar_status oscar_runtime_validate_config(const oscar_runtime* rt, const char* config_json_path,
                                           bool check_hash) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_validate_config";
    const oscar_runtime& h = handle(rt, fn);
    if (!is_set(config_json_path)) {
      raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: config path is NULL or empty", fn);
    }
    const std::string path = config_json_path;
    if (!oscar::file_exists(path) || oscar::is_directory(path)) {
      raise(OSCAR_STATUS_IO_ERROR, "model config '{}' does not exist or is not a file", path);
    }
    std::string text;
    try {
      text = oscar::read_file(path);
    } catch (const oscar::Error& e) {
      raise(OSCAR_STATUS_IO_ERROR, "{}", e.what());
    }
    oscar::ModelConfig config;
    try {
      config = oscar::parse_model_config(text, path);
    } catch (const oscar::Error& e) {
      raise(OSCAR_STATUS_FORMAT_ERROR, "{}", e.what());
    }
    oscar::ModelIdentity id = h.bundle.model;  // keeps the weights hash: a config cannot tell it
    id.name = path;
    id.architecture = config.architecture;
    id.model_type = config.model_type;
    id.num_layers = config.num_layers;
    id.num_heads = config.num_heads;
    id.num_kv_heads = config.num_kv_heads;
    id.head_dim = config.head_dim;
    id.rope = config.rope;
    id.config_sha256 = oscar::sha256_hex(text);
    compare_identity(h, id, check_hash);
  });
}

oscar_status oscar_runtime_validate_model_dir(const oscar_runtime* rt, const char* model_dir,
                                              bool check_hashes) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_validate_model_dir";
    const oscar_runtime& h = handle(rt, fn);
    if (!is_set(model_dir)) {
      raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: model directory is NULL or empty", fn);
    }
    const std::string dir = model_dir;
    if (!oscar::is_directory(dir)) {
      raise(OSCAR_STATUS_IO_ERROR, "model directory '{}' does not exist", dir);
    }
    if (!oscar::file_exists(oscar::join_path(dir, "config.json"))) {
      raise(OSCAR_STATUS_IO_ERROR, "model directory '{}' has no config.json", dir);
    }
    oscar::ModelIdentity id;
    try {
      id = oscar::model_identity(dir);
    } catch (const oscar::Error& e) {
      raise(OSCAR_STATUS_FORMAT_ERROR, "{}", e.what());
    }
    compare_identity(h, id, check_hashes);
  });
}

const oscar_runtime_info* oscar_runtime_get_info(const oscar_runtime* rt) {
  if (rt == nullptr) {
    set_last_error("oscar_runtime_get_info: the handle is NULL");
    return nullptr;
  }
  return &rt->info;
}

const char* oscar_runtime_manifest_json(const oscar_runtime* rt) {
  if (rt == nullptr) {
    set_last_error("oscar_runtime_manifest_json: the handle is NULL");
    return nullptr;
  }
  return rt->manifest_json.c_str();
}

oscar_status oscar_runtime_rotation(const oscar_runtime* rt, oscar_kv kind_arg, int64_t layer,
                                    int64_t kv_head, const float** out) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_rotation";
    const oscar_runtime& h = handle(rt, fn);
    require(out, fn, "out");
    const oscar_kv kind = checked_kind(kind_arg, fn);
    check_head(h, layer, kv_head, fn);
    const HeadView v = head_view(h, layer, kv_head);
    *out = kind == OSCAR_KV_KEY ? v.k_rotation : v.v_rotation;
  });
}

oscar_status oscar_runtime_eigenvalues(const oscar_runtime* rt, oscar_kv kind_arg, int64_t layer,
                                       int64_t kv_head, const float** out) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_eigenvalues";
    const oscar_runtime& h = handle(rt, fn);
    require(out, fn, "out");
    const oscar_kv kind = checked_kind(kind_arg, fn);
    check_head(h, layer, kv_head, fn);
    const oscar::LayerRotations& l = h.bundle.layers[static_cast<std::size_t>(layer)];
    *out = slice(kind == OSCAR_KV_KEY ? l.k_eigenvalues : l.v_eigenvalues, kv_head, h.bundle.d());
  });
}

oscar_status oscar_runtime_clip_ratio(const oscar_runtime* rt, oscar_kv kind_arg, int64_t layer,
                                      int64_t kv_head, float* out) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_clip_ratio";
    const oscar_runtime& h = handle(rt, fn);
    require(out, fn, "out");
    const oscar_kv kind = checked_kind(kind_arg, fn);
    check_head(h, layer, kv_head, fn);
    const oscar::LayerRotations& l = h.bundle.layers[static_cast<std::size_t>(layer)];
    *out = (kind == OSCAR_KV_KEY ? l.k_clip : l.v_clip)[static_cast<std::size_t>(kv_head)];
  });
}

oscar_status oscar_runtime_mean(const oscar_runtime* rt, oscar_kv kind_arg, int64_t layer,
                                int64_t kv_head, const float** out) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_mean";
    const oscar_runtime& h = handle(rt, fn);
    require(out, fn, "out");
    const oscar_kv kind = checked_kind(kind_arg, fn);
    check_head(h, layer, kv_head, fn);
    const HeadView v = head_view(h, layer, kv_head);
    *out = kind == OSCAR_KV_KEY ? v.k_mean : v.v_mean;
  });
}

oscar_status oscar_runtime_key_smoothing(const oscar_runtime* rt, int64_t layer, int64_t kv_head,
                                         const float** out) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_key_smoothing";
    const oscar_runtime& h = handle(rt, fn);
    require(out, fn, "out");
    check_head(h, layer, kv_head, fn);
    *out = head_view(h, layer, kv_head).k_smooth;
  });
}

oscar_status oscar_runtime_transform_matrix(const oscar_runtime* rt, oscar_transform which_arg,
                                            int64_t layer, int64_t kv_head, oscar_layout layout_arg,
                                            float* matrix, float* bias) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_transform_matrix";
    const oscar_runtime& h = handle(rt, fn);
    const oscar_transform which = checked_transform(which_arg, fn);
    const oscar_layout layout = checked_layout(layout_arg, fn);
    check_head(h, layer, kv_head, fn);
    require(matrix, fn, "matrix");
    const HeadView v = head_view(h, layer, kv_head);
    if (bias == nullptr && has_bias(v, which)) {
      raise(
          OSCAR_STATUS_INVALID_ARGUMENT,
          "{}: bias is NULL but this bundle's {} map has a bias (its {} are centred)", fn,
          transform_name(which),
          which == OSCAR_TRANSFORM_KEY || which == OSCAR_TRANSFORM_KEY_INVERSE ? "keys" : "values");
    }
    std::vector<double> m, b;
    affine_of(v, which, m, b);
    const std::int64_t d = v.d;
    for (std::int64_t i = 0; i < d; ++i) {
      for (std::int64_t j = 0; j < d; ++j) {
        const std::int64_t at = layout == OSCAR_LAYOUT_ROW_MAJOR ? i * d + j : j * d + i;
        matrix[at] = static_cast<float>(m[static_cast<std::size_t>(i * d + j)]);
      }
    }
    if (bias != nullptr) {
      for (std::int64_t j = 0; j < d; ++j)
        bias[j] = static_cast<float>(b[static_cast<std::size_t>(j)]);
    }
  });
}

oscar_status oscar_runtime_apply(const oscar_runtime* rt, oscar_transform which_arg, int64_t layer,
                                 int64_t kv_head, const float* in, float* out, int64_t n_rows) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_apply";
    const oscar_runtime& h = handle(rt, fn);
    const oscar_transform which = checked_transform(which_arg, fn);
    check_head(h, layer, kv_head, fn);
    if (n_rows < 0) {
      raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: n_rows must not be negative (got {})", fn, n_rows);
    }
    if (n_rows == 0) return;
    require(in, fn, "in");
    require(out, fn, "out");
    const std::int64_t d = h.bundle.d();
    const std::size_t n = static_cast<std::size_t>(n_rows * d);
    const std::less<const float*> before;
    if (in != out && before(in, out + n) && before(out, in + n)) {
      raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: in and out overlap without being equal", fn);
    }
    const HeadView v = head_view(h, layer, kv_head);
    std::vector<float> pre(static_cast<std::size_t>(d)), acc(static_cast<std::size_t>(d));
    for (std::int64_t r = 0; r < n_rows; ++r) {
      apply_row(v, which, in + r * d, pre.data(), acc.data(), out + r * d);
    }
  });
}

int64_t oscar_runtime_int2_row_bytes(const oscar_runtime* rt) {
  if (rt == nullptr) {
    set_last_error("oscar_runtime_int2_row_bytes: the handle is NULL");
    return 0;
  }
  return oscar::int2::packed_bytes(rt->bundle.d());
}

int64_t oscar_runtime_int2_row_groups(const oscar_runtime* rt) {
  if (rt == nullptr) {
    set_last_error("oscar_runtime_int2_row_groups: the handle is NULL");
    return 0;
  }
  return rt->bundle.d() / rt->group_size;
}

oscar_status oscar_runtime_quantize_int2(const oscar_runtime* rt, oscar_kv kind_arg, int64_t layer,
                                         int64_t kv_head, const float* row_rot, uint8_t* packed,
                                         float* scales, float* zeros) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_quantize_int2";
    const oscar_runtime& h = handle(rt, fn);
    const oscar_kv kind = checked_kind(kind_arg, fn);
    check_head(h, layer, kv_head, fn);
    require(row_rot, fn, "row_rot");
    require(packed, fn, "packed");
    require(scales, fn, "scales");
    require(zeros, fn, "zeros");
    check_int2(h, fn);
    const std::int64_t d = h.bundle.d();
    for (std::int64_t i = 0; i < d; ++i) {
      if (!std::isfinite(row_rot[i])) {
        raise(OSCAR_STATUS_INVALID_ARGUMENT, "{}: element {} of the row is not finite ({})", fn, i,
              row_rot[i]);
      }
    }
    float clip = 0.0f;
    const oscar::LayerRotations& l = h.bundle.layers[static_cast<std::size_t>(layer)];
    clip = (kind == OSCAR_KV_KEY ? l.k_clip : l.v_clip)[static_cast<std::size_t>(kv_head)];
    oscar::int2::QuantParams p;
    p.group_size = h.group_size;
    p.clip_ratio = static_cast<double>(clip);
    p.scale_dtype = h.scale_dtype;
    oscar::int2::quantize_row(row_rot, d, p, packed, scales, zeros);
  });
}

oscar_status oscar_runtime_dequantize_int2(const oscar_runtime* rt, const uint8_t* packed,
                                           const float* scales, const float* zeros,
                                           float* row_rot) {
  return guarded(OSCAR_STATUS_INTERNAL_ERROR, [&] {
    constexpr const char* fn = "oscar_runtime_dequantize_int2";
    const oscar_runtime& h = handle(rt, fn);
    require(packed, fn, "packed");
    require(scales, fn, "scales");
    require(zeros, fn, "zeros");
    require(row_rot, fn, "row_rot");
    check_int2(h, fn);
    oscar::int2::dequantize_row(packed, scales, zeros, h.bundle.d(), h.group_size, row_rot);
  });
}

}  // extern "C"

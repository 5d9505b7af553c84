// Rotation bundle v1: manifest (JSON in the safetensors metadata), tensors, checksums, validation.
#include "oscar/bundle.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <utility>

#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/safetensors.h"
#include "oscar/sha256.h"

namespace oscar {
namespace {

using nlohmann::json;

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

json optional_to_json(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

json rope_to_json(const RopeConfig& rope) {
  return json{{"type", rope.type},
              {"theta", rope.theta},
              {"factor", rope.factor},
              {"low_freq_factor", rope.low_freq_factor},
              {"high_freq_factor", rope.high_freq_factor},
              {"original_max_position_embeddings", rope.original_max_position_embeddings},
              {"beta_fast", rope.beta_fast},
              {"beta_slow", rope.beta_slow},
              {"attention_factor", optional_to_json(rope.attention_factor)},
              {"mscale", optional_to_json(rope.mscale)},
              {"mscale_all_dim", optional_to_json(rope.mscale_all_dim)},
              {"truncate", rope.truncate},
              {"partial_rotary_factor", rope.partial_rotary_factor}};
}

// Strict field access: the manifest is our own format, so a missing or mistyped key is corruption.
class ManifestReader {
 public:
  explicit ManifestReader(std::string origin) : origin_(std::move(origin)) {}

  const json& object(const json& parent, const char* key) const {
    const json& value = field(parent, key);
    if (!value.is_object()) bad(key, "an object");
    return value;
  }
  std::string string(const json& parent, const char* key) const {
    const json& value = field(parent, key);
    if (!value.is_string()) bad(key, "a string");
    return value.get<std::string>();
  }
  std::int64_t integer(const json& parent, const char* key) const {
    const json& value = field(parent, key);
    if (!value.is_number_integer()) bad(key, "an integer");
    return value.get<std::int64_t>();
  }
  double number(const json& parent, const char* key) const {
    const json& value = field(parent, key);
    if (!value.is_number()) bad(key, "a number");
    return value.get<double>();
  }
  bool boolean(const json& parent, const char* key) const {
    const json& value = field(parent, key);
    if (!value.is_boolean()) bad(key, "a boolean");
    return value.get<bool>();
  }
  std::optional<double> optional_number(const json& parent, const char* key) const {
    const json& value = field(parent, key);
    if (value.is_null()) return std::nullopt;
    if (!value.is_number()) bad(key, "a number or null");
    return value.get<double>();
  }

 private:
  const json& field(const json& parent, const char* key) const {
    if (!parent.contains(key)) fail("{}: bundle manifest lacks the key '{}'", origin_, key);
    return parent.at(key);
  }
  [[noreturn]] void bad(const char* key, const char* what) const {
    fail("{}: bundle manifest key '{}' must be {}", origin_, key, what);
  }
  std::string origin_;
};

RopeConfig rope_from_json(const json& j, const ManifestReader& r) {
  RopeConfig rope;
  rope.type = r.string(j, "type");
  rope.theta = r.number(j, "theta");
  rope.factor = r.number(j, "factor");
  rope.low_freq_factor = r.number(j, "low_freq_factor");
  rope.high_freq_factor = r.number(j, "high_freq_factor");
  rope.original_max_position_embeddings = r.integer(j, "original_max_position_embeddings");
  rope.beta_fast = r.number(j, "beta_fast");
  rope.beta_slow = r.number(j, "beta_slow");
  rope.attention_factor = r.optional_number(j, "attention_factor");
  rope.mscale = r.optional_number(j, "mscale");
  rope.mscale_all_dim = r.optional_number(j, "mscale_all_dim");
  rope.truncate = r.boolean(j, "truncate");
  rope.partial_rotary_factor = r.number(j, "partial_rotary_factor");
  return rope;
}

// The tensors of a bundle in file order, with their shapes.
struct TensorSlot {
  std::string name;
  std::vector<std::int64_t> shape;
  const std::vector<float>* values;
};

std::vector<TensorSlot> tensor_slots(const Bundle& b) {
  const std::int64_t h = b.n_kv_heads(), d = b.d();
  std::vector<TensorSlot> slots;
  for (std::size_t i = 0; i < b.layers.size(); ++i) {
    const LayerRotations& layer = b.layers[i];
    const std::string prefix = fmt::format("layers.{}.", i);
    slots.push_back({prefix + "k_rotation", {h, d, d}, &layer.k_rotation});
    slots.push_back({prefix + "v_rotation", {h, d, d}, &layer.v_rotation});
    slots.push_back({prefix + "k_eigenvalues", {h, d}, &layer.k_eigenvalues});
    slots.push_back({prefix + "v_eigenvalues", {h, d}, &layer.v_eigenvalues});
    slots.push_back({prefix + "k_clip", {h}, &layer.k_clip});
    slots.push_back({prefix + "v_clip", {h}, &layer.v_clip});
    if (!layer.k_mean.empty()) slots.push_back({prefix + "k_mean", {h, d}, &layer.k_mean});
    if (!layer.v_mean.empty()) slots.push_back({prefix + "v_mean", {h, d}, &layer.v_mean});
    if (!layer.k_smooth.empty()) slots.push_back({prefix + "k_smooth", {h, d}, &layer.k_smooth});
  }
  return slots;
}

std::string bundle_checksum(const Bundle& b) {
  std::vector<NamedBytes> named;
  for (const TensorSlot& slot : tensor_slots(b)) {
    named.push_back({slot.name, slot.values->data(), slot.values->size() * sizeof(float)});
  }
  return tensor_checksum(std::move(named));
}

// Smoothing is the only version-2 feature: without it the bundle is written as version 1.
int written_format_version(const Bundle& b) { return b.calibration.smooth_keys > 0.0 ? 2 : 1; }

json manifest_to_json(const Bundle& b) {
  const ModelIdentity& m = b.model;
  const QuantizationParams& q = b.quantization;
  const CalibrationProvenance& c = b.calibration;
  const int version = written_format_version(b);
  json manifest{
      {"format", kBundleFormatName},
      {"format_version", version},
      {"model",
       {{"architecture", m.architecture},
        {"model_type", m.model_type},
        {"name", m.name},
        {"num_layers", m.num_layers},
        {"num_heads", m.num_heads},
        {"num_kv_heads", m.num_kv_heads},
        {"head_dim", m.head_dim},
        {"rope", rope_to_json(m.rope)},
        {"config_sha256", m.config_sha256},
        {"weights_header_sha256", m.weights_header_sha256}}},
      {"quantization",
       {{"bits", q.bits},
        {"group_size", q.group_size},
        {"sink_tokens", q.sink_tokens},
        {"recent_tokens", q.recent_tokens},
        {"scale_dtype", q.scale_dtype},
        {"row_packing", q.row_packing}}},
      {"calibration",
       {{"dataset_name", c.dataset_name},
        {"dataset_sha256", c.dataset_sha256},
        {"tokens", c.tokens},
        {"seq_len", c.seq_len},
        {"seed", c.seed},
        {"grouping", c.grouping},
        {"value_objective", c.value_objective},
        {"composition", c.composition},
        {"center_keys", c.center_keys},
        {"center_values", c.center_values},
        {"clip_method", c.clip_method},
        {"eigen_backend", c.eigen_backend},
        {"device", c.device}}},
      {"rotation_convention",
       version == 1 ? "x_rot = x @ R, row vectors; queries use R_K, outputs R_V^T"
                    : "x_rot = x @ R, row vectors; keys ((k - k_mean) / k_smooth) @ R_K, queries "
                      "(q * k_smooth) @ R_K, outputs R_V^T"},
      {"tensor_sha256", b.tensor_sha256},
      {"tool", {{"name", "oscar"}, {"version", b.tool_version}, {"git_commit", b.git_commit}}},
      {"created", b.created}};
  if (version >= 2) manifest["calibration"]["smooth_keys"] = c.smooth_keys;
  return manifest;
}

Bundle manifest_from_json(const std::string& text, const std::string& origin) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: bundle manifest is not valid JSON: {}", origin, e.what());
  }
  OSCAR_CHECK(j.is_object(), "{}: bundle manifest must be a JSON object", origin);
  const ManifestReader r(origin);
  const std::string format = r.string(j, "format");
  OSCAR_CHECK(format == kBundleFormatName, "{}: format '{}' is not '{}'", origin, format,
              kBundleFormatName);
  const std::int64_t version = r.integer(j, "format_version");
  OSCAR_CHECK(version <= kBundleFormatVersion,
              "{}: bundle format_version {} is newer than this tool reads ({}); upgrade oscar",
              origin, version, kBundleFormatVersion);
  OSCAR_CHECK(version >= 1, "{}: invalid bundle format_version {}", origin, version);
  Bundle b;
  const json& m = r.object(j, "model");
  b.model.architecture = r.string(m, "architecture");
  b.model.model_type = r.string(m, "model_type");
  b.model.name = r.string(m, "name");
  b.model.num_layers = r.integer(m, "num_layers");
  b.model.num_heads = r.integer(m, "num_heads");
  b.model.num_kv_heads = r.integer(m, "num_kv_heads");
  b.model.head_dim = r.integer(m, "head_dim");
  b.model.rope = rope_from_json(r.object(m, "rope"), r);
  b.model.config_sha256 = r.string(m, "config_sha256");
  b.model.weights_header_sha256 = r.string(m, "weights_header_sha256");

  const json& q = r.object(j, "quantization");
  b.quantization.bits = static_cast<int>(r.integer(q, "bits"));
  b.quantization.group_size = r.integer(q, "group_size");
  b.quantization.sink_tokens = r.integer(q, "sink_tokens");
  b.quantization.recent_tokens = r.integer(q, "recent_tokens");
  b.quantization.scale_dtype = r.string(q, "scale_dtype");
  b.quantization.row_packing = r.string(q, "row_packing");

  const json& c = r.object(j, "calibration");
  b.calibration.dataset_name = r.string(c, "dataset_name");
  b.calibration.dataset_sha256 = r.string(c, "dataset_sha256");
  b.calibration.tokens = r.integer(c, "tokens");
  b.calibration.seq_len = r.integer(c, "seq_len");
  b.calibration.seed = static_cast<std::uint64_t>(r.integer(c, "seed"));
  b.calibration.grouping = r.string(c, "grouping");
  b.calibration.value_objective = r.string(c, "value_objective");
  b.calibration.composition = r.string(c, "composition");
  b.calibration.center_keys = r.boolean(c, "center_keys");
  b.calibration.center_values = r.boolean(c, "center_values");
  if (version >= 2) {
    OSCAR_CHECK(c.contains("smooth_keys") && c.at("smooth_keys").is_number(),
                "{}: manifest field calibration.smooth_keys is missing or not a number", origin);
    b.calibration.smooth_keys = c.at("smooth_keys").get<double>();
    OSCAR_CHECK(b.calibration.smooth_keys > 0.0 && b.calibration.smooth_keys <= 1.0,
                "{}: calibration.smooth_keys {} outside (0, 1] in a version-2 bundle", origin,
                b.calibration.smooth_keys);
  }
  b.calibration.clip_method = r.string(c, "clip_method");
  b.calibration.eigen_backend = r.string(c, "eigen_backend");
  b.calibration.device = r.string(c, "device");

  b.tensor_sha256 = r.string(j, "tensor_sha256");
  const json& tool = r.object(j, "tool");
  b.tool_version = r.string(tool, "version");
  b.git_commit = r.string(tool, "git_commit");
  b.created = r.string(j, "created");
  return b;
}

}  // namespace

ModelIdentity model_identity(const std::string& model_dir) {
  const ModelConfig config = load_model_config(model_dir);
  ModelIdentity id;
  id.architecture = config.architecture;
  id.model_type = config.model_type;
  id.name = base_name(model_dir);
  id.num_layers = config.num_layers;
  id.num_heads = config.num_heads;
  id.num_kv_heads = config.num_kv_heads;
  id.head_dim = config.head_dim;
  id.rope = config.rope;
  id.config_sha256 = sha256_hex(read_file(join_path(model_dir, "config.json")));
  const Checkpoint checkpoint = Checkpoint::open(model_dir);
  std::vector<const SafetensorsFile*> files;
  for (const auto& file : checkpoint.files()) files.push_back(file.get());
  std::sort(files.begin(), files.end(), [](const SafetensorsFile* a, const SafetensorsFile* b) {
    return base_name(a->path()) < base_name(b->path());
  });
  Sha256 hash;
  for (const SafetensorsFile* file : files) {
    hash.update(base_name(file->path()));
    hash.update(std::string_view("\0", 1));
    hash.update(file->header_json());
  }
  id.weights_header_sha256 = hash.hex_digest();
  return id;
}

const float* Bundle::rotation(std::int64_t layer, std::int64_t head, char kind) const {
  OSCAR_CHECK(layer >= 0 && layer < static_cast<std::int64_t>(layers.size()),
              "bundle has no layer {}", layer);
  OSCAR_CHECK(head >= 0 && head < n_kv_heads(), "bundle has no KV head {}", head);
  const auto& r = kind == 'k' ? layers[layer].k_rotation : layers[layer].v_rotation;
  return r.data() + head * d() * d();
}

std::string tensor_checksum(std::vector<NamedBytes> tensors) {
  std::sort(tensors.begin(), tensors.end(),
            [](const NamedBytes& a, const NamedBytes& b) { return a.name < b.name; });
  Sha256 hash;
  for (const NamedBytes& t : tensors) {
    hash.update(t.name);
    hash.update(std::string_view("\0", 1));
    hash.update(t.data, t.nbytes);
  }
  return hash.hex_digest();
}

void validate_bundle(const Bundle& b, const std::string& origin) {
  const ModelIdentity& m = b.model;
  OSCAR_CHECK(m.num_layers > 0 && m.num_kv_heads > 0 && m.head_dim > 0 && m.num_heads > 0,
              "{}: bundle model dimensions must be positive (layers {}, heads {}/{}, head_dim {})",
              origin, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim);
  OSCAR_CHECK(m.num_heads % m.num_kv_heads == 0,
              "{}: {} query heads are not a multiple of {} KV heads", origin, m.num_heads,
              m.num_kv_heads);
  OSCAR_CHECK(static_cast<std::int64_t>(b.layers.size()) == m.num_layers,
              "{}: bundle has {} layers of tensors but the manifest says {}", origin,
              b.layers.size(), m.num_layers);
  const QuantizationParams& q = b.quantization;
  OSCAR_CHECK(q.bits == 2, "{}: unsupported quantization bits {} (2 only)", origin, q.bits);
  OSCAR_CHECK(q.group_size >= 0 && (q.group_size == 0 || m.head_dim % q.group_size == 0),
              "{}: group_size {} does not divide head_dim {}", origin, q.group_size, m.head_dim);
  OSCAR_CHECK(q.sink_tokens >= 0 && q.recent_tokens >= 0, "{}: negative sink or recent window",
              origin);
  const bool centred = b.calibration.center_keys;
  for (std::size_t i = 0; i < b.layers.size(); ++i) {
    const LayerRotations& layer = b.layers[i];
    OSCAR_CHECK(layer.k_mean.empty() != centred,
                "{}: layer {}: k_mean must be present exactly when keys are centred", origin, i);
    OSCAR_CHECK(layer.v_mean.empty() != b.calibration.center_values,
                "{}: layer {}: v_mean must be present exactly when values are centred", origin, i);
    OSCAR_CHECK(layer.k_smooth.empty() != (b.calibration.smooth_keys > 0.0),
                "{}: layer {}: k_smooth must be present exactly when keys are smoothed", origin, i);
    for (float s : layer.k_smooth) {
      OSCAR_CHECK(std::isfinite(s) && s > 0.0f,
                  "{}: layer {}: key smoothing scale {} is not a positive finite number", origin, i,
                  s);
    }
  }
  for (const TensorSlot& slot : tensor_slots(b)) {
    std::int64_t numel = 1;
    for (std::int64_t s : slot.shape) numel *= s;
    OSCAR_CHECK(static_cast<std::int64_t>(slot.values->size()) == numel,
                "{}: tensor {} holds {} values, expected {}", origin, slot.name,
                slot.values->size(), numel);
    for (float v : *slot.values) {
      OSCAR_CHECK(std::isfinite(v), "{}: tensor {} holds a non-finite value", origin, slot.name);
    }
    const bool is_clip =
        slot.name.size() > 5 && slot.name.compare(slot.name.size() - 5, 5, "_clip") == 0;
    if (is_clip) {
      for (float v : *slot.values) {
        OSCAR_CHECK(v > 0.0f && v <= 1.0f, "{}: tensor {} holds clip ratio {} outside (0, 1]",
                    origin, slot.name, v);
      }
    }
  }
}

int bundle_format_version(const Bundle& bundle) { return written_format_version(bundle); }

std::string bundle_manifest_json(const Bundle& bundle, int indent) {
  return manifest_to_json(bundle).dump(indent);
}

std::string manifest_checksum(std::string_view manifest_json) { return sha256_hex(manifest_json); }

void write_bundle(const std::string& path, Bundle& bundle) {
  validate_bundle(bundle, path);
  bundle.tensor_sha256 = bundle_checksum(bundle);
  std::vector<TensorToWrite> tensors;
  for (const TensorSlot& slot : tensor_slots(bundle)) {
    tensors.push_back({slot.name, DType::F32, slot.shape, slot.values->data(),
                       slot.values->size() * sizeof(float)});
  }
  const std::string manifest = bundle_manifest_json(bundle);
  const std::string sealed = manifest_checksum(manifest);
  write_safetensors(path, tensors, {{"oscar", manifest}, {kManifestChecksumKey, sealed}});
  bundle.manifest_sha256 = sealed;
}

Bundle read_bundle(const std::string& path) {
  OSCAR_CHECK(file_exists(path), "bundle '{}' does not exist", path);
  const MappedFile file(path);
  return parse_bundle(file.data(), file.size(), path);
}

Bundle parse_bundle(const std::uint8_t* bytes, std::size_t size, const std::string& origin) {
  const SafetensorsHeader header = parse_safetensors_header(bytes, size, origin);
  // The data section follows the 8-byte length prefix and the JSON header.
  const std::uint8_t* data_section = bytes + 8 + header.header_size;
  std::map<std::string, const TensorInfo*> by_name;
  for (const TensorInfo& info : header.tensors) by_name.emplace(info.name, &info);
  const auto manifest = header.metadata.find("oscar");
  OSCAR_CHECK(manifest != header.metadata.end(),
              "{}: not an OSCAR bundle (no 'oscar' manifest in the safetensors metadata)", origin);
  // The manifest's checksum, when the file has one (older bundles have none; readers that predate
  // it ignore the entry, so it needs no new format version). Checked before the manifest is read,
  // so a damaged manifest is reported as such whatever it now says.
  const auto sealed = header.metadata.find(kManifestChecksumKey);
  if (sealed != header.metadata.end()) {
    const std::string actual = manifest_checksum(manifest->second);
    OSCAR_CHECK(sealed->second == actual,
                "{}: manifest checksum mismatch ({} {}, manifest {}): the file is corrupt", origin,
                kManifestChecksumKey, sealed->second, actual);
  }
  Bundle b = manifest_from_json(manifest->second, origin);
  if (sealed != header.metadata.end()) b.manifest_sha256 = sealed->second;

  // Every tensor the manifest implies must be present with its dtype and shape; nothing else may
  // be.
  const std::int64_t h = b.model.num_kv_heads, d = b.model.head_dim;
  OSCAR_CHECK(b.model.num_layers > 0 && b.model.num_layers < 100000 && h > 0 && h < 100000 &&
                  d > 0 && d <= 65536,
              "{}: implausible model dimensions in the manifest (layers {}, KV heads {}, "
              "head_dim {})",
              origin, b.model.num_layers, h, d);
  b.layers.resize(b.model.num_layers);
  std::set<std::string> expected;
  auto load = [&](const std::string& name, std::vector<std::int64_t> shape,
                  std::vector<float>& out) {
    expected.insert(name);
    const auto found = by_name.find(name);
    OSCAR_CHECK(found != by_name.end(), "{}: bundle lacks tensor {}", origin, name);
    const TensorInfo* info = found->second;
    OSCAR_CHECK(info->dtype == DType::F32, "{}: tensor {} is {}, expected F32", origin, name,
                dtype_name(info->dtype));
    OSCAR_CHECK(info->shape == shape, "{}: tensor {} has shape [{}], expected [{}]", origin, name,
                fmt::join(info->shape, ", "), fmt::join(shape, ", "));
    out.resize(static_cast<std::size_t>(info->numel()));
    std::memcpy(out.data(), data_section + info->begin, info->nbytes());
  };
  for (std::int64_t i = 0; i < b.model.num_layers; ++i) {
    LayerRotations& layer = b.layers[i];
    const std::string prefix = fmt::format("layers.{}.", i);
    load(prefix + "k_rotation", {h, d, d}, layer.k_rotation);
    load(prefix + "v_rotation", {h, d, d}, layer.v_rotation);
    load(prefix + "k_eigenvalues", {h, d}, layer.k_eigenvalues);
    load(prefix + "v_eigenvalues", {h, d}, layer.v_eigenvalues);
    load(prefix + "k_clip", {h}, layer.k_clip);
    load(prefix + "v_clip", {h}, layer.v_clip);
    if (b.calibration.center_keys) load(prefix + "k_mean", {h, d}, layer.k_mean);
    if (b.calibration.center_values) load(prefix + "v_mean", {h, d}, layer.v_mean);
    if (b.calibration.smooth_keys > 0.0) load(prefix + "k_smooth", {h, d}, layer.k_smooth);
  }
  for (const TensorInfo& info : header.tensors) {
    OSCAR_CHECK(expected.count(info.name) == 1,
                "{}: unexpected tensor {} (not part of bundle format v{})", origin, info.name,
                written_format_version(b));
  }
  const std::string actual = bundle_checksum(b);
  OSCAR_CHECK(actual == b.tensor_sha256,
              "{}: tensor checksum mismatch (manifest {}, data {}): the file is corrupt", origin,
              b.tensor_sha256, actual);
  validate_bundle(b, origin);
  return b;
}

double max_orthogonality_error(const Bundle& b, char kind) {
  const std::int64_t d = b.d();
  double worst = 0.0;
  for (std::int64_t layer = 0; layer < static_cast<std::int64_t>(b.layers.size()); ++layer) {
    for (std::int64_t head = 0; head < b.n_kv_heads(); ++head) {
      const float* r = b.rotation(layer, head, kind);
      for (std::int64_t i = 0; i < d; ++i) {
        for (std::int64_t j = 0; j < d; ++j) {
          double dot = 0.0;
          for (std::int64_t k = 0; k < d; ++k) dot += double(r[i * d + k]) * r[j * d + k];
          worst = std::max(worst, std::abs(dot - (i == j ? 1.0 : 0.0)));
        }
      }
    }
  }
  return worst;
}

void check_bundle_matches_model(const Bundle& bundle, const ModelIdentity& model,
                                bool check_hashes) {
  const ModelIdentity& b = bundle.model;
  std::vector<std::string> problems;
  auto compare = [&](const char* what, const auto& in_bundle, const auto& in_model) {
    if (!(in_bundle == in_model)) {
      problems.push_back(fmt::format("{} {} (bundle) vs {} (model)", what, in_bundle, in_model));
    }
  };
  compare("layers", b.num_layers, model.num_layers);
  compare("query heads", b.num_heads, model.num_heads);
  compare("KV heads", b.num_kv_heads, model.num_kv_heads);
  compare("head_dim", b.head_dim, model.head_dim);
  compare("architecture", b.architecture, model.architecture);
  compare("rope type", b.rope.type, model.rope.type);
  compare("rope theta", b.rope.theta, model.rope.theta);
  compare("rope factor", b.rope.factor, model.rope.factor);
  if (check_hashes) {
    compare("config sha256", b.config_sha256, model.config_sha256);
    compare("weights header sha256", b.weights_header_sha256, model.weights_header_sha256);
  }
  if (!problems.empty()) {
    fail("bundle for model '{}' does not fit model '{}': {}", b.name, model.name,
         fmt::join(problems, "; "));
  }
}

}  // namespace oscar

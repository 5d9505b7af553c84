// SGLang rotation checkpoints (k_rotation_*.pt / v_rotation_*.pt) from and to rotation bundles,
// and the list of what each export target cannot express.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <map>

#include "oscar/bundle_export.h"
#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/sha256.h"
#include "oscar/version.h"

namespace oscar {
namespace {

constexpr const char* kProvenanceFormat = "oscar-sglang-rotations";

// The anchor's objective names: the key target is always the query covariance ("qqt"); "sst" is
// the value target (the released code computes its key-weighted proxy under that name, the paper
// the attention-output covariance: our provenance says which). Compositions: "plain" is R = U.
std::string objective_suffix(const std::string& composition) {
  if (composition == "r") return "plain";
  return composition;  // r_h_pbr, r_h
}

std::string objective(const Bundle& b, char kind) {
  if (b.calibration.composition == "h") return "hadamard";
  return fmt::format("{}_{}", kind == 'k' ? "qqt" : "sst",
                     objective_suffix(b.calibration.composition));
}

bool same_floats(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

PickleValue tensor_of(std::vector<std::int64_t> shape, std::vector<float> values) {
  TorchTensor t;
  t.shape = std::move(shape);
  t.values = std::move(values);
  return PickleValue::tensor(std::move(t));
}

PickleValue provenance(const Bundle& b, char kind) {
  const ModelIdentity& m = b.model;
  const CalibrationProvenance& c = b.calibration;
  const QuantizationParams& q = b.quantization;
  PickleValue model = PickleValue::dict();
  model.set("name", PickleValue::string(m.name));
  model.set("architecture", PickleValue::string(m.architecture));
  model.set("num_layers", PickleValue::integer(m.num_layers));
  model.set("num_heads", PickleValue::integer(m.num_heads));
  model.set("num_kv_heads", PickleValue::integer(m.num_kv_heads));
  model.set("head_dim", PickleValue::integer(m.head_dim));
  model.set("config_sha256", PickleValue::string(m.config_sha256));
  model.set("weights_header_sha256", PickleValue::string(m.weights_header_sha256));
  PickleValue cal = PickleValue::dict();
  cal.set("dataset_name", PickleValue::string(c.dataset_name));
  cal.set("dataset_sha256", PickleValue::string(c.dataset_sha256));
  cal.set("tokens", PickleValue::integer(c.tokens));
  cal.set("seq_len", PickleValue::integer(c.seq_len));
  cal.set("seed", PickleValue::integer(static_cast<std::int64_t>(c.seed)));
  cal.set("grouping", PickleValue::string(c.grouping));
  cal.set("value_objective", PickleValue::string(c.value_objective));
  cal.set("composition", PickleValue::string(c.composition));
  cal.set("center_keys", PickleValue::boolean(c.center_keys));
  cal.set("center_values", PickleValue::boolean(c.center_values));
  cal.set("smooth_keys", PickleValue::real(c.smooth_keys));
  cal.set("clip_method", PickleValue::string(c.clip_method));
  cal.set("eigen_backend", PickleValue::string(c.eigen_backend));
  cal.set("device", PickleValue::string(c.device));
  PickleValue quant = PickleValue::dict();
  quant.set("bits", PickleValue::integer(q.bits));
  quant.set("group_size", PickleValue::integer(q.group_size));
  quant.set("sink_tokens", PickleValue::integer(q.sink_tokens));
  quant.set("recent_tokens", PickleValue::integer(q.recent_tokens));
  quant.set("scale_dtype", PickleValue::string(q.scale_dtype));
  quant.set("row_packing", PickleValue::string(q.row_packing));
  std::vector<float> clip;
  for (const LayerRotations& l : b.layers) {
    const auto& c_ratios = kind == 'k' ? l.k_clip : l.v_clip;
    clip.insert(clip.end(), c_ratios.begin(), c_ratios.end());
  }
  PickleValue p = PickleValue::dict();
  p.set("format", PickleValue::string(kProvenanceFormat));
  p.set("format_version", PickleValue::integer(1));
  p.set("kind", PickleValue::string(std::string(1, kind)));
  p.set("model", std::move(model));
  p.set("calibration", std::move(cal));
  p.set("quantization", std::move(quant));
  p.set("clip", tensor_of({m.num_layers, m.num_kv_heads}, std::move(clip)));
  p.set("bundle_format_version", PickleValue::integer(bundle_format_version(b)));
  p.set("bundle_tensor_sha256", PickleValue::string(b.tensor_sha256));
  p.set("tool", PickleValue::string(fmt::format("oscar {} ({})", version(), git_commit())));
  return p;
}

PickleValue export_dict(const Bundle& b, char kind, int format_version) {
  const std::int64_t h = b.n_kv_heads(), d = b.d();
  PickleValue root = PickleValue::dict();
  root.set("format_version", PickleValue::integer(format_version));
  root.set("objective", PickleValue::string(objective(b, kind)));
  root.set("source_grouping", PickleValue::string(format_version == 1 ? "layer" : "head"));
  PickleValue layers = PickleValue::dict();
  for (std::int64_t i = 0; i < b.model.num_layers; ++i) {
    const LayerRotations& l = b.layers[static_cast<std::size_t>(i)];
    const auto& rotation = kind == 'k' ? l.k_rotation : l.v_rotation;
    const auto& eigen = kind == 'k' ? l.k_eigenvalues : l.v_eigenvalues;
    const std::int64_t heads = format_version == 1 ? 1 : h;
    std::vector<float> r(rotation.begin(), rotation.begin() + heads * d * d);
    std::vector<float> e;  // ascending per head: the order torch.linalg.eigh returns
    for (std::int64_t head = 0; head < heads; ++head) {
      e.insert(e.end(), eigen.rbegin() + (h - 1 - head) * d, eigen.rbegin() + (h - head) * d);
    }
    PickleValue layer = PickleValue::dict();
    layer.set("layer_id", PickleValue::integer(i));
    layer.set("rotation", format_version == 1 ? tensor_of({d, d}, std::move(r))
                                              : tensor_of({h, d, d}, std::move(r)));
    layer.set("eigenvalues",
              format_version == 1 ? tensor_of({d}, std::move(e)) : tensor_of({h, d}, std::move(e)));
    layers.set(PickleValue::integer(i), std::move(layer));
  }
  root.set("layers", std::move(layers));
  root.set("oscar", provenance(b, kind));
  return root;
}

// ---- import -----------------------------------------------------------------------------------

struct ImportedSide {
  int format_version = 0;
  std::string objective;
  std::vector<std::vector<float>> rotation;  // per layer [H, d, d]
  std::vector<std::vector<float>> eigen;     // per layer [H, d], descending
  const PickleValue* provenance = nullptr;
};

ImportedSide read_side(const PickleValue& root, const std::string& origin,
                       const ModelIdentity& model) {
  const std::int64_t layers = model.num_layers, h = model.num_kv_heads, d = model.head_dim;
  ImportedSide side;
  root.entries(origin + ": the checkpoint");  // must be a dict
  const PickleValue* version = root.find("format_version");
  const PickleValue* layer_map = root.find("layers");
  OSCAR_CHECK(layer_map != nullptr, "{}: no 'layers' entry (not an OSCAR rotation checkpoint)",
              origin);
  if (const PickleValue* o = root.find("objective"))
    side.objective = o->as_string(origin + ": objective");
  side.provenance = root.find("oscar");
  if (side.provenance != nullptr) {
    const PickleValue* format = side.provenance->find("format");
    OSCAR_CHECK(
        format != nullptr && format->as_string(origin + ": oscar.format") == kProvenanceFormat,
        "{}: the 'oscar' entry is not {} provenance", origin, kProvenanceFormat);
  }
  // Index the layers by id: keys are ints (torch.save of the anchor) or their decimal strings.
  std::map<std::int64_t, const PickleValue*> by_id;
  for (const auto& [key, value] : layer_map->entries(origin + ": 'layers'")) {
    std::int64_t id = -1;
    if (key.is(PickleValue::Kind::kInt)) {
      id = key.as_int("");
    } else {
      const std::string& s = key.as_string(origin + ": a layer key");
      OSCAR_CHECK(!s.empty() && s.size() < 10 &&
                      std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }),
                  "{}: layer key '{}' is not a layer number", origin, s);
      id = std::stoll(s);
    }
    OSCAR_CHECK(by_id.emplace(id, &value).second, "{}: layer {} appears twice", origin, id);
    OSCAR_CHECK(id >= 0 && id < layers,
                "{}: layer {} does not exist in the model ({} layers): rotations of one model do "
                "not transfer to another",
                origin, id, layers);
  }
  for (std::int64_t i = 0; i < layers; ++i) {
    OSCAR_CHECK(by_id.count(i) == 1, "{}: layer {} is missing ({} of the model's {} present)",
                origin, i, by_id.size(), layers);
    const PickleValue& entry = *by_id.at(i);
    const std::string where = fmt::format("{}: layer {}", origin, i);
    if (const PickleValue* id = entry.find("layer_id")) {
      OSCAR_CHECK(id->as_int(where + " layer_id") == i, "{} has layer_id {}", where,
                  id->as_int(""));
    }
    const PickleValue* rot = entry.find("rotation");
    OSCAR_CHECK(rot != nullptr, "{} has no 'rotation'", where);
    const TorchTensor& r = rot->as_tensor(where + " rotation");
    // Dispatch on the rotation's rank, as SGLang does: [d, d] per layer or [H, d, d] per head.
    const int layer_version = r.shape.size() == 2 ? 1 : 2;
    if (layer_version == 1) {
      OSCAR_CHECK(r.shape == (std::vector<std::int64_t>{d, d}),
                  "{} rotation has shape [{}], expected [{}, {}] (head_dim {})", where,
                  fmt::join(r.shape, ", "), d, d, d);
    } else {
      OSCAR_CHECK(r.shape == (std::vector<std::int64_t>{h, d, d}),
                  "{} rotation has shape [{}], expected [{}, {}] or [{}, {}, {}] (KV heads {}, "
                  "head_dim {})",
                  where, fmt::join(r.shape, ", "), d, d, h, d, d, h, d);
    }
    OSCAR_CHECK(side.format_version == 0 || side.format_version == layer_version,
                "{}: layers mix per-layer and per-head rotations", origin);
    side.format_version = layer_version;
    const PickleValue* eig = entry.find("eigenvalues");
    OSCAR_CHECK(eig != nullptr, "{} has no 'eigenvalues'", where);
    const TorchTensor& e = eig->as_tensor(where + " eigenvalues");
    const std::vector<std::int64_t> eshape =
        layer_version == 1 ? std::vector<std::int64_t>{d} : std::vector<std::int64_t>{h, d};
    OSCAR_CHECK(e.shape == eshape, "{} eigenvalues have shape [{}], expected [{}]", where,
                fmt::join(e.shape, ", "), fmt::join(eshape, ", "));
    for (float v : r.values) OSCAR_CHECK(std::isfinite(v), "{} rotation is not finite", where);
    for (float v : e.values) OSCAR_CHECK(std::isfinite(v), "{} eigenvalues are not finite", where);
    std::vector<float> rotation, eigen;
    const std::int64_t stored_heads = layer_version == 1 ? 1 : h;
    for (std::int64_t head = 0; head < h; ++head) {
      const std::int64_t src = head % stored_heads;
      rotation.insert(rotation.end(), r.values.begin() + src * d * d,
                      r.values.begin() + (src + 1) * d * d);
      std::vector<float> values(e.values.begin() + src * d, e.values.begin() + (src + 1) * d);
      std::sort(values.begin(), values.end(), std::greater<float>());  // bundles: descending
      eigen.insert(eigen.end(), values.begin(), values.end());
    }
    side.rotation.push_back(std::move(rotation));
    side.eigen.push_back(std::move(eigen));
  }
  if (version != nullptr) {
    const std::int64_t v = version->as_int(origin + ": format_version");
    OSCAR_CHECK(v == 1 || v == 2, "{}: format_version {} is not 1 or 2", origin, v);
    OSCAR_CHECK(v == side.format_version,
                "{}: format_version {} but the rotations are {} (format {} shape)", origin, v,
                side.format_version == 1 ? "[d, d]" : "[H, d, d]", side.format_version);
  }
  return side;
}

std::string composition_from_objective(const std::string& objective) {
  if (objective == "hadamard") return "h";
  const std::pair<const char*, const char*> suffixes[] = {
      {"_r_h_pbr", "r_h_pbr"}, {"_r_h", "r_h"}, {"_plain", "r"}};
  for (const auto& [suffix, name] : suffixes) {
    const std::string s(suffix);
    if (objective.size() > s.size() &&
        objective.compare(objective.size() - s.size(), s.size(), s) == 0) {
      return name;
    }
  }
  return "";
}

const PickleValue& sub(const PickleValue& p, const char* key, const std::string& origin) {
  const PickleValue* v = p.find(key);
  OSCAR_CHECK(v != nullptr, "{}: provenance lacks '{}'", origin, key);
  return *v;
}

}  // namespace

bool rotations_shared_per_layer(const Bundle& b) {
  const std::size_t dd = static_cast<std::size_t>(b.d() * b.d());
  for (const LayerRotations& l : b.layers) {
    for (std::int64_t h = 1; h < b.n_kv_heads(); ++h) {
      const std::size_t at = static_cast<std::size_t>(h) * dd;
      if (!same_floats(l.k_rotation.data(), l.k_rotation.data() + at, dd) ||
          !same_floats(l.v_rotation.data(), l.v_rotation.data() + at, dd)) {
        return false;
      }
    }
  }
  return true;
}

std::vector<std::string> export_losses(const Bundle& b, const std::string& target) {
  OSCAR_CHECK(target == "sglang" || target == "gguf", "unknown export target '{}'", target);
  const std::string engine = target == "sglang" ? "SGLang" : "the llama.cpp port";
  const CalibrationProvenance& c = b.calibration;
  std::vector<std::string> losses;
  if (c.smooth_keys > 0.0) {
    losses.push_back(fmt::format(
        "keys were smoothed (alpha {:.2f}): R_K was computed for keys divided by k_smooth and "
        "queries multiplied by it; the export cannot carry the scales, so {} applies R_K to "
        "unsmoothed keys (attention stays exact, but INT2 key error differs from what oscar-eval "
        "measured for this bundle). Calibrate with --smooth-keys 0 for a faithful export",
        c.smooth_keys, engine));
  }
  if (c.center_keys) {
    losses.push_back(fmt::format(
        "keys were centred: the per-head key means (k_mean) are dropped and {} quantizes k R_K "
        "uncentred (attention stays exact; INT2 key error differs from what oscar-eval measured). "
        "Calibrate with --no-center-keys for a faithful export",
        engine));
  }
  if (c.center_values) {
    losses.push_back(fmt::format(
        "values were centred: the per-head value means (v_mean) are dropped and {} quantizes "
        "v R_V uncentred",
        engine));
  }
  bool uniform_clip = true;
  const float k0 = b.layers.front().k_clip.front(), v0 = b.layers.front().v_clip.front();
  for (const LayerRotations& l : b.layers) {
    for (float k : l.k_clip) uniform_clip &= k == k0;
    for (float v : l.v_clip) uniform_clip &= v == v0;
  }
  if (!uniform_clip) {
    losses.push_back(fmt::format(
        "clip ratios differ per layer and head ({}); {} takes one key and one value ratio for the "
        "whole model (set it yourself; the files keep the per-head values only as provenance)",
        c.clip_method, engine));
  }
  if (target == "gguf" && !rotations_shared_per_layer(b)) {
    losses.push_back(
        "rotations differ per KV head (grouping head): the llama.cpp port loads one [d, d] "
        "rotation per layer, so per-head tensors [d, d, n_kv_heads] load only in a port that "
        "understands them");
  }
  return losses;
}

SglangFiles sglang_export(const Bundle& b, int format_version) {
  validate_bundle(b, "bundle to export");
  const bool shared = rotations_shared_per_layer(b);
  if (format_version == 0) format_version = shared ? 1 : 2;
  OSCAR_CHECK(format_version == 1 || format_version == 2,
              "SGLang rotation format_version must be 1 or 2, not {}", format_version);
  OSCAR_CHECK(format_version == 2 || shared,
              "format_version 1 holds one rotation per layer, but this bundle's KV heads have "
              "different rotations (grouping {}): export format 2, or calibrate with --grouping "
              "layer",
              b.calibration.grouping);
  SglangFiles files;
  files.format_version = format_version;
  files.k_name = fmt::format("k_rotation_{}.pt", objective(b, 'k'));
  files.v_name = fmt::format("v_rotation_{}.pt", objective(b, 'v'));
  files.k = export_dict(b, 'k', format_version);
  files.v = export_dict(b, 'v', format_version);
  return files;
}

std::vector<std::string> write_sglang_export(const SglangFiles& files,
                                             const std::string& directory) {
  OSCAR_CHECK(is_directory(directory), "output directory '{}' does not exist", directory);
  const std::string k_path = join_path(directory, files.k_name);
  const std::string v_path = join_path(directory, files.v_name);
  write_torch_archive(k_path, files.k);
  write_torch_archive(v_path, files.v);
  return {k_path, v_path};
}

Bundle sglang_import(const PickleValue& k_root, const PickleValue& v_root,
                     const std::string& k_origin, const std::string& v_origin,
                     const ModelIdentity& model, const SglangImportOptions& options,
                     std::vector<std::string>* warnings) {
  auto warn = [&](std::string w) {
    if (warnings != nullptr) warnings->push_back(std::move(w));
  };
  // Provenance first: a file exported for another model is named as such, before its shapes.
  for (const auto& [root, origin] :
       {std::pair<const PickleValue*, const std::string*>{&k_root, &k_origin},
        {&v_root, &v_origin}}) {
    const PickleValue* p = root->is(PickleValue::Kind::kDict) ? root->find("oscar") : nullptr;
    if (p == nullptr || !options.check_hashes) continue;
    const PickleValue& m = sub(*p, "model", *origin);
    const std::string name = sub(m, "name", *origin).as_string("model name");
    const std::string config = sub(m, "config_sha256", *origin).as_string("config_sha256");
    const std::string weights =
        sub(m, "weights_header_sha256", *origin).as_string("weights_header_sha256");
    OSCAR_CHECK(config == model.config_sha256 && weights == model.weights_header_sha256,
                "{} was exported for model '{}' (config sha256 {}), not '{}' (config sha256 {}); "
                "rotations do not transfer between checkpoints (--skip-hashes to import anyway)",
                *origin, name, config.substr(0, 12), model.name, model.config_sha256.substr(0, 12));
  }
  const ImportedSide k = read_side(k_root, k_origin, model);
  const ImportedSide v = read_side(v_root, v_origin, model);
  OSCAR_CHECK(k.format_version == v.format_version, "{} holds {} rotations but {} holds {}",
              k_origin, k.format_version == 1 ? "per-layer" : "per-head", v_origin,
              v.format_version == 1 ? "per-layer" : "per-head");

  Bundle b;
  b.model = model;
  b.tool_version = version();
  b.git_commit = git_commit();
  CalibrationProvenance& c = b.calibration;
  c.grouping = k.format_version == 1 ? "layer" : "head";
  c.eigen_backend = "imported";
  c.device = "none";
  c.clip_method = "fixed";

  // Our own exports carry provenance: identity to check, and the calibration to restore.
  const PickleValue* prov = k.provenance != nullptr ? k.provenance : v.provenance;
  if (prov != nullptr) {
    const std::string& origin = k.provenance != nullptr ? k_origin : v_origin;
    const PickleValue& cal = sub(*prov, "calibration", origin);
    c.dataset_name = sub(cal, "dataset_name", origin).as_string("dataset_name");
    c.dataset_sha256 = sub(cal, "dataset_sha256", origin).as_string("dataset_sha256");
    c.tokens = sub(cal, "tokens", origin).as_int("tokens");
    c.seq_len = sub(cal, "seq_len", origin).as_int("seq_len");
    c.seed = static_cast<std::uint64_t>(sub(cal, "seed", origin).as_int("seed"));
    c.value_objective = sub(cal, "value_objective", origin).as_string("value_objective");
    // A per-head bundle whose heads happen to agree (e.g. one KV head) travels as format 1.
    c.grouping = sub(cal, "grouping", origin).as_string("grouping");
    c.composition = sub(cal, "composition", origin).as_string("composition");
    c.clip_method = sub(cal, "clip_method", origin).as_string("clip_method");
    c.eigen_backend = sub(cal, "eigen_backend", origin).as_string("eigen_backend");
    c.device = sub(cal, "device", origin).as_string("device");
    if (sub(cal, "center_keys", origin).as_bool("center_keys")) {
      warn(
          "the source bundle centred keys; the files carry no key means, so the imported bundle "
          "has none (it evaluates what SGLang runs)");
    }
    if (sub(cal, "center_values", origin).as_bool("center_values")) {
      warn("the source bundle centred values; the imported bundle has no value means");
    }
    if (sub(cal, "smooth_keys", origin).as_float("smooth_keys") > 0.0) {
      warn(
          "the source bundle smoothed keys; the files carry no scales, so the imported bundle "
          "applies R_K to unsmoothed keys (what SGLang runs)");
    }
    const PickleValue& q = sub(*prov, "quantization", origin);
    b.quantization.group_size = sub(q, "group_size", origin).as_int("group_size");
    b.quantization.sink_tokens = sub(q, "sink_tokens", origin).as_int("sink_tokens");
    b.quantization.recent_tokens = sub(q, "recent_tokens", origin).as_int("recent_tokens");
    b.quantization.scale_dtype = sub(q, "scale_dtype", origin).as_string("scale_dtype");
  } else {
    warn(
        "the files carry no provenance (not written by oscar-bundle): model identity was not "
        "checked beyond layer count and shapes, calibration data is unknown");
    c.dataset_name = "imported";
    c.value_objective = "keyweight";  // what the released reference code calls "sst"
  }
  if (!options.value_objective.empty()) c.value_objective = options.value_objective;
  OSCAR_CHECK(c.value_objective == "attn" || c.value_objective == "keyweight",
              "value objective '{}' is not attn or keyweight", c.value_objective);
  if (!options.composition.empty()) {
    c.composition = options.composition;
  } else if (prov == nullptr) {
    c.composition = composition_from_objective(k.objective);
    OSCAR_CHECK(!c.composition.empty(),
                "{}: objective '{}' names no known composition (r_h_pbr, plain, r_h, hadamard); "
                "pass --composition",
                k_origin, k.objective);
    if (composition_from_objective(v.objective) != c.composition) {
      warn(
          fmt::format("K objective '{}' and V objective '{}' name different compositions; "
                      "recording {}",
                      k.objective, v.objective, c.composition));
    }
  }
  OSCAR_CHECK(c.grouping == "head" || c.grouping == "layer", "grouping '{}' is not head or layer",
              c.grouping);
  OSCAR_CHECK(c.composition == "r_h_pbr" || c.composition == "r" || c.composition == "r_h" ||
                  c.composition == "h",
              "composition '{}' is not r_h_pbr, r, r_h or h", c.composition);

  const std::int64_t h = model.num_kv_heads;
  b.layers.resize(static_cast<std::size_t>(model.num_layers));
  auto clip_of = [&](const ImportedSide& side, double given, double fallback,
                     std::int64_t layer) -> std::vector<float> {
    if (given > 0.0) {
      OSCAR_CHECK(given <= 1.0, "clip ratio {} is outside (0, 1]", given);
      return std::vector<float>(static_cast<std::size_t>(h), static_cast<float>(given));
    }
    if (side.provenance != nullptr) {
      const PickleValue* clip = side.provenance->find("clip");
      if (clip != nullptr) {
        const TorchTensor& t = clip->as_tensor("provenance clip");
        OSCAR_CHECK(t.shape == (std::vector<std::int64_t>{model.num_layers, h}),
                    "provenance clip ratios have shape [{}]", fmt::join(t.shape, ", "));
        return std::vector<float>(t.values.begin() + layer * h, t.values.begin() + (layer + 1) * h);
      }
    }
    return std::vector<float>(static_cast<std::size_t>(h), static_cast<float>(fallback));
  };
  for (std::int64_t i = 0; i < model.num_layers; ++i) {
    LayerRotations& l = b.layers[static_cast<std::size_t>(i)];
    l.k_rotation = k.rotation[static_cast<std::size_t>(i)];
    l.v_rotation = v.rotation[static_cast<std::size_t>(i)];
    l.k_eigenvalues = k.eigen[static_cast<std::size_t>(i)];
    l.v_eigenvalues = v.eigen[static_cast<std::size_t>(i)];
    l.k_clip = clip_of(k, options.clip_k, 0.96, i);
    l.v_clip = clip_of(v, options.clip_v, 0.92, i);
  }
  if (options.clip_k <= 0.0 && k.provenance == nullptr) {
    warn("no clip ratios given or recorded: using K 0.96 / V 0.92 (the method's defaults)");
  }
  validate_bundle(b, k_origin);
  return b;
}

Bundle import_sglang_files(const std::string& k_path, const std::string& v_path,
                           const ModelIdentity& model, const SglangImportOptions& options,
                           std::vector<std::string>* warnings) {
  const PickleValue k = read_torch_archive(k_path);
  const PickleValue v = read_torch_archive(v_path);
  Bundle b = sglang_import(k, v, k_path, v_path, model, options, warnings);
  if (k.find("oscar") == nullptr) {
    // No calibration provenance: pin the source files instead.
    auto base = [](const std::string& p) {
      const auto slash = p.rfind('/');
      return slash == std::string::npos ? p : p.substr(slash + 1);
    };
    b.calibration.dataset_name = fmt::format("imported:{}+{}", base(k_path), base(v_path));
    Sha256 hash;
    hash.update(read_file(k_path));
    hash.update(read_file(v_path));
    b.calibration.dataset_sha256 = hash.hex_digest();
  }
  return b;
}

}  // namespace oscar

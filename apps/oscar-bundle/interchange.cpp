// oscar-bundle export / import / diff: command implementations and their reports.
#include "interchange.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <cmath>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "oscar/bundle_export.h"
#include "oscar/error.h"
#include "oscar/file.h"

namespace oscar_bundle {
namespace {

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return text;
}

void warn(const std::string& message) {
  fmt::print(stderr, "oscar-bundle: warning: {}\n", message);
}

// The single file in `dir` whose name starts with `prefix` and ends with ".pt".
std::string find_rotation_file(const std::string& dir, const std::string& prefix) {
  OSCAR_CHECK(oscar::is_directory(dir), "'{}' is not a directory", dir);
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > 3 &&
        name.compare(name.size() - 3, 3, ".pt") == 0) {
      found.push_back(entry.path().string());
    }
  }
  OSCAR_CHECK(found.size() == 1,
              "'{}' holds {} files named {}*.pt (expected exactly one; name "
              "them with --k-rotation / --v-rotation)",
              dir, found.size(), prefix);
  return found.front();
}

std::string metric(double value, bool defined = true) {
  if (!defined || std::isnan(value)) return "n/a";
  if (value == 0.0) return "0";
  return fmt::format("{:.2e}", value);
}

}  // namespace

int run_export(const ExportOptions& o) {
  const oscar::Bundle bundle = oscar::read_bundle(o.bundle_path);
  OSCAR_CHECK(o.format == "sglang" || o.format == "gguf",
              "unknown export format '{}' (sglang or gguf)", o.format);
  // Build first, so that a refused export prints its error alone; then report what is lost.
  if (o.format == "sglang") {
    const oscar::SglangFiles files = oscar::sglang_export(bundle, o.sglang_version);
    if (!oscar::is_directory(o.out)) {
      OSCAR_CHECK(::mkdir(o.out.c_str(), 0777) == 0,
                  "cannot create output directory '{}' (does its parent exist?)", o.out);
    }
    for (const auto& loss : oscar::export_losses(bundle, o.format)) warn(loss);
    const auto paths = oscar::write_sglang_export(files, o.out);
    fmt::print("wrote {} and {} (format_version {}, {} layers, rotation {})\n", paths[0], paths[1],
               files.format_version, bundle.model.num_layers,
               files.format_version == 1
                   ? fmt::format("[{0}, {0}] per layer", bundle.d())
                   : fmt::format("[{1}, {0}, {0}] per layer", bundle.d(), bundle.n_kv_heads()));
    const auto& l0 = bundle.layers.front();
    fmt::print(
        "SGLang reads these with torch.load; quantizer settings are its own: clip ratios here K "
        "{:.3g}, V {:.3g} (layer 0, head 0), sink {}, recent {}, group {}, scales {}\n",
        l0.k_clip.front(), l0.v_clip.front(), bundle.quantization.sink_tokens,
        bundle.quantization.recent_tokens,
        bundle.quantization.group_size == 0 ? bundle.d() : bundle.quantization.group_size,
        bundle.quantization.scale_dtype);
    return 0;
  }
  const oscar::GgufWriter writer = oscar::gguf_export(bundle, o.allow_per_head);
  oscar::check_writable(o.out, "GGUF output");
  for (const auto& loss : oscar::export_losses(bundle, o.format)) warn(loss);
  writer.write(o.out);
  const bool shared = oscar::rotations_shared_per_layer(bundle);
  fmt::print(
      "wrote {} ({} layers: blk.N.attn_k_rot.weight / attn_v_rot.weight, F32, ne [{}, {}{}])\n",
      o.out, bundle.model.num_layers, bundle.d(), bundle.d(),
      shared ? "" : fmt::format(", {}", bundle.n_kv_heads()));
  return 0;
}

int run_import(const ImportOptions& o) {
  OSCAR_CHECK(o.format == "sglang", "unknown import format '{}' (sglang)", o.format);
  std::string k_path = o.k_path, v_path = o.v_path;
  if (!o.from_dir.empty()) {
    if (k_path.empty()) k_path = find_rotation_file(o.from_dir, "k_rotation");
    if (v_path.empty()) v_path = find_rotation_file(o.from_dir, "v_rotation");
  }
  OSCAR_CHECK(!k_path.empty() && !v_path.empty(),
              "name the rotation files: --from DIR, or --k-rotation and --v-rotation");
  oscar::check_writable(o.out, "bundle output");
  const oscar::ModelIdentity model = oscar::model_identity(o.model_dir);
  oscar::SglangImportOptions options;
  options.clip_k = o.clip_k;
  options.clip_v = o.clip_v;
  options.composition = o.composition;
  options.value_objective = o.value_objective;
  options.check_hashes = !o.skip_hashes;
  std::vector<std::string> warnings;
  oscar::Bundle bundle = oscar::import_sglang_files(k_path, v_path, model, options, &warnings);
  for (const auto& w : warnings) warn(w);
  bundle.created = utc_now();
  oscar::write_bundle(o.out, bundle);
  fmt::print("wrote {} from {} and {} (model {}, grouping {}, composition {}, tensors {})\n", o.out,
             k_path, v_path, model.name, bundle.calibration.grouping,
             bundle.calibration.composition, bundle.tensor_sha256.substr(0, 16));
  return 0;
}

int run_diff(const DiffOptions& o) {
  const oscar::Bundle a = oscar::read_bundle(o.a);
  const oscar::Bundle b = oscar::read_bundle(o.b);
  const oscar::BundleDiff diff = oscar::diff_bundles(a, b, o.tolerances);
  const auto& t = o.tolerances;
  auto tolerance = [](double v) { return v < 0.0 ? nlohmann::json(nullptr) : nlohmann::json(v); };
  if (o.json) {
    nlohmann::json heads = nlohmann::json::array();
    for (const auto& h : diff.heads) {
      if (h.identical && !o.all) continue;
      heads.push_back({{"layer", h.layer},
                       {"head", h.head},
                       {"kind", std::string(1, h.kind)},
                       {"identical", h.identical},
                       {"rotation_max_abs", h.rotation},
                       {"angle_deg", h.angle_defined ? nlohmann::json(h.angle_deg) : nullptr},
                       {"eigen_rel", h.eigen},
                       {"clip_abs", h.clip},
                       {"aux_rel", h.aux}});
    }
    nlohmann::json fields = nlohmann::json::array();
    for (const auto& f : diff.fields) {
      fields.push_back({{"field", f.field}, {"a", f.a}, {"b", f.b}, {"counted", f.counted}});
    }
    const nlohmann::json report = {{"a", o.a},
                                   {"b", o.b},
                                   {"ok", diff.ok()},
                                   {"tensors_identical", diff.tensors_identical},
                                   {"leading", diff.leading},
                                   {"tolerances",
                                    {{"rotation", tolerance(t.rotation)},
                                     {"angle_deg", tolerance(t.angle_deg)},
                                     {"eigen", tolerance(t.eigen)},
                                     {"clip", tolerance(t.clip)},
                                     {"aux", tolerance(t.aux)}}},
                                   {"worst",
                                    {{"rotation_max_abs", diff.worst.rotation},
                                     {"angle_deg", diff.worst.angle_deg},
                                     {"eigen_rel", diff.worst.eigen},
                                     {"clip_abs", diff.worst.clip},
                                     {"aux_rel", diff.worst.aux}}},
                                   {"manifest_differences", fields},
                                   {"heads", heads},
                                   {"failures", diff.failures}};
    std::cout << report.dump(2) << "\n";
    return diff.ok() ? 0 : 2;
  }
  fmt::print("A  {}  ({}, {} tokens of {}, {} grouping, created {})\n", o.a, a.model.name,
             a.calibration.tokens, a.calibration.dataset_name, a.calibration.grouping, a.created);
  fmt::print("B  {}  ({}, {} tokens of {}, {} grouping, created {})\n", o.b, b.model.name,
             b.calibration.tokens, b.calibration.dataset_name, b.calibration.grouping, b.created);
  if (!diff.fields.empty()) {
    fmt::print("\nmanifest differences:\n");
    for (const auto& f : diff.fields) {
      fmt::print("  {:<36} {} | {}{}\n", f.field, f.a.substr(0, 40), f.b.substr(0, 40),
                 f.counted ? "" : "   (not counted)");
    }
  }
  std::size_t differing = 0;
  for (const auto& h : diff.heads) differing += h.identical ? 0 : 1;
  fmt::print("\ntensors: {} of {} (layer, KV head, K/V) differ{}\n", differing, diff.heads.size(),
             diff.tensors_identical ? " (bit-identical)" : "");
  if (differing > 0 || o.all) {
    fmt::print("{:>5} {:>4} {:>2}  {:>10} {:>12} {:>10} {:>9} {:>10}\n", "layer", "head", "",
               "max|dR|", fmt::format("angle(k={})", diff.leading), "eig rel", "clip", "aux rel");
    std::size_t shown = 0;
    for (const auto& h : diff.heads) {
      if (h.identical && !o.all) continue;
      if (shown++ == o.max_rows) {
        fmt::print("  ... ({} more rows; --json lists all)\n",
                   (o.all ? diff.heads.size() : differing) - o.max_rows);
        break;
      }
      fmt::print("{:>5} {:>4} {:>2}  {:>10} {:>12} {:>10} {:>9} {:>10}\n", h.layer, h.head,
                 h.kind == 'k' ? "K" : "V", metric(h.rotation),
                 h.angle_defined ? fmt::format("{:.3g} deg", h.angle_deg) : "n/a", metric(h.eigen),
                 metric(h.clip), metric(h.aux));
    }
    auto tol_text = [](double v) {
      return v < 0.0 ? std::string("unchecked") : fmt::format("{:.3g}", v);
    };
    fmt::print(
        "worst: max|dR| {} (tol {}), angle {:.3g} deg (tol {}), eig rel {} (tol {}), clip {} (tol "
        "{}), aux rel {} (tol {})\n",
        metric(diff.worst.rotation), tol_text(t.rotation), diff.worst.angle_deg,
        tol_text(t.angle_deg), metric(diff.worst.eigen), tol_text(t.eigen), metric(diff.worst.clip),
        tol_text(t.clip), metric(diff.worst.aux), tol_text(t.aux));
  }
  if (diff.ok()) {
    fmt::print("\nresult: {}\n", diff.tensors_identical ? "identical tensors" : "within tolerance");
    return 0;
  }
  fmt::print("\nresult: OVER TOLERANCE\n");
  for (const auto& f : diff.failures) fmt::print("  - {}\n", f);
  return 2;
}

}  // namespace oscar_bundle

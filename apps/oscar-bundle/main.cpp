// oscar-bundle: inspects, verifies, exports, imports and compares OSCAR rotation bundles.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "interchange.h"
#include "oscar/bundle.h"
#include "oscar/error.h"
#include "oscar/version.h"
#include "run_app.h"

namespace {

struct Options {
  std::string bundle_path, model_dir;
  double tolerance = 1e-5;
  bool json = false, skip_hashes = false;
};

// Largest increase between consecutive stored eigenvalues (they must be descending) and the most
// negative one (covariances are positive semi-definite).
std::pair<double, double> eigen_order_violations(const oscar::Bundle& b) {
  double worst_rise = 0.0, most_negative = 0.0;
  const std::int64_t d = b.d();
  for (const auto& layer : b.layers) {
    for (const auto* values : {&layer.k_eigenvalues, &layer.v_eigenvalues}) {
      for (std::size_t i = 0; i < values->size(); ++i) {
        most_negative = std::min(most_negative, double((*values)[i]));
        if (i % static_cast<std::size_t>(d) != 0) {
          worst_rise = std::max(worst_rise, double((*values)[i]) - (*values)[i - 1]);
        }
      }
    }
  }
  return {worst_rise, most_negative};
}

int inspect(const Options& o) {
  const oscar::Bundle b = oscar::read_bundle(o.bundle_path);
  if (o.json) {
    std::cout << oscar::bundle_manifest_json(b, 2) << "\n";
    return 0;
  }
  const auto& m = b.model;
  const auto& c = b.calibration;
  const auto& q = b.quantization;
  fmt::print("bundle      {} (format v{}, oscar {} @ {})\n", o.bundle_path,
             oscar::bundle_format_version(b), b.tool_version, b.git_commit.substr(0, 12));
  fmt::print("model       {} ({}): {} layers, {} q / {} KV heads, head_dim {}, rope {} theta {}\n",
             m.name, m.architecture, m.num_layers, m.num_heads, m.num_kv_heads, m.head_dim,
             m.rope.type, m.rope.theta);
  fmt::print("            config sha256 {}\n            weights header sha256 {}\n",
             m.config_sha256, m.weights_header_sha256);
  fmt::print("calibrated  {} tokens of {} (sha256 {}), seq {}, seed {}\n", c.tokens, c.dataset_name,
             c.dataset_sha256.substr(0, 16), c.seq_len, c.seed);
  fmt::print(
      "method      grouping {}, values {}, composition {}, centred keys {}, centred values {}, "
      "key smoothing {}, clip {}, eigensolver {} on {}\n",
      c.grouping, c.value_objective, c.composition, c.center_keys ? "yes" : "no",
      c.center_values ? "yes" : "no",
      c.smooth_keys > 0.0 ? fmt::format("alpha {:.2f}", c.smooth_keys) : std::string("no"),
      c.clip_method, c.eigen_backend, c.device);
  fmt::print("quantizer   INT{}, group {}, sink {}, recent {}, scales {}, packing {}\n", q.bits,
             q.group_size == 0 ? m.head_dim : q.group_size, q.sink_tokens, q.recent_tokens,
             q.scale_dtype, q.row_packing);
  fmt::print("created     {}\ntensors     sha256 {}\n\n", b.created, b.tensor_sha256);
  fmt::print("{:>5} {:>5}  {:>12} {:>12}  {:>12} {:>12}  {:>6} {:>6}\n", "layer", "head",
             "K eig max", "K eig min", "V eig max", "V eig min", "clip K", "clip V");
  const std::int64_t d = b.d();
  for (std::size_t i = 0; i < b.layers.size(); ++i) {
    const auto& l = b.layers[i];
    for (std::int64_t h = 0; h < b.n_kv_heads(); ++h) {
      const std::size_t base = static_cast<std::size_t>(h * d);
      fmt::print("{:>5} {:>5}  {:>12.4g} {:>12.4g}  {:>12.4g} {:>12.4g}  {:>6.3f} {:>6.3f}\n", i, h,
                 l.k_eigenvalues[base], l.k_eigenvalues[base + d - 1], l.v_eigenvalues[base],
                 l.v_eigenvalues[base + d - 1], l.k_clip[h], l.v_clip[h]);
    }
  }
  return 0;
}

int verify(const Options& o) {
  nlohmann::json report = {{"bundle", o.bundle_path}};
  std::vector<std::string> failures;
  const oscar::Bundle b = oscar::read_bundle(o.bundle_path);  // format, shapes, checksum
  report["manifest"] = "ok";
  report["checksum"] = "ok";
  const char* manifest_checksum =
      b.manifest_sha256.empty() ? "absent (written before manifest checksums)" : "ok";
  report["manifest_checksum"] = manifest_checksum;
  const double k_err = oscar::max_orthogonality_error(b, 'k');
  const double v_err = oscar::max_orthogonality_error(b, 'v');
  report["orthogonality_error"] = {{"k", k_err}, {"v", v_err}, {"tolerance", o.tolerance}};
  if (!(k_err <= o.tolerance) || !(v_err <= o.tolerance)) {
    failures.push_back(
        fmt::format("rotations are not orthogonal: max |R R^T - I| K {:.3g}, V "
                    "{:.3g} > {:.3g}",
                    k_err, v_err, o.tolerance));
  }
  const auto [rise, negative] = eigen_order_violations(b);
  // Eigenvalues are stored as float32 from float64: allow float32 rounding of the largest value.
  double largest = 0.0;
  for (const auto& l : b.layers) {
    for (float v : l.k_eigenvalues) largest = std::max(largest, double(std::abs(v)));
    for (float v : l.v_eigenvalues) largest = std::max(largest, double(std::abs(v)));
  }
  const double eigen_slack = 1e-6 * largest;
  if (rise > eigen_slack)
    failures.push_back(fmt::format("eigenvalues not descending ({:.3g})", rise));
  if (negative < -eigen_slack) {
    failures.push_back(fmt::format("negative eigenvalue {:.3g}", negative));
  }
  if (!o.model_dir.empty()) {
    try {
      oscar::check_bundle_matches_model(b, oscar::model_identity(o.model_dir), !o.skip_hashes);
      report["model"] = "ok";
    } catch (const oscar::Error& e) {
      report["model"] = e.what();
      failures.push_back(e.what());
    }
  }
  report["ok"] = failures.empty();
  report["failures"] = failures;
  if (o.json) {
    std::cout << report.dump(2) << "\n";
  } else {
    fmt::print(
        "{}: manifest ok, manifest checksum {}, tensor checksum ok, orthogonality K {:.2e} V "
        "{:.2e}{}\n",
        o.bundle_path, manifest_checksum, k_err, v_err,
        o.model_dir.empty() ? "" : ", model checked");
    for (const auto& f : failures) fmt::print("FAILED: {}\n", f);
    if (failures.empty()) fmt::print("verified\n");
  }
  return failures.empty() ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"oscar-bundle: inspect, verify, export, import and compare OSCAR rotation bundles"};
  app.require_subcommand(1);
  Options o;
  auto* inspect_cmd = app.add_subcommand("inspect", "Print a bundle's manifest and spectra");
  inspect_cmd->add_option("bundle", o.bundle_path, "Bundle file")->required();
  inspect_cmd->add_flag("--json", o.json, "Print the manifest as JSON");
  auto* verify_cmd = app.add_subcommand(
      "verify", "Check manifest, shapes, checksum, orthogonality and (with --model) the model");
  verify_cmd->add_option("bundle", o.bundle_path, "Bundle file")->required();
  verify_cmd->add_option("--model", o.model_dir, "Model directory the bundle must belong to");
  verify_cmd->add_option("--tolerance", o.tolerance, "Largest allowed |R R^T - I|")
      ->default_val(1e-5);
  verify_cmd->add_flag("--skip-hashes", o.skip_hashes,
                       "With --model: compare dimensions only, not the config/weights hashes");
  verify_cmd->add_flag("--json", o.json, "Print a JSON report");

  oscar_bundle::ExportOptions ex;
  auto* export_cmd =
      app.add_subcommand("export", "Write a bundle in a serving engine's format (docs/exports.md)");
  export_cmd->add_option("bundle", ex.bundle_path, "Bundle file")->required();
  export_cmd->add_option("--format", ex.format, "sglang (two .pt files) or gguf")->required();
  export_cmd
      ->add_option("--out", ex.out,
                   "sglang: directory for k_rotation_*.pt / v_rotation_*.pt (created when "
                   "missing); gguf: the .gguf file")
      ->required();
  export_cmd
      ->add_option("--sglang-version", ex.sglang_version,
                   "sglang format_version: 1 ([d, d] per layer) or 2 ([H, d, d]); default: 1 "
                   "when every KV head shares its layer's rotation, else 2")
      ->default_val(0);
  export_cmd->add_flag("--allow-per-head", ex.allow_per_head,
                       "gguf: write per-head rotations as [d, d, n_kv_heads] tensors (the "
                       "llama.cpp port loads [d, d] only)");

  oscar_bundle::ImportOptions im;
  auto* import_cmd =
      app.add_subcommand("import", "Make a bundle from a serving engine's rotation files");
  import_cmd->add_option("--format", im.format, "sglang")->required();
  import_cmd->add_option("--from", im.from_dir,
                         "Directory with one k_rotation_*.pt and one v_rotation_*.pt");
  import_cmd->add_option("--k-rotation", im.k_path, "Key rotation file (.pt)");
  import_cmd->add_option("--v-rotation", im.v_path, "Value rotation file (.pt)");
  import_cmd->add_option("--model", im.model_dir, "Model directory the rotations belong to")
      ->required();
  import_cmd->add_option("--out", im.out, "Bundle to write (.safetensors)")->required();
  import_cmd->add_option("--clip-k", im.clip_k,
                         "Key clip ratio for every head (default: recorded, else 0.96)");
  import_cmd->add_option("--clip-v", im.clip_v,
                         "Value clip ratio for every head (default: recorded, else 0.92)");
  import_cmd->add_option("--composition", im.composition,
                         "r_h_pbr, r, r_h or h (default: recorded, else from the objective name)");
  import_cmd->add_option("--value-objective", im.value_objective,
                         "attn or keyweight (default: recorded, else keyweight, the released "
                         "code's 'sst')");
  import_cmd->add_flag("--skip-hashes", im.skip_hashes,
                       "Import even when the files' provenance names another checkpoint");

  oscar_bundle::DiffOptions df;
  auto* diff_cmd = app.add_subcommand(
      "diff", "Compare two bundles (exit 0: within tolerance, 2: over tolerance, 1: error)");
  diff_cmd->add_option("a", df.a, "First bundle")->required();
  diff_cmd->add_option("b", df.b, "Second bundle")->required();
  auto& t = df.tolerances;
  diff_cmd->add_option("--rot-tol", t.rotation, "Max |R_A - R_B| per element (negative: unchecked)")
      ->default_val(0.0);
  diff_cmd
      ->add_option("--angle-tol", t.angle_deg,
                   "Max principal angle between leading eigen-subspaces, degrees "
                   "(negative: unchecked)")
      ->default_val(0.0);
  diff_cmd
      ->add_option("--eig-tol", t.eigen,
                   "Max eigenvalue difference relative to the head's largest (negative: "
                   "unchecked)")
      ->default_val(0.0);
  diff_cmd->add_option("--clip-tol", t.clip, "Max clip ratio difference (negative: unchecked)")
      ->default_val(0.0);
  diff_cmd
      ->add_option("--aux-tol", t.aux,
                   "Max relative difference of key/value means and smoothing scales "
                   "(negative: unchecked)")
      ->default_val(0.0);
  diff_cmd
      ->add_option("--leading", t.leading,
                   "Eigenvectors spanning the compared subspace (0: head_dim / 4)")
      ->default_val(0);
  diff_cmd->add_option("--ignore-field", t.ignored_fields,
                       "Manifest field (dotted, e.g. calibration.tokens) whose difference does "
                       "not count; repeatable");
  diff_cmd->add_flag("--all", df.all, "List every (layer, head, K/V), not only differing ones");
  diff_cmd->add_option("--max-rows", df.max_rows, "Rows of the table")->default_val(40);
  diff_cmd->add_flag("--json", df.json, "Print a JSON report");

  app.set_version_flag("--version", std::string(oscar::version()));
  CLI11_PARSE(app, argc, argv);
  return oscar_app::run_app("oscar-bundle", [&]() -> int {
    if (inspect_cmd->parsed()) return inspect(o);
    if (verify_cmd->parsed()) return verify(o);
    if (export_cmd->parsed()) return oscar_bundle::run_export(ex);
    if (import_cmd->parsed()) return oscar_bundle::run_import(im);
    return oscar_bundle::run_diff(df);
  });
}

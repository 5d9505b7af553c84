// oscar-bundle export / import / diff: engine formats in and out, and bundle comparison.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "oscar/bundle_diff.h"

namespace oscar_bundle {

struct ExportOptions {
  std::string bundle_path, format, out;
  int sglang_version = 0;  // 0: 1 when rotations are shared per layer, else 2
  bool allow_per_head = false;
};
int run_export(const ExportOptions& o);

struct ImportOptions {
  std::string format, from_dir, k_path, v_path, model_dir, out;
  double clip_k = 0.0, clip_v = 0.0;
  std::string composition, value_objective;
  bool skip_hashes = false;
};
int run_import(const ImportOptions& o);

struct DiffOptions {
  std::string a, b;
  oscar::DiffTolerances tolerances;
  bool json = false, all = false;
  std::size_t max_rows = 40;
};
// 0: within tolerance, 2: over tolerance (errors throw).
int run_diff(const DiffOptions& o);

}  // namespace oscar_bundle

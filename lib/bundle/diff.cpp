// Bundle comparison: manifest fields, and rotations judged both elementwise and by the principal
// angles between leading eigen-subspaces (robust to eigenvector sign and near-degenerate order).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>

#include "oscar/bundle_diff.h"
#include "oscar/error.h"

namespace oscar {
namespace {

using nlohmann::json;

constexpr double kPi = 3.14159265358979323846;

void flatten(const json& j, const std::string& prefix, std::map<std::string, std::string>* out) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) {
      flatten(value, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else {
    (*out)[prefix] = j.is_string() ? j.get<std::string>() : j.dump();
  }
}

bool is_clock_or_build_field(const std::string& field) {
  return field == "created" || field == "tool.version" || field == "tool.git_commit" ||
         field == "tool.name" || field == "tensor_sha256";
}

// Eigenvalues of a symmetric n x n matrix (row-major), cyclic Jacobi; the matrices here are small
// (the compared subspace dimension).
std::vector<double> symmetric_eigenvalues(std::vector<double> a, std::int64_t n) {
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0, total = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t j = 0; j < n; ++j) {
        total += a[i * n + j] * a[i * n + j];
        if (i != j) off += a[i * n + j] * a[i * n + j];
      }
    }
    if (off <= 1e-30 * std::max(total, 1e-300)) break;
    for (std::int64_t p = 0; p < n; ++p) {
      for (std::int64_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (apq == 0.0) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1.0 / std::sqrt(t * t + 1), s = t * c;
        for (std::int64_t k = 0; k < n; ++k) {  // columns p, q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (std::int64_t k = 0; k < n; ++k) {  // rows p, q
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
    }
  }
  std::vector<double> values(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) values[static_cast<std::size_t>(i)] = a[i * n + i];
  return values;
}

std::vector<double> hadamard(std::int64_t d) {
  std::vector<double> h(static_cast<std::size_t>(d * d));
  const double scale = 1.0 / std::sqrt(static_cast<double>(d));
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t j = 0; j < d; ++j) {
      // Sylvester order: H[i][j] = (-1)^popcount(i & j).
      int bits = 0;
      for (std::int64_t x = i & j; x != 0; x &= x - 1) ++bits;
      h[static_cast<std::size_t>(i * d + j)] = (bits % 2 ? -scale : scale);
    }
  }
  return h;
}

std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b,
                           std::int64_t d) {
  std::vector<double> c(static_cast<std::size_t>(d * d), 0.0);
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t k = 0; k < d; ++k) {
      const double aik = a[i * d + k];
      for (std::int64_t j = 0; j < d; ++j) c[i * d + j] += aik * b[k * d + j];
    }
  }
  return c;
}

bool power_of_two(std::int64_t d) { return d > 0 && (d & (d - 1)) == 0; }

// Each column's entry of largest magnitude must be positive; entries within a relative 1e-4 of
// the largest count as ties (float32 storage blurs exact ties), and one positive tie suffices.
bool sign_convention_holds(const std::vector<double>& u, std::int64_t d) {
  for (std::int64_t j = 0; j < d; ++j) {
    double largest = 0.0;
    for (std::int64_t i = 0; i < d; ++i) largest = std::max(largest, std::abs(u[i * d + j]));
    bool positive = false;
    for (std::int64_t i = 0; i < d; ++i) {
      const double v = u[i * d + j];
      if (std::abs(v) >= largest * (1.0 - 1e-4) && v > 0) positive = true;
    }
    if (!positive) return false;
  }
  return true;
}

double max_abs_diff(const float* a, const float* b, std::size_t n) {
  double worst = 0.0;
  for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double(a[i]) - b[i]));
  return worst;
}

double relative_diff(const float* a, const float* b, std::size_t n) {
  double scale = 0.0;
  for (std::size_t i = 0; i < n; ++i) scale = std::max(scale, std::abs(double(a[i])));
  const double diff = max_abs_diff(a, b, n);
  return scale > 0.0 ? diff / scale : diff;
}

bool same(const float* a, const float* b, std::size_t n) {
  return std::memcmp(a, b, n * sizeof(float)) == 0;
}

}  // namespace

bool recover_eigenvectors(const float* rotation, const float* eigenvalues_desc, std::int64_t d,
                          const std::string& composition, std::vector<double>* u) {
  if (composition == "h") return false;
  std::vector<double> r(rotation, rotation + d * d);
  if (composition == "r") {
    *u = std::move(r);
  } else if (composition == "r_h" || composition == "r_h_pbr") {
    if (!power_of_two(d)) return false;
    std::vector<double> uh = r;
    if (composition == "r_h_pbr") {
      // R = (U H) I[:, perm] with perm[bitrev(i)] = idx_desc[i]: column i of R is column perm[i]
      // of U H. idx_desc orders the ascending (eigh) indices by value, largest first, ties in
      // index order, exactly as the calibration built it.
      std::vector<double> ascending(static_cast<std::size_t>(d));
      for (std::int64_t j = 0; j < d; ++j) ascending[j] = eigenvalues_desc[d - 1 - j];
      std::vector<std::int64_t> idx(static_cast<std::size_t>(d));
      std::iota(idx.begin(), idx.end(), 0);
      std::stable_sort(idx.begin(), idx.end(),
                       [&](std::int64_t a, std::int64_t b) { return ascending[a] > ascending[b]; });
      int bits = 0;
      while ((std::int64_t{1} << bits) < d) ++bits;
      for (std::int64_t i = 0; i < d; ++i) {
        std::int64_t br = 0;
        for (int b = 0; b < bits; ++b) br |= ((i >> b) & 1) << (bits - 1 - b);
        const std::int64_t column_of_r = br;  // perm[br(i)] = idx[i]
        const std::int64_t column_of_uh = idx[i];
        for (std::int64_t row = 0; row < d; ++row) {
          uh[row * d + column_of_uh] = r[row * d + column_of_r];
        }
      }
    }
    *u = matmul(uh, hadamard(d), d);  // (U H) H = U: H is symmetric and orthonormal
  } else {
    return false;
  }
  return sign_convention_holds(*u, d);
}

double largest_principal_angle_deg(const std::vector<double>& u_a, const std::vector<double>& u_b,
                                   std::int64_t d, std::int64_t k) {
  OSCAR_CHECK(k >= 1 && k <= d, "subspace dimension {} outside [1, {}]", k, d);
  const std::int64_t first = d - k;  // leading eigenvectors: the last columns (ascending order)
  // M = A_k^T B_k (k x k); E = B_k - A_k M (d x k); sin(theta_max) = ||E||_2.
  std::vector<double> m(static_cast<std::size_t>(k * k), 0.0);
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t j = 0; j < k; ++j) {
      double s = 0.0;
      for (std::int64_t r = 0; r < d; ++r) s += u_a[r * d + first + i] * u_b[r * d + first + j];
      m[i * k + j] = s;
    }
  }
  std::vector<double> e(static_cast<std::size_t>(d * k));
  for (std::int64_t r = 0; r < d; ++r) {
    for (std::int64_t j = 0; j < k; ++j) {
      double s = u_b[r * d + first + j];
      for (std::int64_t i = 0; i < k; ++i) s -= u_a[r * d + first + i] * m[i * k + j];
      e[r * k + j] = s;
    }
  }
  std::vector<double> ete(static_cast<std::size_t>(k * k), 0.0);
  for (std::int64_t i = 0; i < k; ++i) {
    for (std::int64_t j = 0; j < k; ++j) {
      double s = 0.0;
      for (std::int64_t r = 0; r < d; ++r) s += e[r * k + i] * e[r * k + j];
      ete[i * k + j] = s;
    }
  }
  const auto values = symmetric_eigenvalues(std::move(ete), k);
  const double largest = std::max(0.0, *std::max_element(values.begin(), values.end()));
  return std::asin(std::min(1.0, std::sqrt(largest))) * 180.0 / kPi;
}

BundleDiff diff_bundles(const Bundle& a, const Bundle& b, const DiffTolerances& tol) {
  const ModelIdentity &ma = a.model, &mb = b.model;
  OSCAR_CHECK(ma.num_layers == mb.num_layers && ma.num_kv_heads == mb.num_kv_heads &&
                  ma.head_dim == mb.head_dim,
              "the bundles have different shapes (layers {} vs {}, KV heads {} vs {}, head_dim {} "
              "vs {}): they belong to different models and cannot be compared tensor by tensor",
              ma.num_layers, mb.num_layers, ma.num_kv_heads, mb.num_kv_heads, ma.head_dim,
              mb.head_dim);
  BundleDiff diff;
  const std::int64_t d = a.d(), heads = a.n_kv_heads();
  diff.leading = tol.leading > 0 ? std::min(tol.leading, d) : std::max<std::int64_t>(1, d / 4);

  // Manifest fields.
  std::map<std::string, std::string> fa, fb;
  flatten(json::parse(bundle_manifest_json(a)), "", &fa);
  flatten(json::parse(bundle_manifest_json(b)), "", &fb);
  std::map<std::string, std::pair<std::string, std::string>> all;
  for (const auto& [k, v] : fa) all[k].first = v;
  for (const auto& [k, v] : fb) all[k].second = v;
  for (const auto& [field, values] : all) {
    if (values.first == values.second) continue;
    FieldDiff f{field, fa.count(field) ? values.first : "(absent)",
                fb.count(field) ? values.second : "(absent)"};
    f.counted = !is_clock_or_build_field(field) &&
                std::find(tol.ignored_fields.begin(), tol.ignored_fields.end(), field) ==
                    tol.ignored_fields.end();
    if (f.counted) {
      diff.failures.push_back(fmt::format("manifest field {} differs: {} vs {}", field, f.a, f.b));
    }
    diff.fields.push_back(std::move(f));
  }

  // Tensors, per (layer, head, kind).
  const std::size_t dd = static_cast<std::size_t>(d * d), du = static_cast<std::size_t>(d);
  std::int64_t undefined_unchecked = 0;
  HeadDiff worst;
  worst.angle_deg = 0.0;
  HeadDiff worst_at_rotation, worst_at_angle, worst_at_eigen, worst_at_clip, worst_at_aux;
  for (std::int64_t layer = 0; layer < ma.num_layers; ++layer) {
    const LayerRotations& la = a.layers[static_cast<std::size_t>(layer)];
    const LayerRotations& lb = b.layers[static_cast<std::size_t>(layer)];
    for (std::int64_t head = 0; head < heads; ++head) {
      for (const char kind : {'k', 'v'}) {
        HeadDiff h;
        h.layer = layer;
        h.head = head;
        h.kind = kind;
        const float* ra = (kind == 'k' ? la.k_rotation : la.v_rotation).data() + head * dd;
        const float* rb = (kind == 'k' ? lb.k_rotation : lb.v_rotation).data() + head * dd;
        const float* ea = (kind == 'k' ? la.k_eigenvalues : la.v_eigenvalues).data() + head * du;
        const float* eb = (kind == 'k' ? lb.k_eigenvalues : lb.v_eigenvalues).data() + head * du;
        const float ca = (kind == 'k' ? la.k_clip : la.v_clip)[static_cast<std::size_t>(head)];
        const float cb = (kind == 'k' ? lb.k_clip : lb.v_clip)[static_cast<std::size_t>(head)];
        const bool rotation_same = same(ra, rb, dd);
        h.identical = rotation_same && same(ea, eb, du) && ca == cb;
        h.rotation = max_abs_diff(ra, rb, dd);
        h.eigen = relative_diff(ea, eb, du);
        h.clip = std::abs(double(ca) - cb);
        // Means and smoothing scales compared where both bundles have them (their presence is a
        // manifest difference).
        std::vector<std::pair<const std::vector<float>*, const std::vector<float>*>> aux;
        if (kind == 'k') {
          aux = {{&la.k_mean, &lb.k_mean}, {&la.k_smooth, &lb.k_smooth}};
        } else {
          aux = {{&la.v_mean, &lb.v_mean}};
        }
        for (const auto& [xa, xb] : aux) {
          if (xa->empty() != xb->empty()) h.identical = false;  // one bundle lacks it
          if (xa->empty() || xb->empty()) continue;
          const float* pa = xa->data() + head * du;
          const float* pb = xb->data() + head * du;
          h.identical = h.identical && same(pa, pb, du);
          h.aux = std::max(h.aux, relative_diff(pa, pb, du));
        }
        if (rotation_same && a.calibration.composition == b.calibration.composition) {
          h.angle_deg = 0.0;
        } else {
          std::vector<double> ua, ub;
          h.angle_defined = recover_eigenvectors(ra, ea, d, a.calibration.composition, &ua) &&
                            recover_eigenvectors(rb, eb, d, b.calibration.composition, &ub);
          h.angle_deg = h.angle_defined ? largest_principal_angle_deg(ua, ub, d, diff.leading)
                                        : std::numeric_limits<double>::quiet_NaN();
          if (!h.angle_defined && tol.rotation < 0.0) ++undefined_unchecked;
        }
        diff.tensors_identical = diff.tensors_identical && h.identical;
        auto track = [](double value, double& slot, HeadDiff& where, const HeadDiff& now) {
          if (value > slot) {
            slot = value;
            where = now;
          }
        };
        track(h.rotation, worst.rotation, worst_at_rotation, h);
        if (h.angle_defined) track(h.angle_deg, worst.angle_deg, worst_at_angle, h);
        track(h.eigen, worst.eigen, worst_at_eigen, h);
        track(h.clip, worst.clip, worst_at_clip, h);
        track(h.aux, worst.aux, worst_at_aux, h);
        diff.heads.push_back(h);
      }
    }
  }
  diff.worst = worst;
  auto where = [](const HeadDiff& h) {
    return fmt::format("layer {} head {} {}", h.layer, h.head, h.kind == 'k' ? "K" : "V");
  };
  auto check = [&](const char* what, double value, double limit, const HeadDiff& at,
                   const char* unit) {
    if (limit >= 0.0 && value > limit) {
      diff.failures.push_back(fmt::format("{} {:.3g}{} at {} exceeds the tolerance {:.3g}{}", what,
                                          value, unit, where(at), limit, unit));
    }
  };
  check("rotation elements differ by", worst.rotation, tol.rotation, worst_at_rotation, "");
  check("leading-subspace angle", worst.angle_deg, tol.angle_deg, worst_at_angle, " deg");
  check("eigenvalues differ (relative) by", worst.eigen, tol.eigen, worst_at_eigen, "");
  check("clip ratios differ by", worst.clip, tol.clip, worst_at_clip, "");
  check("means/smoothing scales differ (relative) by", worst.aux, tol.aux, worst_at_aux, "");
  if (undefined_unchecked > 0 && tol.angle_deg >= 0.0) {
    diff.failures.push_back(fmt::format(
        "{} heads differ but their eigenvector bases cannot be recovered (composition h, or "
        "float32 eigenvalue ties): bound their rotations elementwise with a rotation tolerance",
        undefined_unchecked));
  }
  return diff;
}

}  // namespace oscar

// Runtime loader (oscar_runtime): C++ API and C ABI against synthetic bundles written in a temp
// dir.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/file.h"
#include "oscar/int2.h"
#include "oscar/int2_cache_reference.h"
#include "oscar/oscar_runtime.h"
#include "oscar/runtime.h"
#include "oscar/safetensors.h"
#include "synthetic_bundle.h"
#include "test_support.h"

extern "C" int oscar_test_c_abi(const char* bundle_path, char* message, size_t message_size);

namespace {

namespace rt = oscar::runtime;
using oscar::Bundle;
using oscar::test::synthetic_bundle;
using oscar::test::SyntheticBundleOptions;

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

std::string last_error() { return oscar_runtime_last_error(); }

std::vector<float> random_rows(std::int64_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::string read_bytes(const std::string& path) { return oscar::read_file(path); }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

// The map of `which` for one row, in float64, straight from the formulas of
// docs/bundle-format.md (no folding, no shared code with the library).
std::vector<double> reference_map(const Bundle& b, oscar_transform which, std::int64_t layer,
                                  std::int64_t head, const float* x) {
  const std::int64_t d = b.d();
  const oscar::LayerRotations& l = b.layers[static_cast<std::size_t>(layer)];
  const float* rk = l.k_rotation.data() + head * d * d;
  const float* rv = l.v_rotation.data() + head * d * d;
  auto mu = [&](std::int64_t i) { return l.k_mean.empty() ? 0.0 : l.k_mean[head * d + i]; };
  auto nu = [&](std::int64_t i) { return l.v_mean.empty() ? 0.0 : l.v_mean[head * d + i]; };
  auto s = [&](std::int64_t i) { return l.k_smooth.empty() ? 1.0 : l.k_smooth[head * d + i]; };
  std::vector<double> y(static_cast<std::size_t>(d), 0.0);
  for (std::int64_t j = 0; j < d; ++j) {
    double acc = 0.0;
    for (std::int64_t i = 0; i < d; ++i) {
      switch (which) {
        case OSCAR_TRANSFORM_KEY:
          acc += (x[i] - mu(i)) / s(i) * rk[i * d + j];
          break;
        case OSCAR_TRANSFORM_QUERY:
          acc += x[i] * s(i) * rk[i * d + j];
          break;
        case OSCAR_TRANSFORM_VALUE:
          acc += (x[i] - nu(i)) * rv[i * d + j];
          break;
        case OSCAR_TRANSFORM_OUTPUT:
        case OSCAR_TRANSFORM_VALUE_INVERSE:
          acc += x[i] * rv[j * d + i];  // (x R_V^T)_j
          break;
        case OSCAR_TRANSFORM_KEY_INVERSE:
          acc += x[i] * rk[j * d + i];  // (x R_K^T)_j
          break;
      }
    }
    if (which == OSCAR_TRANSFORM_OUTPUT || which == OSCAR_TRANSFORM_VALUE_INVERSE) acc += nu(j);
    if (which == OSCAR_TRANSFORM_KEY_INVERSE) acc = acc * s(j) + mu(j);
    y[static_cast<std::size_t>(j)] = acc;
  }
  return y;
}

constexpr oscar_transform kAllTransforms[] = {
    OSCAR_TRANSFORM_KEY,    OSCAR_TRANSFORM_QUERY,       OSCAR_TRANSFORM_VALUE,
    OSCAR_TRANSFORM_OUTPUT, OSCAR_TRANSFORM_KEY_INVERSE, OSCAR_TRANSFORM_VALUE_INVERSE};

class RuntimeTest : public ::testing::Test {
 protected:
  // Writes synthetic_bundle(options) as `name` and returns its path; `bundle` keeps what was
  // written (with its checksum).
  std::string write(const SyntheticBundleOptions& options, const std::string& name = "b.oscar") {
    bundle_ = synthetic_bundle(options);
    const std::string path = dir_.file(name);
    oscar::write_bundle(path, bundle_);
    return path;
  }
  oscar_model_desc matching_desc() const {
    oscar_model_desc m = oscar_runtime_default_model_desc();
    m.num_layers = bundle_.model.num_layers;
    m.num_heads = bundle_.model.num_heads;
    m.num_kv_heads = bundle_.model.num_kv_heads;
    m.head_dim = bundle_.model.head_dim;
    return m;
  }

  oscar::test::TempDir dir_;
  Bundle bundle_;
};

// ---- Open, metadata, accessors ------------------------------------------------------------

TEST(RuntimeLibrary, VersionsAndStatusNames) {
  EXPECT_EQ(oscar_runtime_abi_version(), OSCAR_RUNTIME_ABI_VERSION);
  EXPECT_GT(std::strlen(oscar_runtime_version()), 0u);
  EXPECT_STREQ(oscar_status_string(OSCAR_STATUS_OK), "ok");
  EXPECT_STREQ(oscar_status_string(OSCAR_STATUS_MODEL_MISMATCH), "model mismatch");
  for (int s = OSCAR_STATUS_OK; s <= OSCAR_STATUS_INTERNAL_ERROR; ++s) {
    EXPECT_STRNE(oscar_status_string(static_cast<oscar_status>(s)), "unknown status") << s;
  }
  const oscar_runtime_params p = oscar_runtime_default_params();
  EXPECT_TRUE(p.check_orthogonality);
  EXPECT_DOUBLE_EQ(p.orthogonality_tolerance, 1e-5);
  const oscar_model_desc m = oscar_runtime_default_model_desc();
  EXPECT_EQ(m.num_layers, 0);
  EXPECT_EQ(m.architecture, nullptr);
  EXPECT_EQ(m.rope_theta, 0.0);
}

TEST_F(RuntimeTest, OpenReportsTheManifest) {
  const std::string path = write({});
  const rt::Runtime r = rt::Runtime::open(path);
  const oscar_runtime_info& i = r.info();
  EXPECT_EQ(i.format_version, 2);
  EXPECT_EQ(r.format_version(), 2);
  EXPECT_STREQ(i.origin, path.c_str());
  EXPECT_STREQ(i.architecture, "LlamaForCausalLM");
  EXPECT_STREQ(i.model_type, "llama");
  EXPECT_STREQ(i.model_name, "synthetic");
  EXPECT_EQ(i.num_layers, 2);
  EXPECT_EQ(i.num_heads, 4);
  EXPECT_EQ(i.num_kv_heads, 2);
  EXPECT_EQ(i.head_dim, 16);
  EXPECT_EQ(r.num_layers(), 2);
  EXPECT_EQ(r.num_kv_heads(), 2);
  EXPECT_EQ(r.head_dim(), 16);
  EXPECT_STREQ(i.rope_type, "default");
  EXPECT_EQ(i.rope_theta, 10000.0);
  EXPECT_EQ(i.rope_factor, 1.0);
  EXPECT_EQ(i.config_sha256, bundle_.model.config_sha256);
  EXPECT_EQ(i.weights_header_sha256, bundle_.model.weights_header_sha256);
  EXPECT_EQ(i.bits, 2);
  EXPECT_EQ(i.group_size, 16);  // 0 in the manifest: one group per row
  EXPECT_EQ(i.sink_tokens, 64);
  EXPECT_EQ(i.recent_tokens, 256);
  EXPECT_STREQ(i.scale_dtype, "bf16");
  EXPECT_STREQ(i.row_packing, "int2-strided");
  EXPECT_TRUE(i.keys_centered);
  EXPECT_TRUE(i.values_centered);
  EXPECT_TRUE(i.keys_smoothed);
  EXPECT_EQ(i.smooth_keys, 0.5);
  EXPECT_STREQ(i.grouping, "head");
  EXPECT_STREQ(i.value_objective, "attn");
  EXPECT_STREQ(i.composition, "r_h_pbr");
  EXPECT_STREQ(i.clip_method, "fixed");
  EXPECT_STREQ(i.dataset_name, "synthetic.txt");
  EXPECT_EQ(i.calibration_tokens, 4096);
  EXPECT_EQ(i.calibration_seq_len, 256);
  EXPECT_STREQ(i.eigen_backend, "lapack");
  EXPECT_STREQ(i.calibration_device, "cpu");
  EXPECT_STREQ(i.tool_version, "0.1.0");
  EXPECT_STREQ(i.git_commit, "synthetic");
  EXPECT_STREQ(i.created, "2026-01-01T00:00:00Z");
  EXPECT_EQ(i.tensor_sha256, bundle_.tensor_sha256);
  EXPECT_EQ(std::string(i.manifest_sha256).size(), 64u);
  EXPECT_EQ(i.manifest_sha256, bundle_.manifest_sha256);
  const std::string manifest = r.manifest_json();
  // For a bundle of this writer, the manifest the library rebuilds is the text the checksum covers.
  EXPECT_EQ(oscar::manifest_checksum(manifest), bundle_.manifest_sha256);
  EXPECT_TRUE(contains(manifest, "\"format\":\"oscar-rotation-bundle\"")) << manifest;
  EXPECT_TRUE(contains(manifest, bundle_.tensor_sha256));
  EXPECT_EQ(last_error(), "");
}

TEST_F(RuntimeTest, AccessorsEqualTheBundleTensors) {
  const std::string path = write({});
  const rt::Runtime r = rt::Runtime::open(path);
  const std::int64_t d = bundle_.d();
  const auto same = [&](const float* p, const std::vector<float>& tensor, std::int64_t offset,
                        std::int64_t n) {
    return p != nullptr &&
           std::memcmp(p, tensor.data() + offset, static_cast<std::size_t>(n) * 4) == 0;
  };
  for (std::int64_t layer = 0; layer < 2; ++layer) {
    const oscar::LayerRotations& l = bundle_.layers[static_cast<std::size_t>(layer)];
    for (std::int64_t h = 0; h < 2; ++h) {
      EXPECT_TRUE(same(r.rotation(rt::Kind::kKey, layer, h), l.k_rotation, h * d * d, d * d));
      EXPECT_TRUE(same(r.rotation(rt::Kind::kValue, layer, h), l.v_rotation, h * d * d, d * d));
      EXPECT_TRUE(same(r.eigenvalues(rt::Kind::kKey, layer, h), l.k_eigenvalues, h * d, d));
      EXPECT_TRUE(same(r.eigenvalues(rt::Kind::kValue, layer, h), l.v_eigenvalues, h * d, d));
      EXPECT_TRUE(same(r.mean(rt::Kind::kKey, layer, h), l.k_mean, h * d, d));
      EXPECT_TRUE(same(r.mean(rt::Kind::kValue, layer, h), l.v_mean, h * d, d));
      EXPECT_TRUE(same(r.key_smoothing(layer, h), l.k_smooth, h * d, d));
      EXPECT_EQ(r.clip_ratio(rt::Kind::kKey, layer, h), l.k_clip[static_cast<std::size_t>(h)]);
      EXPECT_EQ(r.clip_ratio(rt::Kind::kValue, layer, h), l.v_clip[static_cast<std::size_t>(h)]);
    }
    // The heads of a layer are contiguous: head 0's pointer addresses the whole layer.
    EXPECT_EQ(r.rotation(rt::Kind::kKey, layer, 1), r.rotation(rt::Kind::kKey, layer, 0) + d * d);
    EXPECT_EQ(r.mean(rt::Kind::kValue, layer, 1), r.mean(rt::Kind::kValue, layer, 0) + d);
  }
  // The C accessors return the same pointers.
  const float* p = nullptr;
  ASSERT_EQ(oscar_runtime_rotation(r.get(), OSCAR_KV_VALUE, 1, 1, &p), OSCAR_STATUS_OK);
  EXPECT_EQ(p, r.rotation(rt::Kind::kValue, 1, 1));
  float clip = 0.0f;
  ASSERT_EQ(oscar_runtime_clip_ratio(r.get(), OSCAR_KV_KEY, 1, 0, &clip), OSCAR_STATUS_OK);
  EXPECT_EQ(clip, bundle_.layers[1].k_clip[0]);
}

TEST_F(RuntimeTest, FormatOneBundleHasNoMeansOrSmoothing) {
  SyntheticBundleOptions o;
  o.center_keys = o.center_values = false;
  o.smooth_keys = 0.0;
  const rt::Runtime r = rt::Runtime::open(write(o));
  EXPECT_EQ(r.format_version(), 1);
  EXPECT_FALSE(r.info().keys_centered);
  EXPECT_FALSE(r.info().keys_smoothed);
  EXPECT_EQ(r.mean(rt::Kind::kKey, 0, 0), nullptr);
  EXPECT_EQ(r.mean(rt::Kind::kValue, 1, 1), nullptr);
  EXPECT_EQ(r.key_smoothing(0, 1), nullptr);
  // Without means the key and value maps have no bias, so NULL bias is fine.
  std::vector<float> m(16 * 16);
  for (oscar_transform t : kAllTransforms) {
    EXPECT_EQ(
        oscar_runtime_transform_matrix(r.get(), t, 0, 0, OSCAR_LAYOUT_ROW_MAJOR, m.data(), nullptr),
        OSCAR_STATUS_OK)
        << t;
  }
}

TEST_F(RuntimeTest, OpenFromMemory) {
  const std::string bytes = read_bytes(write({}));
  oscar_runtime* h = nullptr;
  ASSERT_EQ(oscar_runtime_open_memory(bytes.data(), bytes.size(), "in-memory", nullptr, &h),
            OSCAR_STATUS_OK)
      << last_error();
  EXPECT_STREQ(oscar_runtime_get_info(h)->origin, "in-memory");
  EXPECT_EQ(oscar_runtime_get_info(h)->tensor_sha256, bundle_.tensor_sha256);
  oscar_runtime_close(h);

  const rt::Runtime r = rt::Runtime::open_memory(bytes.data(), bytes.size(), "");
  EXPECT_STREQ(r.info().origin, "<memory>");
  h = reinterpret_cast<oscar_runtime*>(1);
  EXPECT_EQ(oscar_runtime_open_memory(bytes.data(), bytes.size() / 2, "half", nullptr, &h),
            OSCAR_STATUS_FORMAT_ERROR);
  EXPECT_EQ(h, nullptr);
  EXPECT_TRUE(contains(last_error(), "half")) << last_error();
  EXPECT_EQ(oscar_runtime_open_memory(nullptr, 10, "x", nullptr, &h),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(oscar_runtime_open_memory(nullptr, 0, "x", nullptr, &h), OSCAR_STATUS_FORMAT_ERROR);
}

// ---- Errors at open ----------------------------------------------------------------------------

TEST_F(RuntimeTest, BadPaths) {
  oscar_runtime* h = reinterpret_cast<oscar_runtime*>(1);
  const std::string missing = dir_.file("missing.oscar");
  EXPECT_EQ(oscar_runtime_open(missing.c_str(), nullptr, &h), OSCAR_STATUS_IO_ERROR);
  EXPECT_EQ(h, nullptr);
  EXPECT_TRUE(contains(last_error(), missing) && contains(last_error(), "does not exist"))
      << last_error();
  EXPECT_EQ(oscar_runtime_open(dir_.path().c_str(), nullptr, &h), OSCAR_STATUS_IO_ERROR);
  EXPECT_TRUE(contains(last_error(), "directory")) << last_error();
  EXPECT_EQ(oscar_runtime_open("", nullptr, &h), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(oscar_runtime_open(nullptr, nullptr, &h), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "path")) << last_error();
  EXPECT_EQ(oscar_runtime_open(missing.c_str(), nullptr, nullptr), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "out is NULL")) << last_error();
  try {
    rt::Runtime::open(missing);
    FAIL() << "no exception";
  } catch (const rt::Error& e) {
    EXPECT_EQ(e.status(), OSCAR_STATUS_IO_ERROR);
    EXPECT_TRUE(contains(e.what(), missing)) << e.what();
  }
}

TEST_F(RuntimeTest, CorruptAndTruncatedFiles) {
  const std::string path = write({});
  const std::string good = read_bytes(path);
  const auto open_status = [&](const std::string& bytes, const std::string& name) {
    write_bytes(dir_.file(name), bytes);
    oscar_runtime* h = nullptr;
    const oscar_status s = oscar_runtime_open(dir_.file(name).c_str(), nullptr, &h);
    EXPECT_EQ(h == nullptr, s != OSCAR_STATUS_OK);
    oscar_runtime_close(h);
    return s;
  };
  EXPECT_EQ(open_status(good, "copy.oscar"), OSCAR_STATUS_OK);
  for (std::size_t size :
       {std::size_t{0}, std::size_t{4}, std::size_t{100}, good.size() / 2, good.size() - 1}) {
    EXPECT_EQ(open_status(good.substr(0, size), "trunc.oscar"), OSCAR_STATUS_FORMAT_ERROR) << size;
    EXPECT_TRUE(contains(last_error(), "trunc.oscar")) << last_error();
  }
  std::string flipped = good;
  flipped[flipped.size() - 7] ^= 0x20;  // inside the last tensor
  EXPECT_EQ(open_status(flipped, "flipped.oscar"), OSCAR_STATUS_FORMAT_ERROR);
  EXPECT_TRUE(contains(last_error(), "checksum")) << last_error();
  EXPECT_EQ(open_status("{\"not\": \"a bundle\"}\n", "text.oscar"), OSCAR_STATUS_FORMAT_ERROR);

  // A plain safetensors file without the manifest.
  const float one = 1.0f;
  oscar::write_safetensors(dir_.file("plain.safetensors"),
                           {{"x", oscar::DType::F32, {1}, &one, sizeof(one)}});
  oscar_runtime* h = nullptr;
  EXPECT_EQ(oscar_runtime_open(dir_.file("plain.safetensors").c_str(), nullptr, &h),
            OSCAR_STATUS_FORMAT_ERROR);
  EXPECT_TRUE(contains(last_error(), "not an OSCAR bundle")) << last_error();
}

TEST_F(RuntimeTest, NonOrthogonalRotationsAreRefusedWhenChecked) {
  Bundle b = synthetic_bundle({});
  for (float& v : b.layers[1].v_rotation) v *= 1.01f;
  const std::string path = dir_.file("skew.oscar");
  oscar::write_bundle(path, b);
  oscar_runtime* h = nullptr;
  EXPECT_EQ(oscar_runtime_open(path.c_str(), nullptr, &h), OSCAR_STATUS_FORMAT_ERROR);
  EXPECT_TRUE(contains(last_error(), "value rotations are not orthogonal")) << last_error();
  oscar_runtime_params p = oscar_runtime_default_params();
  p.check_orthogonality = false;
  ASSERT_EQ(oscar_runtime_open(path.c_str(), &p, &h), OSCAR_STATUS_OK) << last_error();
  oscar_runtime_close(h);
  p.check_orthogonality = true;
  p.orthogonality_tolerance = 0.0;
  EXPECT_EQ(oscar_runtime_open(path.c_str(), &p, &h), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "orthogonality_tolerance")) << last_error();
}

// ---- Validation against the engine's model --------------------------------------------------

TEST_F(RuntimeTest, ValidateAcceptsTheModel) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  oscar_model_desc m = matching_desc();
  EXPECT_EQ(oscar_runtime_validate(r.get(), &m), OSCAR_STATUS_OK) << last_error();
  std::string config = bundle_.model.config_sha256, weights = bundle_.model.weights_header_sha256;
  for (char& c : config) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  m.architecture = "LlamaForCausalLM";
  m.config_sha256 = config.c_str();  // hex case does not matter
  m.weights_header_sha256 = weights.c_str();
  m.rope_theta = 10000.0;
  EXPECT_EQ(oscar_runtime_validate(r.get(), &m), OSCAR_STATUS_OK) << last_error();
  EXPECT_EQ(last_error(), "");

  rt::ModelDescription model{2,
                             4,
                             2,
                             16,
                             "LlamaForCausalLM",
                             bundle_.model.config_sha256,
                             bundle_.model.weights_header_sha256,
                             10000.0};
  EXPECT_NO_THROW(r.validate(model));
}

TEST_F(RuntimeTest, ValidateNamesEachMismatch) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const std::string other_hash(64, 'a');
  struct Case {
    const char* field;
    void (*change)(oscar_model_desc&, const std::string&);
  };
  const Case cases[] = {
      {"layers 2 (bundle) vs 3 (model)",
       [](oscar_model_desc& m, const std::string&) { m.num_layers = 3; }},
      {"query heads 4 (bundle) vs 8 (model)",
       [](oscar_model_desc& m, const std::string&) { m.num_heads = 8; }},
      {"KV heads 2 (bundle) vs 1 (model)",
       [](oscar_model_desc& m, const std::string&) { m.num_kv_heads = 1; }},
      {"head_dim 16 (bundle) vs 32 (model)",
       [](oscar_model_desc& m, const std::string&) { m.head_dim = 32; }},
      {"architecture LlamaForCausalLM (bundle) vs Qwen3ForCausalLM (model)",
       [](oscar_model_desc& m, const std::string&) { m.architecture = "Qwen3ForCausalLM"; }},
      {"config sha256",
       [](oscar_model_desc& m, const std::string& h) { m.config_sha256 = h.c_str(); }},
      {"weights header sha256",
       [](oscar_model_desc& m, const std::string& h) { m.weights_header_sha256 = h.c_str(); }},
      {"rope theta 10000 (bundle) vs 500000 (model)",
       [](oscar_model_desc& m, const std::string&) { m.rope_theta = 500000.0; }},
  };
  oscar_model_desc all = matching_desc();
  for (const Case& c : cases) {
    oscar_model_desc m = matching_desc();
    c.change(m, other_hash);
    c.change(all, other_hash);
    EXPECT_EQ(oscar_runtime_validate(r.get(), &m), OSCAR_STATUS_MODEL_MISMATCH) << c.field;
    EXPECT_TRUE(contains(last_error(), c.field)) << last_error();
    EXPECT_TRUE(contains(last_error(), r.info().origin)) << last_error();
  }
  EXPECT_EQ(oscar_runtime_validate(r.get(), &all), OSCAR_STATUS_MODEL_MISMATCH);
  for (const Case& c : cases) EXPECT_TRUE(contains(last_error(), c.field)) << c.field;

  try {
    rt::ModelDescription model;
    model.num_layers = 2;
    model.num_heads = 4;
    model.num_kv_heads = 2;
    model.head_dim = 64;
    r.validate(model);
    FAIL() << "no exception";
  } catch (const rt::Error& e) {
    EXPECT_EQ(e.status(), OSCAR_STATUS_MODEL_MISMATCH);
    EXPECT_TRUE(contains(e.what(), "head_dim 16 (bundle) vs 64 (model)")) << e.what();
  }
}

TEST_F(RuntimeTest, ValidateRejectsBadDescriptions) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  oscar_model_desc m = matching_desc();
  m.num_kv_heads = 0;
  EXPECT_EQ(oscar_runtime_validate(r.get(), &m), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "num_kv_heads must be positive")) << last_error();
  m = matching_desc();
  m.config_sha256 = "abc";
  EXPECT_EQ(oscar_runtime_validate(r.get(), &m), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "'abc' is not a sha256")) << last_error();
  m = matching_desc();
  m.rope_theta = -1.0;
  EXPECT_EQ(oscar_runtime_validate(r.get(), &m), OSCAR_STATUS_INVALID_ARGUMENT);
  m.rope_theta = std::nan("");
  EXPECT_EQ(oscar_runtime_validate(r.get(), &m), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(oscar_runtime_validate(r.get(), nullptr), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "model is NULL")) << last_error();
}

TEST_F(RuntimeTest, ValidateAgainstConfigJson) {
  const SyntheticBundleOptions o;
  const rt::Runtime r = rt::Runtime::open(write(o));
  const std::string config = dir_.file("config.json");
  oscar::write_file_atomic(config, oscar::test::synthetic_config_json(o));
  EXPECT_NO_THROW(r.validate_config(config));

  // Same model, different bytes: only the hash differs.
  oscar::write_file_atomic(config, oscar::test::synthetic_config_json(o) + " ");
  EXPECT_EQ(oscar_runtime_validate_config(r.get(), config.c_str(), true),
            OSCAR_STATUS_MODEL_MISMATCH);
  EXPECT_TRUE(contains(last_error(), "config sha256")) << last_error();
  EXPECT_EQ(oscar_runtime_validate_config(r.get(), config.c_str(), false), OSCAR_STATUS_OK);

  SyntheticBundleOptions deeper = o;
  deeper.layers = 3;
  oscar::write_file_atomic(config, oscar::test::synthetic_config_json(deeper));
  EXPECT_EQ(oscar_runtime_validate_config(r.get(), config.c_str(), false),
            OSCAR_STATUS_MODEL_MISMATCH);
  EXPECT_TRUE(contains(last_error(), "layers 2 (bundle) vs 3 (model)")) << last_error();
  EXPECT_TRUE(contains(last_error(), config)) << last_error();

  oscar::write_file_atomic(config, "{ not json");
  EXPECT_EQ(oscar_runtime_validate_config(r.get(), config.c_str(), true),
            OSCAR_STATUS_FORMAT_ERROR);
  EXPECT_TRUE(contains(last_error(), "config.json")) << last_error();
  EXPECT_EQ(oscar_runtime_validate_config(r.get(), dir_.file("none.json").c_str(), true),
            OSCAR_STATUS_IO_ERROR);
  EXPECT_EQ(oscar_runtime_validate_config(r.get(), nullptr, true), OSCAR_STATUS_INVALID_ARGUMENT);
}

TEST_F(RuntimeTest, ValidateAgainstModelDirectory) {
  const SyntheticBundleOptions o;
  const std::string model = dir_.file("model");
  ASSERT_EQ(::mkdir(model.c_str(), 0755), 0);
  oscar::write_file_atomic(model + "/config.json", oscar::test::synthetic_config_json(o));
  const float w[4] = {1, 2, 3, 4};
  oscar::write_safetensors(model + "/model.safetensors",
                           {{"model.norm.weight", oscar::DType::F32, {4}, w, sizeof(w)}});
  Bundle b = synthetic_bundle(o);
  b.model.weights_header_sha256 = oscar::model_identity(model).weights_header_sha256;
  oscar::write_bundle(dir_.file("b.oscar"), b);
  const rt::Runtime r = rt::Runtime::open(dir_.file("b.oscar"));
  EXPECT_NO_THROW(r.validate_model_dir(model));

  // Re-exported weights: the header hash differs; --skip-hashes style validation still passes.
  oscar::write_safetensors(model + "/model.safetensors",
                           {{"model.norm.weight", oscar::DType::F32, {2, 2}, w, sizeof(w)}});
  EXPECT_EQ(oscar_runtime_validate_model_dir(r.get(), model.c_str(), true),
            OSCAR_STATUS_MODEL_MISMATCH);
  EXPECT_TRUE(contains(last_error(), "weights header sha256")) << last_error();
  EXPECT_EQ(oscar_runtime_validate_model_dir(r.get(), model.c_str(), false), OSCAR_STATUS_OK);

  EXPECT_EQ(oscar_runtime_validate_model_dir(r.get(), dir_.file("nope").c_str(), true),
            OSCAR_STATUS_IO_ERROR);
  EXPECT_EQ(oscar_runtime_validate_model_dir(r.get(), dir_.path().c_str(), true),
            OSCAR_STATUS_IO_ERROR);  // no config.json there
  EXPECT_TRUE(contains(last_error(), "config.json")) << last_error();
  ::remove((model + "/model.safetensors").c_str());
  EXPECT_EQ(oscar_runtime_validate_model_dir(r.get(), model.c_str(), true),
            OSCAR_STATUS_FORMAT_ERROR);
  EXPECT_TRUE(contains(last_error(), "model.safetensors")) << last_error();
}

// ---- Argument checks and error reporting ------------------------------------------------------

TEST_F(RuntimeTest, NullHandlesAndArguments) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const float* p = nullptr;
  float f = 0.0f;
  std::vector<float> buf(16 * 16), row(16);
  std::vector<std::uint8_t> packed(4);
  const oscar_model_desc m = matching_desc();

  const auto expect_null_handle = [&](oscar_status s, const char* function) {
    EXPECT_EQ(s, OSCAR_STATUS_INVALID_ARGUMENT) << function;
    EXPECT_TRUE(contains(last_error(), function) && contains(last_error(), "handle is NULL"))
        << last_error();
  };
  expect_null_handle(oscar_runtime_validate(nullptr, &m), "oscar_runtime_validate");
  expect_null_handle(oscar_runtime_validate_config(nullptr, "c", true),
                     "oscar_runtime_validate_config");
  expect_null_handle(oscar_runtime_validate_model_dir(nullptr, "d", true),
                     "oscar_runtime_validate_model_dir");
  expect_null_handle(oscar_runtime_rotation(nullptr, OSCAR_KV_KEY, 0, 0, &p),
                     "oscar_runtime_rotation");
  expect_null_handle(oscar_runtime_eigenvalues(nullptr, OSCAR_KV_KEY, 0, 0, &p),
                     "oscar_runtime_eigenvalues");
  expect_null_handle(oscar_runtime_clip_ratio(nullptr, OSCAR_KV_KEY, 0, 0, &f),
                     "oscar_runtime_clip_ratio");
  expect_null_handle(oscar_runtime_mean(nullptr, OSCAR_KV_KEY, 0, 0, &p), "oscar_runtime_mean");
  expect_null_handle(oscar_runtime_key_smoothing(nullptr, 0, 0, &p), "oscar_runtime_key_smoothing");
  expect_null_handle(oscar_runtime_transform_matrix(nullptr, OSCAR_TRANSFORM_KEY, 0, 0,
                                                    OSCAR_LAYOUT_ROW_MAJOR, buf.data(), row.data()),
                     "oscar_runtime_transform_matrix");
  expect_null_handle(
      oscar_runtime_apply(nullptr, OSCAR_TRANSFORM_KEY, 0, 0, row.data(), row.data(), 1),
      "oscar_runtime_apply");
  expect_null_handle(
      oscar_runtime_quantize_int2(nullptr, OSCAR_KV_KEY, 0, 0, row.data(), packed.data(), &f, &f),
      "oscar_runtime_quantize_int2");
  expect_null_handle(oscar_runtime_dequantize_int2(nullptr, packed.data(), &f, &f, row.data()),
                     "oscar_runtime_dequantize_int2");
  EXPECT_EQ(oscar_runtime_get_info(nullptr), nullptr);
  EXPECT_TRUE(contains(last_error(), "oscar_runtime_get_info")) << last_error();
  EXPECT_EQ(oscar_runtime_manifest_json(nullptr), nullptr);
  EXPECT_EQ(oscar_runtime_int2_row_bytes(nullptr), 0);
  EXPECT_EQ(oscar_runtime_int2_row_groups(nullptr), 0);
  EXPECT_TRUE(contains(last_error(), "handle is NULL")) << last_error();
  oscar_runtime_close(nullptr);  // a no-op

  // NULL outputs and inputs.
  EXPECT_EQ(oscar_runtime_rotation(r.get(), OSCAR_KV_KEY, 0, 0, nullptr),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "out is NULL")) << last_error();
  EXPECT_EQ(oscar_runtime_clip_ratio(r.get(), OSCAR_KV_KEY, 0, 0, nullptr),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(oscar_runtime_apply(r.get(), OSCAR_TRANSFORM_KEY, 0, 0, nullptr, row.data(), 1),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "in is NULL")) << last_error();
  EXPECT_EQ(oscar_runtime_apply(r.get(), OSCAR_TRANSFORM_KEY, 0, 0, nullptr, nullptr, 0),
            OSCAR_STATUS_OK);  // zero rows: nothing to read or write
  EXPECT_EQ(oscar_runtime_apply(r.get(), OSCAR_TRANSFORM_KEY, 0, 0, row.data(), row.data(), -1),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(oscar_runtime_transform_matrix(r.get(), OSCAR_TRANSFORM_KEY, 0, 0,
                                           OSCAR_LAYOUT_ROW_MAJOR, nullptr, row.data()),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(oscar_runtime_quantize_int2(r.get(), OSCAR_KV_KEY, 0, 0, row.data(), nullptr, &f, &f),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "packed is NULL")) << last_error();

  // Indices out of range (enum values outside their enumerators: tests/runtime_c_abi.c, since
  // only C may form them).
  EXPECT_EQ(oscar_runtime_rotation(r.get(), OSCAR_KV_KEY, 2, 0, &p), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "layer 2 is out of range (the bundle has 2 layers)"))
      << last_error();
  EXPECT_EQ(oscar_runtime_mean(r.get(), OSCAR_KV_VALUE, 0, -1, &p), OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "KV head -1 is out of range")) << last_error();
  EXPECT_THROW(r.rotation(rt::Kind::kKey, 0, 2), rt::Error);

  // A moved-from C++ object reports instead of crashing.
  rt::Runtime a = rt::Runtime::open(dir_.file("b.oscar"));
  const rt::Runtime b = std::move(a);
  EXPECT_EQ(b.head_dim(), 16);
  EXPECT_THROW(a.info(), rt::Error);  // NOLINT(bugprone-use-after-move): on purpose
  EXPECT_THROW(a.manifest_json(), rt::Error);
}

TEST_F(RuntimeTest, LastErrorIsPerThreadAndClearedBySuccess) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const float* p = nullptr;
  EXPECT_EQ(oscar_runtime_rotation(r.get(), OSCAR_KV_KEY, 5, 0, &p), OSCAR_STATUS_INVALID_ARGUMENT);
  const std::string mine = last_error();
  EXPECT_FALSE(mine.empty());
  std::string other = "unset";
  std::thread([&] { other = oscar_runtime_last_error(); }).join();
  EXPECT_EQ(other, "");
  std::thread([&] {
    oscar_runtime_rotation(r.get(), OSCAR_KV_KEY, 0, 9, &p);
    other = oscar_runtime_last_error();
  }).join();
  EXPECT_TRUE(contains(other, "KV head 9")) << other;
  EXPECT_EQ(last_error(), mine);  // untouched by the other thread's failure
  EXPECT_EQ(oscar_runtime_rotation(r.get(), OSCAR_KV_KEY, 0, 0, &p), OSCAR_STATUS_OK);
  EXPECT_EQ(last_error(), "");
}

// ---- Applying the bundle -------------------------------------------------------------------

TEST_F(RuntimeTest, ApplyMatchesAPlainLoopReference) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const std::int64_t d = 16, rows = 5;
  const std::vector<float> x = random_rows(rows * d, 7);
  for (oscar_transform t : kAllTransforms) {
    for (std::int64_t layer = 0; layer < 2; ++layer) {
      for (std::int64_t head = 0; head < 2; ++head) {
        std::vector<float> y(x.size());
        ASSERT_EQ(oscar_runtime_apply(r.get(), t, layer, head, x.data(), y.data(), rows),
                  OSCAR_STATUS_OK)
            << last_error();
        for (std::int64_t row = 0; row < rows; ++row) {
          const std::vector<double> ref = reference_map(bundle_, t, layer, head, &x[row * d]);
          for (std::int64_t j = 0; j < d; ++j) {
            EXPECT_NEAR(y[row * d + j], ref[j], 1e-5 * (1.0 + std::abs(ref[j])))
                << "transform " << t << " layer " << layer << " head " << head << " row " << row
                << " j " << j;
          }
        }
        // In place gives the same bits.
        std::vector<float> z = x;
        ASSERT_EQ(oscar_runtime_apply(r.get(), t, layer, head, z.data(), z.data(), rows),
                  OSCAR_STATUS_OK);
        EXPECT_EQ(z, y);
      }
    }
  }
  std::vector<float> buf = x;
  EXPECT_EQ(oscar_runtime_apply(r.get(), OSCAR_TRANSFORM_KEY, 0, 0, buf.data() + 1, buf.data(), 2),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "overlap")) << last_error();
  // The vector overload is the same map.
  std::vector<float> two(2 * d);
  r.apply(rt::Transform::kValue, 1, 0, x.data(), two.data(), 2);
  EXPECT_EQ(r.apply(rt::Transform::kValue, 1, 0, std::vector<float>(x.begin(), x.begin() + 2 * d)),
            two);
  EXPECT_THROW(r.apply(rt::Transform::kKey, 0, 0, std::vector<float>(17)), rt::Error);
}

TEST_F(RuntimeTest, RotatedKeysAreWhatTheCacheKernelsStore) {
  // The INT2 cache reference rounds ((k - mu) / s) R_K to bf16 after the same float32 sums.
  const rt::Runtime r = rt::Runtime::open(write({}));
  const std::int64_t d = 16;
  const std::vector<float> x = random_rows(8 * d, 11);
  for (std::int64_t row = 0; row < 8; ++row) {
    const float* k = &x[row * d];
    std::vector<float> ours(d), kernel(d);
    r.apply(rt::Transform::kKey, 1, 0, k, ours.data());
    oscar::int2::rotate_row(k, r.mean(rt::Kind::kKey, 1, 0), r.key_smoothing(1, 0),
                            r.rotation(rt::Kind::kKey, 1, 0), d, kernel.data());
    for (std::int64_t j = 0; j < d; ++j) {
      EXPECT_EQ(oscar::int2::round_scale(ours[j], oscar::int2::ScaleDType::kBF16), kernel[j])
          << row << " " << j;
    }
  }
}

TEST_F(RuntimeTest, RoundTripsAndAttentionInvariance) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const std::int64_t d = 16;
  const std::vector<float> k = random_rows(d, 1), q = random_rows(d, 2), v = random_rows(d, 3);
  std::vector<float> k_rot(d), q_rot(d), v_rot(d), back(d);
  r.apply(rt::Transform::kKey, 0, 1, k.data(), k_rot.data());
  r.apply(rt::Transform::kQuery, 0, 1, q.data(), q_rot.data());
  r.apply(rt::Transform::kValue, 0, 1, v.data(), v_rot.data());
  // q_rot . k_rot = q . (k - mu): the logits only move by a per-query constant.
  const float* mu = r.mean(rt::Kind::kKey, 0, 1);
  double rotated = 0.0, plain = 0.0;
  for (std::int64_t i = 0; i < d; ++i) {
    rotated += double(q_rot[i]) * k_rot[i];
    plain += double(q[i]) * (k[i] - mu[i]);
  }
  EXPECT_NEAR(rotated, plain, 1e-4 * (1.0 + std::abs(plain)));
  r.apply(rt::Transform::kKeyInverse, 0, 1, k_rot.data(), back.data());
  for (std::int64_t i = 0; i < d; ++i) EXPECT_NEAR(back[i], k[i], 1e-5) << i;
  r.apply(rt::Transform::kOutput, 0, 1, v_rot.data(), back.data());
  for (std::int64_t i = 0; i < d; ++i) EXPECT_NEAR(back[i], v[i], 1e-5) << i;
}

TEST_F(RuntimeTest, TransformMatricesFoldTheSameMaps) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const std::int64_t d = 16;
  const std::vector<float> x = random_rows(d, 5);
  for (oscar_transform t : kAllTransforms) {
    const rt::Affine row_major = r.transform(static_cast<rt::Transform>(t), 1, 1);
    const rt::Affine transposed =
        r.transform(static_cast<rt::Transform>(t), 1, 1, rt::Layout::kTransposed);
    EXPECT_EQ(row_major.bias, transposed.bias);
    const std::vector<double> ref = reference_map(bundle_, t, 1, 1, x.data());
    for (std::int64_t j = 0; j < d; ++j) {
      double a = row_major.bias[j], b = transposed.bias[j];
      for (std::int64_t i = 0; i < d; ++i) {
        a += double(x[i]) * row_major.matrix[i * d + j];
        b += double(x[i]) * transposed.matrix[j * d + i];  // [out, in]
      }
      EXPECT_NEAR(a, ref[j], 1e-5 * (1.0 + std::abs(ref[j]))) << t << " " << j;
      EXPECT_EQ(a, b) << t << " " << j;
    }
  }
  // The query map never has a bias; the key map of a centred bundle does.
  std::vector<float> m(d * d), bias(d);
  EXPECT_EQ(oscar_runtime_transform_matrix(r.get(), OSCAR_TRANSFORM_QUERY, 0, 0,
                                           OSCAR_LAYOUT_ROW_MAJOR, m.data(), nullptr),
            OSCAR_STATUS_OK);
  EXPECT_EQ(oscar_runtime_transform_matrix(r.get(), OSCAR_TRANSFORM_KEY, 0, 0,
                                           OSCAR_LAYOUT_ROW_MAJOR, m.data(), nullptr),
            OSCAR_STATUS_INVALID_ARGUMENT);
  EXPECT_TRUE(contains(last_error(), "bias is NULL")) << last_error();
  EXPECT_EQ(oscar_runtime_transform_matrix(r.get(), OSCAR_TRANSFORM_OUTPUT, 0, 0,
                                           OSCAR_LAYOUT_TRANSPOSED, m.data(), nullptr),
            OSCAR_STATUS_INVALID_ARGUMENT);
  // R itself, in the layout the bundle stores.
  const rt::Affine value = r.transform(rt::Transform::kValue, 0, 1);
  const float* rv = r.rotation(rt::Kind::kValue, 0, 1);
  EXPECT_EQ(value.matrix, std::vector<float>(rv, rv + d * d));
}

TEST_F(RuntimeTest, Int2RowsMatchTheReference) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const std::int64_t d = 16;
  EXPECT_EQ(oscar_runtime_int2_row_bytes(r.get()), 4);
  EXPECT_EQ(oscar_runtime_int2_row_groups(r.get()), 1);
  const std::vector<float> x = random_rows(d, 9);
  for (rt::Kind kind : {rt::Kind::kKey, rt::Kind::kValue}) {
    std::vector<float> x_rot(d);
    r.apply(kind == rt::Kind::kKey ? rt::Transform::kKey : rt::Transform::kValue, 1, 1, x.data(),
            x_rot.data());
    const rt::Int2Row row = r.quantize_int2(kind, 1, 1, x_rot.data());
    oscar::int2::QuantParams p;
    p.group_size = d;
    p.clip_ratio = r.clip_ratio(kind, 1, 1);
    p.scale_dtype = oscar::int2::ScaleDType::kBF16;
    std::vector<std::uint8_t> packed(4);
    float scale = 0.0f, zero = 0.0f;
    oscar::int2::quantize_row(x_rot.data(), d, p, packed.data(), &scale, &zero);
    EXPECT_EQ(row.packed, packed);
    EXPECT_EQ(row.scales, std::vector<float>{scale});
    EXPECT_EQ(row.zeros, std::vector<float>{zero});
    std::vector<float> expected(d);
    oscar::int2::dequantize_row(packed.data(), &scale, &zero, d, d, expected.data());
    EXPECT_EQ(r.dequantize_int2(row), expected);
  }
  std::vector<float> bad(d, 1.0f);
  bad[3] = std::nanf("");
  EXPECT_THROW(r.quantize_int2(rt::Kind::kKey, 0, 0, bad.data()), rt::Error);
  EXPECT_TRUE(contains(last_error(), "element 3")) << last_error();
  rt::Int2Row wrong;
  EXPECT_THROW(r.dequantize_int2(wrong), rt::Error);
}

TEST_F(RuntimeTest, Int2GroupsFromTheManifest) {
  Bundle b = synthetic_bundle({});
  b.quantization.group_size = 4;
  b.quantization.scale_dtype = "f16";
  oscar::write_bundle(dir_.file("g4.oscar"), b);
  const rt::Runtime r = rt::Runtime::open(dir_.file("g4.oscar"));
  EXPECT_EQ(r.info().group_size, 4);
  EXPECT_EQ(oscar_runtime_int2_row_groups(r.get()), 4);
  const std::vector<float> x = random_rows(16, 4);
  const rt::Int2Row row = r.quantize_int2(rt::Kind::kValue, 0, 0, x.data());
  ASSERT_EQ(row.scales.size(), 4u);
  for (float s : row.scales) {
    EXPECT_EQ(s, oscar::int2::round_scale(s, oscar::int2::ScaleDType::kF16));
  }
}

TEST_F(RuntimeTest, Int2UnsupportedIsReportedNotFatal) {
  SyntheticBundleOptions o;
  o.head_dim = 6;  // not a multiple of 4: no INT2 packing, rotations still usable
  o.heads = 2;
  const rt::Runtime r = rt::Runtime::open(write(o));
  std::vector<float> x = random_rows(6, 1), y(6);
  EXPECT_NO_THROW(r.apply(rt::Transform::kKey, 0, 0, x.data(), y.data()));
  try {
    r.quantize_int2(rt::Kind::kKey, 0, 0, y.data());
    FAIL() << "no exception";
  } catch (const rt::Error& e) {
    EXPECT_EQ(e.status(), OSCAR_STATUS_UNSUPPORTED);
    EXPECT_TRUE(contains(e.what(), "INT2 rows are not supported")) << e.what();
  }
}

TEST_F(RuntimeTest, ConcurrentReadersAgree) {
  const rt::Runtime r = rt::Runtime::open(write({}));
  const std::vector<float> x = random_rows(64 * 16, 3);
  std::vector<float> expected(x.size());
  r.apply(rt::Transform::kKey, 1, 1, x.data(), expected.data(), 64);
  std::vector<std::vector<float>> results(4);
  std::vector<std::thread> threads;
  for (auto& out : results) {
    threads.emplace_back([&r, &x, &out] {
      out.resize(x.size());
      for (int rep = 0; rep < 20; ++rep)
        r.apply(rt::Transform::kKey, 1, 1, x.data(), out.data(), 64);
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& out : results) EXPECT_EQ(out, expected);
}

// ---- The C ABI from C ----------------------------------------------------------------------

TEST_F(RuntimeTest, CProgramUsesTheCAbi) {
  const std::string path = write({});
  char message[512];
  EXPECT_EQ(oscar_test_c_abi(path.c_str(), message, sizeof(message)), 0) << message;
}

}  // namespace

// Calibration: streaming statistics vs direct computation, merge, resume, data packing, bundles.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "oscar/bundle.h"
#include "oscar/calibrate.h"
#include "oscar/calibration_data.h"
#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/kv_statistics.h"
#include "oscar/model.h"
#include "oscar/safetensors.h"
#include "oscar/tokenizer.h"
#include "test_support.h"
#include "tiny_model.h"

using namespace oscar;

namespace {

// Streaming sums per batch vs one product over all rows: the same float64 values summed in a
// different order; relative differences stay within ~n * 1e-16 for n <= 1e4 terms, so 1e-12.
constexpr double kStreamTol = 1e-12;
// The bar for eigenvalues from the bundle path vs a direct eigendecomposition: 1e-9.
constexpr double kEigenTol = 1e-9;

double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs().max() / b.abs().max()).item<double>();
}

// Keeps every attention record of a forward (the "dump everything" approach, for reference).
struct Capture : AttentionObserver {
  std::vector<std::vector<AttentionRecord>> by_layer;
  explicit Capture(std::int64_t layers) : by_layer(static_cast<std::size_t>(layers)) {}
  void on_attention(const AttentionRecord& r) override {
    AttentionRecord copy = r;
    copy.q = r.q.clone();
    copy.k = r.k.clone();
    copy.v = r.v.clone();
    copy.out = r.out.clone();
    by_layer[static_cast<std::size_t>(r.layer)].push_back(copy);
  }
  torch::Tensor all(std::int64_t layer, torch::Tensor AttentionRecord::*field) const {
    std::vector<torch::Tensor> parts;
    for (const auto& r : by_layer[static_cast<std::size_t>(layer)]) parts.push_back(r.*field);
    return torch::cat(parts, 0).to(torch::kCPU, torch::kFloat64);  // [B_total, T, H, d]
  }
};

// Hands each record to several observers, so a capture and the statistics see the same forward.
struct Tee : AttentionObserver {
  std::vector<AttentionObserver*> targets;
  void on_attention(const AttentionRecord& r) override {
    for (auto* t : targets) t->on_attention(r);
  }
};

class CalibrationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    spec_.layers = 3;
    spec_.heads = 8;
    spec_.kv_heads = 2;
    spec_.head_dim = 16;
    spec_.hidden = 64;
    test::write_tiny_model(dir_.path(), spec_);
    model_ = std::make_unique<Model>(Model::load(dir_.path()));
    torch::manual_seed(11);
    tokens_ = torch::randint(0, spec_.vocab, {6, 40}, torch::kInt64);
  }
  KvStatistics stream(std::int64_t begin, std::int64_t end, std::int64_t batch) {
    KvStatistics s(spec_.layers, spec_.heads, spec_.kv_heads, spec_.head_dim, torch::kCPU);
    feed(s, begin, end, batch);
    return s;
  }
  void feed(AttentionObserver& s, std::int64_t begin, std::int64_t end, std::int64_t batch) {
    ForwardOptions f;
    f.observer = &s;
    for (std::int64_t i = begin; i < end; i += batch) {
      model_->hidden_states(tokens_.slice(0, i, std::min(end, i + batch)), f);
    }
  }
  test::TempDir dir_;
  test::TinyModelSpec spec_;
  std::unique_ptr<Model> model_;
  torch::Tensor tokens_;
};

// Direct (non-streaming) C for KV head h of a layer from captured tensors [N, T, H, d].
torch::Tensor direct_group_moment(const torch::Tensor& x, std::int64_t kv_head,
                                  std::int64_t group) {
  const auto rows = x.slice(2, kv_head * group, (kv_head + 1) * group).reshape({-1, x.size(3)});
  return rows.t().matmul(rows) / static_cast<double>(rows.size(0));
}

}  // namespace

TEST_F(CalibrationTest, StreamingEqualsDirectComputation) {
  Capture capture(spec_.layers);
  KvStatistics s(spec_.layers, spec_.heads, spec_.kv_heads, spec_.head_dim, torch::kCPU);
  Tee tee;
  tee.targets = {&capture, &s};
  feed(tee, 0, 6, 2);
  EXPECT_EQ(s.main_tokens(), 6 * 40);
  const std::int64_t g = spec_.heads / spec_.kv_heads;
  for (std::int64_t l = 0; l < spec_.layers; ++l) {
    const auto q = capture.all(l, &AttentionRecord::q);
    const auto o = capture.all(l, &AttentionRecord::out);
    const auto k = capture.all(l, &AttentionRecord::k);
    const auto v = capture.all(l, &AttentionRecord::v);
    for (std::int64_t h = 0; h < spec_.kv_heads; ++h) {
      const auto cq = direct_group_moment(q, h, g);
      EXPECT_LT(rel_diff(s.query_covariance(l)[h], cq), kStreamTol);
      EXPECT_LT(rel_diff(s.output_covariance(l)[h], direct_group_moment(o, h, g)), kStreamTol);
      const auto kh = k.select(2, h).reshape({-1, spec_.head_dim});
      EXPECT_LT(rel_diff(s.key_mean(l)[h], kh.mean(0)), kStreamTol);
      // The released proxy: w_t = k_t C_Q k_t^T, C_S = sum w v^T v / sum w.
      const auto vh = v.select(2, h).reshape({-1, spec_.head_dim});
      const auto w = (kh.matmul(cq) * kh).sum(1);
      const auto expected = (vh * w.unsqueeze(1)).t().matmul(vh) / w.sum();
      KvStatistics kw = stream(0, 6, 2);
      kw.begin_keyweight_pass();
      feed(kw, 0, 6, 2);
      EXPECT_LT(rel_diff(kw.keyweight_value_covariance(l)[h], expected), kStreamTol);
    }
  }
}

TEST_F(CalibrationTest, StoredEigenvaluesEqualDirectEigendecomposition) {
  Capture capture(spec_.layers);
  KvStatistics s(spec_.layers, spec_.heads, spec_.kv_heads, spec_.head_dim, torch::kCPU);
  Tee tee;
  tee.targets = {&capture, &s};
  feed(tee, 0, 6, 4);
  const RotationResult r = compute_rotations(s, RotationOptions{});
  const std::int64_t g = spec_.heads / spec_.kv_heads;
  for (std::int64_t l = 0; l < spec_.layers; ++l) {
    for (std::int64_t h = 0; h < spec_.kv_heads; ++h) {
      const auto cq = direct_group_moment(capture.all(l, &AttentionRecord::q), h, g);
      const auto cs = direct_group_moment(capture.all(l, &AttentionRecord::out), h, g);
      const auto eq = std::get<0>(torch::linalg_eigh(cq)).flip(0);
      const auto es = std::get<0>(torch::linalg_eigh(cs)).flip(0);
      EXPECT_LT(rel_diff(r.k_eigenvalues[l][h], eq), kEigenTol) << "layer " << l << " head " << h;
      EXPECT_LT(rel_diff(r.v_eigenvalues[l][h], es), kEigenTol) << "layer " << l << " head " << h;
      // R's columns are U H P: R^T C R is the Hadamard-mixed spectrum, trace preserved.
      const auto rk = r.k_rotation[l][h];
      EXPECT_NEAR(rk.t().matmul(cq).matmul(rk).trace().item<double>(), cq.trace().item<double>(),
                  1e-9 * cq.trace().item<double>());
    }
  }
}

TEST_F(CalibrationTest, MergeOfHalvesEqualsOnePass) {
  const KvStatistics whole = stream(0, 6, 2);
  KvStatistics first = stream(0, 2, 2);
  const KvStatistics second = stream(2, 6, 2);
  first.merge(second);
  EXPECT_EQ(first.main_tokens(), whole.main_tokens());
  for (std::int64_t l = 0; l < spec_.layers; ++l) {
    EXPECT_LT(rel_diff(first.query_covariance(l), whole.query_covariance(l)), kStreamTol);
    EXPECT_LT(rel_diff(first.output_covariance(l), whole.output_covariance(l)), kStreamTol);
    EXPECT_LT(rel_diff(first.key_mean(l), whole.key_mean(l)), kStreamTol);
  }
  KvStatistics other(spec_.layers, spec_.heads, spec_.kv_heads, 8, torch::kCPU);
  EXPECT_THROW(first.merge(other), Error);
}

// Sharded key-weighted calibration: the main passes merge, each shard runs its key-weighted pass
// with C_Q from the merged main pass, and those parts merge into what one run gives.
TEST_F(CalibrationTest, ShardedKeyWeightPassEqualsOnePass) {
  KvStatistics whole = stream(0, 6, 2);
  whole.begin_keyweight_pass();
  feed(whole, 0, 6, 2);

  KvStatistics main = stream(0, 2, 2);
  main.merge(stream(2, 6, 2));
  StatsProvenance p;
  main.save(dir_.file("main.safetensors"), p);
  KvStatistics part1 = KvStatistics::load(dir_.file("main.safetensors"), torch::kCPU);
  KvStatistics part2 = KvStatistics::load(dir_.file("main.safetensors"), torch::kCPU);
  part1.begin_keyweight_pass();
  feed(part1, 0, 2, 2);
  part2.begin_keyweight_pass();
  feed(part2, 2, 6, 2);
  part2.keyweight_sequences = 4;
  part2.save(dir_.file("kw2.safetensors"), p);  // a shard's part travels as a file
  part1.keyweight_sequences = 2;
  part1.merge(KvStatistics::load(dir_.file("kw2.safetensors"), torch::kCPU));
  EXPECT_EQ(part1.main_tokens(), whole.main_tokens());
  EXPECT_EQ(part1.keyweight_tokens(), whole.keyweight_tokens());
  EXPECT_EQ(part1.keyweight_sequences, 6);
  for (std::int64_t l = 0; l < spec_.layers; ++l) {
    EXPECT_LT(rel_diff(part1.keyweight_value_covariance(l), whole.keyweight_value_covariance(l)),
              kStreamTol);
    EXPECT_TRUE(torch::equal(part1.query_covariance(l), main.query_covariance(l)));
  }
  // Parts weighted by another C_Q (a shard's own main pass) do not merge, nor do the two passes.
  KvStatistics own = stream(0, 2, 2);
  own.begin_keyweight_pass();
  feed(own, 0, 2, 2);
  try {
    part1.merge(own);
    ADD_FAILURE() << "merged key-weighted parts of different main passes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("another main pass"), std::string::npos) << e.what();
  }
  EXPECT_THROW(main.merge(own), Error);
}

TEST_F(CalibrationTest, ResumeEqualsUninterruptedRunBitForBit) {
  StatsProvenance p;
  p.model_name = "tiny";
  KvStatistics interrupted = stream(0, 4, 2);
  interrupted.main_sequences = 4;
  interrupted.save(dir_.file("stats.safetensors"), p);
  StatsProvenance loaded_p;
  KvStatistics resumed = KvStatistics::load(dir_.file("stats.safetensors"), torch::kCPU, &loaded_p);
  EXPECT_EQ(loaded_p.model_name, "tiny");
  EXPECT_EQ(resumed.main_sequences, 4);
  feed(resumed, 4, 6, 2);
  const KvStatistics whole = stream(0, 6, 2);
  for (std::int64_t l = 0; l < spec_.layers; ++l) {
    EXPECT_TRUE(torch::equal(resumed.query_covariance(l), whole.query_covariance(l)));
    EXPECT_TRUE(torch::equal(resumed.output_covariance(l), whole.output_covariance(l)));
    EXPECT_TRUE(torch::equal(resumed.key_mean(l), whole.key_mean(l)));
  }
}

TEST_F(CalibrationTest, NonFiniteActivationsAreReported) {
  KvStatistics s(spec_.layers, spec_.heads, spec_.kv_heads, spec_.head_dim, torch::kCPU);
  AttentionRecord r;
  r.layer = 1;
  r.q = torch::zeros({1, 3, spec_.heads, spec_.head_dim});
  r.q[0][1][2][3] = std::numeric_limits<float>::quiet_NaN();
  r.k = torch::zeros({1, 3, spec_.kv_heads, spec_.head_dim});
  r.v = r.k;
  r.out = torch::zeros_like(r.q);
  s.on_attention(r);
  try {
    s.check_finite();
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1"), std::string::npos) << e.what();
  }
}

TEST_F(CalibrationTest, TooFewTokensForFullRankIsAnError) {
  KvStatistics s(spec_.layers, spec_.heads, spec_.kv_heads, spec_.head_dim, torch::kCPU);
  ForwardOptions f;
  f.observer = &s;
  model_->hidden_states(tokens_.slice(0, 0, 1).slice(1, 0, 5), f);  // 5 tokens < d = 16
  EXPECT_THROW(compute_rotations(s, RotationOptions{}), Error);
  KvStatistics empty(spec_.layers, spec_.heads, spec_.kv_heads, spec_.head_dim, torch::kCPU);
  EXPECT_THROW(compute_rotations(empty, RotationOptions{}), Error);
}

TEST_F(CalibrationTest, LayerGroupingSharesOneRotationPerLayer) {
  const KvStatistics s = stream(0, 6, 3);
  RotationOptions o;
  o.grouping = Grouping::kLayer;
  const RotationResult r = compute_rotations(s, o);
  for (std::int64_t l = 0; l < spec_.layers; ++l) {
    EXPECT_TRUE(torch::equal(r.k_rotation[l][0], r.k_rotation[l][1]));
    EXPECT_TRUE(torch::equal(r.v_rotation[l][0], r.v_rotation[l][1]));
  }
}

TEST_F(CalibrationTest, BundleRoundTripAndValidation) {
  const KvStatistics s = stream(0, 6, 3);
  RotationOptions o;
  o.center_keys = true;
  const RotationResult r = compute_rotations(s, o);
  const ModelIdentity id = model_identity(dir_.path());
  Bundle b = make_bundle(r, o, id, QuantizationParams{}, CalibrationProvenance{});
  b.created = "2026-01-01T00:00:00Z";
  const std::string path = dir_.file("b.safetensors");
  write_bundle(path, b);
  const Bundle back = read_bundle(path);
  EXPECT_EQ(back.tensor_sha256, b.tensor_sha256);
  EXPECT_EQ(back.layers[2].k_rotation, b.layers[2].k_rotation);
  EXPECT_EQ(back.layers[1].k_mean.size(), static_cast<std::size_t>(2 * 16));
  EXPECT_LT(max_orthogonality_error(back, 'k'), 1e-6);
  EXPECT_LT(max_orthogonality_error(back, 'v'), 1e-6);
  EXPECT_NO_THROW(check_bundle_matches_model(back, id));
  EXPECT_EQ(back.calibration.grouping, "head");
  EXPECT_TRUE(back.calibration.center_keys);

  // Same inputs -> identical tensors; the manifest differs only in `created`.
  Bundle again = make_bundle(compute_rotations(stream(0, 6, 3), o), o, id, QuantizationParams{},
                             CalibrationProvenance{});
  again.created = "2027-01-01T00:00:00Z";
  write_bundle(dir_.file("c.safetensors"), again);
  EXPECT_EQ(again.tensor_sha256, b.tensor_sha256);
}

TEST_F(CalibrationTest, KeySmoothingScalesAndRotatesInTheSmoothedBasis) {
  Capture cap(spec_.layers);
  KvStatistics s(spec_.layers, spec_.heads, spec_.kv_heads, spec_.head_dim, torch::kCPU);
  Tee tee;
  tee.targets = {&cap, &s};
  feed(tee, 0, 6, 3);
  RotationOptions o;
  o.center_keys = true;
  o.smooth_keys = 0.5;
  o.composition = Composition::kR;  // R = U: compare eigenvectors directly
  const RotationResult r = compute_rotations(s, o);
  const std::int64_t group = spec_.heads / spec_.kv_heads, d = spec_.head_dim;
  for (std::int64_t l = 0; l < spec_.layers; ++l) {
    const auto q = cap.all(l, &AttentionRecord::q), k = cap.all(l, &AttentionRecord::k);
    for (std::int64_t h = 0; h < spec_.kv_heads; ++h) {
      // s_c = (sigma_k / sigma_q)^0.5 with geometric mean 1, from captured rows directly.
      const auto kr = k.select(2, h).reshape({-1, d});
      const auto qr = q.slice(2, h * group, (h + 1) * group).reshape({-1, d});
      const auto k_var = kr.var(0, /*unbiased=*/false), q_var = qr.pow(2).mean(0);
      auto log_s = 0.25 * (k_var.log() - q_var.log());
      const auto expected = (log_s - log_s.mean()).exp();
      const auto smooth = r.k_smooth[l][h];
      EXPECT_LT(rel_diff(smooth, expected), kStreamTol * 100) << "layer " << l << " head " << h;
      // The logits are unchanged: (q S) . ((k - mu) / S) = q . k - q . mu.
      const auto mu = r.k_mean[l][h];
      const auto lhs = (qr * smooth).matmul(((kr - mu) / smooth).t());
      const auto rhs = qr.matmul((kr - mu).t());
      EXPECT_LT(rel_diff(lhs, rhs), 1e-13);
      // R_K diagonalises C_Q in the smoothed basis: R^T (S C_Q S) R is diagonal.
      const auto qs = qr * smooth;
      const auto cq = qs.t().matmul(qs) / static_cast<double>(qs.size(0));
      const auto rk = r.k_rotation[l][h];
      const auto diag = rk.t().matmul(cq).matmul(rk);
      const auto off = diag - torch::diag_embed(torch::diagonal(diag));
      EXPECT_LT((off.abs().max() / diag.abs().max()).item<double>(), 1e-9);
    }
  }
  // Layer grouping shares the scales across heads; out-of-range strengths are refused.
  o.grouping = Grouping::kLayer;
  const RotationResult rl = compute_rotations(s, o);
  EXPECT_TRUE(torch::equal(rl.k_smooth[0][0], rl.k_smooth[0][1]));
  o.smooth_keys = 1.5;
  EXPECT_THROW(compute_rotations(s, o), Error);
}

TEST_F(CalibrationTest, SmoothedBundlesAreVersion2AndUnsmoothedStayVersion1) {
  const KvStatistics s = stream(0, 6, 3);
  const ModelIdentity id = model_identity(dir_.path());
  RotationOptions o;
  Bundle plain = make_bundle(compute_rotations(s, o), o, id, {}, {});
  EXPECT_EQ(bundle_format_version(plain), 1);
  EXPECT_EQ(bundle_manifest_json(plain).find("smooth_keys"), std::string::npos);
  o.smooth_keys = 0.5;
  Bundle b = make_bundle(compute_rotations(s, o), o, id, {}, {});
  EXPECT_EQ(bundle_format_version(b), 2);
  const std::string path = dir_.file("smooth.safetensors");
  write_bundle(path, b);
  const Bundle back = read_bundle(path);
  EXPECT_EQ(bundle_format_version(back), 2);
  EXPECT_DOUBLE_EQ(back.calibration.smooth_keys, 0.5);
  EXPECT_EQ(back.layers[1].k_smooth, b.layers[1].k_smooth);
  EXPECT_EQ(back.layers[1].k_smooth.size(), static_cast<std::size_t>(2 * 16));
  // Scales must be positive and present exactly when the manifest says keys are smoothed.
  Bundle bad = b;
  bad.layers[0].k_smooth[3] = -1.0f;
  EXPECT_THROW(write_bundle(dir_.file("bad.safetensors"), bad), Error);
  bad = b;
  bad.layers[2].k_smooth.clear();
  EXPECT_THROW(write_bundle(dir_.file("bad.safetensors"), bad), Error);
}

TEST_F(CalibrationTest, CorruptOrForeignBundlesAreRejected) {
  const KvStatistics s = stream(0, 6, 3);
  const RotationResult r = compute_rotations(s, RotationOptions{});
  const ModelIdentity id = model_identity(dir_.path());
  Bundle b = make_bundle(r, RotationOptions{}, id, QuantizationParams{}, CalibrationProvenance{});
  const std::string path = dir_.file("b.safetensors");
  write_bundle(path, b);
  const std::string bytes = read_file(path);
  auto expect_error = [&](const std::string& content, const char* needle) {
    write_file_atomic(dir_.file("bad.safetensors"), content);
    try {
      read_bundle(dir_.file("bad.safetensors"));
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  std::string flipped = bytes;
  flipped[flipped.size() - 5] ^= 0x10;  // a bit of the last tensor's data
  expect_error(flipped, "checksum");
  expect_error(bytes.substr(0, bytes.size() - 3), "bad.safetensors");
  // A bundle from a newer writer: its manifest (and the manifest's checksum, which a newer writer
  // computes too) says format_version 7. An edit without the checksum is damage.
  {
    const SafetensorsFile file(path);
    std::string manifest = file.metadata().at("oscar");
    const auto pos = manifest.find("\"format_version\":1");
    ASSERT_NE(pos, std::string::npos);
    manifest.replace(pos, 18, "\"format_version\":7");
    std::vector<TensorToWrite> tensors;
    for (const TensorInfo& t : file.tensors()) {
      tensors.push_back({t.name, t.dtype, t.shape, file.data(t), t.nbytes()});
    }
    const std::string newer = dir_.file("newer.safetensors");
    write_safetensors(newer, tensors,
                      {{"oscar", manifest}, {kManifestChecksumKey, manifest_checksum(manifest)}});
    expect_error(read_file(newer), "newer");
    write_safetensors(newer, tensors,
                      {{"oscar", manifest}, {kManifestChecksumKey, manifest_checksum(bytes)}});
    expect_error(read_file(newer), "manifest checksum mismatch");
  }
  EXPECT_THROW(read_bundle(dir_.file("missing.safetensors")), Error);

  // A bundle of another model.
  test::TempDir other_dir;
  test::TinyModelSpec other = spec_;
  other.layers = 2;
  test::write_tiny_model(other_dir.path(), other);
  try {
    check_bundle_matches_model(b, model_identity(other_dir.path()));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layers 3 (bundle) vs 2 (model)"), std::string::npos)
        << e.what();
  }
  // Same shape, different weights: only the hashes tell.
  test::TempDir twin_dir;
  test::TinyModelSpec twin = spec_;
  twin.seed = 99;
  test::write_tiny_model(twin_dir.path(), twin);
  EXPECT_NO_THROW(check_bundle_matches_model(b, model_identity(twin_dir.path()), false));
  const ModelIdentity twin_id = model_identity(twin_dir.path());
  if (twin_id.weights_header_sha256 == id.weights_header_sha256) {
    // Identical headers (same shapes and dtypes): config.json is the same too, so the bundle
    // legitimately fits; nothing to check.
    SUCCEED();
  }
}

TEST(CalibrationData, PackingIsDeterministicAndSeedShuffles) {
  std::vector<std::vector<std::int32_t>> docs;
  for (int d = 0; d < 20; ++d) docs.push_back(std::vector<std::int32_t>(7 + d, d));
  DataOptions o;
  o.seq_len = 16;
  o.tokens = 100;
  const auto a = pack_documents(docs, o);
  EXPECT_EQ(a.sequences.size(), 7u);  // ceil(100 / 16)
  EXPECT_EQ(a.tokens(), 112);
  EXPECT_EQ(a.sequences[0][0], 0);
  EXPECT_EQ(a.sequences[0][7], 1);  // documents concatenated in order
  o.seed = 42;
  const auto b = pack_documents(docs, o);
  const auto c = pack_documents(docs, o);
  EXPECT_EQ(b.sequences, c.sequences);
  EXPECT_NE(a.sequences, b.sequences);
  o.tokens = 100000;
  try {
    pack_documents(docs, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--tokens"), std::string::npos) << e.what();
  }
}

TEST(CalibrationData, ReadsTextJsonlAndIds) {
  OSCAR_REQUIRE_MODEL(stories, "stories260K");
  const auto tokenizer = Tokenizer::from_file(join_path(stories, "tokenizer.json"));
  test::TempDir dir;
  write_file_atomic(dir.file("a.txt"), "Once upon a time.\n\nThe end came soon.\n");
  write_file_atomic(dir.file("a.jsonl"),
                    "{\"text\": \"Once upon a time.\"}\n\n{\"text\": \"The end came soon.\"}\n");
  DataOptions o;
  o.seq_len = 4;
  o.tokens = 8;
  o.bos_token = 1;
  const auto text = load_calibration_data(dir.file("a.txt"), tokenizer, o);
  const auto jsonl = load_calibration_data(dir.file("a.jsonl"), tokenizer, o);
  EXPECT_EQ(text.format, DataFormat::kParagraphs);
  EXPECT_EQ(jsonl.format, DataFormat::kJsonl);
  EXPECT_EQ(text.sequences, jsonl.sequences);
  EXPECT_EQ(text.documents, 2);
  EXPECT_EQ(text.sequences[0][0], 1) << "documents start with BOS";
  EXPECT_EQ(text.sha256.size(), 64u);

  write_file_atomic(dir.file("ids.json"), "[[1, 5, 6, 7, 8], [1, 9, 10, 11]]");
  const auto ids = load_calibration_data(dir.file("ids.json"), tokenizer, o);
  EXPECT_EQ(ids.sequences[1], (std::vector<std::int32_t>{8, 1, 9, 10}));
  write_file_atomic(dir.file("bad.json"), "[1, 2, 99999]");
  EXPECT_THROW(load_calibration_data(dir.file("bad.json"), tokenizer, o), Error);
  write_file_atomic(dir.file("bad.jsonl"), "{\"text\": \"ok\"}\n{\"txt\": 3}\n");
  try {
    load_calibration_data(dir.file("bad.jsonl"), tokenizer, o);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("bad.jsonl:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(load_calibration_data(dir.file("nope.txt"), tokenizer, o), Error);
}

// The three shared models (each skipped when absent): eigenvalues of the streamed statistics vs a
// direct eigendecomposition of C built from every captured q and o at once.
class CalibrationReal : public ::testing::TestWithParam<const char*> {};

TEST_P(CalibrationReal, BundleEigenvaluesEqualDirectEigendecomposition) {
  OSCAR_REQUIRE_MODEL(dir, GetParam());
  const Model model = Model::load(dir);
  const auto& c = model.config();
  const auto tokenizer = Tokenizer::from_file(join_path(dir, "tokenizer.json"));
  DataOptions o;
  o.seq_len = 128;
  o.tokens = 512;
  o.bos_token = c.bos_token_id ? static_cast<std::int32_t>(*c.bos_token_id) : -1;
  const bool stories = std::string(GetParam()) == "stories260K";
  const auto data = load_calibration_data(
      join_path(test::source_dir(),
                stories ? "../datasets/oscar-stories-v1.txt" : "../datasets/oscar-code-v1.txt"),
      tokenizer, o);
  Capture capture(c.num_layers);
  KvStatistics s(c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, model.device());
  Tee tee;
  tee.targets = {&capture, &s};
  ForwardOptions f;
  f.observer = &tee;
  for (const auto& seq : data.sequences) {
    model.hidden_states(torch::tensor(seq, torch::kInt64).unsqueeze(0), f);
  }
  const RotationResult r = compute_rotations(s, RotationOptions{});
  const std::int64_t g = c.num_heads / c.num_kv_heads;
  for (std::int64_t l = 0; l < c.num_layers; ++l) {
    for (std::int64_t h = 0; h < c.num_kv_heads; ++h) {
      const auto cq = direct_group_moment(capture.all(l, &AttentionRecord::q), h, g);
      const auto cs = direct_group_moment(capture.all(l, &AttentionRecord::out), h, g);
      EXPECT_LT(rel_diff(r.k_eigenvalues[l][h].cpu(), std::get<0>(torch::linalg_eigh(cq)).flip(0)),
                kEigenTol);
      EXPECT_LT(rel_diff(r.v_eigenvalues[l][h].cpu(), std::get<0>(torch::linalg_eigh(cs)).flip(0)),
                kEigenTol);
      const auto rk = r.k_rotation[l][h].cpu();
      EXPECT_LT(
          (rk.matmul(rk.t()) - torch::eye(c.head_dim, torch::kFloat64)).abs().max().item<double>(),
          1e-12);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SharedModels, CalibrationReal,
                         ::testing::Values("stories260K", "codellama-h64-25m",
                                           "codeqwen3-h128-30m"));

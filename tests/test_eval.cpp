// Evaluation: mixed-precision window logic, exactness with full windows, methods, determinism.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "oscar/error.h"
#include "oscar/evaluation.h"
#include "oscar/fake_quant.h"
#include "oscar/rotation.h"
#include "test_support.h"
#include "tiny_model.h"

using namespace oscar;

namespace {

// Plain per-query reference in float64: key j is quantized for the query at t iff
// S0 <= j <= t - W (and j <= t).
torch::Tensor reference_attention(const torch::Tensor& q, const torch::Tensor& kf,
                                  const torch::Tensor& vf, const torch::Tensor& kq,
                                  const torch::Tensor& vq, double scale, WindowParams w) {
  const std::int64_t B = q.size(0), T = q.size(1), Hq = q.size(2), d = q.size(3);
  const std::int64_t g = Hq / kf.size(2);
  auto out = torch::zeros({B, T, Hq, d}, torch::kFloat64);
  for (std::int64_t b = 0; b < B; ++b) {
    for (std::int64_t h = 0; h < Hq; ++h) {
      for (std::int64_t t = 0; t < T; ++t) {
        std::vector<torch::Tensor> keys, values;
        for (std::int64_t j = 0; j <= t; ++j) {
          const bool quant = j >= w.sink && j <= t - w.recent;
          keys.push_back((quant ? kq : kf)[b][j][h / g].to(torch::kFloat64));
          values.push_back((quant ? vq : vf)[b][j][h / g].to(torch::kFloat64));
        }
        const auto K = torch::stack(keys), V = torch::stack(values);
        const auto p = torch::softmax(K.matmul(q[b][t][h].to(torch::kFloat64)) * scale, 0);
        out[b][t][h] = p.matmul(V);
      }
    }
  }
  return out;
}

// float32 attention vs a float64 reference over T <= 40 keys: errors ~1e-6; 1e-5 has margin.
constexpr double kAttnTol = 1e-5;

}  // namespace

TEST(MixedAttention, WindowMaskMatchesPerQueryReference) {
  torch::manual_seed(2);
  const std::int64_t B = 2, T = 37, Hq = 4, Hkv = 2, d = 8;
  const auto q = torch::randn({B, T, Hq, d});
  const auto kf = torch::randn({B, T, Hkv, d}), vf = torch::randn({B, T, Hkv, d});
  const auto kq = torch::randn({B, T, Hkv, d}), vq = torch::randn({B, T, Hkv, d});
  for (WindowParams w : {WindowParams{2, 3}, WindowParams{0, 1}, WindowParams{5, 10},
                         WindowParams{40, 1}, WindowParams{0, 40}}) {
    const auto got = mixed_precision_attention(q, kf, vf, kq, vq, 0.35, w);
    const auto want = reference_attention(q, kf, vf, kq, vq, 0.35, w);
    EXPECT_LT((got.to(torch::kFloat64) - want).abs().max().item<double>(), kAttnTol)
        << "sink " << w.sink << " recent " << w.recent;
  }
}

TEST(MixedAttention, WindowsCoveringEverythingEqualBf16Exactly) {
  torch::manual_seed(3);
  const std::int64_t T = 300;  // more than one query block
  const auto q = torch::randn({1, T, 4, 16});
  const auto k = torch::randn({1, T, 2, 16}), v = torch::randn({1, T, 2, 16});
  const auto garbage = torch::randn({1, T, 2, 16}) * 100;
  const auto all_full = mixed_precision_attention(q, k, v, k, v, 0.25, {0, T + 1});
  EXPECT_TRUE(
      torch::equal(mixed_precision_attention(q, k, v, garbage, garbage, 0.25, {0, T}), all_full));
  EXPECT_TRUE(
      torch::equal(mixed_precision_attention(q, k, v, garbage, garbage, 0.25, {T, 1}), all_full));
  // And through a model: a quantizing method with full windows gives the bf16 method's logits.
  test::TempDir dir;
  test::TinyModelSpec spec;
  test::write_tiny_model(dir.path(), spec);
  const Model model = Model::load(dir.path());
  const auto config = model.config();
  const auto tokens = torch::randint(0, spec.vocab, {1, 50}, torch::kInt64);
  const auto bf16 = make_baseline_method("bf16", config, 0, int2::ScaleDType::kBF16, torch::kCPU);
  const auto naive = make_baseline_method("naive", config, 0, int2::ScaleDType::kBF16, torch::kCPU);
  MixedPrecisionAttention ref(bf16, {4, 8}, config.num_layers);
  MixedPrecisionAttention full(naive, {0, 51}, config.num_layers);
  MixedPrecisionAttention quant(naive, {4, 8}, config.num_layers);
  ForwardOptions f;
  f.attention = &ref;
  const auto ref_logits = model.forward(tokens, f);
  f.attention = &full;
  EXPECT_TRUE(torch::equal(model.forward(tokens, f), ref_logits));
  f.attention = &quant;
  const auto q_logits = model.forward(tokens, f);
  EXPECT_FALSE(torch::equal(q_logits, ref_logits));
  EXPECT_GT(quant.layer_relative_errors()[0], 0.0);
  EXPECT_EQ(full.layer_relative_errors()[0], 0.0);
  // Deterministic: the same method twice gives identical logits.
  EXPECT_TRUE(torch::equal(model.forward(tokens, f), q_logits));
}

TEST(Methods, RotationByIdentityEqualsNaiveAndHadamardIsExactlyInvertible) {
  test::TinyModelSpec spec;
  test::TempDir dir;
  test::write_tiny_model(dir.path(), spec);
  const auto config = Model::load(dir.path()).config();
  torch::manual_seed(4);
  const auto k = torch::randn({2, 9, config.num_kv_heads, config.head_dim});
  const auto v = torch::randn({2, 9, config.num_kv_heads, config.head_dim});
  const auto naive = make_baseline_method("naive", config, 0, int2::ScaleDType::kF32, torch::kCPU);
  QuantMethod identity = naive;
  identity.kind = MethodKind::kRotation;
  for (std::int64_t i = 0; i < config.num_layers; ++i) {
    const auto eye =
        torch::eye(config.head_dim).expand({config.num_kv_heads, config.head_dim, config.head_dim});
    identity.k_rotation.push_back(eye.contiguous());
    identity.v_rotation.push_back(eye.contiguous());
  }
  const auto [kn, vn] = reconstruct_kv(naive, 0, k, v);
  const auto [ki, vi] = reconstruct_kv(identity, 0, k, v);
  EXPECT_TRUE(torch::allclose(kn, ki, 0, 1e-6));
  EXPECT_TRUE(torch::allclose(vn, vi, 0, 1e-6));
  // Quantization error of the reconstruction is bounded by half a step of each group's range.
  const auto err = (kn - k).abs().amax(-1);
  const auto range = k.amax(-1) - k.amin(-1);
  EXPECT_TRUE((err <= range / 6.0 * 1.01 + 1e-6).all().item<bool>());
  EXPECT_THROW(make_baseline_method("int3", config, 0, int2::ScaleDType::kBF16, torch::kCPU),
               Error);
}

TEST(Methods, KeySmoothingIsUndoneExactlyAfterDequantization) {
  test::TinyModelSpec spec;
  test::TempDir dir;
  test::write_tiny_model(dir.path(), spec);
  const auto config = Model::load(dir.path()).config();
  torch::manual_seed(5);
  const std::int64_t h = config.num_kv_heads, d = config.head_dim;
  // Keys with one channel 50x larger than the rest: the case smoothing exists for.
  auto k = torch::randn({2, 9, h, d});
  k.select(3, 1).mul_(50.0);
  const auto v = torch::randn({2, 9, h, d});
  const auto hadamard =
      make_baseline_method("hadamard", config, 0, int2::ScaleDType::kF32, torch::kCPU);
  QuantMethod smoothed = hadamard;
  smoothed.kind = MethodKind::kRotation;
  smoothed.k_clip = smoothed.v_clip = 1.0;
  for (std::int64_t i = 0; i < config.num_layers; ++i) {
    auto s = torch::ones({h, d});
    s.select(1, 1).fill_(50.0);
    smoothed.k_smooth.push_back(s);
  }
  const auto [kh, vh] = reconstruct_kv(hadamard, 0, k, v);
  const auto [ks, vs] = reconstruct_kv(smoothed, 0, k, v);
  EXPECT_TRUE(torch::equal(vh, vs));  // values untouched
  // Smoothing that equalises the channels cuts the reconstruction error of the other channels.
  const auto others = torch::cat({k.slice(3, 0, 1), k.slice(3, 2, d)}, 3);
  const auto err = [&](const torch::Tensor& kr) {
    return (torch::cat({kr.slice(3, 0, 1), kr.slice(3, 2, d)}, 3) - others)
        .pow(2)
        .sum()
        .item<double>();
  };
  EXPECT_LT(err(ks), 0.25 * err(kh));
}

TEST(Methods, BitsPerElement) {
  QuantMethod m;
  m.kind = MethodKind::kNaive;
  m.scale_dtype = int2::ScaleDType::kBF16;
  // 128K context, d = 128, G = 128: 2.25 bits in the INT2 part, 320 bf16 tokens: ~2.28.
  EXPECT_NEAR(m.bits_per_element(128, 131072, 64, 256), 2.25 + 320.0 * 13.75 / 131072, 1e-9);
  EXPECT_NEAR(m.bits_per_element(128, 131072, 0, 0), 2.25, 1e-12);
  m.group_size = 32;
  EXPECT_NEAR(m.bits_per_element(128, 131072, 0, 0), 3.0, 1e-12);
  m.scale_dtype = int2::ScaleDType::kF32;
  m.group_size = 0;
  EXPECT_NEAR(m.bits_per_element(128, 131072, 0, 0), 2.5, 1e-12);
  m.kind = MethodKind::kBF16;
  EXPECT_EQ(m.bits_per_element(128, 100, 0, 0), 16.0);
}

TEST(Passkey, TrialsPlantAndQueryTheKey) {
  std::vector<std::int32_t> filler(1000);
  for (int i = 0; i < 1000; ++i) filler[i] = 100 + i % 50;
  const std::vector<std::int32_t> marker = {7, 8};
  const std::vector<std::vector<std::int32_t>> keys = {{31, 32, 33}, {41, 42}};
  const auto trials = make_passkey_trials(filler, marker, keys, 64, 10, 1);
  ASSERT_EQ(trials.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    const auto& t = trials[i];
    EXPECT_EQ(t.tokens.size(), 64u);
    EXPECT_EQ(t.tokens[0], 1);
    EXPECT_EQ(t.tokens[10], 7);
    EXPECT_EQ(t.tokens[12], keys[i][0]);
    ASSERT_EQ(t.answer_positions.size(), keys[i].size());
    for (std::size_t j = 0; j < keys[i].size(); ++j) {
      EXPECT_EQ(t.tokens[t.answer_positions[j] + 1], keys[i][j]);
    }
    EXPECT_EQ(t.answer_positions.back(), 62);
  }
  EXPECT_THROW(make_passkey_trials(filler, marker, keys, 12, 10, 1), Error);
}

TEST(ClipSearch, ChoosesRatiosFromTheGridPerHead) {
  test::TinyModelSpec spec;
  spec.head_dim = 16;
  spec.hidden = 64;
  test::TempDir dir;
  test::write_tiny_model(dir.path(), spec);
  const Model model = Model::load(dir.path());
  const auto& c = model.config();
  KvStatistics stats(c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim, torch::kCPU);
  ClipSearch search(c.num_layers, c.num_heads, c.num_kv_heads, {2, 4}, 0, int2::ScaleDType::kBF16);
  torch::manual_seed(9);
  ForwardOptions f;
  f.observer = &stats;
  model.hidden_states(torch::randint(0, spec.vocab, {4, 48}, torch::kInt64), f);
  f.observer = &search;
  model.hidden_states(torch::randint(0, spec.vocab, {1, 48}, torch::kInt64), f);
  RotationResult r = compute_rotations(stats, RotationOptions{});
  const std::vector<double> grid = {0.8, 0.9, 1.0};
  search.search(r, RotationOptions{}, grid);
  for (const HeadSummary& h : r.heads) {
    EXPECT_NE(std::find(grid.begin(), grid.end(), h.k_clip), grid.end());
    EXPECT_NE(std::find(grid.begin(), grid.end(), h.v_clip), grid.end());
  }
  // A one-point grid is the fixed clip.
  search.search(r, RotationOptions{}, {1.0});
  for (const HeadSummary& h : r.heads) EXPECT_EQ(h.k_clip, 1.0);
  ClipSearch empty(c.num_layers, c.num_heads, c.num_kv_heads, {2, 4}, 0, int2::ScaleDType::kBF16);
  EXPECT_THROW(empty.search(r, RotationOptions{}, grid), Error);
}

// Cross-check with LibTorch's own serializer: torch::pickle_load reads what the Torch-free writer
// produces, and the Torch-free reader reads what torch::pickle_save produces.
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <cstring>

#include "oscar/bundle_export.h"
#include "oscar/torch_archive.h"

using namespace oscar;

namespace {

TorchTensor make_tensor(std::vector<std::int64_t> shape, float start) {
  TorchTensor t;
  t.shape = std::move(shape);
  t.values.resize(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < t.values.size(); ++i) t.values[i] = start + 0.25f * i;
  return t;
}

c10::IValue entry(const c10::impl::GenericDict& dict, const c10::IValue& key) {
  const auto it = dict.find(key);
  EXPECT_NE(it, dict.end());
  return it == dict.end() ? c10::IValue() : it->value();
}

void expect_equal(const torch::Tensor& t, const TorchTensor& ours) {
  ASSERT_EQ(t.scalar_type(), torch::kFloat32);
  ASSERT_EQ(t.sizes().vec(), ours.shape);
  const auto c = t.contiguous();
  ASSERT_EQ(std::memcmp(c.data_ptr<float>(), ours.values.data(), ours.values.size() * 4), 0);
}

}  // namespace

TEST(TorchInterop, LibTorchReadsOurArchives) {
  PickleValue root = PickleValue::dict();
  root.set("format_version", PickleValue::integer(2));
  root.set("objective", PickleValue::string("qqt_r_h_pbr"));
  PickleValue layers = PickleValue::dict();
  const TorchTensor r0 = make_tensor({2, 4, 4}, -1.0f), e0 = make_tensor({2, 4}, 0.5f);
  PickleValue layer = PickleValue::dict();
  layer.set("layer_id", PickleValue::integer(0));
  layer.set("rotation", PickleValue::tensor(r0));
  layer.set("eigenvalues", PickleValue::tensor(e0));
  layers.set(PickleValue::integer(0), layer);
  root.set("layers", layers);
  root.set("scale", PickleValue::real(0.125));
  root.set("flag", PickleValue::boolean(true));
  const std::string bytes = torch_archive_bytes(root);

  const c10::IValue loaded = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  ASSERT_TRUE(loaded.isGenericDict());
  const auto dict = loaded.toGenericDict();
  EXPECT_EQ(entry(dict, std::string("format_version")).toInt(), 2);
  EXPECT_EQ(entry(dict, std::string("objective")).toStringRef(), "qqt_r_h_pbr");
  EXPECT_EQ(entry(dict, std::string("scale")).toDouble(), 0.125);
  EXPECT_TRUE(entry(dict, std::string("flag")).toBool());
  const auto layer_dict = entry(dict, std::string("layers")).toGenericDict();
  const auto l0 = entry(layer_dict, int64_t{0}).toGenericDict();
  EXPECT_EQ(entry(l0, std::string("layer_id")).toInt(), 0);
  expect_equal(entry(l0, std::string("rotation")).toTensor(), r0);
  expect_equal(entry(l0, std::string("eigenvalues")).toTensor(), e0);
}

TEST(TorchInterop, WeReadLibTorchArchives) {
  // torch::pickle_save writes the zip format with its own zip writer, and wraps containers in
  // torch.jit._pickle.restore_type_tag, which the reader unwraps.
  c10::impl::GenericDict layers(c10::IntType::get(), c10::AnyType::get());
  c10::impl::GenericDict l0(c10::StringType::get(), c10::AnyType::get());
  const auto rotation = torch::arange(16, torch::kFloat32).view({4, 4}) / 3.0;
  const auto eigen = torch::tensor({0.1, 0.2, 0.3, 4.0}, torch::kFloat64);  // a float64 tensor
  l0.insert(std::string("layer_id"), int64_t{0});
  l0.insert(std::string("rotation"), rotation);
  l0.insert(std::string("eigenvalues"), eigen);
  l0.insert(std::string("view"), rotation.t());  // non-contiguous: shares the storage
  layers.insert(int64_t{0}, l0);
  c10::impl::GenericDict root(c10::StringType::get(), c10::AnyType::get());
  root.insert(std::string("format_version"), int64_t{1});
  root.insert(std::string("layers"), layers);
  const std::vector<char> bytes = torch::pickle_save(root);
  // Why the exporter does not use torch::pickle_save: LibTorch's pickler wraps containers in
  // torch.jit._pickle.restore_type_tag, a global that torch.load(weights_only=True), the default
  // since torch 2.6 and what SGLang's loader gets, refuses.
  EXPECT_NE(std::string(bytes.begin(), bytes.end()).find("restore_type_tag"), std::string::npos);

  const PickleValue v = parse_torch_archive(reinterpret_cast<const std::uint8_t*>(bytes.data()),
                                            bytes.size(), "pickle_save.pt");
  EXPECT_EQ(v.find("format_version")->as_int(""), 1);
  const PickleValue& layer = *v.find("layers")->find(PickleValue::integer(0));
  const TorchTensor& r = layer.find("rotation")->as_tensor("");
  expect_equal(rotation, r);
  const TorchTensor& view = layer.find("view")->as_tensor("");
  expect_equal(rotation.t().contiguous(), view);
  const TorchTensor& e = layer.find("eigenvalues")->as_tensor("");
  EXPECT_EQ(e.source_dtype, "float64");
  EXPECT_EQ(e.values, (std::vector<float>{0.1f, 0.2f, 0.3f, 4.0f}));
}

TEST(TorchInterop, SglangExportLoadsInLibTorch) {
  Bundle b;
  b.model.architecture = "LlamaForCausalLM";
  b.model.model_type = "llama";
  b.model.name = "tiny";
  b.model.num_layers = 2;
  b.model.num_heads = 2;
  b.model.num_kv_heads = 1;
  b.model.head_dim = 4;
  b.calibration.grouping = "head";
  for (int l = 0; l < 2; ++l) {
    LayerRotations layer;
    layer.k_rotation = make_tensor({1, 4, 4}, float(l)).values;
    layer.v_rotation = make_tensor({1, 4, 4}, float(-l)).values;
    layer.k_eigenvalues = {4, 3, 2, 1};
    layer.v_eigenvalues = {8, 6, 4, 2};
    layer.k_clip = {0.96f};
    layer.v_clip = {0.92f};
    b.layers.push_back(layer);
  }
  const SglangFiles files = sglang_export(b);
  EXPECT_EQ(files.format_version, 1);  // one KV head: per-layer format
  const std::string bytes = torch_archive_bytes(files.v);
  const auto dict =
      torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  const auto layers = entry(dict, std::string("layers")).toGenericDict();
  ASSERT_EQ(layers.size(), 2u);
  const auto l1 = entry(layers, int64_t{1}).toGenericDict();
  const auto r = entry(l1, std::string("rotation")).toTensor();
  EXPECT_EQ(r.sizes().vec(), (std::vector<std::int64_t>{4, 4}));
  EXPECT_EQ(std::memcmp(r.data_ptr<float>(), b.layers[1].v_rotation.data(), 64), 0);
  const auto e = entry(l1, std::string("eigenvalues")).toTensor();
  EXPECT_TRUE(torch::equal(e, torch::tensor({2.f, 4.f, 6.f, 8.f})));
  const auto prov = entry(dict, std::string("oscar")).toGenericDict();
  EXPECT_EQ(entry(prov, std::string("kind")).toStringRef(), "v");
}

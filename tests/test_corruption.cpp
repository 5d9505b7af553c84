// Damaged and mismatched inputs end to end: truncated, bit-flipped, tampered and missing files of
// every format the project reads (bundles, safetensors checkpoints, statistics, config.json,
// tokenizer.json, .npy) are rejected with an oscar::Error naming the file and the problem, and
// atomic writes leave no partial or temporary files behind.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/config.h"
#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/kv_statistics.h"
#include "oscar/npy.h"
#include "oscar/safetensors.h"
#include "oscar/tokenizer.h"
#include "test_support.h"

namespace oscar {
namespace {

using nlohmann::json;
using test::TempDir;

// Runs `fn`, which must throw oscar::Error containing every one of `needles`. With
// OSCAR_TEST_SHOW_ERRORS=1 the messages are printed (they make the table of docs/hardening.md).
void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> needles) {
  try {
    fn();
    ADD_FAILURE() << "no error (expected one containing '" << *needles.begin() << "')";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
    const char* show = std::getenv("OSCAR_TEST_SHOW_ERRORS");
    if (show != nullptr && std::string(show) == "1") std::cout << "  error: " << msg << "\n";
  }
}

std::string slurp(const std::string& path) { return read_file(path); }

void write_raw(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  ASSERT_TRUE(out.good()) << path;
}

void truncate_to(const std::string& path, std::size_t size) {
  write_raw(path, slurp(path).substr(0, size));
}

void flip_byte(const std::string& path, std::size_t offset) {
  std::string bytes = slurp(path);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ 0x55);
  write_raw(path, bytes);
}

// Names in `dir` (no "." and ".."), for checks that nothing stray was left.
std::vector<std::string> list_dir(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

// --- a synthetic model directory and bundle ---

std::string config_json(std::int64_t layers, double rope_theta = 10000.0) {
  return json{{"model_type", "llama"},
              {"architectures", {"LlamaForCausalLM"}},
              {"hidden_size", 16},
              {"intermediate_size", 32},
              {"num_hidden_layers", layers},
              {"num_attention_heads", 4},
              {"num_key_value_heads", 2},
              {"vocab_size", 32},
              {"max_position_embeddings", 128},
              {"rope_theta", rope_theta}}
      .dump(2);
}

// config.json plus a one-tensor model.safetensors: all model_identity() reads.
void write_model_dir(const std::string& dir, std::int64_t layers, double rope_theta = 10000.0) {
  ::mkdir(dir.c_str(), 0755);
  write_file_atomic(join_path(dir, "config.json"), config_json(layers, rope_theta));
  const std::vector<float> w(32 * 16, 0.5f);
  write_safetensors(join_path(dir, "model.safetensors"),
                    {{"model.embed_tokens.weight", DType::F32, {32, 16}, w.data(), w.size() * 4}});
}

// A valid bundle for the model of write_model_dir (2 KV heads, head_dim 4): block rotations.
Bundle make_bundle(const ModelIdentity& model, bool centred = true, double smooth = 0.5) {
  Bundle b;
  b.model = model;
  b.calibration.dataset_name = "synthetic";
  b.calibration.tokens = 64;
  b.calibration.seq_len = 16;
  b.calibration.center_keys = centred;
  b.calibration.center_values = centred;
  b.calibration.smooth_keys = smooth;
  b.tool_version = "test";
  b.created = "2025-01-01T00:00:00Z";
  const std::int64_t h = model.num_kv_heads, d = model.head_dim;
  const auto hd = static_cast<std::size_t>(h * d);
  for (std::int64_t l = 0; l < model.num_layers; ++l) {
    LayerRotations r;
    r.k_rotation.assign(static_cast<std::size_t>(h * d * d), 0.0f);
    for (std::int64_t i = 0; i < h * d; ++i) r.k_rotation[i * d + i % d] = 1.0f;  // identities
    r.v_rotation = r.k_rotation;
    r.k_eigenvalues.assign(hd, 1.0f);
    r.v_eigenvalues.assign(hd, 1.0f);
    r.k_clip.assign(static_cast<std::size_t>(h), 0.9f);
    r.v_clip.assign(static_cast<std::size_t>(h), 1.0f);
    if (centred) r.k_mean.assign(hd, 0.1f), r.v_mean.assign(hd, -0.1f);
    if (smooth > 0.0) r.k_smooth.assign(hd, 2.0f);
    b.layers.push_back(std::move(r));
  }
  return b;
}

// A tensor of a safetensors file, owned, so that it can be changed and written back.
struct OwnedTensor {
  std::string name;
  DType dtype;
  std::vector<std::int64_t> shape;
  std::string bytes;
};

// Reads `path` (a bundle or statistics file), lets `edit` change its "oscar" manifest and tensors,
// and writes it back: tampering that keeps the container itself valid. A file with a manifest
// checksum gets one for the edited manifest (unless `reseal` is false: then the old one stays), so
// that a test reaches the check it aims at behind the manifest checksum.
void rewrite(const std::string& path,
             const std::function<void(json& manifest, std::vector<OwnedTensor>& tensors)>& edit,
             bool reseal = true) {
  std::vector<OwnedTensor> tensors;
  json manifest;
  std::optional<std::string> sealed_with;
  {
    const SafetensorsFile file(path);
    manifest = json::parse(file.metadata().at("oscar"));
    const auto seal = file.metadata().find(kManifestChecksumKey);
    if (seal != file.metadata().end()) sealed_with = seal->second;
    for (const TensorInfo& t : file.tensors()) {
      tensors.push_back({t.name, t.dtype, t.shape,
                         std::string(reinterpret_cast<const char*>(file.data(t)), t.nbytes())});
    }
  }
  edit(manifest, tensors);
  std::vector<TensorToWrite> out;
  for (const OwnedTensor& t : tensors) {
    out.push_back({t.name, t.dtype, t.shape, t.bytes.data(), t.bytes.size()});
  }
  const std::string text = manifest.dump();
  std::map<std::string, std::string> metadata = {{"oscar", text}};
  if (sealed_with) metadata[kManifestChecksumKey] = reseal ? manifest_checksum(text) : *sealed_with;
  write_safetensors(path, out, metadata);
}

OwnedTensor& tensor_named(std::vector<OwnedTensor>& tensors, const std::string& name) {
  for (OwnedTensor& t : tensors) {
    if (t.name == name) return t;
  }
  throw std::runtime_error("test bug: no tensor " + name);
}

// The manifest checksum of the (edited) tensors, as write_bundle computes it.
std::string checksum_of(const std::vector<OwnedTensor>& tensors) {
  std::vector<NamedBytes> named;
  for (const OwnedTensor& t : tensors) named.push_back({t.name, t.bytes.data(), t.bytes.size()});
  return tensor_checksum(named);
}

class Corruption : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = dir_.file("model");
    write_model_dir(model_, 2);
    identity_ = model_identity(model_);
    bundle_path_ = dir_.file("b.safetensors");
    Bundle b = make_bundle(identity_);
    write_bundle(bundle_path_, b);
    ASSERT_NO_THROW(read_bundle(bundle_path_));
  }

  TempDir dir_;
  std::string model_, bundle_path_;
  ModelIdentity identity_;
};

// --- bundles ---

TEST_F(Corruption, TruncatedBundle) {
  const std::string whole = slurp(bundle_path_);
  const SafetensorsHeader header = parse_safetensors_header(
      reinterpret_cast<const std::uint8_t*>(whole.data()), whole.size(), "whole");
  // Every cut is rejected, naming the file and suggesting truncation: inside the length prefix,
  // inside the JSON header, and inside the tensor data.
  for (std::size_t cut : {std::size_t{0}, std::size_t{5}, std::size_t{8 + header.header_size / 2},
                          std::size_t{8 + header.header_size + 3}, whole.size() - 1}) {
    SCOPED_TRACE(cut);
    write_raw(bundle_path_, whole.substr(0, cut));
    expect_error([&] { read_bundle(bundle_path_); }, {bundle_path_, "truncated"});
  }
}

TEST_F(Corruption, FlippedByteInTensorDataFailsTheChecksum) {
  const std::size_t size = slurp(bundle_path_).size();
  for (std::size_t back : {std::size_t{1}, std::size_t{20}, std::size_t{100}}) {
    Bundle b = make_bundle(identity_);
    write_bundle(bundle_path_, b);
    flip_byte(bundle_path_, size - back);
    expect_error([&] { read_bundle(bundle_path_); },
                 {bundle_path_, "tensor checksum mismatch", "corrupt"});
  }
}

TEST_F(Corruption, FlippedByteInHeaderJson) {
  // The first byte of the JSON header: '{' becomes '.', which is no JSON at all.
  flip_byte(bundle_path_, 8);
  expect_error([&] { read_bundle(bundle_path_); }, {bundle_path_, "malformed JSON"});
}

TEST_F(Corruption, BundleOfAnotherModel) {
  const std::string other = dir_.file("other");
  write_model_dir(other, 3, 500000.0);
  const Bundle b = read_bundle(bundle_path_);
  expect_error([&] { check_bundle_matches_model(b, model_identity(other)); },
               {"does not fit model 'other'", "layers 2 (bundle) vs 3 (model)",
                "rope theta 10000 (bundle) vs 500000 (model)", "config sha256"});
  // The same model re-exported (same shapes, other config bytes): only the hashes differ.
  const std::string same = dir_.file("same");
  write_model_dir(same, 2);
  write_file_atomic(join_path(same, "config.json"), config_json(2) + "\n");
  expect_error([&] { check_bundle_matches_model(b, model_identity(same)); }, {"config sha256"});
  EXPECT_NO_THROW(check_bundle_matches_model(b, model_identity(same), /*check_hashes=*/false));
}

TEST_F(Corruption, NewerFormatVersion) {
  rewrite(bundle_path_, [](json& m, std::vector<OwnedTensor>&) { m["format_version"] = 3; });
  expect_error([&] { read_bundle(bundle_path_); },
               {bundle_path_, "format_version 3 is newer than this tool reads (2)", "upgrade"});
}

TEST_F(Corruption, OtherFormatName) {
  rewrite(bundle_path_, [](json& m, std::vector<OwnedTensor>&) { m["format"] = "other-format"; });
  expect_error([&] { read_bundle(bundle_path_); },
               {"format 'other-format' is not 'oscar-rotation-bundle'"});
}

TEST_F(Corruption, WrongTensorDtype) {
  rewrite(bundle_path_, [](json&, std::vector<OwnedTensor>& t) {
    OwnedTensor& clip = tensor_named(t, "layers.1.k_clip");
    clip.dtype = DType::I32;  // same size, other type
  });
  expect_error([&] { read_bundle(bundle_path_); },
               {bundle_path_, "tensor layers.1.k_clip is I32, expected F32"});
}

TEST_F(Corruption, WrongTensorShape) {
  rewrite(bundle_path_, [](json&, std::vector<OwnedTensor>& t) {
    tensor_named(t, "layers.0.k_rotation").shape = {8, 4};  // same bytes, flattened heads
  });
  expect_error([&] { read_bundle(bundle_path_); },
               {"tensor layers.0.k_rotation has shape [8, 4], expected [2, 4, 4]"});
}

TEST_F(Corruption, MissingAndUnexpectedTensors) {
  const std::string whole = slurp(bundle_path_);
  rewrite(bundle_path_, [](json&, std::vector<OwnedTensor>& t) {
    t.erase(std::remove_if(t.begin(), t.end(),
                           [](const OwnedTensor& x) { return x.name == "layers.1.v_clip"; }),
            t.end());
  });
  expect_error([&] { read_bundle(bundle_path_); }, {"bundle lacks tensor layers.1.v_clip"});
  write_raw(bundle_path_, whole);
  rewrite(bundle_path_, [](json&, std::vector<OwnedTensor>& t) {
    t.push_back({"layers.0.extra", DType::F32, {1}, std::string(4, '\0')});
  });
  expect_error([&] { read_bundle(bundle_path_); }, {"unexpected tensor layers.0.extra"});
  // A v1 bundle must not carry the v2 smoothing tensors.
  Bundle v1 = make_bundle(identity_, true, 0.0);
  write_bundle(bundle_path_, v1);
  rewrite(bundle_path_, [](json&, std::vector<OwnedTensor>& t) {
    t.push_back({"layers.0.k_smooth", DType::F32, {2, 4}, std::string(32, '\0')});
  });
  expect_error([&] { read_bundle(bundle_path_); },
               {"unexpected tensor layers.0.k_smooth (not part of bundle format v1)"});
}

TEST_F(Corruption, ManifestDamage) {
  const std::string whole = slurp(bundle_path_);
  auto tamper = [&](const std::function<void(json&)>& edit) {
    write_raw(bundle_path_, whole);
    rewrite(bundle_path_, [&](json& m, std::vector<OwnedTensor>&) { edit(m); });
  };
  tamper([](json& m) { m["model"].erase("head_dim"); });
  expect_error([&] { read_bundle(bundle_path_); },
               {bundle_path_, "bundle manifest lacks the key 'head_dim'"});
  tamper([](json& m) { m["model"]["num_layers"] = "2"; });
  expect_error([&] { read_bundle(bundle_path_); },
               {"bundle manifest key 'num_layers' must be an integer"});
  tamper([](json& m) { m["model"]["num_kv_heads"] = 1000000; });
  expect_error([&] { read_bundle(bundle_path_); }, {"implausible model dimensions"});
  tamper([](json& m) { m["calibration"]["smooth_keys"] = 0.0; });
  expect_error([&] { read_bundle(bundle_path_); },
               {"smooth_keys 0 outside (0, 1] in a version-2 bundle"});
  tamper([](json& m) { m["tensor_sha256"] = std::string(64, '0'); });
  expect_error([&] { read_bundle(bundle_path_); }, {"tensor checksum mismatch"});

  // Not a manifest at all: a plain safetensors file, and a manifest that is not JSON.
  const std::vector<float> x = {1.0f};
  write_safetensors(bundle_path_, {{"x", DType::F32, {1}, x.data(), 4}});
  expect_error([&] { read_bundle(bundle_path_); }, {bundle_path_, "not an OSCAR bundle"});
  write_safetensors(bundle_path_, {{"x", DType::F32, {1}, x.data(), 4}}, {{"oscar", "{nope"}});
  expect_error([&] { read_bundle(bundle_path_); }, {"bundle manifest is not valid JSON"});
}

TEST_F(Corruption, ManifestChecksum) {
  EXPECT_EQ(read_bundle(bundle_path_).manifest_sha256.size(), 64u);
  {
    const SafetensorsFile file(bundle_path_);
    EXPECT_EQ(file.metadata().at(kManifestChecksumKey),
              manifest_checksum(file.metadata().at("oscar")));
  }
  const std::string whole = slurp(bundle_path_);
  // Any change to the manifest, even to a value no other check looks at, breaks the seal.
  rewrite(
      bundle_path_, [](json& m, std::vector<OwnedTensor>&) { m["calibration"]["device"] = "cuda"; },
      /*reseal=*/false);
  expect_error([&] { read_bundle(bundle_path_); },
               {bundle_path_, "manifest checksum mismatch", "the file is corrupt"});
  write_raw(bundle_path_, whole);
  const SafetensorsFile file(bundle_path_);
  const std::string& text = file.metadata().at("oscar");
  std::vector<TensorToWrite> out;
  for (const TensorInfo& t : file.tensors()) {
    out.push_back({t.name, t.dtype, t.shape, file.data(t), t.nbytes()});
  }
  const std::string other = dir_.file("other.safetensors");
  // The text is sealed byte for byte: the same manifest laid out differently is a change.
  write_safetensors(
      other, out,
      {{"oscar", json::parse(text).dump(2)}, {kManifestChecksumKey, manifest_checksum(text)}});
  expect_error([&] { read_bundle(other); }, {"manifest checksum mismatch"});
  // A bundle written before manifest checksums (no entry) still reads.
  write_safetensors(other, out, {{"oscar", text}});
  const Bundle old = read_bundle(other);
  EXPECT_TRUE(old.manifest_sha256.empty());
  EXPECT_EQ(bundle_manifest_json(old), text);  // the reader rebuilds the writer's exact text
}

TEST_F(Corruption, InvalidValuesWithAValidChecksum) {
  // Values that the checksum vouches for but that no calibration produces.
  const std::string whole = slurp(bundle_path_);
  auto poke = [&](const std::string& name, float value) {
    write_raw(bundle_path_, whole);
    rewrite(bundle_path_, [&](json& m, std::vector<OwnedTensor>& t) {
      std::memcpy(tensor_named(t, name).bytes.data(), &value, sizeof value);
      m["tensor_sha256"] = checksum_of(t);
    });
  };
  poke("layers.0.v_rotation", std::nanf(""));
  expect_error([&] { read_bundle(bundle_path_); },
               {"tensor layers.0.v_rotation holds a non-finite value"});
  poke("layers.1.v_clip", 1.5f);
  expect_error([&] { read_bundle(bundle_path_); },
               {"tensor layers.1.v_clip holds clip ratio 1.5 outside (0, 1]"});
  poke("layers.0.k_smooth", -1.0f);
  expect_error([&] { read_bundle(bundle_path_); },
               {"layer 0: key smoothing scale -1 is not a positive finite number"});
}

TEST_F(Corruption, MissingBundle) {
  expect_error([&] { read_bundle(dir_.file("none.safetensors")); }, {"does not exist"});
  expect_error([&] { read_bundle(dir_.path()); }, {"is not a regular file"});
}

// --- safetensors checkpoints ---

TEST_F(Corruption, TruncatedModelShard) {
  const std::string weights = join_path(model_, "model.safetensors");
  truncate_to(weights, slurp(weights).size() - 7);
  expect_error([&] { Checkpoint::open(model_); }, {weights, "truncated"});
  expect_error([&] { model_identity(model_); }, {weights, "truncated"});
}

TEST_F(Corruption, ShardedCheckpoints) {
  const std::string dir = dir_.file("sharded");
  ::mkdir(dir.c_str(), 0755);
  const std::vector<float> a(6, 1.0f), b(4, 2.0f);
  const std::string shard1 = join_path(dir, "model-00001-of-00002.safetensors");
  const std::string shard2 = join_path(dir, "model-00002-of-00002.safetensors");
  write_safetensors(shard1, {{"a", DType::F32, {2, 3}, a.data(), 24}});
  write_safetensors(shard2, {{"b", DType::F32, {4}, b.data(), 16}});
  const std::string index = join_path(dir, "model.safetensors.index.json");
  auto write_index = [&](const std::string& text) { write_raw(index, text); };
  write_index(R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                 "b": "model-00002-of-00002.safetensors"}})");
  ASSERT_NO_THROW(Checkpoint::open(dir));

  truncate_to(shard2, 20);
  expect_error([&] { Checkpoint::open(dir); }, {shard2, "truncated"});
  write_safetensors(shard2, {{"b", DType::F32, {4}, b.data(), 16}});

  write_index(R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                 "b": "model-00003-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir); },
               {"shard 'model-00003-of-00002.safetensors'", index, "does not exist"});
  write_index(R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                 "b": "model-00001-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir); }, {"tensor 'b'", "which does not contain it"});
  write_index(R"({"weight_map": {"a": "../model-00001-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir); }, {index, "is not a plain file name"});
  write_index(R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                 "a": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir); }, {index, "key 'a' appears twice"});
  write_index(R"({"weight_map": {"a": "model-00001-of-00002.safetensors", )");
  expect_error([&] { Checkpoint::open(dir); }, {index, "malformed JSON"});
  write_index(R"({"weight_map": {}})");
  expect_error([&] { Checkpoint::open(dir); }, {index, "\"weight_map\" is empty"});
  // A tensor in two shards.
  write_safetensors(
      shard2, {{"a", DType::F32, {2, 3}, a.data(), 24}, {"b", DType::F32, {4}, b.data(), 16}});
  write_index(R"({"weight_map": {"a": "model-00001-of-00002.safetensors",
                                 "b": "model-00002-of-00002.safetensors"}})");
  expect_error([&] { Checkpoint::open(dir); },
               {"tensor 'a' appears in both shard 'model-00001-of-00002.safetensors' and shard "
                "'model-00002-of-00002.safetensors'"});
}

TEST_F(Corruption, RepeatedKeysInsideATensorEntry) {
  // Two "dtype" keys: readers that keep the first and readers that keep the last would disagree.
  const std::string header =
      R"({"x": {"dtype": "F32", "dtype": "F16", "shape": [1], "data_offsets": [0, 4]}})";
  std::string bytes;
  for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  bytes += header + std::string(4, '\0');
  const std::string path = dir_.file("dup.safetensors");
  write_raw(path, bytes);
  expect_error([&] { SafetensorsFile f(path); }, {path, "key 'dtype' appears twice"});
}

TEST_F(Corruption, MissingModelFiles) {
  expect_error([&] { load_model_config(dir_.file("nowhere")); },
               {"model directory", "does not exist"});
  const std::string empty = dir_.file("empty");
  ::mkdir(empty.c_str(), 0755);
  expect_error([&] { load_model_config(empty); }, {"no config.json in", empty});
  write_file_atomic(join_path(empty, "config.json"), config_json(2));
  expect_error([&] { Checkpoint::open(empty); },
               {"no model.safetensors or model.safetensors.index.json in", empty});
  expect_error([&] { model_identity(empty); }, {"no model.safetensors"});
}

// --- config.json and tokenizer.json ---

TEST_F(Corruption, BadConfigJson) {
  const std::string path = join_path(model_, "config.json");
  write_raw(path, config_json(2).substr(0, 40));
  expect_error([&] { load_model_config(model_); }, {path, "malformed JSON"});
  write_raw(path, "[1, 2]");
  expect_error([&] { load_model_config(model_); }, {path, "expected a JSON object"});
  json c = json::parse(config_json(2));
  c["hidden_size"] = 1e30;  // found by fuzzing: an out-of-range float converted to int64
  write_raw(path, c.dump());
  expect_error([&] { load_model_config(model_); }, {path, "'hidden_size' must be an integer"});
  c["hidden_size"] = 18446744073709551615ull;
  write_raw(path, c.dump());
  expect_error([&] { load_model_config(model_); }, {"'hidden_size' must be an integer"});
  c["hidden_size"] = "16";
  write_raw(path, c.dump());
  expect_error([&] { load_model_config(model_); }, {"'hidden_size' must be an integer"});
  c = json::parse(config_json(2));
  c["num_key_value_heads"] = 3;
  write_raw(path, c.dump());
  expect_error([&] { load_model_config(model_); }, {"is not a multiple of num_key_value_heads"});
  c["num_key_value_heads"] = 0;
  write_raw(path, c.dump());
  expect_error([&] { load_model_config(model_); }, {"sizes must be positive"});
}

TEST_F(Corruption, BadTokenizerJson) {
  const std::string path = dir_.file("tokenizer.json");
  const std::string good = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2},
                               "merges": ["a b"]}})";
  write_raw(path, good);
  ASSERT_EQ(Tokenizer::from_file(path).encode("ab", false), std::vector<std::int32_t>{2});
  write_raw(path, good.substr(0, good.size() / 2));
  expect_error([&] { Tokenizer::from_file(path); }, {path, "invalid JSON"});
  write_raw(path, R"({"model": {"type": "Unigram", "vocab": []}})");
  expect_error([&] { Tokenizer::from_file(path); }, {path, "Unigram"});
  write_raw(path, R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})");
  expect_error([&] { Tokenizer::from_file(path); }, {path, "merge"});
  expect_error([&] { Tokenizer::from_file(dir_.file("none.json")); }, {"cannot open", "none.json"});
}

// --- statistics files ---

class StatisticsCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.file("s.st");
    KvStatistics stats(2, 4, 2, 4, torch::kCPU);
    stats.main_sequences = 3;
    StatsProvenance provenance;
    provenance.model_name = "tiny";
    stats.save(path_, provenance);
    ASSERT_NO_THROW(KvStatistics::load(path_, torch::kCPU));
  }
  TempDir dir_;
  std::string path_;
};

TEST_F(StatisticsCorruption, Truncated) {
  const std::string whole = slurp(path_);
  for (std::size_t cut : {std::size_t{3}, whole.size() / 4, whole.size() - 8}) {
    SCOPED_TRACE(cut);
    write_raw(path_, whole.substr(0, cut));
    expect_error([&] { KvStatistics::load(path_, torch::kCPU); }, {path_, "truncated"});
  }
}

TEST_F(StatisticsCorruption, ManifestAndTensors) {
  const std::string whole = slurp(path_);
  auto tamper = [&](const std::function<void(json&, std::vector<OwnedTensor>&)>& edit) {
    write_raw(path_, whole);
    rewrite(path_, edit);
  };
  // A count that would allocate far more than the file holds is refused before allocating.
  tamper([](json& m, std::vector<OwnedTensor>&) { m["num_layers"] = 1000000000; });
  expect_error([&] { KvStatistics::load(path_, torch::kCPU); },
               {path_, "1000000000 layers", "do not match the 14 tensors"});
  tamper([](json& m, std::vector<OwnedTensor>&) { m["head_dim"] = 8; });
  expect_error([&] { KvStatistics::load(path_, torch::kCPU); },
               {"layers.0.q_sum has shape [2, 4, 4], but the manifest says 2 KV heads of "
                "head_dim 8"});
  tamper([](json& m, std::vector<OwnedTensor>&) { m["format_version"] = 3; });
  expect_error([&] { KvStatistics::load(path_, torch::kCPU); },
               {"statistics format_version 3 is not supported"});
  tamper([](json& m, std::vector<OwnedTensor>&) { m.erase("main_tokens"); });
  expect_error([&] { KvStatistics::load(path_, torch::kCPU); },
               {path_, "malformed statistics manifest"});
  tamper([](json&, std::vector<OwnedTensor>& t) {
    OwnedTensor& k = tensor_named(t, "layers.1.k_sum");
    k.dtype = DType::F32;
    k.shape = {2, 8};  // same bytes, other dtype and shape
  });
  expect_error([&] { KvStatistics::load(path_, torch::kCPU); },
               {"tensor layers.1.k_sum is F32 [2, 8], expected F64 [2, 4]"});
  expect_error([&] { KvStatistics::load(dir_.file("none.st"), torch::kCPU); },
               {"statistics file", "does not exist"});
}

// --- .npy ---

TEST(NpyCorruption, TruncatedAndOversized) {
  TempDir dir;
  const std::string path = dir.file("a.npy");
  const std::vector<float> v = {1, 2, 3, 4, 5, 6};
  write_npy_float32(path, {2, 3}, v.data());
  truncate_to(path, slurp(path).size() - 4);
  expect_error([&] { read_npy(path); }, {path, "data size 20 does not match shape and dtype"});
  truncate_to(path, 9);
  expect_error([&] { read_npy(path); }, {path, "not a .npy file"});
  // Found by fuzzing: a shape whose element count overflows, and an empty array.
  std::string header =
      "{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999, "
      "99999999999, 0), }\n";
  std::string bytes = std::string("\x93NUMPY\x01\x00", 8);
  bytes.push_back(static_cast<char>(header.size()));
  bytes.push_back('\0');
  expect_error([&] { parse_npy(bytes + header, "big.npy"); }, {"big.npy", "is too large"});
  write_npy_float32(path, {0, 3}, v.data());
  EXPECT_TRUE(read_npy(path).as_float32().empty());
}

// --- atomic writes ---

TEST(AtomicWrite, NoTemporaryFilesLeftBehind) {
  TempDir dir;
  const std::string path = dir.file("out.bin");
  write_file_atomic(path, "first");
  write_file_atomic(path, "second");
  EXPECT_EQ(read_file(path), "second");
  EXPECT_EQ(list_dir(dir.path()), std::vector<std::string>{"out.bin"});
  // A failed write (the target is a directory) throws and leaves neither file nor temporary.
  const std::string sub = dir.file("sub");
  ::mkdir(sub.c_str(), 0755);
  expect_error([&] { write_file_atomic(sub, "x"); }, {"cannot rename", "sub"});
  std::vector<std::string> names = list_dir(dir.path());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"out.bin", "sub"}));
  expect_error([&] { write_file_atomic(dir.file("no/such/dir/f"), "x"); }, {"cannot create"});
}

// A writer killed between naming its temporary file and the rename leaves the file; the next write
// to the same path removes it once its process is gone, and leaves a live process's file, other
// paths' files and names that only look alike.
TEST(AtomicWrite, RemovesTemporariesOfWritersThatAreGone) {
  TempDir dir;
  const std::string path = dir.file("s.st");
  // A process id that is gone: a child that has exited and been reaped.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);
  const std::string gone = "s.st.tmp." + std::to_string(child) + ".0badf00d";
  const std::string live = "s.st.tmp." + std::to_string(::getppid()) + ".12345678";
  const std::string other_path = "t.st.tmp." + std::to_string(child) + ".0badf00d";
  const std::string not_ours = "s.st.tmp." + std::to_string(child) + ".xyz";
  for (const std::string& name : {gone, live, other_path, not_ours}) write_raw(dir.file(name), "x");
  write_file_atomic(path, "stats");
  std::vector<std::string> names = list_dir(dir.path());
  std::sort(names.begin(), names.end());
  std::vector<std::string> expected = {"s.st", live, not_ours, other_path};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  EXPECT_EQ(read_file(path), "stats");
}

}  // namespace
}  // namespace oscar

// Bundle interchange: the torch.save zip/pickle subset, SGLang export/import, GGUF export (checked
// with an independent GGUF reader) and bundle diff.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <random>

#include "oscar/bundle_diff.h"
#include "oscar/bundle_export.h"
#include "oscar/error.h"
#include "oscar/torch_archive.h"
#include "test_support.h"

using namespace oscar;

namespace {

// ---- synthetic bundles ------------------------------------------------------------------------

std::vector<double> hadamard(std::int64_t d) {
  std::vector<double> h(static_cast<std::size_t>(d * d));
  for (std::int64_t i = 0; i < d; ++i) {
    for (std::int64_t j = 0; j < d; ++j) {
      int bits = 0;
      for (std::int64_t x = i & j; x; x &= x - 1) ++bits;
      h[i * d + j] = (bits % 2 ? -1.0 : 1.0) / std::sqrt(double(d));
    }
  }
  return h;
}

std::vector<double> matmul(const std::vector<double>& a, const std::vector<double>& b,
                           std::int64_t d) {
  std::vector<double> c(static_cast<std::size_t>(d * d), 0.0);
  for (std::int64_t i = 0; i < d; ++i)
    for (std::int64_t k = 0; k < d; ++k)
      for (std::int64_t j = 0; j < d; ++j) c[i * d + j] += a[i * d + k] * b[k * d + j];
  return c;
}

// A random orthogonal matrix (Gram-Schmidt of a Gaussian matrix), columns sign-fixed so that each
// column's largest-magnitude entry is positive (the calibration's convention).
std::vector<double> random_orthogonal(std::int64_t d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal;
  std::vector<double> q(static_cast<std::size_t>(d * d));
  for (auto& x : q) x = normal(rng);
  for (std::int64_t j = 0; j < d; ++j) {
    for (int pass = 0; pass < 2; ++pass) {
      for (std::int64_t p = 0; p < j; ++p) {
        double dot = 0.0;
        for (std::int64_t i = 0; i < d; ++i) dot += q[i * d + j] * q[i * d + p];
        for (std::int64_t i = 0; i < d; ++i) q[i * d + j] -= dot * q[i * d + p];
      }
    }
    double norm = 0.0;
    for (std::int64_t i = 0; i < d; ++i) norm += q[i * d + j] * q[i * d + j];
    norm = std::sqrt(norm);
    std::int64_t pivot = 0;
    for (std::int64_t i = 0; i < d; ++i) {
      if (std::abs(q[i * d + j]) > std::abs(q[pivot * d + j])) pivot = i;
    }
    const double sign = q[pivot * d + j] < 0 ? -1.0 : 1.0;
    for (std::int64_t i = 0; i < d; ++i) q[i * d + j] *= sign / norm;
  }
  return q;
}

// R = U H P with perm[bitrev(i)] = d - 1 - i (distinct eigenvalues: idx_desc[i] = d - 1 - i).
std::vector<double> compose_r_h_pbr(const std::vector<double>& u, std::int64_t d) {
  const auto uh = matmul(u, hadamard(d), d);
  int bits = 0;
  while ((std::int64_t{1} << bits) < d) ++bits;
  std::vector<double> r(static_cast<std::size_t>(d * d));
  for (std::int64_t i = 0; i < d; ++i) {
    std::int64_t br = 0;
    for (int b = 0; b < bits; ++b) br |= ((i >> b) & 1) << (bits - 1 - b);
    for (std::int64_t row = 0; row < d; ++row) r[row * d + br] = uh[row * d + (d - 1 - i)];
  }
  return r;
}

std::vector<float> to_float(const std::vector<double>& v) {
  return std::vector<float>(v.begin(), v.end());
}

struct SyntheticOptions {
  std::int64_t layers = 3, heads = 2, d = 8;
  bool per_head = true;  // false: grouping layer (every head the same)
  bool centred = false;
  double smooth = 0.0;
  std::uint64_t seed = 1;
};

Bundle synthetic_bundle(const SyntheticOptions& o, std::vector<std::vector<double>>* us = nullptr) {
  std::mt19937_64 rng(o.seed);
  std::uniform_real_distribution<double> uniform(0.1, 1.0);
  Bundle b;
  b.model.architecture = "LlamaForCausalLM";
  b.model.model_type = "llama";
  b.model.name = "synthetic";
  b.model.num_layers = o.layers;
  b.model.num_heads = o.heads * 2;
  b.model.num_kv_heads = o.heads;
  b.model.head_dim = o.d;
  b.model.rope.type = "default";
  b.model.config_sha256 = std::string(64, 'c');
  b.model.weights_header_sha256 = std::string(64, 'w');
  b.calibration.dataset_name = "synthetic.txt";
  b.calibration.dataset_sha256 = std::string(64, 'd');
  b.calibration.tokens = 4096;
  b.calibration.seq_len = 512;
  b.calibration.grouping = o.per_head ? "head" : "layer";
  b.calibration.center_keys = o.centred;
  b.calibration.smooth_keys = o.smooth;
  b.calibration.eigen_backend = "lapack";
  b.calibration.device = "cpu";
  b.tool_version = "0.1.0";
  b.git_commit = "test";
  b.created = "2026-01-01T00:00:00Z";
  const std::int64_t d = o.d;
  for (std::int64_t l = 0; l < o.layers; ++l) {
    LayerRotations layer;
    for (std::int64_t h = 0; h < o.heads; ++h) {
      for (int kind = 0; kind < 2; ++kind) {
        std::vector<double> u;
        std::vector<float> eig(static_cast<std::size_t>(d));
        if (h == 0 || o.per_head) {
          u = random_orthogonal(d, rng);
          double value = 10.0;
          for (auto& e : eig) e = static_cast<float>(value *= uniform(rng) * 0.8);
        } else {  // grouping layer: copy head 0
          const auto& src = kind == 0 ? layer.k_rotation : layer.v_rotation;
          const auto& esrc = kind == 0 ? layer.k_eigenvalues : layer.v_eigenvalues;
          auto& dst = kind == 0 ? layer.k_rotation : layer.v_rotation;
          auto& edst = kind == 0 ? layer.k_eigenvalues : layer.v_eigenvalues;
          dst.insert(dst.end(), src.begin(), src.begin() + d * d);
          edst.insert(edst.end(), esrc.begin(), esrc.begin() + d);
          continue;
        }
        if (us != nullptr) us->push_back(u);
        const auto r = to_float(compose_r_h_pbr(u, d));
        auto& dst = kind == 0 ? layer.k_rotation : layer.v_rotation;
        auto& edst = kind == 0 ? layer.k_eigenvalues : layer.v_eigenvalues;
        dst.insert(dst.end(), r.begin(), r.end());
        edst.insert(edst.end(), eig.begin(), eig.end());
      }
      layer.k_clip.push_back(0.96f);
      layer.v_clip.push_back(0.92f);
    }
    if (o.centred) {
      for (std::int64_t i = 0; i < o.heads * d; ++i) layer.k_mean.push_back(0.01f * i);
    }
    if (o.smooth > 0.0) {
      for (std::int64_t i = 0; i < o.heads * d; ++i) layer.k_smooth.push_back(1.0f + 0.01f * i);
    }
    b.layers.push_back(std::move(layer));
  }
  validate_bundle(b, "synthetic");
  b.tensor_sha256 = std::string(64, '0');
  return b;
}

ModelIdentity identity_of(const Bundle& b) { return b.model; }

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

PickleValue round_trip(const PickleValue& v) {
  const std::string bytes = torch_archive_bytes(v);
  return parse_torch_archive(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size(),
                             "memory.pt");
}

// ---- a minimal stored-zip writer, independent of the library's, to craft torch.save-style files
// --

std::uint32_t crc32(const std::string& s) {
  std::uint32_t c = 0xFFFFFFFFu;
  for (unsigned char ch : s) {
    c ^= ch;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
  }
  return c ^ 0xFFFFFFFFu;
}

void le(std::string& out, std::uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string make_zip(const std::vector<std::pair<std::string, std::string>>& records) {
  std::string out, central;
  for (const auto& [name, data] : records) {
    const std::size_t offset = out.size();
    le(out, 0x04034b50, 4);
    le(out, 20, 2);
    le(out, 0, 2);
    le(out, 0, 2);
    le(out, 0, 4);
    le(out, crc32(data), 4);
    le(out, data.size(), 4);
    le(out, data.size(), 4);
    le(out, name.size(), 2);
    le(out, 0, 2);
    out += name + data;
    le(central, 0x02014b50, 4);
    le(central, 20, 2);
    le(central, 20, 2);
    le(central, 0, 6);  // flags, method, time
    le(central, 0, 2);  // date
    le(central, crc32(data), 4);
    le(central, data.size(), 4);
    le(central, data.size(), 4);
    le(central, name.size(), 2);
    le(central, 0, 8);
    le(central, 0, 4);
    le(central, offset, 4);
    central += name;
  }
  const std::size_t start = out.size();
  out += central;
  le(out, 0x06054b50, 4);
  le(out, 0, 4);
  le(out, records.size(), 2);
  le(out, records.size(), 2);
  le(out, central.size(), 4);
  le(out, start, 4);
  le(out, 0, 2);
  return out;
}

// Pickle fragments in the shape Python's pickler writes them (with memo puts and gets).
struct Pickle {
  std::string s = "\x80\x02";
  int memo = 0;
  Pickle& op(const std::string& x) {
    s += x;
    return *this;
  }
  Pickle& put() {  // BINPUT next
    s += 'q';
    s.push_back(static_cast<char>(memo++));
    return *this;
  }
  Pickle& get(int i) {
    s += 'h';
    s.push_back(static_cast<char>(i));
    return *this;
  }
  Pickle& str(const std::string& x) {
    s += 'X';
    le(s, x.size(), 4);
    s += x;
    return put();
  }
  Pickle& k(int v) {
    s += 'K';
    s.push_back(static_cast<char>(v));
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) {
    s += "c" + module + "\n" + name + "\n";
    return put();
  }
};

std::string floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

std::string doubles(const std::vector<double>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(double));
}

// ---- an independent GGUF reader --------------------------------------------------------------

struct GgufFile {
  std::uint32_t version = 0;
  std::map<std::string, std::pair<std::uint32_t, std::string>> kv;  // type, raw value bytes
  struct Tensor {
    std::vector<std::uint64_t> ne;
    std::uint32_t type = 0;
    std::uint64_t offset = 0;
    std::vector<float> data;
  };
  std::vector<std::string> order;
  std::map<std::string, Tensor> tensors;
  std::uint64_t data_start = 0;

  std::string str(const std::string& key) const {
    const auto& raw = kv.at(key).second;
    return raw.substr(8);
  }
  std::uint32_t u32(const std::string& key) const {
    std::uint32_t v;
    std::memcpy(&v, kv.at(key).second.data(), 4);
    return v;
  }
  std::vector<float> f32_array(const std::string& key) const {
    const auto& raw = kv.at(key).second;  // elem type u32, count u64, values
    std::uint64_t n;
    std::memcpy(&n, raw.data() + 4, 8);
    std::vector<float> v(n);
    std::memcpy(v.data(), raw.data() + 12, n * 4);
    return v;
  }
};

GgufFile read_gguf(const std::string& bytes) {
  GgufFile f;
  std::size_t p = 0;
  auto take = [&](std::size_t n) {
    if (p + n > bytes.size()) throw std::runtime_error("GGUF truncated");
    const std::size_t at = p;
    p += n;
    return at;
  };
  auto u32 = [&] {
    std::uint32_t v;
    std::memcpy(&v, bytes.data() + take(4), 4);
    return v;
  };
  auto u64 = [&] {
    std::uint64_t v;
    std::memcpy(&v, bytes.data() + take(8), 8);
    return v;
  };
  auto string = [&] {
    const std::uint64_t n = u64();
    return bytes.substr(take(n), n);
  };
  if (bytes.substr(0, 4) != "GGUF") throw std::runtime_error("no GGUF magic");
  take(4);
  f.version = u32();
  const std::uint64_t tensors = u64(), kvs = u64();
  const std::map<std::uint32_t, std::size_t> scalar_size = {
      {0, 1}, {1, 1}, {2, 2}, {3, 2}, {4, 4}, {5, 4}, {6, 4}, {7, 1}, {10, 8}, {11, 8}, {12, 8}};
  std::function<void(std::uint32_t)> skip_value = [&](std::uint32_t type) {
    if (type == 8) {
      string();
    } else if (type == 9) {
      const std::uint32_t elem = u32();
      const std::uint64_t n = u64();
      for (std::uint64_t i = 0; i < n; ++i) skip_value(elem);
    } else {
      take(scalar_size.at(type));
    }
  };
  for (std::uint64_t i = 0; i < kvs; ++i) {
    const std::string key = string();
    const std::uint32_t type = u32();
    const std::size_t start = p;
    skip_value(type);
    f.kv[key] = {type, bytes.substr(start, p - start)};
  }
  for (std::uint64_t i = 0; i < tensors; ++i) {
    const std::string name = string();
    GgufFile::Tensor t;
    const std::uint32_t dims = u32();
    for (std::uint32_t k = 0; k < dims; ++k) t.ne.push_back(u64());
    t.type = u32();
    t.offset = u64();
    f.order.push_back(name);
    f.tensors[name] = t;
  }
  const std::uint64_t alignment = f.kv.count("general.alignment") ? f.u32("general.alignment") : 32;
  f.data_start = (p + alignment - 1) / alignment * alignment;
  for (auto& [name, t] : f.tensors) {
    std::uint64_t n = 1;
    for (auto e : t.ne) n *= e;
    if (t.offset % alignment != 0) throw std::runtime_error("unaligned tensor " + name);
    if (f.data_start + t.offset + n * 4 > bytes.size()) throw std::runtime_error("tensor past end");
    t.data.resize(n);
    std::memcpy(t.data.data(), bytes.data() + f.data_start + t.offset, n * 4);
  }
  return f;
}

}  // namespace

// ================================================================================================

TEST(TorchArchive, RoundTripsPlainData) {
  PickleValue root = PickleValue::dict();
  root.set("none", PickleValue());
  root.set("flag", PickleValue::boolean(true));
  root.set("small", PickleValue::integer(7));
  root.set("medium", PickleValue::integer(40000));
  root.set("negative", PickleValue::integer(-5));
  root.set("large", PickleValue::integer(std::int64_t{1} << 40));
  root.set("most negative", PickleValue::integer(std::numeric_limits<std::int64_t>::min()));
  root.set("pi", PickleValue::real(3.141592653589793));
  root.set("text", PickleValue::string("a \xc3\xa9 string"));
  TorchTensor t;
  t.shape = {2, 3};
  t.values = {1, -2, 3.5f, 0, 1e-30f, -7};
  root.set("matrix", PickleValue::tensor(t));
  TorchTensor scalar;
  scalar.values = {42};
  root.set("scalar tensor", PickleValue::tensor(scalar));
  TorchTensor empty;
  empty.shape = {0, 4};
  root.set("empty tensor", PickleValue::tensor(empty));
  PickleValue layers = PickleValue::dict();
  layers.set(PickleValue::integer(0), PickleValue::list({PickleValue::integer(1)}));
  layers.set(PickleValue::integer(300), PickleValue::tuple({PickleValue::string("x")}));
  root.set("layers", layers);
  const PickleValue back = round_trip(root);
  EXPECT_EQ(back, root);
  EXPECT_EQ(back.find("matrix")->as_tensor("m").shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(back.find("layers")->find(PickleValue::integer(300))->items("t")[0].as_string("x"),
            "x");
  // Deterministic bytes: no clock, no addresses.
  EXPECT_EQ(torch_archive_bytes(root), torch_archive_bytes(back));
}

TEST(TorchArchive, ZipLayoutIsWhatTorchLoadExpects) {
  PickleValue root = PickleValue::dict();
  TorchTensor t;
  t.shape = {3};
  t.values = {1, 2, 3};
  root.set("a", PickleValue::tensor(t));
  root.set("b", PickleValue::tensor(t));
  const std::string z = torch_archive_bytes(root);
  // Walk the local headers: names in torch.save's order, stored, data 64-byte aligned, CRC right.
  std::vector<std::string> names;
  std::size_t p = 0;
  while (p + 30 <= z.size()) {
    std::uint32_t sig;
    std::memcpy(&sig, z.data() + p, 4);
    if (sig != 0x04034b50) break;
    std::uint16_t method, name_len, extra_len;
    std::uint32_t crc, size;
    std::memcpy(&method, z.data() + p + 8, 2);
    std::memcpy(&crc, z.data() + p + 14, 4);
    std::memcpy(&size, z.data() + p + 18, 4);
    std::memcpy(&name_len, z.data() + p + 26, 2);
    std::memcpy(&extra_len, z.data() + p + 28, 2);
    names.push_back(z.substr(p + 30, name_len));
    const std::size_t data = p + 30 + name_len + extra_len;
    EXPECT_EQ(method, 0) << names.back();
    EXPECT_EQ(data % 64, 0u) << names.back();
    EXPECT_EQ(crc, crc32(z.substr(data, size))) << names.back();
    p = data + size;
  }
  EXPECT_EQ(names,
            (std::vector<std::string>{"archive/data.pkl", "archive/byteorder", "archive/data/0",
                                      "archive/data/1", "archive/version"}));
}

TEST(TorchArchive, ReadsTorchSaveStylePickles) {
  // What Python's torch.save writes for {"layers": {0: {"rotation": t, "eigenvalues": e}},
  // "format_version": 1}: every new object memoized (BINPUT), repeated strings and globals fetched
  // back (BINGET), nested MARK/SETITEMS; here with a transposed (non-contiguous) view of a float64
  // storage and a bfloat16 tensor.
  Pickle pk;
  pk.op("}").put().op("(");                                               // memo 0: root
  pk.str("layers");                                                       // 1
  pk.op("}").put().op("(");                                               // 2: layers
  pk.k(0).op("}").put().op("(");                                          // 3: layer 0
  pk.str("rotation");                                                     // 4
  pk.global("torch._utils", "_rebuild_tensor_v2");                        // 5
  pk.op("((").str("storage");                                             // 6
  pk.global("torch", "DoubleStorage").str("0").str("cpu").k(6).op("tQ");  // 7, 8, 9
  // [[1,2,3],[4,5,6]] stored row-major; the view has size (3, 2) and stride (1, 3).
  pk.k(0).op("(").k(3).k(2).op("t(").k(1).k(3).op("t\x89");
  pk.global("collections", "OrderedDict").op(")R").put().op("tR").put();  // 10, 11, 12
  pk.str("eigenvalues");                                                  // 13
  pk.get(5).op("((").get(6).global("torch", "BFloat16Storage").str("1").get(9).k(2).op("tQ");
  pk.k(0).op("(").k(2).op("t(").k(1).op("t\x89").get(10).op(")RtR");
  pk.op("u");  // layer 0 items
  pk.op("u");  // layers items
  pk.str("format_version").k(1).op("u.");
  std::string bf;
  le(bf, 0x4000, 2);  // bfloat16 2.0
  le(bf, 0xbf00, 2);  // bfloat16 -0.5
  const std::string file = make_zip({{"k_rotation_x/data.pkl", pk.s},
                                     {"k_rotation_x/data/0", doubles({1, 2, 3, 4, 5, 6})},
                                     {"k_rotation_x/data/1", bf},
                                     {"k_rotation_x/version", "3\n"}});
  const PickleValue v = parse_torch_archive(reinterpret_cast<const std::uint8_t*>(file.data()),
                                            file.size(), "crafted.pt");
  const PickleValue& layer = *v.find("layers")->find(PickleValue::integer(0));
  const TorchTensor& r = layer.find("rotation")->as_tensor("rotation");
  EXPECT_EQ(r.shape, (std::vector<std::int64_t>{3, 2}));
  EXPECT_EQ(r.values, (std::vector<float>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(r.source_dtype, "float64");
  const TorchTensor& e = layer.find("eigenvalues")->as_tensor("eigenvalues");
  EXPECT_EQ(e.values, (std::vector<float>{2.0f, -0.5f}));
  EXPECT_EQ(v.find("format_version")->as_int("v"), 1);
}

TEST(TorchArchive, RefusesCodeAndBrokenFiles) {
  auto parse = [](const std::string& file) {
    return error_of([&] {
      parse_torch_archive(reinterpret_cast<const std::uint8_t*>(file.data()), file.size(), "x.pt");
    });
  };
  Pickle evil;
  evil.global("builtins", "eval").str("print(1)").op("\x85R.");
  EXPECT_TRUE(contains(parse(make_zip({{"a/data.pkl", evil.s}})), "builtins.eval"));
  Pickle reduce_storage;  // a REDUCE on a storage type (not an allowed callable)
  reduce_storage.global("torch", "FloatStorage").op(")R.");
  EXPECT_TRUE(contains(parse(make_zip({{"a/data.pkl", reduce_storage.s}})), "cannot be called"));
  EXPECT_TRUE(contains(parse("not a zip at all, just some text........."), "zip"));
  EXPECT_TRUE(contains(parse(make_zip({{"a/other", "x"}})), "no data.pkl"));
  auto tensor_pickle = [](const std::string& key, int numel) {
    Pickle p;
    p.global("torch._utils", "_rebuild_tensor_v2").op("((").str("storage");
    p.global("torch", "FloatStorage").str(key).str("cpu").k(numel).op("tQ");
    p.k(0).op("(").k(numel).op("t(").k(1).op("t\x89)tR.");
    return p.s;
  };
  EXPECT_TRUE(contains(parse(make_zip({{"a/data.pkl", tensor_pickle("9", 4)}})), "data/9"));
  EXPECT_TRUE(contains(
      parse(make_zip({{"a/data.pkl", tensor_pickle("0", 4)}, {"a/data/0", floats({1, 2})}})),
      "fewer than"));
  EXPECT_EQ(parse(make_zip({{"a/data.pkl", tensor_pickle("0", 2)}, {"a/data/0", floats({1, 2})}})),
            "");
  // A list holding the same list twice, 40 levels deep: 2^40 values if expanded naively.
  Pickle bomb;
  bomb.op("]").put().op("(").k(1).op("e");                                         // memo 0: [1]
  for (int i = 0; i < 40; ++i) bomb.op("0]").op("(").get(i).get(i).op("e").put();  // POP, build
  bomb.op(".");
  EXPECT_TRUE(contains(parse(make_zip({{"a/data.pkl", bomb.s}})), "too"));
  // Sizes and strides whose product overflows int64 are refused, not wrapped.
  Pickle wide;
  wide.global("torch._utils", "_rebuild_tensor_v2").op("((").str("storage");
  wide.global("torch", "FloatStorage").str("0").str("cpu").k(2).op("tQ").k(0);
  wide.op("(J\xff\xff\xff\x7fJ\xff\xff\xff\x7ft(J\xff\xff\xff\x7fJ\xff\xff\xff\x7ft\x89)tR.");
  EXPECT_TRUE(contains(parse(make_zip({{"a/data.pkl", wide.s}, {"a/data/0", floats({1, 2})}})),
                       "reaches past"));
  // A corrupt record: the CRC check names it.
  std::string zip = make_zip({{"a/data.pkl", tensor_pickle("0", 2)}, {"a/data/0", floats({1, 2})}});
  zip[zip.find("a/data/0") + 8 + 2] ^= 1;
  EXPECT_TRUE(contains(parse(zip), "CRC"));
}

TEST(TorchArchive, EveryTruncationAndByteFlipIsACleanError) {
  Bundle b = synthetic_bundle({2, 2, 4, true, false, 0.0, 3});
  const std::string file = torch_archive_bytes(sglang_export(b).k);
  for (std::size_t n = 0; n < file.size(); n += 7) {
    const std::string cut = file.substr(0, n);
    EXPECT_FALSE(error_of([&] {
                   parse_torch_archive(reinterpret_cast<const std::uint8_t*>(cut.data()),
                                       cut.size(), "cut.pt");
                 }).empty())
        << n;
  }
  // A flipped byte is either refused or lands where no reader looks (padding, timestamps,
  // attributes): the value read is then the original, never silently different data.
  const PickleValue original = round_trip(sglang_export(b).k);
  std::size_t accepted = 0;
  for (std::size_t i = 0; i < file.size(); ++i) {
    std::string flipped = file;
    flipped[i] = static_cast<char>(flipped[i] ^ 0x5a);
    try {
      const PickleValue v = parse_torch_archive(
          reinterpret_cast<const std::uint8_t*>(flipped.data()), flipped.size(), "flip.pt");
      ASSERT_EQ(v, original) << "byte " << i;
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_LT(accepted, file.size() / 2);
}

TEST(SglangExport, PerLayerBundleRoundTripsBitForBit) {
  Bundle b = synthetic_bundle({3, 2, 8, /*per_head=*/false});
  EXPECT_TRUE(rotations_shared_per_layer(b));
  EXPECT_TRUE(export_losses(b, "sglang").empty());
  const SglangFiles files = sglang_export(b);
  EXPECT_EQ(files.format_version, 1);
  EXPECT_EQ(files.k_name, "k_rotation_qqt_r_h_pbr.pt");
  EXPECT_EQ(files.v_name, "v_rotation_sst_r_h_pbr.pt");
  const PickleValue k = round_trip(files.k), v = round_trip(files.v);
  // The layout SGLang reads.
  EXPECT_EQ(k.find("format_version")->as_int(""), 1);
  EXPECT_EQ(k.find("source_grouping")->as_string(""), "layer");
  EXPECT_EQ(k.find("objective")->as_string(""), "qqt_r_h_pbr");
  const auto& layers = k.find("layers")->entries("layers");
  ASSERT_EQ(layers.size(), 3u);
  for (std::int64_t i = 0; i < 3; ++i) {
    const PickleValue& entry = *k.find("layers")->find(PickleValue::integer(i));
    EXPECT_EQ(entry.find("layer_id")->as_int(""), i);
    const TorchTensor& r = entry.find("rotation")->as_tensor("");
    EXPECT_EQ(r.shape, (std::vector<std::int64_t>{8, 8}));
    EXPECT_TRUE(std::equal(r.values.begin(), r.values.end(), b.layers[i].k_rotation.begin()));
    const TorchTensor& e = entry.find("eigenvalues")->as_tensor("");
    EXPECT_EQ(e.shape, (std::vector<std::int64_t>{8}));
    EXPECT_TRUE(std::is_sorted(e.values.begin(), e.values.end())) << "ascending, as eigh";
  }
  std::vector<std::string> warnings;
  const Bundle back =
      sglang_import(k, v, "k.pt", "v.pt", identity_of(b), SglangImportOptions{}, &warnings);
  EXPECT_TRUE(warnings.empty());
  for (std::size_t i = 0; i < b.layers.size(); ++i) {
    EXPECT_EQ(back.layers[i].k_rotation, b.layers[i].k_rotation);
    EXPECT_EQ(back.layers[i].v_rotation, b.layers[i].v_rotation);
    EXPECT_EQ(back.layers[i].k_eigenvalues, b.layers[i].k_eigenvalues);
    EXPECT_EQ(back.layers[i].v_eigenvalues, b.layers[i].v_eigenvalues);
    EXPECT_EQ(back.layers[i].k_clip, b.layers[i].k_clip);
    EXPECT_EQ(back.layers[i].v_clip, b.layers[i].v_clip);
  }
  EXPECT_EQ(back.calibration.grouping, "layer");
  EXPECT_EQ(back.calibration.dataset_sha256, b.calibration.dataset_sha256);
  EXPECT_EQ(back.calibration.tokens, b.calibration.tokens);
  EXPECT_EQ(back.calibration.value_objective, "attn");
  DiffTolerances exact;
  EXPECT_TRUE(diff_bundles(b, back, exact).tensors_identical);
}

TEST(SglangExport, PerHeadBundleIsFormat2AndLosesMeansAndSmoothing) {
  Bundle b = synthetic_bundle({2, 3, 8, true, /*centred=*/true, /*smooth=*/0.5});
  EXPECT_FALSE(rotations_shared_per_layer(b));
  const auto losses = export_losses(b, "sglang");
  ASSERT_EQ(losses.size(), 2u);
  EXPECT_TRUE(contains(losses[0], "smoothed"));
  EXPECT_TRUE(contains(losses[1], "centred"));
  EXPECT_TRUE(contains(error_of([&] { sglang_export(b, 1); }), "--grouping layer"));
  const SglangFiles files = sglang_export(b);
  EXPECT_EQ(files.format_version, 2);
  const PickleValue k = round_trip(files.k);
  EXPECT_EQ(k.find("source_grouping")->as_string(""), "head");
  const PickleValue& l1 = *k.find("layers")->find(PickleValue::integer(1));
  EXPECT_EQ(l1.find("rotation")->as_tensor("").shape, (std::vector<std::int64_t>{3, 8, 8}));
  EXPECT_EQ(l1.find("eigenvalues")->as_tensor("").shape, (std::vector<std::int64_t>{3, 8}));
  std::vector<std::string> warnings;
  const Bundle back = sglang_import(k, round_trip(files.v), "k.pt", "v.pt", identity_of(b),
                                    SglangImportOptions{}, &warnings);
  EXPECT_EQ(warnings.size(), 2u);
  EXPECT_FALSE(back.calibration.center_keys);
  EXPECT_EQ(back.calibration.smooth_keys, 0.0);
  EXPECT_TRUE(back.layers[0].k_mean.empty());
  EXPECT_TRUE(back.layers[0].k_smooth.empty());
  for (std::size_t i = 0; i < b.layers.size(); ++i) {
    EXPECT_EQ(back.layers[i].k_rotation, b.layers[i].k_rotation) << "rotations survive";
    EXPECT_EQ(back.layers[i].v_eigenvalues, b.layers[i].v_eigenvalues);
  }
}

TEST(SglangExport, SingleKvHeadTravelsAsFormat1AndKeepsItsGrouping) {
  const Bundle b = synthetic_bundle({2, 1, 8, /*per_head=*/true});
  const SglangFiles files = sglang_export(b);
  EXPECT_EQ(files.format_version, 1);
  const Bundle back = sglang_import(round_trip(files.k), round_trip(files.v), "k", "v",
                                    identity_of(b), {}, nullptr);
  EXPECT_EQ(back.calibration.grouping, "head");
  EXPECT_TRUE(diff_bundles(b, back, DiffTolerances{}).ok());
}

TEST(SglangExport, PerHeadClipRatiosAreReportedAndKeptAsProvenance) {
  Bundle b = synthetic_bundle({2, 2, 8});
  b.layers[1].k_clip[1] = 0.9f;
  b.calibration.clip_method = "search";
  const auto losses = export_losses(b, "sglang");
  ASSERT_EQ(losses.size(), 1u);
  EXPECT_TRUE(contains(losses[0], "clip ratios differ"));
  const SglangFiles files = sglang_export(b);
  const Bundle back = sglang_import(round_trip(files.k), round_trip(files.v), "k", "v",
                                    identity_of(b), {}, nullptr);
  EXPECT_EQ(back.layers[1].k_clip[1], 0.9f);
  SglangImportOptions uniform;
  uniform.clip_k = 0.95;
  const Bundle given = sglang_import(round_trip(files.k), round_trip(files.v), "k", "v",
                                     identity_of(b), uniform, nullptr);
  EXPECT_EQ(given.layers[1].k_clip[1], 0.95f);
}

TEST(SglangImport, ReadsTheAnchorsLayoutWithoutProvenance) {
  // As the reference tool writes it: int layer keys, ascending eigenvalues, no "oscar" entry.
  const std::int64_t d = 4, layers = 2;
  Bundle model_of = synthetic_bundle({layers, 2, d, false});
  auto side = [&](const char* objective, char kind) {
    PickleValue root = PickleValue::dict();
    root.set("format_version", PickleValue::integer(1));
    root.set("objective", PickleValue::string(objective));
    root.set("source_grouping", PickleValue::string("layer"));
    PickleValue ls = PickleValue::dict();
    for (std::int64_t i = 0; i < layers; ++i) {
      const auto& rot = kind == 'k' ? model_of.layers[i].k_rotation : model_of.layers[i].v_rotation;
      TorchTensor r;
      r.shape = {d, d};
      r.values.assign(rot.begin(), rot.begin() + d * d);
      TorchTensor e;
      e.shape = {d};
      e.values = {0.1f, 0.2f, 0.5f, 3.0f};
      PickleValue entry = PickleValue::dict();
      entry.set("layer_id", PickleValue::integer(i));
      entry.set("rotation", PickleValue::tensor(r));
      entry.set("eigenvalues", PickleValue::tensor(e));
      // String layer keys are accepted too (as SGLang's loader accepts them).
      ls.set(i == 0 ? PickleValue::integer(i) : PickleValue::string(std::to_string(i)), entry);
    }
    root.set("layers", ls);
    return root;
  };
  std::vector<std::string> warnings;
  const Bundle b = sglang_import(side("qqt_r_h_pbr", 'k'), side("sst_r_h_pbr", 'v'), "k", "v",
                                 identity_of(model_of), {}, &warnings);
  EXPECT_EQ(b.calibration.grouping, "layer");
  EXPECT_EQ(b.calibration.composition, "r_h_pbr");
  EXPECT_EQ(b.calibration.value_objective, "keyweight");
  EXPECT_EQ(b.layers[1].k_eigenvalues,
            (std::vector<float>{3.0f, 0.5f, 0.2f, 0.1f, 3.0f, 0.5f, 0.2f, 0.1f}));
  EXPECT_EQ(b.layers[0].k_clip, (std::vector<float>{0.96f, 0.96f}));
  EXPECT_EQ(b.layers[0].v_clip, (std::vector<float>{0.92f, 0.92f}));
  EXPECT_EQ(warnings.size(), 2u);  // no provenance; default clip ratios
  EXPECT_TRUE(contains(error_of([&] {
                         sglang_import(side("qqt_mystery", 'k'), side("sst_mystery", 'v'), "k", "v",
                                       identity_of(model_of), {}, nullptr);
                       }),
                       "--composition"));
}

TEST(SglangImport, ErrorsNameTheProblem) {
  Bundle b = synthetic_bundle({3, 2, 8, false});
  const SglangFiles files = sglang_export(b);
  auto import_with = [&](const PickleValue& k, const ModelIdentity& model,
                         SglangImportOptions options = {}) {
    return error_of([&] { sglang_import(k, files.v, "k.pt", "v.pt", model, options, nullptr); });
  };
  // A model with more layers: layer 3 missing.
  ModelIdentity deeper = b.model;
  deeper.num_layers = 4;
  EXPECT_TRUE(contains(import_with(files.k, deeper), "layer 3 is missing"));
  // Another head_dim.
  ModelIdentity wider = b.model;
  wider.head_dim = 16;
  EXPECT_TRUE(contains(import_with(files.k, wider), "expected [16, 16]"));
  // Provenance naming another checkpoint.
  ModelIdentity other = b.model;
  other.config_sha256 = std::string(64, 'e');
  EXPECT_TRUE(contains(import_with(files.k, other), "rotations do not transfer"));
  SglangImportOptions skip;
  skip.check_hashes = false;
  EXPECT_EQ(import_with(files.k, other, skip), "");
  // A layer whose rotation is not a tensor.
  PickleValue broken = files.k;
  const PickleValue& layers = *broken.find("layers");
  PickleValue layers_copy = layers;
  PickleValue entry = *layers.find(PickleValue::integer(1));
  entry.set("rotation", PickleValue::string("oops"));
  layers_copy.set(PickleValue::integer(1), entry);
  broken.set("layers", layers_copy);
  EXPECT_TRUE(contains(import_with(broken, b.model), "layer 1 rotation must be a tensor"));
}

TEST(GgufExport, TensorsAreTransposedAsGgmlMulMatNeeds) {
  Bundle b = synthetic_bundle({3, 2, 8, false});
  const std::string bytes = gguf_export(b).bytes();
  const GgufFile f = read_gguf(bytes);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.str("general.architecture"), "oscar");
  EXPECT_EQ(f.str("oscar.model.config_sha256"), b.model.config_sha256);
  EXPECT_EQ(f.str("oscar.rotation.grouping"), "layer");
  EXPECT_EQ(f.u32("oscar.block_count"), 3u);
  EXPECT_EQ(f.u32("oscar.attention.key_length"), 8u);
  EXPECT_EQ(f.f32_array("oscar.quantization.k_clip"), std::vector<float>(6, 0.96f));
  ASSERT_EQ(f.order.size(), 6u);
  EXPECT_EQ(f.order[0], "blk.0.attn_k_rot.weight");
  EXPECT_EQ(f.order[1], "blk.0.attn_v_rot.weight");
  EXPECT_EQ(f.data_start % 32, 0u);
  const std::int64_t d = 8;
  for (std::int64_t i = 0; i < 3; ++i) {
    for (const char kind : {'k', 'v'}) {
      const auto& t = f.tensors.at("blk." + std::to_string(i) + ".attn_" + kind + "_rot.weight");
      EXPECT_EQ(t.ne, (std::vector<std::uint64_t>{8, 8}));
      EXPECT_EQ(t.type, 0u);  // F32
      const auto& r = kind == 'k' ? b.layers[i].k_rotation : b.layers[i].v_rotation;
      // ggml_mul_mat(rot, x)[j][i] = sum_k rot(k, i) x(k, j) must equal (x R)[j][i]: the element
      // at ne (k, i), memory i * d + k, is R[k][i]. Bit-exact.
      for (std::int64_t row = 0; row < d; ++row) {
        for (std::int64_t col = 0; col < d; ++col) {
          ASSERT_EQ(t.data[col * d + row], r[row * d + col]) << i << kind;
        }
      }
      // And the product itself, for one vector, in float64.
      std::vector<double> x(d);
      for (std::int64_t k = 0; k < d; ++k) x[k] = 0.3 * k - 1.0;
      for (std::int64_t col = 0; col < d; ++col) {
        double ggml = 0.0, reference = 0.0;
        for (std::int64_t k = 0; k < d; ++k) {
          ggml += double(t.data[col * d + k]) * x[k];
          reference += x[k] * r[k * d + col];
        }
        EXPECT_NEAR(ggml, reference, 1e-12);
      }
    }
  }
}

TEST(GgufExport, PerHeadRotationsNeedExplicitConsent) {
  Bundle b = synthetic_bundle({2, 3, 8, true});
  EXPECT_TRUE(contains(error_of([&] { gguf_export(b); }), "--allow-per-head"));
  const GgufFile f = read_gguf(gguf_export(b, true).bytes());
  const auto& t = f.tensors.at("blk.1.attn_v_rot.weight");
  EXPECT_EQ(t.ne, (std::vector<std::uint64_t>{8, 8, 3}));
  for (std::int64_t h = 0; h < 3; ++h) {
    for (std::int64_t row = 0; row < 8; ++row) {
      for (std::int64_t col = 0; col < 8; ++col) {
        ASSERT_EQ(t.data[h * 64 + col * 8 + row], b.layers[1].v_rotation[h * 64 + row * 8 + col]);
      }
    }
  }
  EXPECT_EQ(f.str("oscar.rotation.grouping"), "head");
}

TEST(BundleDiff, RecoversTheEigenvectorsOfEachComposition) {
  std::mt19937_64 rng(5);
  const std::int64_t d = 16;
  const auto u = random_orthogonal(d, rng);
  std::vector<float> eig(d);
  for (std::int64_t i = 0; i < d; ++i) eig[i] = static_cast<float>(d - i);  // descending
  std::vector<double> got;
  ASSERT_TRUE(
      recover_eigenvectors(to_float(compose_r_h_pbr(u, d)).data(), eig.data(), d, "r_h_pbr", &got));
  for (std::size_t i = 0; i < u.size(); ++i) ASSERT_NEAR(got[i], u[i], 1e-6);
  ASSERT_TRUE(
      recover_eigenvectors(to_float(matmul(u, hadamard(d), d)).data(), eig.data(), d, "r_h", &got));
  for (std::size_t i = 0; i < u.size(); ++i) ASSERT_NEAR(got[i], u[i], 1e-6);
  ASSERT_TRUE(recover_eigenvectors(to_float(u).data(), eig.data(), d, "r", &got));
  EXPECT_FALSE(recover_eigenvectors(to_float(hadamard(d)).data(), eig.data(), d, "h", &got));
  // A wrong eigenvalue order mixes the columns: the sign convention catches it.
  std::reverse(eig.begin(), eig.end());
  EXPECT_FALSE(
      recover_eigenvectors(to_float(compose_r_h_pbr(u, d)).data(), eig.data(), d, "r_h_pbr", &got));
}

TEST(BundleDiff, PrincipalAnglesMeasureRotatedSubspaces) {
  std::mt19937_64 rng(9);
  const std::int64_t d = 8;
  const auto u = random_orthogonal(d, rng);
  // Rotate the leading eigenvector (last column) towards a trailing one by 10 degrees.
  auto v = u;
  const double a = 10.0 * 3.14159265358979323846 / 180.0;
  for (std::int64_t r = 0; r < d; ++r) {
    v[r * d + 7] = std::cos(a) * u[r * d + 7] + std::sin(a) * u[r * d + 0];
    v[r * d + 0] = -std::sin(a) * u[r * d + 7] + std::cos(a) * u[r * d + 0];
  }
  EXPECT_NEAR(largest_principal_angle_deg(u, v, d, 2), 10.0, 1e-9);
  EXPECT_NEAR(largest_principal_angle_deg(u, u, d, 2), 0.0, 1e-6);
  // Rotations inside the leading subspace (columns 6 and 7) do not count.
  auto w = u;
  for (std::int64_t r = 0; r < d; ++r) {
    w[r * d + 7] = std::cos(a) * u[r * d + 7] + std::sin(a) * u[r * d + 6];
    w[r * d + 6] = -std::sin(a) * u[r * d + 7] + std::cos(a) * u[r * d + 6];
  }
  EXPECT_NEAR(largest_principal_angle_deg(u, w, d, 2), 0.0, 1e-6);
  EXPECT_NEAR(largest_principal_angle_deg(u, w, d, 1), 10.0, 1e-9);
}

TEST(BundleDiff, IdenticalPerturbedAndSignFlippedBundles) {
  std::vector<std::vector<double>> us;
  const Bundle a = synthetic_bundle({2, 2, 8}, &us);
  DiffTolerances exact;
  BundleDiff same = diff_bundles(a, a, exact);
  EXPECT_TRUE(same.ok());
  EXPECT_TRUE(same.tensors_identical);
  EXPECT_TRUE(same.fields.empty());
  EXPECT_EQ(same.heads.size(), 8u);
  EXPECT_EQ(same.leading, 2);

  // One element nudged: over the exact tolerance, within a loose one.
  Bundle b = a;
  b.layers[1].v_rotation[5] += 1e-4f;
  BundleDiff nudged = diff_bundles(a, b, exact);
  EXPECT_FALSE(nudged.ok());
  EXPECT_FALSE(nudged.tensors_identical);
  EXPECT_NEAR(nudged.worst.rotation, 1e-4, 1e-6);
  ASSERT_FALSE(nudged.failures.empty());
  EXPECT_TRUE(contains(nudged.failures[0], "layer 1 head 0 V"));
  DiffTolerances loose;
  loose.rotation = 1e-3;
  loose.angle_deg = 0.1;
  EXPECT_TRUE(diff_bundles(a, b, loose).ok());

  // Mixing two trailing eigenvectors (what another eigensolver may return for close eigenvalues)
  // changes R a lot but not the leading subspace.
  Bundle c = a;
  const double t = 0.3;
  auto rotated = us[0];
  for (std::int64_t r = 0; r < 8; ++r) {
    rotated[r * 8 + 0] = std::cos(t) * us[0][r * 8 + 0] + std::sin(t) * us[0][r * 8 + 1];
    rotated[r * 8 + 1] = -std::sin(t) * us[0][r * 8 + 0] + std::cos(t) * us[0][r * 8 + 1];
  }
  for (std::int64_t col : {0, 1}) {  // restore the sign convention on the mixed columns
    std::int64_t pivot = 0;
    for (std::int64_t r = 0; r < 8; ++r)
      if (std::abs(rotated[r * 8 + col]) > std::abs(rotated[pivot * 8 + col])) pivot = r;
    if (rotated[pivot * 8 + col] < 0)
      for (std::int64_t r = 0; r < 8; ++r) rotated[r * 8 + col] = -rotated[r * 8 + col];
  }
  const auto r = to_float(compose_r_h_pbr(rotated, 8));
  std::copy(r.begin(), r.end(), c.layers[0].k_rotation.begin());
  DiffTolerances subspace;
  subspace.rotation = -1;  // unchecked: only the leading subspace matters here
  subspace.angle_deg = 1e-3;
  const BundleDiff flipped = diff_bundles(a, c, subspace);
  EXPECT_TRUE(flipped.ok()) << (flipped.failures.empty() ? "" : flipped.failures[0]);
  EXPECT_GT(flipped.worst.rotation, 0.05);
  EXPECT_LT(flipped.worst.angle_deg, 1e-3);
  subspace.leading = 7;  // now the mixed trailing vector is inside the compared subspace
  EXPECT_FALSE(diff_bundles(a, c, subspace).ok());
}

TEST(BundleDiff, ManifestFieldsClipsAndShapes) {
  const Bundle a = synthetic_bundle({2, 2, 8});
  Bundle b = a;
  b.calibration.tokens = 1024;
  b.created = "2030-01-01T00:00:00Z";
  b.git_commit = "other";
  b.layers[0].v_clip[1] = 0.9f;
  DiffTolerances exact;
  BundleDiff diff = diff_bundles(a, b, exact);
  EXPECT_FALSE(diff.ok());
  std::size_t counted = 0;
  for (const auto& f : diff.fields) counted += f.counted ? 1 : 0;
  EXPECT_EQ(counted, 1u);  // calibration.tokens; created and tool.git_commit never count
  EXPECT_EQ(diff.failures.size(), 2u);
  EXPECT_NEAR(diff.worst.clip, 0.02, 1e-6);
  exact.ignored_fields = {"calibration.tokens"};
  exact.clip = 0.05;
  EXPECT_TRUE(diff_bundles(a, b, exact).ok());
  const Bundle other = synthetic_bundle({3, 2, 8});
  EXPECT_TRUE(contains(error_of([&] { diff_bundles(a, other, exact); }), "different shapes"));
}

TEST(BundleExports, FilesOnDisk) {
  test::TempDir dir;
  Bundle b = synthetic_bundle({2, 2, 8, false});
  const auto paths = write_sglang_export(sglang_export(b), dir.path());
  ASSERT_EQ(paths.size(), 2u);
  const Bundle back = import_sglang_files(paths[0], paths[1], identity_of(b), {}, nullptr);
  EXPECT_EQ(back.layers[1].v_rotation, b.layers[1].v_rotation);
  EXPECT_TRUE(
      contains(error_of([&] { read_torch_archive(dir.file("none.pt")); }), "does not exist"));
  EXPECT_TRUE(contains(error_of([&] { write_sglang_export(sglang_export(b), dir.file("x/y")); }),
                       "does not exist"));
  gguf_export(b).write(dir.file("r.gguf"));
}

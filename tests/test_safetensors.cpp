// Tests of the safetensors reader and writer: round trips, every validation rule, corrupt input
// (truncation, byte flips), sharded checkpoints and the shared real models.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/safetensors.h"
#include "test_support.h"

namespace oscar {
namespace {

using nlohmann::json;

constexpr const char* kOrigin = "mem.safetensors";

const std::vector<DType> kAllDTypes = {DType::BOOL, DType::U8,      DType::I8,     DType::I16,
                                       DType::U16,  DType::F16,     DType::BF16,   DType::I32,
                                       DType::U32,  DType::F32,     DType::F64,    DType::I64,
                                       DType::U64,  DType::F8_E4M3, DType::F8_E5M2};

// A safetensors file from a header string (used verbatim, no padding) and a data blob.
std::string make_file(const std::string& header, const std::string& data = "") {
  std::string out;
  const std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  return out + header + data;
}

// Parses from an exactly sized heap copy, so a sanitizer sees any read past the end.
SafetensorsHeader parse_bytes(const std::string& bytes) {
  std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
  return parse_safetensors_header(copy.data(), copy.size(), kOrigin);
}

// Asserts that parsing throws oscar::Error whose message contains every one of `needles`.
void expect_rejected(const std::string& bytes, std::initializer_list<std::string> needles) {
  try {
    parse_bytes(bytes);
    ADD_FAILURE() << "no error for: " << bytes.substr(8);
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& n : needles) {
      EXPECT_NE(msg.find(n), std::string::npos) << "'" << n << "' not in: " << msg;
    }
  }
}

std::string pattern_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << path;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A small valid file: two F32 tensors and metadata, 8-aligned header.
std::string small_valid_file() {
  const std::string a = pattern_bytes(24, 1), b = pattern_bytes(16, 2);
  return serialize_safetensors({{"alpha", DType::F32, {2, 3}, a.data(), a.size()},
                                {"beta", DType::I16, {8}, b.data(), b.size()}},
                               {{"format", "pt"}});
}

// --- dtypes ---

TEST(SafetensorsDType, NamesAndSizesRoundTrip) {
  for (DType d : kAllDTypes) {
    EXPECT_EQ(parse_dtype(dtype_name(d)), d);
    EXPECT_GE(dtype_size(d), 1u);
  }
  EXPECT_EQ(dtype_size(DType::BF16), 2u);
  EXPECT_EQ(dtype_size(DType::F64), 8u);
  EXPECT_STREQ(dtype_name(DType::F8_E4M3), "F8_E4M3");
  EXPECT_THROW(parse_dtype("F4"), Error);
  EXPECT_THROW(parse_dtype("f32"), Error);
}

// --- writing and reading back ---

TEST(SafetensorsRoundTrip, EveryDTypeScalarsEmptyAndMetadata) {
  test::TempDir tmp;
  std::vector<std::string> blobs;
  std::vector<TensorToWrite> tensors;
  blobs.reserve(3 * kAllDTypes.size());
  std::uint32_t seed = 10;
  for (DType d : kAllDTypes) {
    const std::string base = dtype_name(d);
    blobs.push_back(pattern_bytes(3 * 5 * dtype_size(d), seed++));
    tensors.push_back({base + ".matrix", d, {3, 5}, blobs.back().data(), blobs.back().size()});
    blobs.push_back(pattern_bytes(dtype_size(d), seed++));
    tensors.push_back({base + ".scalar", d, {}, blobs.back().data(), blobs.back().size()});
    tensors.push_back({base + ".empty", d, {0, 4}, nullptr, 0});
  }
  const std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "h\u00e9llo \"q\""}};
  const std::string path = tmp.file("model.safetensors");
  write_safetensors(path, tensors, meta);

  SafetensorsFile f(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.metadata(), meta);
  ASSERT_EQ(f.tensors().size(), tensors.size());
  // The header is padded so that the data section (and so the first tensor) starts 8-aligned.
  EXPECT_EQ(f.header_json().size() % 8, 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(f.header_json().data() + f.header_json().size()) % 8,
            0u);

  MappedFile raw(path);
  const std::uint8_t* lo = raw.data();
  std::uint64_t prev_pos = 0;
  for (const TensorToWrite& t : tensors) {
    SCOPED_TRACE(t.name);
    const TensorInfo& info = f.at(t.name);
    EXPECT_EQ(info.dtype, t.dtype);
    EXPECT_EQ(info.shape, t.shape);
    EXPECT_EQ(info.nbytes(), t.nbytes);
    EXPECT_EQ(static_cast<std::uint64_t>(info.numel()) * dtype_size(t.dtype), t.nbytes);
    EXPECT_EQ(info.begin, prev_pos);  // contiguous, in the given order
    prev_pos = info.end;
    const std::uint8_t* p = f.data(info);
    // header_json() starts 8 bytes into the mapping, so this is the mapping's first byte.
    const auto* map_begin = reinterpret_cast<const std::uint8_t*>(f.header_json().data()) - 8;
    const std::size_t off = static_cast<std::size_t>(p - map_begin);
    EXPECT_EQ(off, 8 + f.header_json().size() + info.begin);
    EXPECT_LE(off + info.nbytes(), raw.size());
    EXPECT_EQ(std::memcmp(lo + off, p, info.nbytes()), 0);
    if (t.nbytes > 0) {
      EXPECT_EQ(std::memcmp(p, t.data, t.nbytes), 0);
    }
  }
  EXPECT_EQ(8 + f.header_json().size() + prev_pos, raw.size());

  // The header lists tensors in the order given, metadata first.
  const std::string_view hj = f.header_json();
  std::size_t last = hj.find("__metadata__");
  ASSERT_NE(last, std::string_view::npos);
  for (const TensorToWrite& t : tensors) {
    const std::size_t at = hj.find("\"" + t.name + "\"");
    ASSERT_NE(at, std::string_view::npos);
    EXPECT_GT(at, last);
    last = at;
  }

  Checkpoint ck = Checkpoint::open(tmp.path());
  EXPECT_EQ(ck.files().size(), 1u);
  EXPECT_EQ(ck.tensor_names().size(), tensors.size());
  EXPECT_EQ(std::memcmp(ck.data("F32.matrix"), blobs[2 * 9].data(), 60), 0);
}

TEST(SafetensorsRoundTrip, DataPointersLieInsideTheMapping) {
  test::TempDir tmp;
  const std::string bytes = small_valid_file();
  write_text(tmp.file("x.safetensors"), bytes);
  SafetensorsFile f(tmp.file("x.safetensors"));
  const auto* begin = reinterpret_cast<const std::uint8_t*>(f.header_json().data()) - 8;
  const std::uint8_t* end = begin + bytes.size();
  for (const TensorInfo& t : f.tensors()) {
    const std::uint8_t* p = f.data(t);
    EXPECT_GE(p, begin + 8 + f.header_json().size());
    EXPECT_LE(p + t.nbytes(), end);
    EXPECT_EQ(std::memcmp(p, bytes.data() + (p - begin), t.nbytes()), 0);
  }
  EXPECT_EQ(f.at("beta").begin, 24u);
  EXPECT_EQ(f.find("gamma"), nullptr);
  const std::string msg = error_of([&] { f.at("gamma"); });
  EXPECT_NE(msg.find("gamma"), std::string::npos);
  EXPECT_NE(msg.find("x.safetensors"), std::string::npos);
}

TEST(SafetensorsRoundTrip, NoMetadataKeyWhenEmptyAndEmptyFile) {
  const std::string a = pattern_bytes(4, 3);
  const std::string bytes = serialize_safetensors({{"t", DType::F32, {1}, a.data(), 4}}, {});
  EXPECT_EQ(bytes.find("__metadata__"), std::string::npos);
  const SafetensorsHeader h = parse_bytes(bytes);
  EXPECT_TRUE(h.metadata.empty());
  EXPECT_EQ(h.header_size % 8, 0u);
  EXPECT_EQ(h.data_size, 4u);

  const std::string empty = serialize_safetensors({}, {});
  const SafetensorsHeader e = parse_bytes(empty);
  EXPECT_TRUE(e.tensors.empty());
  EXPECT_EQ(e.data_size, 0u);
  EXPECT_EQ(empty.size() % 8, 0u);
}

TEST(SafetensorsRoundTrip, ReaderAcceptsStandardLayouts) {
  // Unpadded header, leading/trailing whitespace, unknown extra fields, zero-size tensors at a
  // boundary, tensors listed out of offset order: all valid per the format.
  const std::string data = pattern_bytes(12, 4);
  const SafetensorsHeader h =
      parse_bytes(make_file(R"(  {"b":{"dtype":"U8","shape":[4],"data_offsets":[8,12],"extra":1},)"
                            R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                            R"("z":{"dtype":"F16","shape":[3,0],"data_offsets":[8,8]}}   )",
                            data));
  ASSERT_EQ(h.tensors.size(), 3u);
  EXPECT_EQ(h.tensors[0].name, "a");  // sorted by offsets
  EXPECT_EQ(h.tensors[1].name, "z");
  EXPECT_EQ(h.tensors[2].name, "b");
  EXPECT_EQ(h.tensors[1].numel(), 0);
}

TEST(SafetensorsWrite, RejectsInvalidInput) {
  const std::string a = pattern_bytes(16, 5);
  auto msg = [&](std::vector<TensorToWrite> t) {
    return error_of([&] { serialize_safetensors(t, {}); });
  };
  EXPECT_NE(msg({{"w", DType::F32, {3}, a.data(), 16}}).find("'w'"), std::string::npos);
  EXPECT_NE(
      msg({{"w", DType::F32, {2}, a.data(), 8}, {"w", DType::F32, {2}, a.data(), 8}}).find("twice"),
      std::string::npos);
  EXPECT_NE(msg({{"w", DType::F32, {2}, nullptr, 8}}).find("null"), std::string::npos);
  EXPECT_NE(msg({{"w", DType::F32, {-2}, a.data(), 8}}).find("negative"), std::string::npos);
  EXPECT_NE(msg({{"__metadata__", DType::F32, {2}, a.data(), 8}}).find("__metadata__"),
            std::string::npos);
  EXPECT_NE(msg({{"", DType::F32, {2}, a.data(), 8}}), "");
  EXPECT_NE(msg({{"w", DType::F32, {INT64_MAX, 2}, a.data(), 8}}).find("overflow"),
            std::string::npos);
  EXPECT_NE(msg({{std::string("bad\xff", 4), DType::F32, {2}, a.data(), 8}}), "");
}

// --- every rejection, hand-crafted ---

TEST(SafetensorsReject, ShortFileAndBadLength) {
  for (std::size_t n = 0; n < 8; ++n) {
    expect_rejected(std::string(n, '\0'), {kOrigin, "shorter"});
  }
  std::string big = make_file("{}");
  big[0] = 3;  // N = 3 > 2 available bytes
  expect_rejected(big, {kOrigin, "header length 3"});
  std::string huge = make_file("{}");
  huge[4] = 1;  // N = 2^32 + 2: beyond the 100 MB limit
  expect_rejected(huge, {kOrigin, "limit"});
  std::string max = make_file("{}");
  for (int i = 0; i < 8; ++i) max[i] = '\xff';
  expect_rejected(max, {kOrigin, "limit"});
}

TEST(SafetensorsReject, MalformedJson) {
  expect_rejected(make_file(""), {kOrigin, "malformed JSON"});
  expect_rejected(make_file("{\"a\": "), {kOrigin, "malformed JSON"});
  expect_rejected(make_file("{} trailing"), {kOrigin, "malformed JSON"});
  expect_rejected(make_file(std::string("{\"a\0\":1}", 8)), {kOrigin, "malformed JSON"});
  expect_rejected(make_file("{\"\xff\":{}}"), {kOrigin, "malformed JSON"});  // not UTF-8
  expect_rejected(make_file("[]"), {kOrigin, "not a JSON object"});
  expect_rejected(make_file("42"), {kOrigin, "not a JSON object"});
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]},)"
                            R"("a":{"dtype":"U8","shape":[0],"data_offsets":[0,0]}})"),
                  {kOrigin, "'a'", "twice"});
}

TEST(SafetensorsReject, BadEntries) {
  const std::string d(4, 'x');
  auto one = [&](const std::string& entry) { return make_file("{\"wq\":" + entry + "}", d); };
  expect_rejected(one("5"), {kOrigin, "'wq'", "not a JSON object"});
  expect_rejected(one("[1]"), {kOrigin, "'wq'", "not a JSON object"});
  expect_rejected(one(R"({"shape":[4],"data_offsets":[0,4]})"), {kOrigin, "'wq'", "dtype"});
  expect_rejected(one(R"({"dtype":7,"shape":[4],"data_offsets":[0,4]})"), {"'wq'", "dtype"});
  expect_rejected(one(R"({"dtype":"U8","data_offsets":[0,4]})"), {kOrigin, "'wq'", "shape"});
  expect_rejected(one(R"({"dtype":"U8","shape":4,"data_offsets":[0,4]})"), {"'wq'", "shape"});
  expect_rejected(one(R"({"dtype":"U8","shape":[4.0],"data_offsets":[0,4]})"), {"'wq'", "shape"});
  expect_rejected(one(R"({"dtype":"U8","shape":["4"],"data_offsets":[0,4]})"), {"'wq'", "shape"});
  expect_rejected(one(R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]})"),
                  {"'wq'", "shape"});
  expect_rejected(one(R"({"dtype":"U8","shape":[4]})"), {kOrigin, "'wq'", "data_offsets"});
  expect_rejected(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0]})"),
                  {"'wq'", "data_offsets"});
  expect_rejected(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4,4]})"),
                  {"'wq'", "data_offsets"});
  expect_rejected(one(R"({"dtype":"U8","shape":[4],"data_offsets":[-1,4]})"),
                  {"'wq'", "data_offsets"});
  expect_rejected(one(R"({"dtype":"U8","shape":[4],"data_offsets":[0,4.0]})"),
                  {"'wq'", "data_offsets"});
  expect_rejected(one(R"({"dtype":"U8","shape":[4],"data_offsets":{"a":0}})"),
                  {"'wq'", "data_offsets"});
}

TEST(SafetensorsReject, BadValues) {
  const std::string d(8, 'x');
  auto one = [&](const std::string& entry) { return make_file("{\"wk\":" + entry + "}", d); };
  expect_rejected(one(R"({"dtype":"F4","shape":[16],"data_offsets":[0,8]})"),
                  {kOrigin, "'wk'", "unknown dtype 'F4'"});
  expect_rejected(one(R"({"dtype":"U8","shape":[-8],"data_offsets":[0,8]})"),
                  {kOrigin, "'wk'", "negative"});
  expect_rejected(one(R"({"dtype":"U8","shape":[2,-4,-1],"data_offsets":[0,8]})"),
                  {"'wk'", "negative"});
  // Overflow is detected while folding, even though the last dimension makes the product zero.
  expect_rejected(one(R"({"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,8]})"),
                  {kOrigin, "'wk'", "overflow"});
  expect_rejected(one(R"({"dtype":"U8","shape":[9223372036854775807,2],"data_offsets":[0,8]})"),
                  {"'wk'", "overflow"});
  // numel fits int64 but numel x 8 bytes does not fit uint64.
  expect_rejected(one(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]})"),
                  {"'wk'", "overflow"});
  expect_rejected(one(R"({"dtype":"U8","shape":[0],"data_offsets":[8,0]})"),
                  {kOrigin, "'wk'", "begin > end"});
  expect_rejected(one(R"({"dtype":"U8","shape":[16],"data_offsets":[0,16]})"),
                  {kOrigin, "'wk'", "beyond"});
  expect_rejected(
      one(R"({"dtype":"U8","shape":[1],"data_offsets":[18446744073709551615,18446744073709551615]})"),
      {"'wk'", "beyond"});
  expect_rejected(one(R"({"dtype":"F32","shape":[4],"data_offsets":[0,8]})"),
                  {kOrigin, "'wk'", "spans 8 bytes", "needs 16"});
  expect_rejected(one(R"({"dtype":"F16","shape":[],"data_offsets":[0,8]})"), {"'wk'", "needs 2"});
}

TEST(SafetensorsReject, OverlapsHolesAndTrailingBytes) {
  const std::string d(16, 'x');
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                            R"("b":{"dtype":"U8","shape":[12],"data_offsets":[4,16]}})",
                            d),
                  {kOrigin, "'a'", "'b'", "overlaps"});
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[16],"data_offsets":[0,16]},)"
                            R"("b":{"dtype":"U8","shape":[16],"data_offsets":[0,16]}})",
                            d),
                  {kOrigin, "overlaps"});
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                            R"("b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})",
                            d),
                  {kOrigin, "not entirely indexed", "'b'"});
  expect_rejected(make_file(R"({"b":{"dtype":"U8","shape":[8],"data_offsets":[8,16]}})", d),
                  {kOrigin, "not entirely indexed"});
  expect_rejected(make_file(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]}})", d),
                  {kOrigin, "not entirely indexed", "trailing"});
  expect_rejected(make_file("{}", d), {kOrigin, "not entirely indexed"});
}

TEST(SafetensorsReject, BadMetadata) {
  expect_rejected(make_file(R"({"__metadata__":"pt"})"), {kOrigin, "__metadata__"});
  expect_rejected(make_file(R"({"__metadata__":null})"), {kOrigin, "__metadata__"});
  expect_rejected(make_file(R"({"__metadata__":{"format":1}})"),
                  {kOrigin, "__metadata__", "'format'"});
  expect_rejected(make_file(R"({"__metadata__":{"a":{"b":"c"}}})"), {kOrigin, "'a'"});
  const SafetensorsHeader h = parse_bytes(make_file(R"({"__metadata__":{}})"));
  EXPECT_TRUE(h.metadata.empty());
}

// --- corrupt input never crashes ---

TEST(SafetensorsCorrupt, EveryTruncationIsRejected) {
  const std::string full = small_valid_file();
  ASSERT_NO_THROW(parse_bytes(full));
  for (std::size_t len = 0; len < full.size(); ++len) {
    SCOPED_TRACE(len);
    EXPECT_THROW(parse_bytes(full.substr(0, len)), Error);
  }
}

TEST(SafetensorsCorrupt, RandomHeaderByteFlipsNeverCrash) {
  const std::string full = small_valid_file();
  const SafetensorsHeader ok = parse_bytes(full);
  const std::size_t header_end = 8 + ok.header_size;
  int valid = 0, rejected = 0;
  for (std::uint32_t seed = 0; seed < 400; ++seed) {
    std::mt19937 rng(seed);
    std::string bytes = full;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < flips; ++i) {
      const std::size_t pos = rng() % header_end;
      // Alternate single-bit flips (near-valid JSON) with whole random bytes.
      if (rng() % 2 == 0) {
        bytes[pos] = static_cast<char>(bytes[pos] ^ (1u << (rng() % 8)));
      } else {
        bytes[pos] = static_cast<char>(rng() & 0xff);
      }
    }
    try {
      const SafetensorsHeader h = parse_bytes(bytes);
      ++valid;
      // Whatever parsed must still describe the data section exactly.
      std::uint64_t covered = 0;
      for (const TensorInfo& t : h.tensors) {
        EXPECT_LE(t.end, h.data_size);
        covered += t.nbytes();
      }
      EXPECT_EQ(covered, h.data_size) << "seed " << seed;
      EXPECT_EQ(8 + h.header_size + h.data_size, bytes.size());
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_EQ(valid + rejected, 400);
  EXPECT_GT(rejected, 0);
}

TEST(SafetensorsCorrupt, RandomBytesNeverCrash) {
  for (std::uint32_t seed = 0; seed < 200; ++seed) {
    std::mt19937 rng(seed);
    std::string body = pattern_bytes(rng() % 96, seed + 1000);
    std::string bytes = make_file(body.substr(0, body.size() / 2), body.substr(body.size() / 2));
    EXPECT_THROW(parse_bytes(bytes), Error) << "seed " << seed;
  }
}

// --- sharded checkpoints ---

// Two shards: shard 1 holds "a" and "b", shard 2 holds "c" (and "extra", absent from the index).
class ShardedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    a_ = pattern_bytes(16, 21);
    b_ = pattern_bytes(8, 22);
    c_ = pattern_bytes(6, 23);
    write_safetensors(
        tmp_.file("s1.safetensors"),
        {{"a", DType::F32, {2, 2}, a_.data(), 16}, {"b", DType::F16, {4}, b_.data(), 8}},
        {{"format", "pt"}});
    write_safetensors(tmp_.file("s2.safetensors"),
                      {{"c", DType::U8, {6}, c_.data(), 6}, {"extra", DType::U8, {0}, nullptr, 0}});
    write_index({{"a", "s1.safetensors"}, {"b", "s1.safetensors"}, {"c", "s2.safetensors"}});
  }
  void write_index(const std::map<std::string, std::string>& weight_map) {
    json j = {{"metadata", {{"total_size", 30}}}, {"weight_map", weight_map}};
    write_text(tmp_.file("model.safetensors.index.json"), j.dump(2));
  }
  std::string open_error() {
    return error_of([&] { Checkpoint::open(tmp_.path()); });
  }
  test::TempDir tmp_;
  std::string a_, b_, c_;
};

TEST_F(ShardedCheckpoint, OpensAndResolvesEveryTensor) {
  const Checkpoint ck = Checkpoint::open(tmp_.path());
  EXPECT_EQ(ck.directory(), tmp_.path());
  ASSERT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.tensor_names(), (std::vector<std::string>{"a", "b", "c", "extra"}));
  EXPECT_EQ(ck.file_of("a").path(), tmp_.file("s1.safetensors"));
  EXPECT_EQ(ck.file_of("c").path(), tmp_.file("s2.safetensors"));
  EXPECT_EQ(ck.file_of("extra").path(), tmp_.file("s2.safetensors"));  // unindexed, still reachable
  EXPECT_EQ(ck.info("b").dtype, DType::F16);
  EXPECT_EQ(ck.info("a").shape, (std::vector<std::int64_t>{2, 2}));
  EXPECT_EQ(std::memcmp(ck.data("a"), a_.data(), 16), 0);
  EXPECT_EQ(std::memcmp(ck.data("b"), b_.data(), 8), 0);
  EXPECT_EQ(std::memcmp(ck.data("c"), c_.data(), 6), 0);
  EXPECT_TRUE(ck.contains("c"));
  EXPECT_FALSE(ck.contains("d"));
  for (const std::string& msg : {error_of([&] { ck.info("d"); }), error_of([&] { ck.data("d"); }),
                                 error_of([&] { ck.file_of("d"); })}) {
    EXPECT_NE(msg.find("'d'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(tmp_.path()), std::string::npos) << msg;
  }
}

TEST_F(ShardedCheckpoint, MissingShard) {
  write_index({{"a", "s1.safetensors"}, {"c", "s3.safetensors"}});
  const std::string msg = open_error();
  EXPECT_NE(msg.find("s3.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
}

TEST_F(ShardedCheckpoint, TensorMissingFromItsShard) {
  write_index({{"a", "s1.safetensors"}, {"c", "s1.safetensors"}});
  const std::string msg = open_error();
  EXPECT_NE(msg.find("'c'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("s1.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.safetensors.index.json"), std::string::npos) << msg;
}

TEST_F(ShardedCheckpoint, PathTraversalInIndex) {
  for (const std::string bad :
       {"../s1.safetensors", "sub/s1.safetensors", "/etc/passwd", "..", ""}) {
    write_index({{"a", bad}});
    const std::string msg = open_error();
    EXPECT_NE(msg.find("not a plain file name"), std::string::npos) << bad << ": " << msg;
  }
}

TEST_F(ShardedCheckpoint, DuplicateTensorAcrossShards) {
  write_safetensors(tmp_.file("s2.safetensors"),
                    {{"c", DType::U8, {6}, c_.data(), 6}, {"a", DType::U8, {1}, a_.data(), 1}});
  const std::string msg = open_error();
  EXPECT_NE(msg.find("'a'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("s1.safetensors"), std::string::npos) << msg;
  EXPECT_NE(msg.find("s2.safetensors"), std::string::npos) << msg;
}

TEST_F(ShardedCheckpoint, BadIndexFiles) {
  write_text(tmp_.file("model.safetensors.index.json"), "{\"weight_map\": ");
  EXPECT_NE(open_error().find("model.safetensors.index.json"), std::string::npos);
  write_text(tmp_.file("model.safetensors.index.json"), "{\"metadata\": {}}");
  EXPECT_NE(open_error().find("weight_map"), std::string::npos);
  write_text(tmp_.file("model.safetensors.index.json"), "{\"weight_map\": {\"a\": 3}}");
  EXPECT_NE(open_error().find("'a'"), std::string::npos);
  write_text(tmp_.file("model.safetensors.index.json"), "{\"weight_map\": {}}");
  EXPECT_NE(open_error(), "");
}

TEST_F(ShardedCheckpoint, CorruptShardIsNamed) {
  write_text(tmp_.file("s2.safetensors"), small_valid_file().substr(0, 40));
  EXPECT_NE(open_error().find("s2.safetensors"), std::string::npos);
}

TEST(Checkpoint, NeitherFileExists) {
  test::TempDir tmp;
  const std::string msg = error_of([&] { Checkpoint::open(tmp.path()); });
  EXPECT_EQ(msg, "no model.safetensors or model.safetensors.index.json in '" + tmp.path() + "'");
  EXPECT_THROW(Checkpoint::open(tmp.file("does-not-exist")), Error);
}

// --- the shared real models ---

// Checks the Llama tensor names and shapes implied by `dir`/config.json.
void check_llama_checkpoint(const std::string& dir, DType dtype, std::size_t files) {
  const json cfg = json::parse(read_file(join_path(dir, "config.json")));
  const std::int64_t hidden = cfg.at("hidden_size"), vocab = cfg.at("vocab_size");
  const std::int64_t inter = cfg.at("intermediate_size"), layers = cfg.at("num_hidden_layers");
  const std::int64_t heads = cfg.at("num_attention_heads"), kv = cfg.at("num_key_value_heads");
  const std::int64_t head_dim = cfg.value("head_dim", hidden / heads);

  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.files().size(), files);
  using Shape = std::vector<std::int64_t>;
  std::map<std::string, Shape> expected = {{"model.embed_tokens.weight", {vocab, hidden}},
                                           {"model.norm.weight", {hidden}}};
  for (std::int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expected[p + "self_attn.q_proj.weight"] = {heads * head_dim, hidden};
    expected[p + "self_attn.k_proj.weight"] = {kv * head_dim, hidden};
    expected[p + "self_attn.v_proj.weight"] = {kv * head_dim, hidden};
    expected[p + "self_attn.o_proj.weight"] = {hidden, heads * head_dim};
    expected[p + "mlp.gate_proj.weight"] = {inter, hidden};
    expected[p + "mlp.up_proj.weight"] = {inter, hidden};
    expected[p + "mlp.down_proj.weight"] = {hidden, inter};
    expected[p + "input_layernorm.weight"] = {hidden};
    expected[p + "post_attention_layernorm.weight"] = {hidden};
  }
  for (const auto& [name, shape] : expected) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(ck.contains(name));
    EXPECT_EQ(ck.info(name).shape, shape);
    EXPECT_EQ(ck.info(name).dtype, dtype);
    EXPECT_NE(ck.data(name), nullptr);
  }
  for (const std::string& name : ck.tensor_names()) {
    EXPECT_EQ(ck.info(name).nbytes(),
              static_cast<std::uint64_t>(ck.info(name).numel()) * dtype_size(ck.info(name).dtype));
  }
}

TEST(SafetensorsRealModel, Stories260K) {
  OSCAR_REQUIRE_MODEL(dir, "stories260K");
  check_llama_checkpoint(dir, DType::F32, 1);
  const Checkpoint ck = Checkpoint::open(dir);
  EXPECT_EQ(ck.files()[0]->metadata().at("format"), "pt");
}

TEST(SafetensorsRealModel, CodeLlamaShardedBF16) {
  OSCAR_REQUIRE_MODEL(dir, "codellama-h64-25m");
  check_llama_checkpoint(dir, DType::BF16, 5);
  const Checkpoint ck = Checkpoint::open(dir);
  const json index = json::parse(read_file(join_path(dir, "model.safetensors.index.json")));
  std::set<std::string> indexed;
  std::uint64_t total = 0;
  for (const auto& [name, shard] : index.at("weight_map").items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(ck.contains(name));
    EXPECT_EQ(ck.file_of(name).path(), join_path(dir, shard.get<std::string>()));
    EXPECT_NE(ck.data(name), nullptr);
    total += ck.info(name).nbytes();
    indexed.insert(name);
  }
  EXPECT_EQ(indexed.size(), ck.tensor_names().size());
  if (index.contains("metadata") && index["metadata"].contains("total_size")) {
    EXPECT_EQ(total, index["metadata"]["total_size"].get<std::uint64_t>());
  }
}

}  // namespace
}  // namespace oscar

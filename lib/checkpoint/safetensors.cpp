// safetensors: header parsing and validation, memory-mapped files, sharded checkpoints, writing.
#include "oscar/safetensors.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <tuple>
#include <utility>

#include "oscar/error.h"

namespace oscar {

namespace {

using nlohmann::json;

// The reference implementation's limit; a larger length prefix is garbage, not a header.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;
constexpr std::size_t kPrefixSize = 8;
constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

struct DTypeEntry {
  DType dtype;
  const char* name;
  std::size_t size;
};

constexpr DTypeEntry kDTypes[] = {
    {DType::BOOL, "BOOL", 1}, {DType::U8, "U8", 1},           {DType::I8, "I8", 1},
    {DType::I16, "I16", 2},   {DType::U16, "U16", 2},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::I32, "I32", 4},         {DType::U32, "U32", 4},
    {DType::F32, "F32", 4},   {DType::F64, "F64", 8},         {DType::I64, "I64", 8},
    {DType::U64, "U64", 8},   {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
};

const DTypeEntry& dtype_entry(DType dtype) {
  for (const DTypeEntry& e : kDTypes) {
    if (e.dtype == dtype) return e;
  }
  fail("invalid DType value {}", static_cast<int>(dtype));
}

const DTypeEntry* find_dtype(std::string_view name) {
  for (const DTypeEntry& e : kDTypes) {
    if (name == e.name) return &e;
  }
  return nullptr;
}

// Element count of `shape`, folded left to right with overflow checks (as the reference does), so a
// huge shape is rejected even when a later dimension is zero. Returns false on a negative dimension
// or when the count does not fit int64; `why` then says which.
bool checked_numel(const std::vector<std::int64_t>& shape, std::uint64_t& numel, std::string& why) {
  constexpr std::uint64_t kMax =
      static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  std::uint64_t n = 1;
  for (std::int64_t d : shape) {
    if (d < 0) {
      why = fmt::format("has a negative dimension ({})", d);
      return false;
    }
    const auto u = static_cast<std::uint64_t>(d);
    if (u != 0 && n > kMax / u) {
      why = "has an element count that overflows";
      return false;
    }
    n *= u;
  }
  numel = n;
  return true;
}

// numel x element size, or false on overflow.
bool checked_nbytes(std::uint64_t numel, std::size_t elem_size, std::uint64_t& nbytes) {
  if (elem_size != 0 && numel > std::numeric_limits<std::uint64_t>::max() / elem_size) return false;
  nbytes = numel * elem_size;
  return true;
}

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Parses a JSON document and rejects repeated keys in any object: nlohmann would keep the last one
// silently, and a tensor (or a tensor's dtype, or an index entry) listed twice is either corrupt or
// an attempt to make readers disagree.
json parse_json_unique_keys(const char* first, const char* last, const std::string& origin,
                            const char* what) {
  std::vector<std::set<std::string>> open_objects;  // keys seen so far in each enclosing object
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) {
      open_objects.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      open_objects.pop_back();
    } else if (event == json::parse_event_t::key) {
      const std::string& key = parsed.get_ref<const std::string&>();
      OSCAR_CHECK(open_objects.back().insert(key).second, "invalid {} '{}': key '{}' appears twice",
                  what, origin, key);
    }
    return true;
  };
  try {
    return json::parse(first, last, cb);
  } catch (const json::exception& e) {
    fail("invalid {} '{}': malformed JSON: {}", what, origin, e.what());
  }
}

// Reads a JSON integer that must be >= 0 (data offsets); false when the value is of another kind.
bool get_u64(const json& v, std::uint64_t& out) {
  if (!v.is_number_unsigned()) {
    // nlohmann stores non-negative integers as unsigned, so anything else is negative or a float.
    return false;
  }
  out = v.get<std::uint64_t>();
  return true;
}

// Reads one shape dimension: any JSON integer that fits int64 (negatives are rejected later, with a
// clearer message).
bool get_dim(const json& v, std::int64_t& out) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out = static_cast<std::int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    out = v.get<std::int64_t>();
    return true;
  }
  return false;
}

// Reads a little-endian u64 without assuming alignment or host byte order.
std::uint64_t read_le64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

[[noreturn]] void fail_tensor(const std::string& origin, const std::string& name,
                              const std::string& why) {
  fail("invalid safetensors file '{}': tensor '{}' {}", origin, name, why);
}

bool valid_shard_name(const std::string& name) {
  return !name.empty() && name.find('/') == std::string::npos &&
         name.find("..") == std::string::npos && name.find('\0') == std::string::npos;
}

}  // namespace

std::size_t dtype_size(DType dtype) { return dtype_entry(dtype).size; }

const char* dtype_name(DType dtype) { return dtype_entry(dtype).name; }

DType parse_dtype(std::string_view name) {
  const DTypeEntry* e = find_dtype(name);
  OSCAR_CHECK(e != nullptr, "unknown safetensors dtype '{}'", name);
  return e->dtype;
}

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;  // validated when parsed: non-negative and within int64
  return n;
}

SafetensorsHeader parse_safetensors_header(const std::uint8_t* bytes, std::size_t file_size,
                                           const std::string& origin) {
  OSCAR_CHECK(file_size >= kPrefixSize,
              "invalid safetensors file '{}': {} bytes is shorter than the 8-byte header length "
              "(empty or truncated file?)",
              origin, file_size);
  const std::uint64_t n = read_le64(bytes);
  OSCAR_CHECK(n <= kMaxHeaderSize,
              "invalid safetensors file '{}': header length {} exceeds the {} byte limit", origin,
              n, kMaxHeaderSize);
  const std::uint64_t available = file_size - kPrefixSize;
  OSCAR_CHECK(n <= available,
              "invalid safetensors file '{}': header length {} exceeds the {} bytes after the "
              "length prefix (truncated file?)",
              origin, n, available);

  SafetensorsHeader header;
  header.header_size = n;
  header.data_size = available - n;

  const char* json_begin = reinterpret_cast<const char*>(bytes + kPrefixSize);
  const json doc =
      parse_json_unique_keys(json_begin, json_begin + n, origin, "safetensors header in");
  OSCAR_CHECK(doc.is_object(), "invalid safetensors file '{}': the header is not a JSON object",
              origin);

  for (const auto& [key, value] : doc.items()) {
    if (key == kMetadataKey) {
      OSCAR_CHECK(value.is_object(),
                  "invalid safetensors file '{}': __metadata__ is not an object of strings",
                  origin);
      for (const auto& [mk, mv] : value.items()) {
        OSCAR_CHECK(mv.is_string(),
                    "invalid safetensors file '{}': __metadata__ value of '{}' is not a string",
                    origin, mk);
        header.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }

    if (!value.is_object()) fail_tensor(origin, key, "is not a JSON object");

    TensorInfo info;
    info.name = key;

    const auto dt = value.find("dtype");
    if (dt == value.end() || !dt->is_string()) fail_tensor(origin, key, "has no string \"dtype\"");
    const DTypeEntry* entry = find_dtype(dt->get_ref<const std::string&>());
    if (entry == nullptr) {
      fail_tensor(origin, key,
                  fmt::format("has unknown dtype '{}'", dt->get_ref<const std::string&>()));
    }
    info.dtype = entry->dtype;

    const auto sh = value.find("shape");
    if (sh == value.end() || !sh->is_array()) fail_tensor(origin, key, "has no array \"shape\"");
    info.shape.reserve(sh->size());
    for (const json& d : *sh) {
      std::int64_t dim = 0;
      if (!get_dim(d, dim)) {
        fail_tensor(origin, key, "has a shape entry that is not a 64-bit integer");
      }
      info.shape.push_back(dim);
    }

    const auto off = value.find("data_offsets");
    if (off == value.end() || !off->is_array() || off->size() != 2 ||
        !get_u64((*off)[0], info.begin) || !get_u64((*off)[1], info.end)) {
      fail_tensor(origin, key, "has no \"data_offsets\" of two non-negative integers");
    }

    std::uint64_t numel = 0;
    std::string why;
    if (!checked_numel(info.shape, numel, why)) fail_tensor(origin, key, why);
    std::uint64_t expected = 0;
    if (!checked_nbytes(numel, entry->size, expected)) {
      fail_tensor(origin, key, "has a byte size that overflows");
    }
    if (info.begin > info.end) {
      fail_tensor(origin, key,
                  fmt::format("has data_offsets [{}, {}] with begin > end", info.begin, info.end));
    }
    if (info.end > header.data_size) {
      fail_tensor(origin, key,
                  fmt::format("has data_offsets [{}, {}] beyond the {}-byte data section "
                              "(truncated file?)",
                              info.begin, info.end, header.data_size));
    }
    if (info.end - info.begin != expected) {
      fail_tensor(origin, key,
                  fmt::format("spans {} bytes but {} {} needs {}", info.end - info.begin,
                              entry->name, shape_text(info.shape), expected));
    }
    header.tensors.push_back(std::move(info));
  }

  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) {
              return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
            });
  // With the tensors sorted, the data section is exactly covered iff each tensor starts where the
  // previous one ended and the last one ends at the end of the section.
  std::uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const TensorInfo& t : header.tensors) {
    if (t.begin < pos) {
      fail("invalid safetensors file '{}': tensor '{}' [{}, {}] overlaps tensor '{}' [{}, {}]",
           origin, t.name, t.begin, t.end, prev->name, prev->begin, prev->end);
    }
    if (t.begin > pos) {
      fail(
          "invalid safetensors file '{}': data section not entirely indexed: bytes [{}, {}) "
          "before tensor '{}' belong to no tensor",
          origin, pos, t.begin, t.name);
    }
    pos = t.end;
    prev = &t;
  }
  OSCAR_CHECK(pos == header.data_size,
              "invalid safetensors file '{}': data section not entirely indexed: trailing bytes "
              "[{}, {}) belong to no tensor",
              origin, pos, header.data_size);
  return header;
}

// --- SafetensorsFile ---

SafetensorsFile::SafetensorsFile(const std::string& path) : map_(path) {
  header_ = parse_safetensors_header(map_.data(), map_.size(), path);
  for (std::size_t i = 0; i < header_.tensors.size(); ++i) {
    index_.emplace(header_.tensors[i].name, i);
  }
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.tensors[it->second];
}

const TensorInfo& SafetensorsFile::at(std::string_view name) const {
  const TensorInfo* info = find(name);
  OSCAR_CHECK(info != nullptr, "tensor '{}' not found in '{}'", name, path());
  return *info;
}

const std::uint8_t* SafetensorsFile::data(const TensorInfo& info) const {
  // Cheap guard against a TensorInfo from another file: it must at least lie inside this one.
  OSCAR_CHECK(info.begin <= info.end && info.end <= header_.data_size,
              "tensor '{}' [{}, {}] does not lie inside the data section of '{}'", info.name,
              info.begin, info.end, path());
  return map_.data() + kPrefixSize + header_.header_size + info.begin;
}

std::string_view SafetensorsFile::header_json() const {
  return {reinterpret_cast<const char*>(map_.data() + kPrefixSize),
          static_cast<std::size_t>(header_.header_size)};
}

// --- Checkpoint ---

std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::string& origin) {
  const json doc = parse_json_unique_keys(json_text.data(), json_text.data() + json_text.size(),
                                          origin, "index");
  OSCAR_CHECK(doc.is_object(), "invalid index '{}': not a JSON object", origin);
  const auto wm = doc.find("weight_map");
  OSCAR_CHECK(wm != doc.end() && wm->is_object(), "invalid index '{}': no \"weight_map\" object",
              origin);
  OSCAR_CHECK(!wm->empty(), "invalid index '{}': \"weight_map\" is empty", origin);
  std::map<std::string, std::string> weight_map;
  for (const auto& [tensor, shard] : wm->items()) {
    OSCAR_CHECK(shard.is_string(), "invalid index '{}': shard of tensor '{}' is not a string",
                origin, tensor);
    const std::string& name = shard.get_ref<const std::string&>();
    // The index is data from a download; it must not make us open files outside the directory.
    OSCAR_CHECK(valid_shard_name(name),
                "invalid index '{}': shard name '{}' of tensor '{}' is not a plain file name in "
                "the model directory",
                origin, name, tensor);
    weight_map.emplace(tensor, name);
  }
  return weight_map;
}

Checkpoint Checkpoint::open(const std::string& model_dir) {
  Checkpoint ckpt;
  ckpt.dir_ = model_dir;
  const std::string index_path = join_path(model_dir, kIndexName);
  const std::string single_path = join_path(model_dir, kSingleName);

  if (!file_exists(index_path)) {
    OSCAR_CHECK(file_exists(single_path), "no {} or {} in '{}'", kSingleName, kIndexName,
                model_dir);
    ckpt.files_.push_back(std::make_unique<SafetensorsFile>(single_path));
    for (const TensorInfo& t : ckpt.files_[0]->tensors()) ckpt.owner_.emplace(t.name, 0);
    return ckpt;
  }

  const std::map<std::string, std::string> weight_map =  // tensor -> shard file name
      parse_safetensors_index(read_file(index_path), index_path);
  std::map<std::string, std::size_t> shard_ids;  // sorted, so files_ follows shard numbering
  for (const auto& [tensor, shard] : weight_map) shard_ids.emplace(shard, 0);

  std::vector<std::string> shard_names;
  for (auto& [name, id] : shard_ids) {
    const std::string path = join_path(model_dir, name);
    OSCAR_CHECK(file_exists(path), "shard '{}' listed in '{}' does not exist", name, index_path);
    id = ckpt.files_.size();
    shard_names.push_back(name);
    ckpt.files_.push_back(std::make_unique<SafetensorsFile>(path));
  }

  for (const auto& [tensor, shard] : weight_map) {
    OSCAR_CHECK(ckpt.files_[shard_ids.at(shard)]->find(tensor) != nullptr,
                "tensor '{}' is listed in '{}' as being in shard '{}', which does not contain it",
                tensor, index_path, shard);
  }
  // Every tensor of every shard is reachable (also ones the index forgot), but only from one shard.
  for (std::size_t i = 0; i < ckpt.files_.size(); ++i) {
    for (const TensorInfo& t : ckpt.files_[i]->tensors()) {
      auto [it, inserted] = ckpt.owner_.emplace(t.name, i);
      OSCAR_CHECK(inserted, "tensor '{}' appears in both shard '{}' and shard '{}' of '{}'", t.name,
                  shard_names[it->second], shard_names[i], model_dir);
    }
  }
  return ckpt;
}

std::vector<std::string> Checkpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(owner_.size());
  for (const auto& kv : owner_) names.push_back(kv.first);
  return names;
}

bool Checkpoint::contains(std::string_view name) const { return owner_.find(name) != owner_.end(); }

const SafetensorsFile& Checkpoint::file_of(std::string_view name) const {
  auto it = owner_.find(name);
  OSCAR_CHECK(it != owner_.end(), "tensor '{}' not found in checkpoint '{}'", name, dir_);
  return *files_[it->second];
}

const TensorInfo& Checkpoint::info(std::string_view name) const { return file_of(name).at(name); }

const std::uint8_t* Checkpoint::data(std::string_view name) const {
  const SafetensorsFile& f = file_of(name);
  return f.data(f.at(name));
}

// --- writing ---

std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  // ordered_json keeps insertion order, so the header lists tensors in the caller's order.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;

  std::set<std::string_view> names;
  std::uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    OSCAR_CHECK(!t.name.empty(), "cannot write a tensor with an empty name");
    OSCAR_CHECK(t.name != kMetadataKey, "cannot write a tensor named '{}'", t.name);
    OSCAR_CHECK(names.insert(t.name).second, "cannot write tensor '{}' twice", t.name);
    std::uint64_t numel = 0;
    std::string why;
    OSCAR_CHECK(checked_numel(t.shape, numel, why), "cannot write tensor '{}': shape {} {}", t.name,
                shape_text(t.shape), why);
    std::uint64_t expected = 0;
    OSCAR_CHECK(checked_nbytes(numel, dtype_size(t.dtype), expected),
                "cannot write tensor '{}': byte size overflows", t.name);
    OSCAR_CHECK(t.nbytes == expected, "cannot write tensor '{}': {} bytes given, {} {} needs {}",
                t.name, t.nbytes, dtype_name(t.dtype), shape_text(t.shape), expected);
    OSCAR_CHECK(t.nbytes == 0 || t.data != nullptr, "cannot write tensor '{}': data is null",
                t.name);
    OSCAR_CHECK(offset <= std::numeric_limits<std::uint64_t>::max() - expected,
                "cannot write tensor '{}': total size overflows", t.name);
    header[t.name] = {{"dtype", dtype_name(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + expected}}};
    offset += expected;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::ordered_json::exception& e) {
    fail("cannot write safetensors header: {}", e.what());  // e.g. a name that is not UTF-8
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  OSCAR_CHECK(offset <= std::numeric_limits<std::size_t>::max() - kPrefixSize - text.size(),
              "safetensors data of {} bytes is too large", offset);
  std::string out;
  out.reserve(kPrefixSize + text.size() + static_cast<std::size_t>(offset));
  std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out += text;
  for (const TensorToWrite& t : tensors) {
    if (t.nbytes > 0) out.append(static_cast<const char*>(t.data), t.nbytes);
  }
  return out;
}

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, serialize_safetensors(tensors, metadata));
}

}  // namespace oscar

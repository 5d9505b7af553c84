// torch.save's zip checkpoint format for plain data: a stored zip writer/reader and a restricted
// pickle (protocol 2) writer/reader. No LibTorch: engines and tests read what the exporters write.
#include "oscar/torch_archive.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "oscar/error.h"
#include "oscar/file.h"

namespace oscar {

// ---------------------------------------------------------------------------------------------
// PickleValue

std::int64_t TorchTensor::numel() const {
  std::int64_t n = 1;
  for (std::int64_t s : shape) n *= s;
  return n;
}

PickleValue PickleValue::boolean(bool value) {
  PickleValue v;
  v.kind_ = Kind::kBool;
  v.bool_ = value;
  return v;
}

PickleValue PickleValue::integer(std::int64_t value) {
  PickleValue v;
  v.kind_ = Kind::kInt;
  v.int_ = value;
  return v;
}

PickleValue PickleValue::real(double value) {
  PickleValue v;
  v.kind_ = Kind::kFloat;
  v.float_ = value;
  return v;
}

PickleValue PickleValue::string(std::string value) {
  PickleValue v;
  v.kind_ = Kind::kString;
  v.string_ = std::move(value);
  return v;
}

PickleValue PickleValue::tensor(TorchTensor value) {
  OSCAR_CHECK(static_cast<std::int64_t>(value.values.size()) == value.numel(),
              "tensor of shape [{}] holds {} values", fmt::join(value.shape, ", "),
              value.values.size());
  PickleValue v;
  v.kind_ = Kind::kTensor;
  v.tensor_ = std::make_shared<const TorchTensor>(std::move(value));
  return v;
}

PickleValue PickleValue::list(std::vector<PickleValue> items) {
  PickleValue v;
  v.kind_ = Kind::kList;
  v.items_ = std::move(items);
  return v;
}

PickleValue PickleValue::tuple(std::vector<PickleValue> items) {
  PickleValue v;
  v.kind_ = Kind::kTuple;
  v.items_ = std::move(items);
  return v;
}

PickleValue PickleValue::dict() {
  PickleValue v;
  v.kind_ = Kind::kDict;
  return v;
}

const char* PickleValue::kind_name() const {
  switch (kind_) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kTensor:
      return "tensor";
    case Kind::kList:
      return "list";
    case Kind::kTuple:
      return "tuple";
    case Kind::kDict:
      return "dict";
  }
  return "?";
}

namespace {
[[noreturn]] void wrong_kind(const std::string& what, const char* expected, const PickleValue& v) {
  fail("{} must be {}, found {} {}", what, expected, v.kind_name(), v.repr());
}
}  // namespace

bool PickleValue::as_bool(const std::string& what) const {
  if (kind_ != Kind::kBool) wrong_kind(what, "a bool", *this);
  return bool_;
}

std::int64_t PickleValue::as_int(const std::string& what) const {
  if (kind_ != Kind::kInt) wrong_kind(what, "an int", *this);
  return int_;
}

double PickleValue::as_float(const std::string& what) const {
  if (kind_ == Kind::kInt) return static_cast<double>(int_);
  if (kind_ != Kind::kFloat) wrong_kind(what, "a number", *this);
  return float_;
}

const std::string& PickleValue::as_string(const std::string& what) const {
  if (kind_ != Kind::kString) wrong_kind(what, "a string", *this);
  return string_;
}

const TorchTensor& PickleValue::as_tensor(const std::string& what) const {
  if (kind_ != Kind::kTensor) wrong_kind(what, "a tensor", *this);
  return *tensor_;
}

const std::vector<PickleValue>& PickleValue::items(const std::string& what) const {
  if (kind_ != Kind::kList && kind_ != Kind::kTuple) wrong_kind(what, "a list", *this);
  return items_;
}

const std::vector<std::pair<PickleValue, PickleValue>>& PickleValue::entries(
    const std::string& what) const {
  if (kind_ != Kind::kDict) wrong_kind(what, "a dict", *this);
  return entries_;
}

PickleValue& PickleValue::set(PickleValue key, PickleValue value) {
  OSCAR_CHECK(kind_ == Kind::kDict, "set() on a {}", kind_name());
  for (auto& entry : entries_) {
    if (entry.first == key) {
      entry.second = std::move(value);
      return entry.second;
    }
  }
  entries_.emplace_back(std::move(key), std::move(value));
  return entries_.back().second;
}

const PickleValue* PickleValue::find(const PickleValue& key) const {
  if (kind_ != Kind::kDict) return nullptr;
  for (const auto& entry : entries_) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void PickleValue::append(PickleValue item) {
  OSCAR_CHECK(kind_ == Kind::kList, "append() on a {}", kind_name());
  items_.push_back(std::move(item));
}

bool PickleValue::operator==(const PickleValue& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kNone:
      return true;
    case Kind::kBool:
      return bool_ == other.bool_;
    case Kind::kInt:
      return int_ == other.int_;
    case Kind::kFloat:
      return float_ == other.float_;
    case Kind::kString:
      return string_ == other.string_;
    case Kind::kTensor:
      return tensor_->shape == other.tensor_->shape && tensor_->values == other.tensor_->values;
    case Kind::kList:
    case Kind::kTuple:
      return items_ == other.items_;
    case Kind::kDict:
      return entries_ == other.entries_;
  }
  return false;
}

std::string PickleValue::repr() const {
  switch (kind_) {
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return fmt::format("{}", float_);
    case Kind::kString:
      return fmt::format("'{}'", string_.size() > 40 ? string_.substr(0, 40) + "..." : string_);
    case Kind::kTensor:
      return fmt::format("tensor[{}]", fmt::join(tensor_->shape, ", "));
    case Kind::kList:
      return fmt::format("list of {}", items_.size());
    case Kind::kTuple:
      return fmt::format("tuple of {}", items_.size());
    case Kind::kDict:
      return fmt::format("dict of {}", entries_.size());
  }
  return "?";
}

namespace {

// ---------------------------------------------------------------------------------------------
// Little-endian helpers and CRC-32 (zip's polynomial 0xEDB88320).

void put_u16(std::string& out, std::uint16_t v) {
  out.push_back(static_cast<char>(v & 0xff));
  out.push_back(static_cast<char>(v >> 8));
}

void put_u32(std::string& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | p[1] << 8);
}

std::uint32_t get_u32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}

std::uint64_t get_u64(const std::uint8_t* p) {
  return std::uint64_t{get_u32(p)} | std::uint64_t{get_u32(p + 4)} << 32;
}

std::uint32_t crc32(const std::uint8_t* data, std::size_t size) {
  static const std::array<std::uint32_t, 256> table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  std::uint32_t c = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) c = table[(c ^ data[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

// ---------------------------------------------------------------------------------------------
// Zip writer: stored records, data aligned to 64 bytes through an extra field (as PyTorch's own
// writer does, so that torch.load(mmap=True) works), a fixed DOS timestamp (1980-01-01).

constexpr std::uint32_t kLocalHeaderSig = 0x04034b50;
constexpr std::uint32_t kCentralHeaderSig = 0x02014b50;
constexpr std::uint32_t kEndOfCentralSig = 0x06054b50;
constexpr std::uint32_t kZip64EndSig = 0x06064b50;
constexpr std::uint32_t kZip64LocatorSig = 0x07064b50;
constexpr std::uint16_t kDosDate = (0 << 9) | (1 << 5) | 1;
constexpr std::size_t kRecordAlignment = 64;

class ZipWriter {
 public:
  void add(const std::string& name, const std::string& data) {
    OSCAR_CHECK(out_.size() + data.size() + name.size() + 200 < 0xFFFFFFFFull,
                "checkpoint larger than 4 GiB is not supported");
    Entry e{name, static_cast<std::uint32_t>(out_.size()),
            crc32(reinterpret_cast<const std::uint8_t*>(data.data()), data.size()),
            static_cast<std::uint32_t>(data.size())};
    const std::size_t unpadded = out_.size() + 30 + name.size();
    std::size_t pad = (kRecordAlignment - unpadded % kRecordAlignment) % kRecordAlignment;
    if (pad > 0 && pad < 4) pad += kRecordAlignment;  // an extra field needs 4 header bytes
    put_u32(out_, kLocalHeaderSig);
    put_u16(out_, 20);  // version needed: 2.0
    put_u16(out_, 0);   // flags
    put_u16(out_, 0);   // method: stored
    put_u16(out_, 0);   // time
    put_u16(out_, kDosDate);
    put_u32(out_, e.crc);
    put_u32(out_, e.size);
    put_u32(out_, e.size);
    put_u16(out_, static_cast<std::uint16_t>(name.size()));
    put_u16(out_, static_cast<std::uint16_t>(pad));
    out_ += name;
    if (pad > 0) {
      put_u16(out_, 0x4246);  // "FB": padding, the id PyTorch's writer uses
      put_u16(out_, static_cast<std::uint16_t>(pad - 4));
      out_.append(pad - 4, '\0');
    }
    out_ += data;
    entries_.push_back(std::move(e));
  }

  std::string finish() {
    const std::size_t central_start = out_.size();
    for (const Entry& e : entries_) {
      put_u32(out_, kCentralHeaderSig);
      put_u16(out_, 20);  // made by
      put_u16(out_, 20);  // needed
      put_u16(out_, 0);
      put_u16(out_, 0);
      put_u16(out_, 0);
      put_u16(out_, kDosDate);
      put_u32(out_, e.crc);
      put_u32(out_, e.size);
      put_u32(out_, e.size);
      put_u16(out_, static_cast<std::uint16_t>(e.name.size()));
      put_u16(out_, 0);  // extra
      put_u16(out_, 0);  // comment
      put_u16(out_, 0);  // disk
      put_u16(out_, 0);  // internal attributes
      put_u32(out_, 0);  // external attributes
      put_u32(out_, e.offset);
      out_ += e.name;
    }
    const std::size_t central_size = out_.size() - central_start;
    OSCAR_CHECK(out_.size() < 0xFFFFFFFFull && entries_.size() < 0xFFFF,
                "checkpoint too large for a zip without zip64");
    put_u32(out_, kEndOfCentralSig);
    put_u16(out_, 0);
    put_u16(out_, 0);
    put_u16(out_, static_cast<std::uint16_t>(entries_.size()));
    put_u16(out_, static_cast<std::uint16_t>(entries_.size()));
    put_u32(out_, static_cast<std::uint32_t>(central_size));
    put_u32(out_, static_cast<std::uint32_t>(central_start));
    put_u16(out_, 0);
    return std::move(out_);
  }

 private:
  struct Entry {
    std::string name;
    std::uint32_t offset, crc, size;
  };
  std::string out_;
  std::vector<Entry> entries_;
};

// ---------------------------------------------------------------------------------------------
// Zip reader: central directory (zip64 sizes and offsets understood), stored records only, every
// record's CRC checked.

struct ZipRecord {
  const std::uint8_t* data = nullptr;
  std::size_t size = 0;
};

std::map<std::string, ZipRecord> read_zip(const std::uint8_t* bytes, std::size_t size,
                                          const std::string& origin) {
  OSCAR_CHECK(size >= 22, "{}: not a PyTorch checkpoint (too short for a zip archive)", origin);
  OSCAR_CHECK(get_u32(bytes) == kLocalHeaderSig,
              "{}: not a zip-format PyTorch checkpoint (legacy torch.save files from before "
              "torch 1.6 are not read; re-save them with a newer torch)",
              origin);
  // The end-of-central-directory record sits in the last 22 + 65535 bytes.
  std::size_t eocd = std::string::npos;
  const std::size_t lowest = size > 22 + 65535 ? size - 22 - 65535 : 0;
  for (std::size_t pos = size - 22 + 1; pos-- > lowest;) {
    if (get_u32(bytes + pos) == kEndOfCentralSig) {
      eocd = pos;
      break;
    }
  }
  OSCAR_CHECK(eocd != std::string::npos, "{}: zip end-of-central-directory record not found",
              origin);
  std::uint64_t entries = get_u16(bytes + eocd + 10);
  std::uint64_t central_size = get_u32(bytes + eocd + 12);
  std::uint64_t central_offset = get_u32(bytes + eocd + 16);
  if ((entries == 0xFFFF || central_offset == 0xFFFFFFFF || central_size == 0xFFFFFFFF) &&
      eocd >= 20 && get_u32(bytes + eocd - 20) == kZip64LocatorSig) {
    const std::uint64_t z64 = get_u64(bytes + eocd - 20 + 8);
    OSCAR_CHECK(size >= 56 && z64 <= size - 56 && get_u32(bytes + z64) == kZip64EndSig,
                "{}: broken zip64 end-of-central-directory record", origin);
    entries = get_u64(bytes + z64 + 32);
    central_size = get_u64(bytes + z64 + 40);
    central_offset = get_u64(bytes + z64 + 48);
  }
  OSCAR_CHECK(central_offset <= size && central_size <= size - central_offset,
              "{}: zip central directory outside the file", origin);
  std::map<std::string, ZipRecord> records;
  std::uint64_t pos = central_offset;
  const std::uint64_t end = central_offset + central_size;
  for (std::uint64_t i = 0; i < entries; ++i) {
    OSCAR_CHECK(pos + 46 <= end && get_u32(bytes + pos) == kCentralHeaderSig,
                "{}: zip central directory entry {} is corrupt", origin, i);
    const std::uint8_t* h = bytes + pos;
    const std::uint16_t flags = get_u16(h + 8), method = get_u16(h + 10);
    const std::uint32_t crc = get_u32(h + 16);
    std::uint64_t csize = get_u32(h + 20), usize = get_u32(h + 24);
    const std::uint16_t name_len = get_u16(h + 28), extra_len = get_u16(h + 30),
                        comment_len = get_u16(h + 32);
    std::uint64_t local = get_u32(h + 42);
    OSCAR_CHECK(pos + 46 + name_len + extra_len + comment_len <= end,
                "{}: zip central directory entry {} overruns the directory", origin, i);
    const std::string name(reinterpret_cast<const char*>(h + 46), name_len);
    // zip64 extended information: 64-bit values for the fields that hold 0xFFFFFFFF, in order.
    const std::uint8_t* extra = h + 46 + name_len;
    for (std::size_t e = 0; e + 4 <= extra_len;) {
      const std::uint16_t id = get_u16(extra + e), len = get_u16(extra + e + 2);
      OSCAR_CHECK(e + 4 + len <= extra_len, "{}: zip extra field of '{}' is corrupt", origin, name);
      if (id == 0x0001) {
        std::size_t at = e + 4;
        for (std::uint64_t* field : {&usize, &csize, &local}) {
          if (*field == 0xFFFFFFFF) {
            OSCAR_CHECK(at + 8 <= e + 4 + len, "{}: zip64 field of '{}' is short", origin, name);
            *field = get_u64(extra + at);
            at += 8;
          }
        }
      }
      e += 4 + len;
    }
    OSCAR_CHECK((flags & 1) == 0, "{}: record '{}' is encrypted", origin, name);
    OSCAR_CHECK(method == 0,
                "{}: record '{}' is compressed (method {}); PyTorch checkpoints store records "
                "uncompressed",
                origin, name, method);
    OSCAR_CHECK(csize == usize, "{}: stored record '{}' has different sizes", origin, name);
    OSCAR_CHECK(local <= size && size - local >= 30 && get_u32(bytes + local) == kLocalHeaderSig,
                "{}: local header of '{}' is missing or outside the file", origin, name);
    const std::uint16_t local_name_len = get_u16(bytes + local + 26);
    OSCAR_CHECK(get_u16(bytes + local + 8) == 0 && local_name_len == name_len &&
                    size - local - 30 >= name_len &&
                    std::memcmp(bytes + local + 30, name.data(), name_len) == 0,
                "{}: local header of '{}' disagrees with the central directory", origin, name);
    const std::uint64_t data_start = local + 30 + local_name_len + get_u16(bytes + local + 28);
    OSCAR_CHECK(data_start <= size && usize <= size - data_start,
                "{}: record '{}' ({} bytes) runs past the end of the file (truncated?)", origin,
                name, usize);
    const ZipRecord record{bytes + data_start, static_cast<std::size_t>(usize)};
    OSCAR_CHECK(crc32(record.data, record.size) == crc,
                "{}: record '{}' fails its CRC-32 check: the file is corrupt", origin, name);
    OSCAR_CHECK(records.emplace(name, record).second, "{}: zip holds '{}' twice", origin, name);
    pos += 46 + name_len + extra_len + comment_len;
  }
  return records;
}

// ---------------------------------------------------------------------------------------------
// Pickle writer (protocol 2, the opcodes torch.save emits for plain data).

class PickleWriter {
 public:
  std::string run(const PickleValue& root) {
    out_ = "\x80\x02";
    write(root, 0);
    out_ += '.';
    return std::move(out_);
  }
  const std::vector<const TorchTensor*>& tensors() const { return tensors_; }

 private:
  void string(const std::string& s) {
    out_ += 'X';
    put_u32(out_, static_cast<std::uint32_t>(s.size()));
    out_ += s;
  }
  void global(const char* module, const char* name) {
    out_ += fmt::format("c{}\n{}\n", module, name);
  }
  void integer(std::int64_t v) {
    if (v >= 0 && v < 256) {
      out_ += 'K';
      out_.push_back(static_cast<char>(v));
    } else if (v >= 0 && v < 65536) {
      out_ += 'M';
      put_u16(out_, static_cast<std::uint16_t>(v));
    } else if (v >= std::numeric_limits<std::int32_t>::min() &&
               v <= std::numeric_limits<std::int32_t>::max()) {
      out_ += 'J';
      put_u32(out_, static_cast<std::uint32_t>(static_cast<std::int32_t>(v)));
    } else {
      // LONG1: little-endian two's complement, 8 bytes (always enough for int64).
      out_ += '\x8a';
      out_.push_back(8);
      const auto u = static_cast<std::uint64_t>(v);
      for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((u >> (8 * i)) & 0xff));
    }
  }
  void int_tuple(const std::vector<std::int64_t>& values) {
    if (values.empty()) {
      out_ += ')';
      return;
    }
    out_ += '(';
    for (std::int64_t v : values) integer(v);
    out_ += 't';
  }
  void tensor(const TorchTensor& t) {
    const std::string key = std::to_string(tensors_.size());
    tensors_.push_back(&t);
    std::vector<std::int64_t> stride(t.shape.size());
    std::int64_t step = 1;
    for (std::size_t i = t.shape.size(); i-- > 0;) {
      stride[i] = step;
      step *= t.shape[i];
    }
    global("torch._utils", "_rebuild_tensor_v2");
    out_ += '(';
    out_ += '(';  // persistent id: ('storage', storage type, key, location, numel)
    string("storage");
    global("torch", "FloatStorage");
    string(key);
    string("cpu");
    integer(t.numel());
    out_ += 't';
    out_ += 'Q';  // BINPERSID
    integer(0);   // storage offset
    int_tuple(t.shape);
    int_tuple(stride);
    out_ += '\x89';  // requires_grad False
    global("collections", "OrderedDict");
    out_ += ')';
    out_ += 'R';  // backward hooks: OrderedDict()
    out_ += 't';
    out_ += 'R';
  }
  void write(const PickleValue& v, int depth) {
    OSCAR_CHECK(depth < 64, "value nested too deeply to pickle");
    switch (v.kind()) {
      case PickleValue::Kind::kNone:
        out_ += 'N';
        return;
      case PickleValue::Kind::kBool:
        out_ += v.as_bool("") ? '\x88' : '\x89';
        return;
      case PickleValue::Kind::kInt:
        integer(v.as_int(""));
        return;
      case PickleValue::Kind::kFloat: {
        out_ += 'G';
        const double d = v.as_float("");
        std::uint64_t bits;
        std::memcpy(&bits, &d, sizeof bits);
        for (int i = 7; i >= 0; --i) out_.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
        return;
      }
      case PickleValue::Kind::kString:
        string(v.as_string(""));
        return;
      case PickleValue::Kind::kTensor:
        tensor(v.as_tensor(""));
        return;
      case PickleValue::Kind::kList:
        out_ += ']';
        if (!v.items("").empty()) {
          out_ += '(';
          for (const auto& item : v.items("")) write(item, depth + 1);
          out_ += 'e';
        }
        return;
      case PickleValue::Kind::kTuple:
        out_ += '(';
        for (const auto& item : v.items("")) write(item, depth + 1);
        out_ += 't';
        return;
      case PickleValue::Kind::kDict:
        out_ += '}';
        if (!v.entries("").empty()) {
          out_ += '(';
          for (const auto& [key, value] : v.entries("")) {
            OSCAR_CHECK(key.is(PickleValue::Kind::kString) || key.is(PickleValue::Kind::kInt),
                        "dict keys must be strings or ints, found {}", key.kind_name());
            write(key, depth + 1);
            write(value, depth + 1);
          }
          out_ += 'u';
        }
        return;
    }
  }

  std::string out_;
  std::vector<const TorchTensor*> tensors_;
};

// ---------------------------------------------------------------------------------------------
// Restricted unpickler. Objects live in shared nodes so that memo references alias (a dict put in
// the memo before its items are set is the same dict when fetched later), as in Python.

struct Node;
using NodePtr = std::shared_ptr<Node>;

struct StorageRef {
  std::string dtype;  // float32 | float64 | float16 | bfloat16
  std::string key;
  std::int64_t numel = 0;
};

struct Node {
  enum class Type { kLeaf, kList, kTuple, kDict, kGlobal, kStorage, kMark };
  Type type = Type::kLeaf;
  PickleValue leaf;  // scalars and tensors
  std::vector<NodePtr> items;
  std::vector<std::pair<NodePtr, NodePtr>> entries;
  std::string global;  // "module.name"
  StorageRef storage;
};

NodePtr leaf(PickleValue v) {
  auto n = std::make_shared<Node>();
  n->leaf = std::move(v);
  return n;
}

NodePtr container(Node::Type type) {
  auto n = std::make_shared<Node>();
  n->type = type;
  return n;
}

float half_to_float(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t{h & 0x8000u} << 16;
  std::uint32_t exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ffu;
  std::uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent == 0) {
    if (mantissa == 0) {
      bits = sign;
    } else {  // subnormal: normalize
      int shift = 0;
      while ((mantissa & 0x400u) == 0) {
        mantissa <<= 1;
        ++shift;
      }
      mantissa &= 0x3ffu;
      bits = sign | static_cast<std::uint32_t>(127 - 15 - shift + 1) << 23 | (mantissa << 13);
    }
  } else {
    bits = sign | ((exponent + 127 - 15) << 23) | (mantissa << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

class Unpickler {
 public:
  Unpickler(const ZipRecord& pickle, const std::map<std::string, ZipRecord>& records,
            std::string prefix, std::string origin)
      : p_(pickle.data),
        end_(pickle.data + pickle.size),
        records_(records),
        prefix_(std::move(prefix)),
        origin_(std::move(origin)) {}

  PickleValue run() {
    for (;;) {
      const std::uint8_t op = byte();
      switch (op) {
        case 0x80:  // PROTO
          OSCAR_CHECK(byte() <= 5, "{}: unsupported pickle protocol", origin_);
          break;
        case 0x95:  // FRAME (protocol 4): the frame length is advisory
          take(8);
          break;
        case '.': {  // STOP
          OSCAR_CHECK(stack_.size() == 1 && marks_.empty(),
                      "{}: pickle stream ends with {} values on its stack", origin_, stack_.size());
          return convert(*stack_.back(), 0);
        }
        case '(':  // MARK
          marks_.push_back(stack_.size());
          break;
        case '}':  // EMPTY_DICT
          push(container(Node::Type::kDict));
          break;
        case ']':  // EMPTY_LIST
          push(container(Node::Type::kList));
          break;
        case ')':  // EMPTY_TUPLE
          push(container(Node::Type::kTuple));
          break;
        case 'd': {  // DICT
          auto d = container(Node::Type::kDict);
          auto items = pop_mark();
          OSCAR_CHECK(items.size() % 2 == 0, "{}: odd number of dict items", origin_);
          for (std::size_t i = 0; i < items.size(); i += 2) set_item(*d, items[i], items[i + 1]);
          push(d);
          break;
        }
        case 'l': {  // LIST
          auto l = container(Node::Type::kList);
          l->items = pop_mark();
          push(l);
          break;
        }
        case 't': {  // TUPLE
          auto t = container(Node::Type::kTuple);
          t->items = pop_mark();
          push(t);
          break;
        }
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const std::size_t n = op - 0x84u;
          OSCAR_CHECK(stack_.size() >= n + base(), "{}: pickle stack underflow", origin_);
          auto t = container(Node::Type::kTuple);
          t->items.assign(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
          stack_.resize(stack_.size() - n);
          push(t);
          break;
        }
        case 's': {  // SETITEM
          auto value = pop(), key = pop();
          set_item(*top(Node::Type::kDict, "SETITEM"), key, value);
          break;
        }
        case 'u': {  // SETITEMS
          auto items = pop_mark();
          OSCAR_CHECK(items.size() % 2 == 0, "{}: odd number of dict items", origin_);
          Node& d = *top(Node::Type::kDict, "SETITEMS");
          for (std::size_t i = 0; i < items.size(); i += 2) set_item(d, items[i], items[i + 1]);
          break;
        }
        case 'a': {  // APPEND
          auto item = pop();
          top(Node::Type::kList, "APPEND")->items.push_back(item);
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark();
          auto& list = top(Node::Type::kList, "APPENDS")->items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case 'J': {  // BININT
          std::int32_t v;
          std::memcpy(&v, take(4), 4);
          push(leaf(PickleValue::integer(v)));
          break;
        }
        case 'K':  // BININT1
          push(leaf(PickleValue::integer(byte())));
          break;
        case 'M':  // BININT2
          push(leaf(PickleValue::integer(get_u16(take(2)))));
          break;
        case 0x8a:  // LONG1
          push(leaf(PickleValue::integer(long_value(byte()))));
          break;
        case 0x8b:  // LONG4
          push(leaf(PickleValue::integer(long_value(get_u32(take(4))))));
          break;
        case 'G': {  // BINFLOAT (big-endian)
          const std::uint8_t* b = take(8);
          std::uint64_t bits = 0;
          for (int i = 0; i < 8; ++i) bits = bits << 8 | b[i];
          double d;
          std::memcpy(&d, &bits, sizeof d);
          push(leaf(PickleValue::real(d)));
          break;
        }
        case 'X':  // BINUNICODE
          push(leaf(PickleValue::string(text(get_u32(take(4))))));
          break;
        case 0x8c:  // SHORT_BINUNICODE
          push(leaf(PickleValue::string(text(byte()))));
          break;
        case 0x8d:  // BINUNICODE8
          push(leaf(PickleValue::string(text(get_u64(take(8))))));
          break;
        case 'U':  // SHORT_BINSTRING (protocol-2 byte strings of Python 2 pickles)
          push(leaf(PickleValue::string(text(byte()))));
          break;
        case 'T':  // BINSTRING
          push(leaf(PickleValue::string(text(get_u32(take(4))))));
          break;
        case 'N':
          push(leaf(PickleValue()));
          break;
        case 0x88:
          push(leaf(PickleValue::boolean(true)));
          break;
        case 0x89:
          push(leaf(PickleValue::boolean(false)));
          break;
        case 'q':  // BINPUT
          memo_[byte()] = peek();
          break;
        case 'r':  // LONG_BINPUT
          memo_[get_u32(take(4))] = peek();
          break;
        case 0x94:  // MEMOIZE
          memo_[static_cast<std::uint32_t>(memo_.size())] = peek();
          break;
        case 'h':  // BINGET
          push(memo_get(byte()));
          break;
        case 'j':  // LONG_BINGET
          push(memo_get(get_u32(take(4))));
          break;
        case '0':  // POP
          pop();
          break;
        case 'c': {  // GLOBAL
          std::string module = line(), name = line();
          push(make_global(module + "." + name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          auto name = pop(), module = pop();
          push(make_global(scalar(*module).as_string("STACK_GLOBAL module") + "." +
                           scalar(*name).as_string("STACK_GLOBAL name")));
          break;
        }
        case 'Q':  // BINPERSID
          push(persistent_load(pop()));
          break;
        case 'R': {  // REDUCE
          auto args = pop();
          auto callable = pop();
          push(reduce(*callable, *args));
          break;
        }
        case 'b': {  // BUILD: only the empty state of an OrderedDict
          auto state = pop();
          top(Node::Type::kDict, "BUILD");
          const bool empty =
              (state->type == Node::Type::kLeaf && state->leaf.is(PickleValue::Kind::kNone)) ||
              (state->type == Node::Type::kDict && state->entries.empty());
          OSCAR_CHECK(empty, "{}: BUILD with object state is not supported (not plain data)",
                      origin_);
          break;
        }
        default:
          fail(
              "{}: unsupported pickle opcode 0x{:02x} at byte {} of data.pkl (the checkpoint "
              "holds more than plain tensors, dicts and lists)",
              origin_, op, static_cast<std::size_t>(p_ - begin_ - 1));
      }
    }
  }

 private:
  std::uint8_t byte() { return *take(1); }
  const std::uint8_t* take(std::uint64_t n) {
    OSCAR_CHECK(n <= static_cast<std::uint64_t>(end_ - p_),
                "{}: data.pkl ends in the middle of an opcode (truncated)", origin_);
    const std::uint8_t* at = p_;
    p_ += n;
    return at;
  }
  std::string text(std::uint64_t n) {
    const std::uint8_t* at = take(n);
    return std::string(reinterpret_cast<const char*>(at), static_cast<std::size_t>(n));
  }
  std::string line() {
    std::string s;
    for (;;) {
      const char c = static_cast<char>(byte());
      if (c == '\n') return s;
      OSCAR_CHECK(s.size() < 256, "{}: GLOBAL name too long", origin_);
      s.push_back(c);
    }
  }
  std::int64_t long_value(std::uint64_t n) {
    OSCAR_CHECK(n <= 8, "{}: integer of {} bytes is out of range", origin_, n);
    const std::uint8_t* b = take(n);
    std::uint64_t u = 0;
    for (std::uint64_t i = 0; i < n; ++i) u |= std::uint64_t{b[i]} << (8 * i);
    if (n > 0 && n < 8 && (b[n - 1] & 0x80)) u |= ~std::uint64_t{0} << (8 * n);  // sign-extend
    return static_cast<std::int64_t>(u);
  }
  std::size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  void push(NodePtr n) {
    OSCAR_CHECK(stack_.size() < 10000000, "{}: pickle stack too deep", origin_);
    stack_.push_back(std::move(n));
  }
  NodePtr pop() {
    OSCAR_CHECK(stack_.size() > base(), "{}: pickle stack underflow", origin_);
    NodePtr n = std::move(stack_.back());
    stack_.pop_back();
    return n;
  }
  const NodePtr& peek() const {
    OSCAR_CHECK(stack_.size() > base(), "{}: pickle memo of an empty stack", origin_);
    return stack_.back();
  }
  Node* top(Node::Type type, const char* op) {
    OSCAR_CHECK(stack_.size() > base() && stack_.back()->type == type,
                "{}: pickle {} applied to the wrong kind of object", origin_, op);
    return stack_.back().get();
  }
  std::vector<NodePtr> pop_mark() {
    OSCAR_CHECK(!marks_.empty(), "{}: pickle MARK missing", origin_);
    const std::size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<NodePtr> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }
  NodePtr memo_get(std::uint32_t key) {
    const auto it = memo_.find(key);
    OSCAR_CHECK(it != memo_.end(), "{}: pickle refers to memo entry {} that was never stored",
                origin_, key);
    return it->second;
  }
  const PickleValue& scalar(const Node& n) const {
    OSCAR_CHECK(n.type == Node::Type::kLeaf, "{}: expected a plain value in the pickle", origin_);
    return n.leaf;
  }
  void set_item(Node& dict, const NodePtr& key, const NodePtr& value) {
    OSCAR_CHECK(key->type == Node::Type::kLeaf && (key->leaf.is(PickleValue::Kind::kString) ||
                                                   key->leaf.is(PickleValue::Kind::kInt)),
                "{}: dict keys must be strings or ints", origin_);
    for (auto& entry : dict.entries) {
      if (entry.first->leaf == key->leaf) {
        entry.second = value;
        return;
      }
    }
    dict.entries.emplace_back(key, value);
  }

  NodePtr make_global(const std::string& name) {
    static const char* const allowed[] = {"collections.OrderedDict",
                                          "torch._utils._rebuild_tensor_v2",
                                          "torch._utils._rebuild_tensor",
                                          "torch._utils._rebuild_parameter",
                                          "torch.jit._pickle.restore_type_tag",
                                          "torch.FloatStorage",
                                          "torch.DoubleStorage",
                                          "torch.HalfStorage",
                                          "torch.BFloat16Storage"};
    const bool ok = std::any_of(std::begin(allowed), std::end(allowed),
                                [&](const char* a) { return name == a; });
    OSCAR_CHECK(ok,
                "{}: the checkpoint references '{}', which a plain-data reader does not load "
                "(only tensors, dicts, lists and scalars are read)",
                origin_, name);
    auto n = container(Node::Type::kGlobal);
    n->global = name;
    return n;
  }

  NodePtr persistent_load(const NodePtr& pid) {
    OSCAR_CHECK(pid->type == Node::Type::kTuple && pid->items.size() == 5,
                "{}: unsupported persistent id in the pickle (expected a storage tuple)", origin_);
    const auto& it = pid->items;
    OSCAR_CHECK(it[0]->type == Node::Type::kLeaf && it[0]->leaf == PickleValue::string("storage"),
                "{}: persistent id is not a storage", origin_);
    OSCAR_CHECK(it[1]->type == Node::Type::kGlobal, "{}: storage without a storage type", origin_);
    static const std::map<std::string, std::string> dtypes = {
        {"torch.FloatStorage", "float32"},
        {"torch.DoubleStorage", "float64"},
        {"torch.HalfStorage", "float16"},
        {"torch.BFloat16Storage", "bfloat16"}};
    const auto dtype = dtypes.find(it[1]->global);
    OSCAR_CHECK(dtype != dtypes.end(), "{}: storage type '{}' is not a floating-point storage",
                origin_, it[1]->global);
    auto n = container(Node::Type::kStorage);
    n->storage.dtype = dtype->second;
    const PickleValue& key = scalar(*it[2]);
    n->storage.key = key.is(PickleValue::Kind::kInt) ? std::to_string(key.as_int(""))
                                                     : key.as_string("storage key");
    n->storage.numel = scalar(*it[4]).as_int("storage size");
    OSCAR_CHECK(n->storage.numel >= 0, "{}: negative storage size", origin_);
    return n;
  }

  NodePtr reduce(const Node& callable, const Node& args) {
    OSCAR_CHECK(callable.type == Node::Type::kGlobal,
                "{}: REDUCE of something that is not an allowed function", origin_);
    OSCAR_CHECK(args.type == Node::Type::kTuple, "{}: REDUCE arguments are not a tuple", origin_);
    const std::string& f = callable.global;
    const auto& a = args.items;
    if (f == "collections.OrderedDict") {
      OSCAR_CHECK(a.empty(), "{}: OrderedDict with constructor arguments", origin_);
      return container(Node::Type::kDict);
    }
    if (f == "torch.jit._pickle.restore_type_tag") {  // what LibTorch's pickler wraps dicts in
      OSCAR_CHECK(!a.empty(), "{}: restore_type_tag without a value", origin_);
      return a[0];
    }
    if (f == "torch._utils._rebuild_parameter") {
      OSCAR_CHECK(!a.empty(), "{}: _rebuild_parameter without data", origin_);
      return a[0];
    }
    if (f == "torch._utils._rebuild_tensor_v2" || f == "torch._utils._rebuild_tensor") {
      OSCAR_CHECK(a.size() >= 4, "{}: {} with {} arguments", origin_, f, a.size());
      return rebuild_tensor(*a[0], scalar(*a[1]).as_int("storage offset"), int_list(*a[2]),
                            int_list(*a[3]));
    }
    fail("{}: '{}' cannot be called while reading plain data", origin_, f);
  }

  std::vector<std::int64_t> int_list(const Node& n) {
    OSCAR_CHECK(n.type == Node::Type::kTuple || n.type == Node::Type::kList,
                "{}: tensor size/stride is not a tuple", origin_);
    std::vector<std::int64_t> out;
    for (const auto& item : n.items) out.push_back(scalar(*item).as_int("tensor size/stride"));
    return out;
  }

  NodePtr rebuild_tensor(const Node& storage, std::int64_t offset,
                         const std::vector<std::int64_t>& size,
                         const std::vector<std::int64_t>& stride) {
    OSCAR_CHECK(storage.type == Node::Type::kStorage, "{}: tensor without a storage", origin_);
    OSCAR_CHECK(size.size() == stride.size() && size.size() <= 8,
                "{}: tensor size and stride disagree", origin_);
    const StorageRef& s = storage.storage;
    const auto record = records_.find(prefix_ + "data/" + s.key);
    OSCAR_CHECK(record != records_.end(), "{}: storage record 'data/{}' is missing", origin_,
                s.key);
    const std::size_t elem = s.dtype == "float64" ? 8 : s.dtype == "float32" ? 4 : 2;
    OSCAR_CHECK(static_cast<std::uint64_t>(s.numel) <= record->second.size / elem,
                "{}: storage 'data/{}' holds {} bytes, fewer than its {} elements need", origin_,
                s.key, record->second.size, s.numel);
    TorchTensor t;
    t.shape = size;
    t.source_dtype = s.dtype;
    OSCAR_CHECK(offset >= 0 && offset <= s.numel, "{}: storage offset {} outside the storage",
                origin_, offset);
    // Every span (size - 1) * stride is bounded by the storage size before it is added, so
    // nothing here overflows.
    const bool empty = std::find(size.begin(), size.end(), 0) != size.end();
    std::int64_t numel = 1, last = offset;
    for (std::size_t i = 0; i < size.size(); ++i) {
      OSCAR_CHECK(size[i] >= 0 && stride[i] >= 0, "{}: negative tensor size or stride", origin_);
      if (!empty && size[i] > 1 && stride[i] > 0) {
        OSCAR_CHECK(size[i] - 1 <= s.numel / stride[i],
                    "{}: tensor of shape [{}] reaches past its storage of {} elements", origin_,
                    fmt::join(size, ", "), s.numel);
        last += (size[i] - 1) * stride[i];
      }
      OSCAR_CHECK(size[i] == 0 || numel <= (std::int64_t{1} << 40) / size[i],
                  "{}: tensor too large", origin_);
      numel *= size[i];
    }
    OSCAR_CHECK(numel == 0 || last < s.numel,
                "{}: tensor of shape [{}] reaches past its storage of {} elements", origin_,
                fmt::join(size, ", "), s.numel);
    // Views may repeat storage elements (stride 0), but a plain-data file has no reason to blow a
    // small storage up into a huge tensor.
    OSCAR_CHECK(numel <= std::max<std::int64_t>(s.numel, 1) * 64,
                "{}: tensor of {} elements is a view expanding its storage of {} elements", origin_,
                numel, s.numel);
    t.values.resize(static_cast<std::size_t>(numel));
    const std::uint8_t* data = record->second.data;
    auto read = [&](std::int64_t index) -> float {
      const std::uint8_t* at = data + static_cast<std::size_t>(index) * elem;
      if (s.dtype == "float32") {
        float f;
        std::memcpy(&f, at, 4);
        return f;
      }
      if (s.dtype == "float64") {
        double d;
        std::memcpy(&d, at, 8);
        return static_cast<float>(d);
      }
      const std::uint16_t h = get_u16(at);
      if (s.dtype == "float16") return half_to_float(h);
      const std::uint32_t bits = std::uint32_t{h} << 16;
      float f;
      std::memcpy(&f, &bits, 4);
      return f;
    };
    std::vector<std::int64_t> index(size.size(), 0);
    for (std::int64_t i = 0; i < numel; ++i) {
      std::int64_t at = offset;
      for (std::size_t k = 0; k < size.size(); ++k) at += index[k] * stride[k];
      t.values[static_cast<std::size_t>(i)] = read(at);
      for (std::size_t k = size.size(); k-- > 0;) {
        if (++index[k] < size[k]) break;
        index[k] = 0;
      }
    }
    return leaf(PickleValue::tensor(std::move(t)));
  }

  PickleValue convert(const Node& n, int depth) {
    OSCAR_CHECK(depth < 64, "{}: pickled data nested too deeply (or recursive)", origin_);
    // Memo references can share one object many times over; expanding such a DAG into a tree
    // could grow exponentially, so the number of values produced is bounded.
    OSCAR_CHECK(++converted_ <= 1000000, "{}: pickled data expands to too many values", origin_);
    switch (n.type) {
      case Node::Type::kLeaf:
        return n.leaf;
      case Node::Type::kList:
      case Node::Type::kTuple: {
        std::vector<PickleValue> items;
        for (const auto& item : n.items) items.push_back(convert(*item, depth + 1));
        return n.type == Node::Type::kList ? PickleValue::list(std::move(items))
                                           : PickleValue::tuple(std::move(items));
      }
      case Node::Type::kDict: {
        PickleValue d = PickleValue::dict();
        for (const auto& [key, value] : n.entries) d.set(key->leaf, convert(*value, depth + 1));
        return d;
      }
      default:
        fail("{}: the pickle holds a bare function or storage reference, not data", origin_);
    }
  }

  const std::uint8_t* p_;
  const std::uint8_t* const end_;
  const std::uint8_t* const begin_ = p_;
  const std::map<std::string, ZipRecord>& records_;
  const std::string prefix_;
  const std::string origin_;
  std::vector<NodePtr> stack_;
  std::vector<std::size_t> marks_;
  std::map<std::uint32_t, NodePtr> memo_;
  std::int64_t converted_ = 0;
};

}  // namespace

std::string torch_archive_bytes(const PickleValue& root) {
  PickleWriter pickler;
  const std::string pickle = pickler.run(root);
  ZipWriter zip;
  zip.add("archive/data.pkl", pickle);
  zip.add("archive/byteorder", "little");
  for (std::size_t i = 0; i < pickler.tensors().size(); ++i) {
    const TorchTensor& t = *pickler.tensors()[i];
    zip.add(fmt::format("archive/data/{}", i),
            std::string(reinterpret_cast<const char*>(t.values.data()),
                        t.values.size() * sizeof(float)));
  }
  zip.add("archive/version", "3\n");
  return zip.finish();
}

void write_torch_archive(const std::string& path, const PickleValue& root) {
  write_file_atomic(path, torch_archive_bytes(root));
}

PickleValue parse_torch_archive(const std::uint8_t* bytes, std::size_t size,
                                const std::string& origin) {
  const auto records = read_zip(bytes, size, origin);
  // The pickle is <prefix>/data.pkl with one top-level directory (torch.save names it after the
  // file; LibTorch and buffers use "archive").
  std::string prefix;
  for (const auto& [name, record] : records) {
    const auto slash = name.find('/');
    if (slash != std::string::npos && name.compare(slash, std::string::npos, "/data.pkl") == 0) {
      OSCAR_CHECK(prefix.empty(), "{}: the archive holds more than one data.pkl", origin);
      prefix = name.substr(0, slash + 1);
    }
  }
  OSCAR_CHECK(!prefix.empty(), "{}: not a PyTorch checkpoint (no data.pkl in the zip archive)",
              origin);
  const auto byteorder = records.find(prefix + "byteorder");
  if (byteorder != records.end()) {
    const std::string order(reinterpret_cast<const char*>(byteorder->second.data),
                            byteorder->second.size);
    OSCAR_CHECK(order == "little", "{}: byte order '{}' is not supported (little-endian only)",
                origin, order);
  }
  Unpickler unpickler(records.at(prefix + "data.pkl"), records, prefix, origin);
  return unpickler.run();
}

PickleValue read_torch_archive(const std::string& path) {
  OSCAR_CHECK(file_exists(path), "'{}' does not exist", path);
  const MappedFile file(path);
  return parse_torch_archive(file.data(), file.size(), path);
}

}  // namespace oscar

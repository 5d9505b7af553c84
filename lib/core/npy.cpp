// Minimal, validating .npy reader and float32 writer (reference logits, GPU cross-checks).
#include "oscar/npy.h"

#include <cstring>

#include "oscar/error.h"
#include "oscar/file.h"

namespace oscar {

namespace {

std::size_t descr_size(const std::string& descr) {
  if (descr == "<f4" || descr == "<i4" || descr == "<u4") return 4;
  if (descr == "<f8" || descr == "<i8" || descr == "<u8") return 8;
  if (descr == "<f2" || descr == "<i2" || descr == "<u2") return 2;
  if (descr == "|u1" || descr == "|i1" || descr == "|b1") return 1;
  return 0;
}

// Extracts the value text of `key` from the header dict literal, e.g. 'descr': '<f4'.
std::string header_value(const std::string& header, const std::string& key,
                         const std::string& path) {
  auto pos = header.find("'" + key + "'");
  OSCAR_CHECK(pos != std::string::npos, "{}: npy header has no '{}'", path, key);
  pos = header.find(':', pos);
  OSCAR_CHECK(pos != std::string::npos, "{}: malformed npy header", path);
  ++pos;
  while (pos < header.size() && header[pos] == ' ') ++pos;
  OSCAR_CHECK(pos < header.size(), "{}: malformed npy header", path);
  char open = header[pos];
  const bool quoted = open == '(' || open == '\'';
  char close = open == '(' ? ')' : open == '\'' ? '\'' : ',';
  auto end = header.find(close, pos + 1);
  OSCAR_CHECK(end != std::string::npos, "{}: malformed npy header", path);
  return quoted ? header.substr(pos + 1, end - pos - 1) : header.substr(pos, end - pos);
}

}  // namespace

std::int64_t NpyArray::numel() const {
  std::int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

NpyArray read_npy(const std::string& path) { return parse_npy(read_file(path), path); }

NpyArray parse_npy(std::string_view raw, const std::string& path) {
  OSCAR_CHECK(raw.size() >= 10 && std::memcmp(raw.data(), "\x93NUMPY", 6) == 0,
              "{}: not a .npy file", path);
  const auto major = static_cast<std::uint8_t>(raw[6]);
  std::size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = static_cast<std::uint8_t>(raw[8]) | (static_cast<std::uint8_t>(raw[9]) << 8);
    offset = 10;
  } else {
    OSCAR_CHECK(major == 2 || major == 3, "{}: unsupported .npy version {}", path, major);
    OSCAR_CHECK(raw.size() >= 12, "{}: truncated .npy header", path);
    for (int i = 0; i < 4; ++i) {
      header_len |= static_cast<std::size_t>(static_cast<std::uint8_t>(raw[8 + i])) << (8 * i);
    }
    offset = 12;
  }
  OSCAR_CHECK(offset + header_len <= raw.size(), "{}: truncated .npy header", path);
  std::string header(raw.substr(offset, header_len));
  NpyArray a;
  a.descr = header_value(header, "descr", path);
  OSCAR_CHECK(header_value(header, "fortran_order", path).find("False") != std::string::npos,
              "{}: Fortran-ordered arrays are not supported", path);
  std::string shape = header_value(header, "shape", path);
  std::size_t i = 0;
  while (i < shape.size()) {
    while (i < shape.size() && (shape[i] == ' ' || shape[i] == ',')) ++i;
    if (i >= shape.size()) break;
    std::size_t j = i;
    while (j < shape.size() && shape[j] >= '0' && shape[j] <= '9') ++j;
    OSCAR_CHECK(j > i && j - i < 12, "{}: malformed shape '({})'", path, shape);
    a.shape.push_back(std::stoll(shape.substr(i, j - i)));
    i = j;
  }
  const std::size_t esize = descr_size(a.descr);
  OSCAR_CHECK(esize > 0, "{}: unsupported dtype '{}'", path, a.descr);
  // Element count and byte size with overflow checks, left to right as numel() multiplies: a
  // shape whose product wraps around could otherwise match a small data section.
  std::int64_t numel = 1;
  for (std::int64_t d : a.shape) {
    OSCAR_CHECK(!__builtin_mul_overflow(numel, d, &numel), "{}: shape '({})' is too large", path,
                shape);
  }
  std::size_t nbytes = 0;
  OSCAR_CHECK(!__builtin_mul_overflow(static_cast<std::size_t>(numel), esize, &nbytes),
              "{}: shape '({})' is too large", path, shape);
  OSCAR_CHECK(raw.size() - offset - header_len == nbytes,
              "{}: data size {} does not match shape and dtype ({} bytes expected)", path,
              raw.size() - offset - header_len, nbytes);
  a.bytes.assign(raw.begin() + static_cast<std::ptrdiff_t>(offset + header_len), raw.end());
  return a;
}

std::vector<float> NpyArray::as_float32() const {
  std::vector<float> out(static_cast<std::size_t>(numel()));
  if (descr == "<f4") {
    if (!bytes.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // data() may be null
  } else if (descr == "<f8") {
    for (std::size_t i = 0; i < out.size(); ++i) {
      double v;
      std::memcpy(&v, bytes.data() + 8 * i, 8);
      out[i] = static_cast<float>(v);
    }
  } else {
    fail("npy array of dtype '{}' cannot be read as float32", descr);
  }
  return out;
}

void write_npy_float32(const std::string& path, const std::vector<std::int64_t>& shape,
                       const float* data) {
  std::string dims;
  std::int64_t n = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    dims += (i > 0 ? ", " : "") + std::to_string(shape[i]);
    n *= shape[i];
  }
  if (shape.size() == 1) dims += ",";  // a 1-tuple is written "(n,)"
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + dims + "), }";
  // Pad so that magic + length + header + newline is a multiple of 64 bytes.
  std::size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::string out = "\x93NUMPY";
  out.push_back('\x01');
  out.push_back('\x00');
  out.push_back(static_cast<char>(header.size() & 0xff));
  out.push_back(static_cast<char>((header.size() >> 8) & 0xff));
  out += header;
  out.append(reinterpret_cast<const char*>(data), static_cast<std::size_t>(n) * sizeof(float));
  write_file_atomic(path, out);
}

}  // namespace oscar

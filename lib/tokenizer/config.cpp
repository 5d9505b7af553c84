// Typed access to tokenizer.json fields, and the GPT-2 byte-to-unicode table.
#include <array>

#include "internal.h"

namespace oscar::tok {

void config_fail(const std::string& origin, const std::string& message) {
  fail("tokenizer.json '{}': {}", origin, message);
}

const Json& require_field(const Json& obj, const char* key, const std::string& origin,
                          const std::string& where) {
  if (!obj.is_object()) config_fail(origin, fmt::format("{} must be a JSON object", where));
  auto it = obj.find(key);
  if (it == obj.end()) config_fail(origin, fmt::format("{} is missing field '{}'", where, key));
  return *it;
}

std::string get_string(const Json& obj, const char* key, const std::string& origin,
                       const std::string& where) {
  const Json& v = require_field(obj, key, origin, where);
  if (!v.is_string()) {
    config_fail(origin,
                fmt::format("{}: field '{}' must be a string, got {}", where, key, v.dump()));
  }
  return v.get<std::string>();
}

std::string get_string_or(const Json& obj, const char* key, const std::string& fallback,
                          const std::string& origin, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) {
    config_fail(origin,
                fmt::format("{}: field '{}' must be a string, got {}", where, key, it->dump()));
  }
  return it->get<std::string>();
}

bool get_bool_or(const Json& obj, const char* key, bool fallback, const std::string& origin,
                 const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) {
    config_fail(origin, fmt::format("{}: field '{}' must be true or false, got {}", where, key,
                                    it->dump()));
  }
  return it->get<bool>();
}

std::int64_t get_int_or(const Json& obj, const char* key, std::int64_t fallback,
                        const std::string& origin, const std::string& where) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) {
    config_fail(origin,
                fmt::format("{}: field '{}' must be an integer, got {}", where, key, it->dump()));
  }
  return it->get<std::int64_t>();
}

char32_t get_char(const Json& obj, const char* key, const std::string& origin,
                  const std::string& where) {
  std::string s = get_string(obj, key, origin, where);
  std::size_t i = 0;
  char32_t c = s.empty() ? 0 : next_char(s, i);
  if (s.empty() || i != s.size()) {
    config_fail(origin, fmt::format("{}: field '{}' must be a single character, got \"{}\"", where,
                                    key, s));
  }
  return c;
}

std::string component_type(const Json& j, const std::string& origin, const std::string& what) {
  if (!j.is_object()) config_fail(origin, fmt::format("{} must be an object or null", what));
  auto it = j.find("type");
  if (it == j.end() || !it->is_string()) {
    config_fail(origin, fmt::format("{} has no \"type\" string", what));
  }
  return it->get<std::string>();
}

// ---------------------------------------------------------------------------------------------

namespace {

struct ByteTable {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> to_byte;  // mapped characters are all below U+0200

  ByteTable() {
    to_byte.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      // Printable Latin-1 bytes map to themselves; the rest to U+0100 upwards, in byte order.
      bool keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      char32_t c = keep ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      append_utf8(to_unicode[b], c);
      to_byte[c] = b;
    }
  }
};

const ByteTable& byte_table() {
  static const ByteTable table;
  return table;
}

}  // namespace

const std::string& byte_to_unicode(std::uint8_t b) { return byte_table().to_unicode[b]; }

int unicode_to_byte(char32_t c) { return c < 512 ? byte_table().to_byte[c] : -1; }

}  // namespace oscar::tok

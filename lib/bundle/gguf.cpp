// GGUF v3 writer: header, metadata, tensor infos, aligned F32 tensor data.
#include "oscar/gguf.h"

#include <algorithm>
#include <cstring>

#include "oscar/error.h"
#include "oscar/file.h"

namespace oscar {
namespace {

template <typename T>
void put(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the project targets little-endian hosts only
  out.append(bytes, sizeof(T));
}

void put_string(std::string& out, const std::string& s) {
  put<std::uint64_t>(out, s.size());
  out += s;
}

}  // namespace

void GgufWriter::key(const std::string& key, GgufType type) {
  OSCAR_CHECK(!key.empty() && key.size() < 65536, "GGUF key '{}' is empty or too long", key);
  OSCAR_CHECK(std::find(keys_.begin(), keys_.end(), key) == keys_.end(),
              "GGUF key '{}' written twice", key);
  keys_.push_back(key);
  put_string(kv_, key);
  put<std::uint32_t>(kv_, static_cast<std::uint32_t>(type));
  ++kv_count_;
}

void GgufWriter::add_string(const std::string& k, const std::string& value) {
  key(k, GgufType::kString);
  put_string(kv_, value);
}

void GgufWriter::add_uint32(const std::string& k, std::uint32_t value) {
  key(k, GgufType::kUint32);
  put(kv_, value);
}

void GgufWriter::add_int64(const std::string& k, std::int64_t value) {
  key(k, GgufType::kInt64);
  put(kv_, value);
}

void GgufWriter::add_float32(const std::string& k, float value) {
  key(k, GgufType::kFloat32);
  put(kv_, value);
}

void GgufWriter::add_bool(const std::string& k, bool value) {
  key(k, GgufType::kBool);
  put<std::uint8_t>(kv_, value ? 1 : 0);
}

void GgufWriter::add_float32_array(const std::string& k, const std::vector<float>& values) {
  key(k, GgufType::kArray);
  put<std::uint32_t>(kv_, static_cast<std::uint32_t>(GgufType::kFloat32));
  put<std::uint64_t>(kv_, values.size());
  for (float v : values) put(kv_, v);
}

void GgufWriter::add_string_array(const std::string& k, const std::vector<std::string>& values) {
  key(k, GgufType::kArray);
  put<std::uint32_t>(kv_, static_cast<std::uint32_t>(GgufType::kString));
  put<std::uint64_t>(kv_, values.size());
  for (const auto& v : values) put_string(kv_, v);
}

void GgufWriter::add_tensor_f32(const std::string& name, std::vector<std::uint64_t> ne,
                                std::vector<float> values) {
  OSCAR_CHECK(!name.empty() && name.size() < 64, "GGUF tensor name '{}' is empty or too long",
              name);  // ggml's GGML_MAX_NAME is 64 including the terminator
  OSCAR_CHECK(!ne.empty() && ne.size() <= 4, "GGUF tensor {} has {} dimensions (1 to 4)", name,
              ne.size());
  std::uint64_t numel = 1;
  for (std::uint64_t n : ne) numel *= n;
  OSCAR_CHECK(numel == values.size(), "GGUF tensor {} holds {} values for {} elements", name,
              values.size(), numel);
  for (const Tensor& t : tensors_) {
    OSCAR_CHECK(t.name != name, "GGUF tensor {} written twice", name);
  }
  tensors_.push_back({name, std::move(ne), std::move(values)});
}

std::string GgufWriter::bytes() const {
  std::string out = "GGUF";
  put<std::uint32_t>(out, 3);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, kv_count_);
  out += kv_;
  std::uint64_t offset = 0;
  auto aligned = [](std::uint64_t x) { return (x + kAlignment - 1) / kAlignment * kAlignment; };
  for (const Tensor& t : tensors_) {
    put_string(out, t.name);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(t.ne.size()));
    for (std::uint64_t n : t.ne) put(out, n);
    put<std::uint32_t>(out, 0);  // GGML_TYPE_F32
    put(out, offset);
    offset = aligned(offset + t.values.size() * sizeof(float));
  }
  out.append(aligned(out.size()) - out.size(), '\0');
  for (const Tensor& t : tensors_) {
    out.append(reinterpret_cast<const char*>(t.values.data()), t.values.size() * sizeof(float));
    out.append(aligned(out.size()) - out.size(), '\0');
  }
  return out;
}

void GgufWriter::write(const std::string& path) const { write_file_atomic(path, bytes()); }

}  // namespace oscar

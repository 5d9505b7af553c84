// GGUF (version 3, little-endian) writer for metadata and F32 tensors, without ggml.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace oscar {

// GGUF value types (the format's numbering).
enum class GgufType : std::uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// Builds a GGUF file in memory: metadata key/value pairs in insertion order, then tensor infos and
// 32-byte aligned (general.alignment) tensor data. Tensors are F32 (ggml type 0). `ne` is ggml's
// dimension order: ne[0] is the fastest-varying (contiguous) dimension, i.e. the reverse of a
// row-major shape; `values` are stored exactly in memory order.
class GgufWriter {
 public:
  static constexpr std::uint32_t kAlignment = 32;

  void add_string(const std::string& key, const std::string& value);
  void add_uint32(const std::string& key, std::uint32_t value);
  void add_int64(const std::string& key, std::int64_t value);
  void add_float32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_float32_array(const std::string& key, const std::vector<float>& values);
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  void add_tensor_f32(const std::string& name, std::vector<std::uint64_t> ne,
                      std::vector<float> values);

  std::string bytes() const;                  // the whole file
  void write(const std::string& path) const;  // atomically

 private:
  void key(const std::string& key, GgufType type);
  std::string kv_;
  std::uint64_t kv_count_ = 0;
  std::vector<std::string> keys_;
  struct Tensor {
    std::string name;
    std::vector<std::uint64_t> ne;
    std::vector<float> values;
  };
  std::vector<Tensor> tensors_;
};

}  // namespace oscar

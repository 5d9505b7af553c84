// safetensors reading (memory-mapped, fully validated) and atomic writing; single and sharded.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "oscar/file.h"

namespace oscar {

// Element types of the safetensors format. Reading accepts all of them; what a consumer can use is
// its own business (the model loader takes F32, F16 and BF16 and names anything else in its error).
enum class DType {
  BOOL,
  U8,
  I8,
  I16,
  U16,
  F16,
  BF16,
  I32,
  U32,
  F32,
  F64,
  I64,
  U64,
  F8_E4M3,
  F8_E5M2
};

std::size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);       // the format's spelling: "F32", "BF16", ...
DType parse_dtype(std::string_view name);  // throws oscar::Error on an unknown name

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets relative to the start of the data section
  std::uint64_t end = 0;
  std::int64_t numel() const;
  std::uint64_t nbytes() const { return end - begin; }
};

// The parsed, validated header of a safetensors file.
struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;              // in order of their data offsets
  std::map<std::string, std::string> metadata;  // the optional "__metadata__" string map
  std::uint64_t header_size = 0;                // N, the length of the JSON header
  std::uint64_t data_size = 0;                  // bytes of the data section
};

// Parses and validates a safetensors header from the first bytes of a file of `file_size` bytes.
// Checks: 8-byte length prefix within the file, well-formed JSON object, known dtypes, non-negative
// shapes, begin <= end, sizes equal to dtype size x element count, offsets inside the data section,
// no overlaps and no holes. Errors name `origin` (a path) and the tensor. Never reads out of
// bounds.
SafetensorsHeader parse_safetensors_header(const std::uint8_t* bytes, std::size_t file_size,
                                           const std::string& origin);

// Parses a `model.safetensors.index.json` (text `json_text`, named `origin` in errors) into its
// weight map, tensor name -> shard file name. Checks: a JSON object without repeated keys, a
// non-empty "weight_map" object of strings, each a plain file name inside the model directory (no
// '/', no "..").
std::map<std::string, std::string> parse_safetensors_index(std::string_view json_text,
                                                           const std::string& origin);

// One memory-mapped, validated safetensors file.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return map_.path(); }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  const TensorInfo* find(std::string_view name) const;     // nullptr when absent
  const TensorInfo& at(std::string_view name) const;       // throws, naming the file and tensor
  const std::uint8_t* data(const TensorInfo& info) const;  // pointer into the mapping
  std::string_view header_json() const;  // the raw JSON header bytes (for identity hashes)

 private:
  MappedFile map_;
  SafetensorsHeader header_;
  std::map<std::string, std::size_t, std::less<>> index_;
};

// The weights of a Hugging Face model directory: `model.safetensors`, or the shards listed in
// `model.safetensors.index.json` (every shard validated, every indexed tensor present where the
// index says it is, no tensor in two shards).
class Checkpoint {
 public:
  static Checkpoint open(const std::string& model_dir);

  const std::string& directory() const { return dir_; }
  std::vector<std::string> tensor_names() const;  // sorted
  bool contains(std::string_view name) const;
  const TensorInfo& info(std::string_view name) const;  // throws, naming the tensor and directory
  const std::uint8_t* data(std::string_view name) const;
  const SafetensorsFile& file_of(std::string_view name) const;
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::size_t, std::less<>> owner_;  // tensor name -> index into files_
};

// A tensor to write: raw little-endian bytes of `dtype` x `shape`.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
  const void* data = nullptr;
  std::size_t nbytes = 0;
};

// Serializes tensors (in the given order) and string metadata to safetensors bytes. The header is
// padded with spaces to a multiple of 8 bytes so every tensor starts 8-byte aligned.
std::string serialize_safetensors(const std::vector<TensorToWrite>& tensors,
                                  const std::map<std::string, std::string>& metadata);

// serialize_safetensors + write_file_atomic.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace oscar

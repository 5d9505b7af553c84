// PyTorch checkpoint files (the zip format of torch.save) holding plain data, written and read
// without LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace oscar {

// A dense tensor as read from or written to a checkpoint: row-major values converted to float32.
// Writing always stores float32; reading accepts float32, float64, float16 and bfloat16 storages
// (`source_dtype` names the stored one; float64 is rounded to float32).
struct TorchTensor {
  std::vector<std::int64_t> shape;
  std::vector<float> values;
  std::string source_dtype = "float32";
  std::int64_t numel() const;
};

// A pickled value of the subset this module speaks: None, bool, int, float, str, tensors, lists,
// tuples and dicts (string or int keys, insertion order kept). What Python's torch.save produces
// for such data, and what torch.load reads back with weights_only=True.
class PickleValue {
 public:
  enum class Kind { kNone, kBool, kInt, kFloat, kString, kTensor, kList, kTuple, kDict };

  PickleValue() = default;  // None
  static PickleValue boolean(bool value);
  static PickleValue integer(std::int64_t value);
  static PickleValue real(double value);
  static PickleValue string(std::string value);
  static PickleValue tensor(TorchTensor value);
  static PickleValue list(std::vector<PickleValue> items = {});
  static PickleValue tuple(std::vector<PickleValue> items = {});
  static PickleValue dict();

  Kind kind() const { return kind_; }
  const char* kind_name() const;
  bool is(Kind kind) const { return kind_ == kind; }

  // Typed access; each throws oscar::Error naming `what` and the actual kind on a mismatch.
  bool as_bool(const std::string& what) const;
  std::int64_t as_int(const std::string& what) const;
  double as_float(const std::string& what) const;  // ints are accepted too
  const std::string& as_string(const std::string& what) const;
  const TorchTensor& as_tensor(const std::string& what) const;
  const std::vector<PickleValue>& items(const std::string& what) const;  // list or tuple
  const std::vector<std::pair<PickleValue, PickleValue>>& entries(const std::string& what) const;

  // Dicts: insertion keeps order and replaces an existing equal key.
  PickleValue& set(PickleValue key, PickleValue value);
  PickleValue& set(const std::string& key, PickleValue value) {
    return set(string(key), std::move(value));
  }
  // nullptr when absent (or when this is not a dict).
  const PickleValue* find(const PickleValue& key) const;
  const PickleValue* find(const std::string& key) const { return find(string(key)); }
  void append(PickleValue item);  // lists

  bool operator==(const PickleValue& other) const;
  bool operator!=(const PickleValue& other) const { return !(*this == other); }
  std::string repr() const;  // short, for error messages: 'layers', 3, tensor[8, 8]

 private:
  Kind kind_ = Kind::kNone;
  bool bool_ = false;
  std::int64_t int_ = 0;
  double float_ = 0.0;
  std::string string_;
  std::shared_ptr<const TorchTensor> tensor_;
  std::vector<PickleValue> items_;
  std::vector<std::pair<PickleValue, PickleValue>> entries_;
};

// The bytes of a checkpoint holding `root`, as torch.save would write it: an uncompressed zip
// archive with archive/data.pkl (pickle protocol 2), one record per tensor under archive/data/,
// archive/byteorder ("little") and archive/version ("3"). Tensors are written float32,
// contiguous, on "cpu". Records are 64-byte aligned; timestamps are fixed, so equal values give
// equal bytes. Only globals that torch.load's weights_only unpickler allows are used
// (torch._utils._rebuild_tensor_v2, torch.FloatStorage, collections.OrderedDict).
std::string torch_archive_bytes(const PickleValue& root);

// torch_archive_bytes written atomically to `path`.
void write_torch_archive(const std::string& path, const PickleValue& root);

// Reads a checkpoint written by torch.save (zip format) or by the functions above. Validates the
// zip structure (bounds, stored entries only, CRC-32 of every record), then runs a restricted
// unpickler: only the opcodes of protocols 2 to 4 that plain data needs, and only the globals that
// rebuild tensors and ordered dicts; anything else is an oscar::Error naming the file and the
// global or opcode. Never executes code and never reads out of bounds.
PickleValue read_torch_archive(const std::string& path);
PickleValue parse_torch_archive(const std::uint8_t* bytes, std::size_t size,
                                const std::string& origin);

}  // namespace oscar

// libFuzzer target: the bundle manifest reader. The input is the manifest JSON; it is wrapped into
// a safetensors container holding the tensors of a fixed valid bundle (2 layers, 2 KV heads,
// head_dim 4, centred and smoothed), so mutations reach the manifest checks that lie behind the
// container's validation, and the checksum of the seed still matches.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/error.h"
#include "oscar/safetensors.h"
#include "tiny_bundle.h"

namespace {

struct Tensors {
  oscar::Bundle bundle = oscar::fuzz::tiny_bundle(2, 2, 4, true, 0.5);
  std::vector<oscar::TensorToWrite> list;
  Tensors() {
    for (std::size_t i = 0; i < bundle.layers.size(); ++i) {
      const oscar::LayerRotations& l = bundle.layers[i];
      const std::string p = "layers." + std::to_string(i) + ".";
      auto add = [&](const char* name, std::vector<std::int64_t> shape,
                     const std::vector<float>& v) {
        list.push_back({p + name, oscar::DType::F32, shape, v.data(), v.size() * sizeof(float)});
      };
      add("k_rotation", {2, 4, 4}, l.k_rotation);
      add("v_rotation", {2, 4, 4}, l.v_rotation);
      add("k_eigenvalues", {2, 4}, l.k_eigenvalues);
      add("v_eigenvalues", {2, 4}, l.v_eigenvalues);
      add("k_clip", {2}, l.k_clip);
      add("v_clip", {2}, l.v_clip);
      add("k_mean", {2, 4}, l.k_mean);
      add("v_mean", {2, 4}, l.v_mean);
      add("k_smooth", {2, 4}, l.k_smooth);
    }
  }
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Tensors tensors;
  std::string file;
  try {
    file = oscar::serialize_safetensors(
        tensors.list, {{"oscar", std::string(reinterpret_cast<const char*>(data), size)}});
  } catch (const oscar::Error&) {
    return 0;  // not UTF-8: the container itself cannot hold it
  }
  try {
    const std::vector<std::uint8_t> bytes(file.begin(), file.end());
    const oscar::Bundle bundle = oscar::parse_bundle(bytes.data(), bytes.size(), "fuzz");
    (void)oscar::bundle_manifest_json(bundle, 2);
    (void)oscar::max_orthogonality_error(bundle, 'v');
  } catch (const oscar::Error&) {
  }
  return 0;
}

// libFuzzer target: the whole rotation bundle reader (safetensors container, JSON manifest, tensor
// shapes and dtypes, checksum, validation).
#include <cstddef>
#include <cstdint>

#include "oscar/bundle.h"
#include "oscar/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const oscar::Bundle bundle = oscar::parse_bundle(data, size, "fuzz.safetensors");
    // What `oscar-bundle inspect/verify` and engines do with an accepted bundle.
    (void)oscar::bundle_manifest_json(bundle, 2);
    (void)oscar::max_orthogonality_error(bundle, 'k');
    (void)bundle.rotation(bundle.model.num_layers - 1, bundle.n_kv_heads() - 1, 'v');
  } catch (const oscar::Error&) {
  }
  return 0;
}

// libFuzzer target: the PyTorch zip checkpoint reader (zip structure, CRC-32, restricted
// unpickler) and, on what it accepts, the SGLang rotation import that interprets the result.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "oscar/bundle.h"
#include "oscar/bundle_export.h"
#include "oscar/error.h"
#include "oscar/torch_archive.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const oscar::PickleValue value = oscar::parse_torch_archive(data, size, "fuzz.pt");
    (void)value.repr();
    // A small model the seeds match (2 layers, 2 KV heads, head_dim 4): both files the same.
    oscar::ModelIdentity model;
    model.architecture = "LlamaForCausalLM";
    model.model_type = "llama";
    model.name = "tiny";
    model.num_layers = 2;
    model.num_heads = 4;
    model.num_kv_heads = 2;
    model.head_dim = 4;
    oscar::SglangImportOptions options;
    options.check_hashes = false;
    std::vector<std::string> warnings;
    (void)oscar::sglang_import(value, value, "fuzz.pt", "fuzz.pt", model, options, &warnings);
  } catch (const oscar::Error&) {
  }
  return 0;
}

// oscar-dump-logits: runs the reference forward on given token ids and writes float32 logits to
// .npy, for cross-checks against other implementations (scripts/gpu/compare_transformers.py).
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/model.h"
#include "oscar/npy.h"

int main(int argc, char** argv) {
  CLI::App app{"Write the reference forward's logits for token ids to a .npy file"};
  std::string model_dir, ids_path, out_path, dtype = "f32", device = "cpu";
  app.add_option("--model", model_dir, "Hugging Face model directory")->required();
  app.add_option("--ids", ids_path, "JSON file: a list of equal-length lists of token ids")
      ->required();
  app.add_option("--out", out_path, "Output .npy, float32 [B, T, V]")->required();
  app.add_option("--dtype", dtype, "f32, bf16, f16 or stored")->default_val("f32");
  app.add_option("--device", device, "cpu or cuda")->default_val("cpu");
  CLI11_PARSE(app, argc, argv);
  try {
    auto ids = nlohmann::json::parse(oscar::read_file(ids_path));
    OSCAR_CHECK(ids.is_array() && !ids.empty() && ids[0].is_array(),
                "{}: expected a list of lists of ids", ids_path);
    const auto B = static_cast<std::int64_t>(ids.size());
    const auto T = static_cast<std::int64_t>(ids[0].size());
    auto tokens = torch::empty({B, T}, torch::kInt64);
    for (std::int64_t b = 0; b < B; ++b) {
      OSCAR_CHECK(static_cast<std::int64_t>(ids[static_cast<std::size_t>(b)].size()) == T,
                  "{}: rows must have equal lengths", ids_path);
      for (std::int64_t t = 0; t < T; ++t) {
        tokens[b][t] =
            ids[static_cast<std::size_t>(b)][static_cast<std::size_t>(t)].get<std::int64_t>();
      }
    }
    oscar::LoadOptions load;
    load.device = oscar::parse_device_name(device);
    if (dtype == "stored") {
      load.keep_stored_dtype = true;
    } else {
      load.dtype = oscar::parse_dtype_name(dtype);
    }
    auto model = oscar::Model::load(model_dir, load);
    auto logits = model.forward(tokens).cpu().contiguous();
    oscar::write_npy_float32(out_path, logits.sizes().vec(), logits.data_ptr<float>());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "oscar-dump-logits: error: {}\n", e.what());
    return 1;
  }
}

// libFuzzer target: tokenizer.json loading, then encoding and decoding with what was loaded.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "oscar/error.h"
#include "oscar/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const oscar::Tokenizer tokenizer = oscar::Tokenizer::from_json(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
    // A fixed text exercising the usual paths: words, digits, punctuation, whitespace runs,
    // multi-byte characters and an invalid byte.
    static constexpr std::string_view kText =
        "Hello, world!  123 d\xC3\xA9j\xC3\xA0 vu\n\tx\xFF<s>";
    for (bool special : {false, true}) {
      const std::vector<std::int32_t> ids = tokenizer.encode(kText, special);
      (void)tokenizer.decode(ids, !special);
    }
    const std::int32_t n = tokenizer.vocab_size();
    std::vector<std::int32_t> all;
    for (std::int32_t id = -1; id <= n && id < 512; ++id) all.push_back(id);
    (void)tokenizer.decode(all, false);
    (void)tokenizer.id_to_token(n);
    (void)tokenizer.token_to_id("<s>");
  } catch (const oscar::Error&) {
  }
  return 0;
}

// Passkey retrieval trials built from evaluation text (a needle that lives in the INT2 part).
#include "oscar/error.h"
#include "oscar/evaluation.h"

namespace oscar {

std::vector<PasskeyTrial> make_passkey_trials(const std::vector<std::int32_t>& filler,
                                              const std::vector<std::int32_t>& marker,
                                              const std::vector<std::vector<std::int32_t>>& keys,
                                              std::int64_t seq_len, std::int64_t plant_position,
                                              std::int32_t bos_token) {
  std::vector<PasskeyTrial> trials;
  std::size_t filler_pos = 0;
  for (const auto& key : keys) {
    OSCAR_CHECK(!key.empty() && !marker.empty(), "passkey marker and keys must not be empty");
    const auto needle_len = static_cast<std::int64_t>(marker.size() + key.size());
    const std::int64_t fixed = (bos_token >= 0 ? 1 : 0) + 2 * needle_len;
    OSCAR_CHECK(plant_position >= 0 && plant_position + fixed < seq_len,
                "passkey: sequence of {} tokens too short to plant a needle at {}", seq_len,
                plant_position);
    PasskeyTrial t;
    if (bos_token >= 0) t.tokens.push_back(bos_token);
    auto take_filler = [&](std::int64_t n) {
      for (std::int64_t i = 0; i < n; ++i) {
        OSCAR_CHECK(!filler.empty(), "passkey: no filler text");
        t.tokens.push_back(filler[filler_pos % filler.size()]);
        ++filler_pos;
      }
    };
    take_filler(plant_position - static_cast<std::int64_t>(t.tokens.size()));
    t.tokens.insert(t.tokens.end(), marker.begin(), marker.end());
    t.tokens.insert(t.tokens.end(), key.begin(), key.end());
    take_filler(seq_len - needle_len - static_cast<std::int64_t>(t.tokens.size()));
    t.tokens.insert(t.tokens.end(), marker.begin(), marker.end());
    const auto answer_start = static_cast<std::int64_t>(t.tokens.size());
    t.tokens.insert(t.tokens.end(), key.begin(), key.end());
    for (std::size_t i = 0; i < key.size(); ++i) {
      t.answer_positions.push_back(answer_start - 1 + static_cast<std::int64_t>(i));
    }
    trials.push_back(std::move(t));
  }
  return trials;
}

}  // namespace oscar

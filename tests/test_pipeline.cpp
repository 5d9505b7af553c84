// End to end on stories260K: text file -> paragraphs -> tokenizer -> forward -> perplexity, against
// the figures the llama2.c C tools produced (models/stories260K/verification.json).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "oscar/file.h"
#include "oscar/model.h"
#include "oscar/text.h"
#include "oscar/tokenizer.h"
#include "test_support.h"

namespace oscar {
namespace {

TEST(Pipeline, ParagraphSplitMatchesReference) {
  OSCAR_REQUIRE_MODEL(dir, "stories260K");
  const std::string text_path = test::dataset_path("tinystories-valid-head.txt");
  if (text_path.empty()) GTEST_SKIP() << "tinystories-valid-head.txt not found";
  auto ref = nlohmann::json::parse(read_file(join_path(dir, "ref_tokens.json")));
  auto paragraphs = split_paragraphs(read_file(text_path));
  auto tokenizer = Tokenizer::from_file(join_path(dir, "tokenizer.json"));
  for (std::size_t i = 0; i < ref["paragraph_indices"].size(); ++i) {
    const std::size_t index = ref["paragraph_indices"][i];
    ASSERT_LT(index, paragraphs.size());
    EXPECT_EQ(paragraphs[index], ref["paragraphs"][i].get<std::string>()) << "paragraph " << index;
    EXPECT_EQ(tokenizer.encode(paragraphs[index]), ref["ids"][i].get<std::vector<std::int32_t>>());
  }
}

TEST(Pipeline, PerplexityOfFirst200ParagraphsMatchesLlama2c) {
  OSCAR_REQUIRE_MODEL(dir, "stories260K");
  const std::string text_path = test::dataset_path("tinystories-valid-head.txt");
  if (text_path.empty()) GTEST_SKIP() << "tinystories-valid-head.txt not found";
  auto verification = nlohmann::json::parse(read_file(join_path(dir, "verification.json")));
  const auto& expected = verification["perplexity_first_paragraphs"]["ppl2_c"];
  auto tokenizer = Tokenizer::from_file(join_path(dir, "tokenizer.json"));
  auto model = Model::load(dir, LoadOptions{torch::kFloat32});
  auto paragraphs = split_paragraphs(read_file(text_path));
  NllSum total;
  for (std::size_t i = 0; i < expected["paragraphs"].get<std::size_t>(); ++i) {
    auto ids = tokenizer.encode(paragraphs[i]);
    if (ids.size() > 512) ids.resize(512);
    auto s =
        model.score(torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.end())).unsqueeze(0));
    total.nll += s.nll;
    total.count += s.count;
  }
  EXPECT_EQ(total.count, expected["tokens"].get<std::int64_t>());
  // The C tool accumulates in float64 from float32 logits: agreement to ~1e-7 relative is expected;
  // 1e-5 leaves room for BLAS summation order.
  EXPECT_NEAR(total.perplexity(), expected["ppl"].get<double>(), 1e-5);
}

}  // namespace
}  // namespace oscar

// Calibration data: plain text, JSONL or pre-tokenized ids, tokenized and packed into sequences.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace oscar {

class Tokenizer;

enum class DataFormat {
  kAuto,        // by extension: .jsonl -> jsonl, .json -> ids, otherwise text (paragraphs if the
                // file has blank lines, else one document)
  kParagraphs,  // text; documents separated by blank lines
  kDocument,    // text; the whole file is one document
  kJsonl,       // one JSON object per line with a string field "text"
  kIds,         // JSON: an array of token ids, or an array of arrays (one per document)
};

DataFormat parse_data_format(const std::string& name);  // auto|paragraphs|document|jsonl|ids
const char* data_format_name(DataFormat format);

struct DataOptions {
  DataFormat format = DataFormat::kAuto;
  std::int64_t seq_len = 2048;
  std::int64_t tokens = 32768;  // at least this many tokens: ceil(tokens / seq_len) sequences
  // 0 keeps the documents in file order; any other value shuffles the document order with a
  // portable generator (splitmix64 + Fisher-Yates), so the packing is the same on every platform.
  std::uint64_t seed = 0;
  // Token every text document must start with (the model's BOS), prepended where the tokenizer's
  // post-processor does not add it, as the model saw documents in training; -1: none.
  std::int32_t bos_token = -1;
};

// Sequences packed from a dataset: documents are tokenized as the model's tokenizer does with
// special tokens (BOS where the tokenizer adds one), concatenated in (shuffled) document order and
// cut into windows of seq_len; the remainder is dropped.
struct CalibrationData {
  std::string name;                       // file base name
  std::string sha256;                     // of the file bytes
  DataFormat format = DataFormat::kAuto;  // the format actually read
  std::int64_t documents = 0;
  std::int64_t available_tokens = 0;  // tokens of the whole dataset
  std::int64_t seq_len = 0;
  std::vector<std::vector<std::int32_t>> sequences;  // each seq_len long
  std::int64_t tokens() const { return static_cast<std::int64_t>(sequences.size()) * seq_len; }
};

// Reads and packs `path`. Throws oscar::Error when the file is missing or malformed (naming the
// line), when ids fall outside the vocabulary, or when the dataset holds fewer tokens than asked
// (naming how many it has, so the user can lower --tokens).
CalibrationData load_calibration_data(const std::string& path, const Tokenizer& tokenizer,
                                      const DataOptions& options);

// The same for already tokenized documents (used by tests and the ids format).
CalibrationData pack_documents(std::vector<std::vector<std::int32_t>> documents,
                               const DataOptions& options);

}  // namespace oscar

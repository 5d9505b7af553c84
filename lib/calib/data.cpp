// Calibration data readers (text, JSONL, ids) and deterministic sequence packing.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <string_view>

#include "oscar/calibration_data.h"
#include "oscar/error.h"
#include "oscar/file.h"
#include "oscar/sha256.h"
#include "oscar/text.h"
#include "oscar/tokenizer.h"

namespace oscar {
namespace {

using nlohmann::json;

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// splitmix64: tiny, well-mixed and specified bit for bit, unlike std::shuffle's distributions.
std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

bool has_blank_line(std::string_view text) {
  for (std::size_t pos = text.find('\n'); pos != std::string_view::npos;
       pos = text.find('\n', pos + 1)) {
    std::size_t next = pos + 1;
    while (next < text.size() && (text[next] == ' ' || text[next] == '\t' || text[next] == '\r')) {
      ++next;
    }
    if (next < text.size() && text[next] == '\n') return true;
  }
  return false;
}

std::vector<std::string> read_jsonl(const std::string& text, const std::string& path) {
  std::vector<std::string> docs;
  std::size_t line_no = 0, start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    ++line_no;
    std::string_view line(text.data() + start, end - start);
    start = end + 1;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      fail("{}:{}: not valid JSON: {}", path, line_no, e.what());
    }
    OSCAR_CHECK(j.is_object() && j.contains("text") && j.at("text").is_string(),
                "{}:{}: expected an object with a string field \"text\"", path, line_no);
    docs.push_back(j.at("text").get<std::string>());
  }
  return docs;
}

std::vector<std::vector<std::int32_t>> read_ids(const std::string& text, const std::string& path,
                                                std::int32_t vocab_size) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON: {}", path, e.what());
  }
  OSCAR_CHECK(j.is_array(), "{}: expected a JSON array of token ids (or of arrays of ids)", path);
  std::vector<std::vector<std::int32_t>> docs;
  auto read_doc = [&](const json& arr, std::size_t doc_index) {
    std::vector<std::int32_t> ids;
    for (const json& v : arr) {
      OSCAR_CHECK(v.is_number_integer(), "{}: document {}: token ids must be integers", path,
                  doc_index);
      const auto id = v.get<std::int64_t>();
      OSCAR_CHECK(id >= 0 && id < vocab_size,
                  "{}: document {}: token id {} is outside the vocabulary [0, {})", path, doc_index,
                  id, vocab_size);
      ids.push_back(static_cast<std::int32_t>(id));
    }
    docs.push_back(std::move(ids));
  };
  if (!j.empty() && j.front().is_array()) {
    for (std::size_t i = 0; i < j.size(); ++i) {
      OSCAR_CHECK(j[i].is_array(), "{}: element {} is not an array of ids", path, i);
      read_doc(j[i], i);
    }
  } else {
    read_doc(j, 0);
  }
  return docs;
}

}  // namespace

DataFormat parse_data_format(const std::string& name) {
  if (name == "auto") return DataFormat::kAuto;
  if (name == "paragraphs") return DataFormat::kParagraphs;
  if (name == "document") return DataFormat::kDocument;
  if (name == "jsonl") return DataFormat::kJsonl;
  if (name == "ids") return DataFormat::kIds;
  fail("unknown data format '{}' (expected auto, paragraphs, document, jsonl or ids)", name);
}

const char* data_format_name(DataFormat format) {
  switch (format) {
    case DataFormat::kAuto:
      return "auto";
    case DataFormat::kParagraphs:
      return "paragraphs";
    case DataFormat::kDocument:
      return "document";
    case DataFormat::kJsonl:
      return "jsonl";
    case DataFormat::kIds:
      return "ids";
  }
  return "?";
}

CalibrationData pack_documents(std::vector<std::vector<std::int32_t>> documents,
                               const DataOptions& options) {
  OSCAR_CHECK(options.seq_len > 0, "sequence length must be positive (got {})", options.seq_len);
  OSCAR_CHECK(options.tokens > 0, "token count must be positive (got {})", options.tokens);
  if (options.seed != 0) {
    std::uint64_t state = options.seed;
    for (std::size_t i = documents.size(); i > 1; --i) {
      const std::size_t j = static_cast<std::size_t>(splitmix64(state) % i);
      std::swap(documents[i - 1], documents[j]);
    }
  }
  CalibrationData data;
  data.seq_len = options.seq_len;
  data.documents = static_cast<std::int64_t>(documents.size());
  for (const auto& doc : documents) data.available_tokens += static_cast<std::int64_t>(doc.size());
  const std::int64_t wanted = (options.tokens + options.seq_len - 1) / options.seq_len;
  const std::int64_t possible = data.available_tokens / options.seq_len;
  OSCAR_CHECK(possible >= wanted,
              "the calibration data holds {} tokens: {} sequences of {} tokens, but {} tokens "
              "({} sequences) were asked for; use --tokens {} or less, a shorter --seq-len, or "
              "more data",
              data.available_tokens, possible, options.seq_len, wanted * options.seq_len, wanted,
              possible * options.seq_len);
  std::vector<std::int32_t> current;
  current.reserve(options.seq_len);
  for (const auto& doc : documents) {
    for (std::int32_t id : doc) {
      current.push_back(id);
      if (static_cast<std::int64_t>(current.size()) == options.seq_len) {
        data.sequences.push_back(std::move(current));
        current = {};
        current.reserve(options.seq_len);
        if (static_cast<std::int64_t>(data.sequences.size()) == wanted) return data;
      }
    }
  }
  return data;
}

CalibrationData load_calibration_data(const std::string& path, const Tokenizer& tokenizer,
                                      const DataOptions& options) {
  OSCAR_CHECK(file_exists(path) && !is_directory(path), "calibration data '{}' does not exist",
              path);
  const std::string text = read_file(path);
  DataFormat format = options.format;
  if (format == DataFormat::kAuto) {
    if (ends_with(path, ".jsonl")) {
      format = DataFormat::kJsonl;
    } else if (ends_with(path, ".json")) {
      format = DataFormat::kIds;
    } else {
      format = has_blank_line(text) ? DataFormat::kParagraphs : DataFormat::kDocument;
    }
  }
  std::vector<std::vector<std::int32_t>> docs;
  if (format == DataFormat::kIds) {
    docs = read_ids(text, path, tokenizer.vocab_size());
  } else {
    std::vector<std::string> texts;
    if (format == DataFormat::kJsonl) {
      texts = read_jsonl(text, path);
    } else if (format == DataFormat::kParagraphs) {
      texts = split_paragraphs(text);
    } else {
      texts.push_back(text);
    }
    OSCAR_CHECK(!texts.empty(), "calibration data '{}' holds no text", path);
    docs.reserve(texts.size());
    for (const std::string& t : texts) {
      auto ids = tokenizer.encode(t);
      if (options.bos_token >= 0 && (ids.empty() || ids.front() != options.bos_token)) {
        ids.insert(ids.begin(), options.bos_token);
      }
      docs.push_back(std::move(ids));
    }
  }
  DataOptions resolved = options;
  resolved.format = format;
  CalibrationData data;
  try {
    data = pack_documents(std::move(docs), resolved);
  } catch (const Error& e) {
    fail("{}: {}", path, e.what());
  }
  data.name = base_name(path);
  data.sha256 = sha256_hex(text);
  data.format = format;
  return data;
}

}  // namespace oscar

// Paragraph splitting for plain-text corpora.
#include "oscar/text.h"

namespace oscar {

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

}  // namespace

std::vector<std::string> split_paragraphs(std::string_view text) {
  std::vector<std::string> out;
  std::string current;
  auto flush = [&]() {
    if (!current.empty()) out.push_back(std::move(current));
    current.clear();
  };
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (trim(line).empty()) {
      flush();
    } else {
      if (!current.empty()) current.push_back('\n');
      current.append(line);
    }
    pos = end + 1;
  }
  flush();
  return out;
}

}  // namespace oscar

// Plain-text corpus helpers shared by the apps: paragraph splitting as the evaluation scripts do
// it.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace oscar {

// Splits text into paragraphs separated by one or more blank (whitespace-only) lines. Each
// paragraph keeps its inner newlines, loses leading/trailing whitespace; empty paragraphs are
// dropped.
std::vector<std::string> split_paragraphs(std::string_view text);

}  // namespace oscar

// Plain-text corpus helpers shared by the apps (paragraph splitting).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace oscar {

// Splits text into paragraphs separated by one or more blank (whitespace-only) lines. A paragraph
// is its lines joined with a newline (a trailing carriage return of each line dropped), with spaces
// inside and at the ends of lines kept: the text is scored exactly as written, as the llama2.c
// perplexity tool does.
std::vector<std::string> split_paragraphs(std::string_view text);

}  // namespace oscar

// The one exit path of the command-line programs: runs a program's body and turns any exception
// into a single line "<program>: error: <message>" on stderr and exit status 1.
#pragma once

#include <fmt/core.h>

#include <cstdio>
#include <exception>
#include <string>
#include <utility>

#if __has_include(<c10/util/Exception.h>)
#include <c10/util/Exception.h>
#define OSCAR_APP_HAS_C10 1
#endif

namespace oscar_app {

// The message on one line: line breaks (Torch messages carry several) become "; ", trailing
// blanks go.
inline std::string one_line(std::string message) {
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  std::string out;
  out.reserve(message.size());
  for (const char c : message) {
    if (c == '\n') {
      out += "; ";
    } else {
      out += c;
    }
  }
  return out;
}

// Returns body()'s exit status, or 1 after printing the error of an exception it threw.
template <class Body>
int run_app(const char* program, Body&& body) {
  std::string message;
  try {
    return std::forward<Body>(body)();
#ifdef OSCAR_APP_HAS_C10
  } catch (const c10::Error& e) {
    message = e.what_without_backtrace();  // what() appends a stack trace
#endif
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception";
  }
  fmt::print(stderr, "{}: error: {}\n", program, one_line(message));
  return 1;
}

}  // namespace oscar_app

// The project's single exception type and the checks that raise it.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace oscar {

// Every failure in library code is reported as an oscar::Error whose message names the object at
// fault (file, tensor, key) and, where possible, what the user can do about it.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace oscar

// Throws oscar::Error with a formatted message when `cond` is false.
#define OSCAR_CHECK(cond, ...)    \
  do {                            \
    if (!(cond)) {                \
      ::oscar::fail(__VA_ARGS__); \
    }                             \
  } while (0)

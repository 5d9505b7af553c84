// Terminal progress for long work: a redrawn line on a terminal, sparse plain lines otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace oscar {

class Progress {
 public:
  // `total` units of work (e.g. tokens); `unit` names them in the rate ("tok/s").
  Progress(std::string label, std::int64_t total, std::string unit, bool enabled = true);
  ~Progress();

  void advance(std::int64_t units);
  void finish();  // prints the final line (idempotent)
  double elapsed_seconds() const;
  double rate() const;  // units per second so far

 private:
  void draw(bool final_line);
  std::string label_, unit_;
  std::int64_t total_, done_ = 0;
  bool enabled_, tty_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace oscar

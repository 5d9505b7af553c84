// Progress line with rate and ETA, written to stderr so stdout stays clean for reports and JSON.
#include "oscar/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace oscar {

Progress::Progress(std::string label, std::int64_t total, std::string unit, bool enabled)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(total),
      enabled_(enabled),
      tty_(::isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

double Progress::elapsed_seconds() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

double Progress::rate() const {
  double s = elapsed_seconds();
  return s > 0 ? static_cast<double>(done_) / s : 0.0;
}

void Progress::advance(std::int64_t units) {
  done_ += units;
  auto now = std::chrono::steady_clock::now();
  // Redraw a terminal line 10 times a second; write a plain line every 10 s to logs.
  double since = std::chrono::duration<double>(now - last_draw_).count();
  if (since >= (tty_ ? 0.1 : 10.0)) {
    last_draw_ = now;
    draw(false);
  }
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(true);
}

void Progress::draw(bool final_line) {
  if (!enabled_) return;
  double r = rate();
  double pct = total_ > 0 ? 100.0 * static_cast<double>(done_) / static_cast<double>(total_) : 0.0;
  std::string eta = "--";
  if (r > 0 && total_ > done_) {
    eta = fmt::format("{:.0f}s", static_cast<double>(total_ - done_) / r);
  }
  std::string line = fmt::format("{}: {}/{} {} ({:.1f}%) {:.1f} {}/s, {} {}", label_, done_, total_,
                                 unit_, pct, r, unit_, final_line ? "elapsed" : "ETA",
                                 final_line ? fmt::format("{:.1f}s", elapsed_seconds()) : eta);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s%s", line.c_str(), final_line ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
}

}  // namespace oscar

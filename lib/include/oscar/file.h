// File access used across the project: read-only memory maps, whole-file reads, atomic writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace oscar {

// A read-only memory map of a whole file. Pages are loaded on demand, so large checkpoints are
// never copied into memory as a whole. Movable, not copyable.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::uint8_t* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  void release();
  std::string path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

// Reads a whole file; throws oscar::Error naming the path when it cannot.
std::string read_file(const std::string& path);

// Writes `bytes` to `path` atomically: a temporary file in the same directory is written, flushed
// to disk and renamed over `path`, and the directory is flushed, so readers never see a partial
// file and a failed write leaves none. The temporary file is unnamed while it is written (Linux
// O_TMPFILE, where the file system supports it), so even a killed process leaves no stray file,
// unless it was killed in the instant between naming that file and renaming it: each write then
// removes such files of earlier writes to the same path whose process is gone.
void write_file_atomic(const std::string& path, std::string_view bytes);

// Fails early (before any long work) when `path` cannot be created: its directory is missing or
// not writable, or it names a directory. `what` names the output in the message. Empty: no-op.
void check_writable(const std::string& path, const char* what);

bool file_exists(const std::string& path);
bool is_directory(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

}  // namespace oscar

// Memory maps, whole-file reads and atomic writes (POSIX).
#include "oscar/file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include "oscar/error.h"

namespace oscar {

namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  OSCAR_CHECK(fd >= 0, "cannot open '{}': {}", path, errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    std::string why = errno_text();
    ::close(fd);
    fail("cannot stat '{}': {}", path, why);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("'{}' is not a regular file", path);
  }
  size_ = static_cast<std::size_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      std::string why = errno_text();
      ::close(fd);
      fail("cannot map '{}': {}", path, why);
    }
    data_ = static_cast<const std::uint8_t*>(p);
  }
  ::close(fd);  // the mapping stays valid after the descriptor is closed
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void MappedFile::release() {
  if (data_ != nullptr) {
    ::munmap(const_cast<std::uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
  }
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  OSCAR_CHECK(in.good(), "cannot open '{}': {}", path, errno_text());
  std::ostringstream ss;
  ss << in.rdbuf();
  OSCAR_CHECK(!in.bad(), "error while reading '{}'", path);
  return ss.str();
}

namespace {

// Writes all of `bytes` to `fd` and flushes it to disk; false (errno set) on failure.
bool write_all_and_sync(int fd, std::string_view bytes) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  return ::fsync(fd) == 0;
}

std::string directory_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Makes a rename inside `dir` durable: without this a crash shortly after the rename can bring
// back the old directory entry (or none) although the file's data were synced. A directory we may
// write but not read cannot be opened; the file is in place then, only less durable.
void sync_directory(const std::string& dir, const std::string& path) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  const bool ok = ::fsync(fd) == 0 || errno == EINVAL;  // EINVAL: the file system cannot sync dirs
  const std::string why = errno_text();
  ::close(fd);
  OSCAR_CHECK(ok, "cannot sync directory '{}' after writing '{}': {}", dir, path, why);
}

// Writes the data into an unnamed file of `dir` (O_TMPFILE) and gives it the name `tmp` only once
// it is complete and synced, so that a process killed while writing leaves nothing behind. False
// when the file system or kernel does not support it (nothing was created then).
bool write_unnamed_then_link(const std::string& dir, const std::string& tmp,
                             const std::string& path, std::string_view bytes) {
#ifdef O_TMPFILE
  const int fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  if (!write_all_and_sync(fd, bytes)) {
    const std::string why = errno_text();
    ::close(fd);  // the unnamed file disappears with its descriptor
    fail("cannot write '{}': {}", path, why);
  }
  // Naming an O_TMPFILE file needs linkat through /proc (AT_EMPTY_PATH needs a capability).
  const std::string proc = fmt::format("/proc/self/fd/{}", fd);
  const bool linked =
      ::linkat(AT_FDCWD, proc.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) == 0;
  ::close(fd);
  return linked;
#else
  (void)dir, (void)tmp, (void)path, (void)bytes;
  return false;
#endif
}

// The process id in `name` when it is a temporary file of write_file_atomic for a file named
// `base` (`<base>.tmp.<pid>.<8 hex digits>`), else -1.
long temporary_writer_pid(const std::string& name, const std::string& base) {
  const std::string prefix = base + ".tmp.";
  if (name.size() <= prefix.size() + 9 || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::size_t dot = name.size() - 9;
  if (name[dot] != '.') return -1;
  for (std::size_t i = dot + 1; i < name.size(); ++i) {
    if (std::isxdigit(static_cast<unsigned char>(name[i])) == 0) return -1;
  }
  long pid = 0;
  for (std::size_t i = prefix.size(); i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid > 0 ? pid : -1;
}

// Removes the temporary files of earlier writes to `path` whose writer no longer runs on this
// machine. O_TMPFILE keeps a file unnamed while it is written, but a writer killed between naming
// it and renaming it over `path` (microseconds, and every write of a run that saves often) leaves
// it, and no later write would ever take it away. A live writer's file, or one whose process
// cannot be probed, is left alone. Best effort: errors are ignored.
void remove_stale_temporaries(const std::string& dir, const std::string& path) {
  const auto slash = path.rfind('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (const dirent* e = ::readdir(d)) {
    const long pid = temporary_writer_pid(e->d_name, base);
    if (pid < 0 || pid == static_cast<long>(::getpid())) continue;
    if (::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    ::unlinkat(::dirfd(d), e->d_name, 0);
  }
  ::closedir(d);
}

}  // namespace

void write_file_atomic(const std::string& path, std::string_view bytes) {
  std::random_device rd;
  const std::string tmp = fmt::format("{}.tmp.{}.{:08x}", path, ::getpid(), rd());
  const std::string dir = directory_of(path);
  if (!write_unnamed_then_link(dir, tmp, path, bytes)) {
    // Fallback: a named temporary file, removed again on any error.
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    OSCAR_CHECK(fd >= 0, "cannot create '{}': {}", tmp, errno_text());
    if (!write_all_and_sync(fd, bytes)) {
      const std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("cannot write '{}': {}", path, why);
    }
    if (::close(fd) != 0) {
      const std::string why = errno_text();
      ::unlink(tmp.c_str());
      fail("cannot flush '{}': {}", path, why);
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = errno_text();
    ::unlink(tmp.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp, path, why);
  }
  sync_directory(dir, path);
  remove_stale_temporaries(dir, path);
}

bool file_exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

void check_writable(const std::string& path, const char* what) {
  if (path.empty()) return;
  OSCAR_CHECK(!is_directory(path), "{} '{}' is a directory; give a file name", what, path);
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  OSCAR_CHECK(is_directory(dir), "cannot write {} '{}': directory '{}' does not exist", what, path,
              dir);
  OSCAR_CHECK(::access(dir.c_str(), W_OK) == 0,
              "cannot write {} '{}': directory '{}' is not writable", what, path, dir);
}

}  // namespace oscar

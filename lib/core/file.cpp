// Memory maps, whole-file reads and atomic writes (POSIX).
#include "oscar/file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

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

void write_file_atomic(const std::string& path, std::string_view bytes) {
  std::random_device rd;
  const std::string tmp = fmt::format("{}.tmp.{}.{:08x}", path, ::getpid(), rd());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  OSCAR_CHECK(fd >= 0, "cannot create '{}': {}", tmp, errno_text());
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string why = errno_text();
      ::close(fd);
      ::unlink(tmp.c_str());
      fail("cannot write '{}': {}", path, why);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    fail("cannot flush '{}': {}", path, why);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    std::string why = errno_text();
    ::unlink(tmp.c_str());
    fail("cannot rename '{}' to '{}': {}", tmp, path, why);
  }
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

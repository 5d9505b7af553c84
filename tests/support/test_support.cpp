// Implementation of the shared test helpers.
#include "test_support.h"

#include <dirent.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace oscar::test {

namespace {

bool is_dir(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::string data_root() {
  const char* v = std::getenv("OSCAR_TEST_DATA");
  if (v != nullptr && *v != '\0') return is_dir(v) ? v : "";
  return is_dir(OSCAR_TEST_DATA_DEFAULT) ? OSCAR_TEST_DATA_DEFAULT : "";
}

std::string model_dir(const std::string& name) {
  std::string root = data_root();
  if (root.empty()) return "";
  std::string p = root + "/models/" + name;
  return is_dir(p) ? p : "";
}

std::string dataset_path(const std::string& name) {
  std::string root = data_root();
  if (root.empty()) return "";
  std::string p = root + "/datasets/" + name;
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? p : "";
}

std::string source_dir() { return OSCAR_TEST_SOURCE_DIR; }

TempDir::TempDir() {
  // POSIX calls rather than std::filesystem: some LibTorch builds carry their own copy of
  // libstdc++'s filesystem symbols, and mixing the two crashes.
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/oscar-test-XXXXXX";
  char* p = ::mkdtemp(tmpl.data());
  if (p == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = p;
}

TempDir::~TempDir() {
  auto remove = [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); };
  ::nftw(path_.c_str(), remove, 16, FTW_DEPTH | FTW_PHYS);
}

}  // namespace oscar::test

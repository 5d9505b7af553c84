// Implementation of the shared test helpers.
#include "test_support.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

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
  return std::filesystem::exists(p) ? p : "";
}

std::string source_dir() { return OSCAR_TEST_SOURCE_DIR; }

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "oscar-test-XXXXXX").string();
  char* p = ::mkdtemp(tmpl.data());
  if (p == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = p;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace oscar::test

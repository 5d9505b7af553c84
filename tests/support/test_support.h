// Helpers shared by the tests: where the shared models and datasets live, temporary directories.
#pragma once

#include <gtest/gtest.h>

#include <string>

namespace oscar::test {

// Root of the shared data tree (models/, datasets/): $OSCAR_TEST_DATA, else the build's default
// (../shared beside the checkout). Empty when the chosen one does not exist.
std::string data_root();

// Path of a shared model directory, or "" when it is absent.
std::string model_dir(const std::string& name);

// Path of a shared dataset file, or "" when it is absent.
std::string dataset_path(const std::string& name);

// Directory of the test sources (tests/), for checked-in fixtures under tests/data.
std::string source_dir();

// A fresh directory under the system temp dir, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

}  // namespace oscar::test

// Skips the current test (visibly) when a shared model is absent.
#define OSCAR_REQUIRE_MODEL(var, name)                                                     \
  const std::string var = ::oscar::test::model_dir(name);                                  \
  if (var.empty()) {                                                                       \
    GTEST_SKIP() << "model '" << name << "' not found (set OSCAR_TEST_DATA to the shared " \
                 << "data tree)";                                                          \
  }

// Writes a synthetic rotation bundle and the config.json of its model (for the install test).
#include <cstdio>
#include <exception>
#include <string>

#include "oscar/bundle.h"
#include "oscar/file.h"
#include "synthetic_bundle.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s BUNDLE_OUT CONFIG_JSON_OUT\n", argv[0]);
    return 2;
  }
  try {
    const oscar::test::SyntheticBundleOptions options;
    oscar::Bundle bundle = oscar::test::synthetic_bundle(options);
    oscar::write_file_atomic(argv[2], oscar::test::synthetic_config_json(options));
    oscar::write_bundle(argv[1], bundle);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "oscar-make-test-bundle: %s\n", e.what());
    return 1;
  }
  return 0;
}

#!/usr/bin/env bash
# Installs the runtime package into a temporary prefix, checks what was installed (files, shared
# library dependencies, exported symbols), builds examples/ against it through find_package(oscar)
# and through pkg-config (plus a C++17 file on oscar/runtime.h), and runs the example on a synthetic
# bundle. Usage: test_install.sh BUILD_DIR SOURCE_DIR MAKE_TEST_BUNDLE [plain|sanitized]
# (exit 77: skipped).
set -uo pipefail
build=$1
src=$2
make_bundle=$3
source "$src/tests/cli/common.sh"

if [ "${4:-plain}" = sanitized ]; then
  # The installed library would need the sanitizer runtime preloaded in every program using it.
  echo "skipped: sanitizer build (the plain build runs this test)"
  exit 77
fi

for tool in cmake cc c++ pkg-config readelf nm; do
  if ! command -v "$tool" >/dev/null; then
    echo "skipped: $tool not found"
    exit 77
  fi
done
if [ ! -x "$make_bundle" ]; then
  echo "FAIL: $make_bundle is not built"
  exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
log=$tmp/log

# Runs a step quietly; on failure prints its output.
step() {
  local name=$1
  shift
  if "$@" >"$log" 2>&1; then
    pass=$((pass + 1))
  else
    echo "FAIL $name:"
    tail -n 30 "$log"
    fails=$((fails + 1))
    return 1
  fi
}

# 1. Install the runtime and development components only.
step install-runtime cmake --install "$build" --prefix "$prefix" --component runtime || exit 1
step install-devel cmake --install "$build" --prefix "$prefix" --component devel || exit 1
installed=$(cd "$prefix" && find . \( -type f -o -type l \) | sed 's|^\./||' | sort)
unexpected=$(grep -vE '^(include/oscar/(oscar_runtime|runtime)\.h|lib[^/]*(/[^/]+)?/(liboscar_runtime\.so(\.[0-9]+)*|pkgconfig/oscar-runtime\.pc|cmake/oscar/oscar(Config|ConfigVersion|Targets|Targets-[a-z]+)\.cmake))$' <<<"$installed")
check "only the runtime is installed (unexpected: ${unexpected:-none})" "$([ -z "$unexpected" ]; echo $?)"
lib=$(find "$prefix" -name 'liboscar_runtime.so.*.*' -type f | head -n 1)
pc=$(find "$prefix" -name oscar-runtime.pc | head -n 1)
if [ -z "$lib" ] || [ -z "$pc" ]; then
  echo "FAIL: installed files missing:"
  echo "$installed"
  exit 1
fi
libdir=$(dirname "$lib")

# 2. The library needs nothing of LibTorch or CUDA and exports its C ABI only.
needed=$(readelf -d "$lib" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
foreign=$(grep -vE '^(libfmt\.so|libstdc\+\+\.so|libm\.so|libgcc_s\.so|libc\.so|ld-linux)' <<<"$needed")
check "shared-library dependencies are system libraries (others: ${foreign:-none})" \
  "$([ -z "$foreign" ]; echo $?)"
exports=$(nm -D --defined-only "$lib" | awk '{print $3}')
extra=$(grep -vE '^(oscar_runtime_[a-z0-9_]+|oscar_status_string)$' <<<"$exports" | head -n 5)
check "only the C ABI is exported (others: ${extra:-none})" "$([ -z "$extra" ]; echo $?)"

# 3. A bundle and the config.json of its model.
step make-bundle "$make_bundle" "$tmp/b.oscar" "$tmp/config.json" || exit 1

# 4. examples/ out of tree through find_package(oscar).
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
step cmake-configure cmake -S "$src/examples" -B "$tmp/ex" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Werror
step cmake-build cmake --build "$tmp/ex"
ex=$tmp/ex/oscar-runtime-example
if [ -x "$ex" ]; then
  out=$("$ex" "$tmp/b.oscar" --config "$tmp/config.json" 2>&1)
  rc=$?
  if [ $rc -eq 0 ] && grep -q "validated  against config.json" <<<"$out" &&
    grep -q "keys   relative L2 error mean" <<<"$out"; then
    pass=$((pass + 1))
  else
    echo "FAIL example run: rc=$rc output: $out"
    fails=$((fails + 1))
  fi
  step example-dimensions "$ex" "$tmp/b.oscar" --layers 2 --heads 4 --kv-heads 2 --head-dim 16 \
    --arch LlamaForCausalLM --rope-theta 10000
  expect_fail mismatch "head_dim 16 (bundle) vs 32 (model)" \
    "$ex" "$tmp/b.oscar" --layers 2 --heads 4 --kv-heads 2 --head-dim 32
  sed 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$tmp/config.json" >"$tmp/deeper.json"
  expect_fail config-mismatch "layers 2 (bundle) vs 3 (model)" \
    "$ex" "$tmp/b.oscar" --config "$tmp/deeper.json" --skip-hashes
  expect_fail missing-bundle "does not exist" "$ex" "$tmp/none.oscar" --config "$tmp/config.json"
  head -c 1000 "$tmp/b.oscar" >"$tmp/trunc.oscar"
  expect_fail truncated-bundle "trunc.oscar" "$ex" "$tmp/trunc.oscar" --config "$tmp/config.json"
  expect_fail usage "describe the model one way" "$ex" "$tmp/b.oscar"
fi

# 5. The same program through pkg-config, then a C++17 file on the header-only C++ API.
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pc")
read -r -a cflags <<<"$(pkg-config --cflags oscar-runtime)"
read -r -a libs <<<"$(pkg-config --libs oscar-runtime)"
step pkg-config-build cc -std=c99 -Wall -Wextra -pedantic -Werror "${cflags[@]}" \
  "$src/examples/runtime_example.c" -o "$tmp/ex-pc" "${libs[@]}" -lm
step pkg-config-run env LD_LIBRARY_PATH="$libdir" "$tmp/ex-pc" "$tmp/b.oscar" \
  --config "$tmp/config.json"
cat >"$tmp/cpp_api.cpp" <<'CPP'
// Uses the installed C++ API alone.
#include <cstdio>
#include "oscar/runtime.h"
int main(int argc, char** argv) {
  try {
    const oscar::runtime::Runtime r = oscar::runtime::Runtime::open(argv[1]);
    r.validate_config(argv[2]);
    std::printf("head_dim %lld\n", static_cast<long long>(r.head_dim()));
    oscar::runtime::Runtime::open(argv[3]);
  } catch (const oscar::runtime::Error& e) {
    std::printf("error %d: %s\n", static_cast<int>(e.status()), e.what());
    return argc == 4 ? 0 : 1;
  }
  return 1;
}
CPP
step cpp-api-build c++ -std=c++17 -Wall -Wextra -Werror "${cflags[@]}" "$tmp/cpp_api.cpp" \
  -o "$tmp/cpp-api" "${libs[@]}"
out=$(LD_LIBRARY_PATH="$libdir" "$tmp/cpp-api" "$tmp/b.oscar" "$tmp/config.json" "$tmp/none" 2>&1)
if grep -q "head_dim 16" <<<"$out" && grep -q "error 2: bundle '$tmp/none' does not exist" <<<"$out"; then
  pass=$((pass + 1))
else
  echo "FAIL cpp-api run: $out"
  fails=$((fails + 1))
fi

# 6. The installed tree is relocatable: pkg-config paths follow the .pc file.
mv "$prefix" "$tmp/moved"
PKG_CONFIG_PATH=${PKG_CONFIG_PATH/$prefix/$tmp/moved}
moved_libdir=$(pkg-config --variable=libdir oscar-runtime)
check "pkg-config follows a moved prefix ($moved_libdir)" \
  "$([ -e "$moved_libdir/liboscar_runtime.so" ]; echo $?)"

echo "$pass passed, $fails failed"
[ $fails -eq 0 ]

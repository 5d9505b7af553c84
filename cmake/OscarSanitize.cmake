# Sanitizer instrumentation of everything the project compiles itself (its libraries, apps and
# tests; prebuilt dependencies such as LibTorch stay uninstrumented).
#   OSCAR_SANITIZE="address;undefined": the whole project under ASan + UBSan (any compiler).
#   OSCAR_FUZZ=ON: the Torch-free parsers built for libFuzzer (clang only); the fuzz targets add
#   -fsanitize=fuzzer at link time themselves (tests/fuzz).
# UBSan findings abort (-fno-sanitize-recover) so that a test with undefined behaviour fails
# instead of printing a line nobody reads.
if(OSCAR_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "OSCAR_FUZZ=ON needs clang (libFuzzer): configure with "
                        "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  set(OSCAR_SANITIZE_FLAGS -fsanitize=fuzzer-no-link,address,undefined)
  set(OSCAR_SANITIZE_LINK_FLAGS -fsanitize=address,undefined)
elseif(OSCAR_SANITIZE)
  list(JOIN OSCAR_SANITIZE "," oscar_sanitizers)
  # -O1: instrumented code compiles about twice as fast as at -O3 (63 s vs 31 s for
  # tests/test_model.cpp with GCC 12), and the tests spend their time in uninstrumented LibTorch.
  set(OSCAR_SANITIZE_FLAGS -fsanitize=${oscar_sanitizers} -O1)
  set(OSCAR_SANITIZE_LINK_FLAGS -fsanitize=${oscar_sanitizers})
  message(STATUS "oscar: sanitizers ${oscar_sanitizers}")
endif()
if(OSCAR_SANITIZE_FLAGS)
  # -g1: line tables for readable reports at little compile-time cost. The prefix map writes the
  # source tree's path as "." into them, so the objects do not depend on where the clone is and
  # ccache shares them between clones (with debug info it otherwise keys on the directory).
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:C,CXX>:${OSCAR_SANITIZE_FLAGS};-fno-sanitize-recover=all;-fno-omit-frame-pointer;-g1;-fdebug-prefix-map=${CMAKE_SOURCE_DIR}=.>")
  add_link_options(${OSCAR_SANITIZE_LINK_FLAGS})
endif()

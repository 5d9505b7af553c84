# Finds the project's dependencies: LibTorch, fmt, CLI11, nlohmann-json, PCRE2, utf8proc, GoogleTest.
if(NOT OSCAR_FUZZ)
  find_package(Torch REQUIRED)
endif()
find_package(fmt REQUIRED)
find_package(CLI11 REQUIRED)
find_package(nlohmann_json 3.9 REQUIRED)
find_package(Threads REQUIRED)

# PCRE2 (8-bit code units, UTF and Unicode properties) for pre-tokenizer regexes.
find_path(PCRE2_INCLUDE_DIR pcre2.h REQUIRED)
find_library(PCRE2_LIBRARY NAMES pcre2-8 REQUIRED)
add_library(oscar_pcre2 INTERFACE)
target_include_directories(oscar_pcre2 SYSTEM INTERFACE ${PCRE2_INCLUDE_DIR})
target_link_libraries(oscar_pcre2 INTERFACE ${PCRE2_LIBRARY})
target_compile_definitions(oscar_pcre2 INTERFACE PCRE2_CODE_UNIT_WIDTH=8)

# utf8proc for Unicode normalization (NFC/NFD/NFKC/NFKD normalizers).
find_path(UTF8PROC_INCLUDE_DIR utf8proc.h REQUIRED)
find_library(UTF8PROC_LIBRARY NAMES utf8proc REQUIRED)
add_library(oscar_utf8proc INTERFACE)
target_include_directories(oscar_utf8proc SYSTEM INTERFACE ${UTF8PROC_INCLUDE_DIR})
target_link_libraries(oscar_utf8proc INTERFACE ${UTF8PROC_LIBRARY})

if(OSCAR_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()

set(oscar_torch_text "LibTorch ${Torch_VERSION}")
if(OSCAR_FUZZ)
  set(oscar_torch_text "no LibTorch (fuzzing build)")
endif()
message(STATUS "oscar: ${oscar_torch_text}, fmt ${fmt_VERSION}, CLI11 ${CLI11_VERSION}, "
               "nlohmann_json ${nlohmann_json_VERSION}")

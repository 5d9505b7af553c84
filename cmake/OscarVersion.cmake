# Records the tool version and git commit so outputs can name what produced them.
find_package(Git QUIET)
set(OSCAR_GIT_COMMIT "unknown")
if(GIT_FOUND AND EXISTS ${CMAKE_SOURCE_DIR}/.git)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse HEAD WORKING_DIRECTORY ${CMAKE_SOURCE_DIR}
                  OUTPUT_VARIABLE OSCAR_GIT_COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT OSCAR_GIT_COMMIT)
    set(OSCAR_GIT_COMMIT "unknown")
  endif()
endif()
configure_file(${CMAKE_SOURCE_DIR}/lib/core/version.cpp.in ${CMAKE_BINARY_DIR}/generated/version.cpp @ONLY)

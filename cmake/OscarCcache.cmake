# Compiler cache: with ccache installed, every C, C++ and CUDA compilation goes through it, so a
# rebuild of unchanged sources (another clone, a cleaned build directory, CI on the same machine)
# takes seconds instead of minutes. OSCAR_CCACHE=OFF compiles directly.
option(OSCAR_CCACHE "Compile through ccache when it is installed" ON)
if(OSCAR_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(OSCAR_CCACHE_PROGRAM ccache)
  if(OSCAR_CCACHE_PROGRAM)
    # base_dir: paths under the source tree are hashed relative to it, so clones at other paths
    # share the cache (sources that embed an absolute path through a -D define still differ).
    # sloppiness: the shared LibTorch PCH is included with -include; its object and the
    # translation units that use it stay cacheable (ccache's documented settings for GCC PCHs).
    set(oscar_ccache_launcher
        ${CMAKE_COMMAND} -E env CCACHE_BASEDIR=${CMAKE_SOURCE_DIR}
        CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
        ${OSCAR_CCACHE_PROGRAM})
    set(CMAKE_C_COMPILER_LAUNCHER ${oscar_ccache_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${oscar_ccache_launcher})
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${oscar_ccache_launcher})
    message(STATUS "oscar: compiling through ${OSCAR_CCACHE_PROGRAM}")
  endif()
endif()

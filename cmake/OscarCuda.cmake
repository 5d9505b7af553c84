# Optional CUDA language support: kernels build only when nvcc is present (or OSCAR_CUDA=ON).
# Architectures are kept in OSCAR_CUDA_ARCHITECTURES and set on each CUDA target, because LibTorch's
# CMake package rewrites the global CMAKE_CUDA_ARCHITECTURES. Default: Hopper-specific code (sm_90a,
# for wgmma/TMA paths) plus sm_80 code and PTX as the portable target; without this nvcc builds sm_75.
set(OSCAR_HAVE_CUDA OFF)
set(OSCAR_CUDA_ARCHITECTURES "90a-real;80" CACHE STRING "CUDA architectures of the project's kernels")
if(NOT OSCAR_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES ${OSCAR_CUDA_ARCHITECTURES})
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    set(OSCAR_HAVE_CUDA ON)
    message(STATUS "oscar: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, kernel architectures "
                   "${OSCAR_CUDA_ARCHITECTURES}")
  elseif(OSCAR_CUDA STREQUAL "ON")
    message(FATAL_ERROR "OSCAR_CUDA=ON but no CUDA compiler (nvcc) was found")
  else()
    message(STATUS "oscar: no CUDA compiler found; CUDA kernels are skipped")
  endif()
endif()

# Applies the project's CUDA architectures and flags to a CUDA target.
function(oscar_cuda_target target)
  set_target_properties(${target} PROPERTIES CUDA_ARCHITECTURES "${OSCAR_CUDA_ARCHITECTURES}"
                                             CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON)
endfunction()

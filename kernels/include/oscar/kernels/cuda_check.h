// Checks for CUDA runtime, cuBLAS and cuSOLVER calls in kernels code: on failure they record a
// readable message (thread-local, see last_error_message) and return Status::kCudaError.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <cusolver_common.h>

#include "oscar/kernels/device.h"

namespace oscar::kernels {

// The message of the last failure recorded on this thread by a check below or by set_last_error
// ("" when none). Kernels return a bare Status; this says which call failed, where and why, so a
// caller can put it in its own exception.
const char* last_error_message();

// Records `message` (printf-style) as this thread's last error.
void set_last_error(const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

void clear_last_error();

namespace detail {

// Each overload returns true on success and otherwise records "<api> error <code> (<name>: <text>)
// in <expr> at <file>:<line>". Overloading on the status type is what lets one macro serve every
// library.
bool check_call(cudaError_t status, const char* expr, const char* file, int line);
bool check_call(cublasStatus_t status, const char* expr, const char* file, int line);
bool check_call(cusolverStatus_t status, const char* expr, const char* file, int line);

}  // namespace detail
}  // namespace oscar::kernels

// Evaluates a CUDA runtime / cuBLAS / cuSOLVER call once; on failure records the message and
// returns Status::kCudaError from the enclosing function (which must return Status).
#define OSCAR_CUDA_CHECK(call)                                                      \
  do {                                                                              \
    if (!::oscar::kernels::detail::check_call((call), #call, __FILE__, __LINE__)) { \
      return ::oscar::kernels::Status::kCudaError;                                  \
    }                                                                               \
  } while (0)

// The same check as an expression: true on success, false (message recorded) on failure, for code
// that must go on after a failure instead of returning.
#define OSCAR_CUDA_OK(call) \
  (::oscar::kernels::detail::check_call((call), #call, __FILE__, __LINE__))

// Readable, thread-local error messages for failed CUDA runtime, cuBLAS and cuSOLVER calls.
#include "oscar/kernels/cuda_check.h"

#include <cstdarg>
#include <cstdio>
#include <string>

namespace oscar::kernels {
namespace {

// Per thread, so concurrent callers on different streams never see each other's failures.
thread_local std::string last_error;

const char* cusolver_status_name(cusolverStatus_t status) {
  switch (status) {
    case CUSOLVER_STATUS_SUCCESS:
      return "CUSOLVER_STATUS_SUCCESS";
    case CUSOLVER_STATUS_NOT_INITIALIZED:
      return "CUSOLVER_STATUS_NOT_INITIALIZED";
    case CUSOLVER_STATUS_ALLOC_FAILED:
      return "CUSOLVER_STATUS_ALLOC_FAILED";
    case CUSOLVER_STATUS_INVALID_VALUE:
      return "CUSOLVER_STATUS_INVALID_VALUE";
    case CUSOLVER_STATUS_ARCH_MISMATCH:
      return "CUSOLVER_STATUS_ARCH_MISMATCH";
    case CUSOLVER_STATUS_MAPPING_ERROR:
      return "CUSOLVER_STATUS_MAPPING_ERROR";
    case CUSOLVER_STATUS_EXECUTION_FAILED:
      return "CUSOLVER_STATUS_EXECUTION_FAILED";
    case CUSOLVER_STATUS_INTERNAL_ERROR:
      return "CUSOLVER_STATUS_INTERNAL_ERROR";
    case CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_MATRIX_TYPE_NOT_SUPPORTED";
    case CUSOLVER_STATUS_NOT_SUPPORTED:
      return "CUSOLVER_STATUS_NOT_SUPPORTED";
    case CUSOLVER_STATUS_INVALID_WORKSPACE:
      return "CUSOLVER_STATUS_INVALID_WORKSPACE";
    default:
      return "unrecognized cuSOLVER status";
  }
}

void record(const char* api, int code, const char* name, const char* text, const char* expr,
            const char* file, int line) {
  set_last_error("%s error %d (%s%s%s) in %s at %s:%d", api, code, name, text ? ": " : "",
                 text ? text : "", expr, file, line);
}

}  // namespace

const char* last_error_message() { return last_error.c_str(); }

void set_last_error(const char* format, ...) {
  char buffer[1024];
  va_list args;
  va_start(args, format);
  std::vsnprintf(buffer, sizeof(buffer), format, args);
  va_end(args);
  last_error = buffer;
}

void clear_last_error() { last_error.clear(); }

namespace detail {

bool check_call(cudaError_t status, const char* expr, const char* file, int line) {
  if (status == cudaSuccess) return true;
  // Reset the runtime's own last-error slot so a later cudaGetLastError() check does not report
  // this failure a second time (sticky errors stay; nothing can clear those).
  cudaGetLastError();
  record("CUDA", static_cast<int>(status), cudaGetErrorName(status), cudaGetErrorString(status),
         expr, file, line);
  return false;
}

bool check_call(cublasStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS) return true;
  record("cuBLAS", static_cast<int>(status), cublasGetStatusName(status),
         cublasGetStatusString(status), expr, file, line);
  return false;
}

bool check_call(cusolverStatus_t status, const char* expr, const char* file, int line) {
  if (status == CUSOLVER_STATUS_SUCCESS) return true;
  record("cuSOLVER", static_cast<int>(status), cusolver_status_name(status), nullptr, expr, file,
         line);
  return false;
}

}  // namespace detail
}  // namespace oscar::kernels

// CPU thread limits for LibTorch and OpenBLAS (oscar/cpu_threads.h). OpenBLAS is reached through
// the process's symbol table, since LibTorch links it behind libblas and this project never does.
#include "oscar/cpu_threads.h"

#include <dlfcn.h>
#include <torch/torch.h>

namespace oscar {

namespace {

using SetThreads = void (*)(int);
using GetThreads = int (*)();

template <typename Fn>
Fn blas_symbol(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_DEFAULT, name));
}

}  // namespace

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
  torch::set_num_threads(threads);
  if (const auto set_blas = blas_symbol<SetThreads>("openblas_set_num_threads")) set_blas(threads);
}

CpuThreads cpu_threads() {
  CpuThreads t;
  t.torch = torch::get_num_threads();
  if (const auto get_blas = blas_symbol<GetThreads>("openblas_get_num_threads"))
    t.blas = get_blas();
  return t;
}

}  // namespace oscar

// CPU threads of the LibTorch programs: LibTorch's intra-op pool and the BLAS library under it.
#pragma once

namespace oscar {

// What a process's CPU pools are set to (0 where a pool is not there to ask).
struct CpuThreads {
  int torch = 0;  // LibTorch's intra-op threads
  int blas = 0;   // OpenBLAS's threads, 0 when the process does not use OpenBLAS
};

// Limits the process to `threads` CPU threads (> 0; 0 or less changes nothing): LibTorch's
// intra-op pool and, when LibTorch's BLAS is OpenBLAS (Debian's libtorch-dev), OpenBLAS's own
// pool, which otherwise takes every core whatever LibTorch was told. Its threads wait by spinning,
// so a pool of every core beside another busy process (a second test, a build) spends most of the
// wall time waiting: stories260K calibration 22-28 s instead of 4 s on a loaded 2-core machine.
// LibTorch's MKL, where it has one, follows torch::set_num_threads already.
void set_cpu_threads(int threads);

CpuThreads cpu_threads();

// The --threads option's help, the same in every program.
inline constexpr const char* kCpuThreadsHelp =
    "CPU threads of LibTorch and of OpenBLAS under it (0: their defaults; with OpenBLAS and more "
    "than one thread, OMP_WAIT_POLICY=passive keeps LibTorch's idle threads off the cores)";

}  // namespace oscar

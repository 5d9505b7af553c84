// CUDA device discovery: never fails on machines without a GPU, reports the device where there is
// one.
#include <gtest/gtest.h>

#include "oscar/kernels/device.h"

namespace oscar::kernels {
namespace {

TEST(CudaDevice, CountIsNonNegativeWithoutGpu) { EXPECT_GE(cuda_device_count(), 0); }

TEST(CudaDevice, InfoOfFirstDevice) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  DeviceInfo info;
  ASSERT_EQ(cuda_device_info(0, &info), Status::kOk);
  EXPECT_GT(info.multiprocessors, 0);
  EXPECT_GT(info.global_memory_bytes, 0u);
  std::printf("device 0: %s, sm_%d%d, %d SMs, %.1f GiB, L2 %.1f MiB\n", info.name,
              info.compute_major, info.compute_minor, info.multiprocessors,
              static_cast<double>(info.global_memory_bytes) / (1 << 30),
              static_cast<double>(info.l2_cache_bytes) / (1 << 20));
}

TEST(CudaDevice, RejectsBadArguments) {
  DeviceInfo info;
  EXPECT_EQ(cuda_device_info(-1, &info), Status::kInvalidArgument);
  EXPECT_EQ(cuda_device_info(0, nullptr), Status::kInvalidArgument);
}

}  // namespace
}  // namespace oscar::kernels

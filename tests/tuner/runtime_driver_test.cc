// The GPU runtime on a machine without a CUDA driver (CI): no crash, no device, readable Unsupported errors; and
// the shape of the driver error messages.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "tuner/gpu_runtime.h"

namespace dflash::gpu {
namespace {

bool DriverLibraryLoadable() {
  void* h = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  ::dlclose(h);
  return true;
}

#define SKIP_IF_DRIVER_PRESENT()                                                             \
  if (DriverLibraryLoadable()) GTEST_SKIP() << "libcuda.so.1 is loadable on this machine; " \
                                               "the no-driver behaviour cannot be observed"

TEST(NoDriver, DeviceCountIsZero) {
  SKIP_IF_DRIVER_PRESENT();
  EXPECT_EQ(DeviceCount(), 0);
  EXPECT_EQ(DeviceCount(), 0);  // the failed load is remembered, not retried into a crash
}

TEST(NoDriver, DriverIsUnsupportedWithAReadableMessage) {
  SKIP_IF_DRIVER_PRESENT();
  Result<const DriverApi*> d = Driver();
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(d.status().message().find("no CUDA driver"), std::string::npos) << d.status().message();
  EXPECT_NE(d.status().message().find("libcuda.so.1"), std::string::npos) << d.status().message();
  EXPECT_EQ(d.status().message().find('\n'), std::string::npos) << "one line: " << d.status().message();
}

TEST(NoDriver, EveryEntryPointReportsUnsupportedInsteadOfCrashing) {
  SKIP_IF_DRIVER_PRESENT();
  EXPECT_EQ(Context::Primary(0).status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(DeviceBuffer::Alloc(1024, "buf").status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(Stream::Create().status().code(), ErrorCode::kUnsupported);
  EXPECT_EQ(Event::Create().status().code(), ErrorCode::kUnsupported);
  const std::array<std::uint8_t, 4> bytes{0x7f, 'E', 'L', 'F'};
  EXPECT_EQ(Module::Load(bytes, "m").status().code(), ErrorCode::kUnsupported);
  int dummy = 0;
  EXPECT_EQ(Launch(reinterpret_cast<CUfunction>(&dummy), {}, {}, 0, nullptr, nullptr, "k").code(),
            ErrorCode::kUnsupported);
}

TEST(CheckCu, SuccessIsOk) { EXPECT_TRUE(CheckCu(CUDA_SUCCESS, "cuInit").ok()); }

TEST(CheckCu, NamesTheCallAndTheLabel) {
  Status st = CheckCu(CUDA_ERROR_INVALID_VALUE, "cuLaunchKernel", "conv1d[block_c=128]");
  EXPECT_EQ(st.code(), ErrorCode::kLaunchError);
  EXPECT_EQ(st.message().rfind("cuLaunchKernel failed for conv1d[block_c=128]: ", 0), 0u) << st.message();
  if (Driver().ok()) {
    EXPECT_EQ(st.message(), "cuLaunchKernel failed for conv1d[block_c=128]: CUDA_ERROR_INVALID_VALUE (invalid argument)");
  } else {
    // Without a driver there is no cuGetErrorName: the number still appears.
    EXPECT_NE(st.message().find(std::to_string(static_cast<int>(CUDA_ERROR_INVALID_VALUE))), std::string::npos)
        << st.message();
  }
}

TEST(CheckCu, WithoutALabelSaysOnlyTheCall) {
  Status st = CheckCu(CUDA_ERROR_OUT_OF_MEMORY, "cuMemAlloc");
  EXPECT_EQ(st.message().rfind("cuMemAlloc failed: ", 0), 0u) << st.message();
}

TEST(CheckCu, WrongArchAndMissingDeviceAreUnsupported) {
  EXPECT_EQ(CheckCu(CUDA_ERROR_NO_BINARY_FOR_GPU, "cuModuleLoadData", "x").code(), ErrorCode::kUnsupported);
  EXPECT_EQ(CheckCu(CUDA_ERROR_NO_DEVICE, "cuInit").code(), ErrorCode::kUnsupported);
  EXPECT_EQ(CheckCu(CUDA_ERROR_ILLEGAL_ADDRESS, "cuStreamSynchronize").code(), ErrorCode::kLaunchError);
}

TEST(EmptyHandles, AreRejectedWithoutTouchingTheDriver) {
  Event e;
  EXPECT_EQ(e.Record(nullptr).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.Query().status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.WaitFor(std::chrono::milliseconds(1)).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(Event::Elapsed(e, e).status().code(), ErrorCode::kInvalidArgument);
  Stream s;
  EXPECT_EQ(s.Synchronize().code(), ErrorCode::kInvalidArgument);
  DeviceBuffer b;
  char host[8] = {};
  EXPECT_EQ(b.Upload(host, sizeof host).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(b.Download(host, sizeof host).code(), ErrorCode::kInvalidArgument);
  Module m;
  EXPECT_EQ(m.Function("f").status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::gpu

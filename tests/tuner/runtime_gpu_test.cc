// The GPU runtime and the benchmark on a real device: memory round trips, fills, event timing, module loading
// from an NVRTC cubin, launches (good, bad, >48 KiB shared), timeouts, and Measure on real kernels.
// Every test skips without a GPU (label `gpu`), except the compile check of the test kernels themselves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "tuner/arch_limits.h"
#include "tuner/benchmark.h"
#include "tuner/device_lock.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/stream_fork.h"

namespace dflash::tuner {
namespace {

using namespace std::chrono_literals;

constexpr char kKernelSource[] = R"cuda(
template <unsigned kMul>
__global__ void write_pattern(unsigned* out, unsigned n, unsigned seed) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = i * kMul + seed;
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Busy-waits `ns` nanoseconds of GPU time and writes how long it saw.
__global__ void spin(unsigned long long ns, unsigned long long* seen) {
  const unsigned long long start = global_ns();
  unsigned long long now = start;
  while (now - start < ns) now = global_ns();
  if (threadIdx.x == 0 && blockIdx.x == 0) *seen = now - start;
}

// out[i] = in[words - 1 - i] + 1 through `words` 32-bit words of dynamic shared memory.
__global__ void shared_reverse(const unsigned* in, unsigned* out, unsigned words) {
  extern __shared__ unsigned smem[];
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) smem[i] = in[i] + 1u;
  __syncthreads();
  for (unsigned i = threadIdx.x; i < words; i += blockDim.x) out[i] = smem[words - 1 - i];
}

// y = 2x + 1 over n floats: a bandwidth-bound kernel for Measure.
__global__ void affine(const float* x, float* y, unsigned n) {
  for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    y[i] = 2.0f * x[i] + 1.0f;
  }
}
)cuda";

constexpr unsigned kMul = 7;
const char* const kWritePattern = "write_pattern<7>";

const EmbeddedFile kFiles[] = {{"runtime_test_kernels.cu", kKernelSource, sizeof(kKernelSource) - 1}};

CompileSpec TestSpec() {
  CompileSpec spec;
  spec.main_file = "runtime_test_kernels.cu";
  spec.name_expressions = {kWritePattern, "spin", "shared_reverse", "affine"};
  return spec;
}

// The test kernels compile on any machine (NVRTC needs no GPU): a broken kernel source fails here, in CI.
TEST(RuntimeTestKernels, CompileForSm90AndSm120) {
  for (const char* arch : {"sm_90", "sm_120"}) {
    Result<CompiledVariant> v = CompileVariant(kFiles, TestSpec(), arch, "runtime test kernels");
    ASSERT_TRUE(v.ok()) << arch << ": " << v.status().ToString();
    EXPECT_FALSE(v->cubin.empty());
    EXPECT_EQ(v->lowered_names.size(), 4u);
  }
}

// A primary context on device 0 and the test kernels loaded into it.
class GpuRuntimeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (gpu::DeviceCount() == 0) {
      Result<const gpu::DriverApi*> d = gpu::Driver();
      GTEST_SKIP() << "no CUDA device (" << (d.ok() ? std::string("driver sees 0 devices") : d.status().message())
                   << ")";
    }
    Result<gpu::Context> c = gpu::Context::Primary(0);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    ctx_.emplace(std::move(c).value());
    Result<gpu::Stream> s = gpu::Stream::Create();
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    stream_ = std::move(s).value();
    Result<CompiledVariant> v = CompileVariant(kFiles, TestSpec(), ctx_->info().arch(), "runtime test kernels");
    ASSERT_TRUE(v.ok()) << v.status().ToString();
    compiled_ = std::move(v).value();
    Result<gpu::Module> m = gpu::Module::Load(compiled_.cubin, "runtime-test-kernels");
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    module_ = std::move(m).value();
  }

  CUfunction Fn(const std::string& expr) {
    Result<CUfunction> f = module_.Function(compiled_.lowered_names.at(expr));
    EXPECT_TRUE(f.ok()) << f.status().ToString();
    return f.ok() ? *f : nullptr;
  }

  gpu::DeviceBuffer Alloc(std::size_t bytes) {
    Result<gpu::DeviceBuffer> b = gpu::DeviceBuffer::Alloc(bytes, "test buffer");
    EXPECT_TRUE(b.ok()) << b.status().ToString();
    return b.ok() ? std::move(b).value() : gpu::DeviceBuffer();
  }

  // Enqueues spin(ns) on the test stream.
  Status LaunchSpin(std::uint64_t ns, gpu::DeviceBuffer& seen, CUstream s) {
    unsigned long long n = ns;
    CUdeviceptr p = seen.ptr();
    void* args[] = {&n, &p};
    return gpu::Launch(Fn("spin"), {1}, {32}, 0, s, args, "spin");
  }

  std::optional<gpu::Context> ctx_;
  gpu::Stream stream_;
  CompiledVariant compiled_;
  gpu::Module module_;
  std::mt19937 rng_{std::random_device{}()};
};

TEST_F(GpuRuntimeTest, PrimaryContextDescribesTheDevice) {
  const gpu::DeviceInfo& info = ctx_->info();
  EXPECT_FALSE(info.name.empty());
  EXPECT_GE(info.cc_major, 7);
  EXPECT_GT(info.sm_count, 0);
  EXPECT_GT(info.l2_bytes, 0u);
  EXPECT_GT(info.total_memory, 0u);
  EXPECT_GE(info.max_shared_per_block_optin, 48 * 1024);
  EXPECT_GE(info.driver_version, 12000);
  EXPECT_EQ(info.uuid.rfind("GPU-", 0), 0u) << info.uuid;
  EXPECT_EQ(info.uuid.size(), 40u) << info.uuid;
  EXPECT_FALSE(info.pci_bus_id.empty());
  EXPECT_EQ(info.cc(), info.cc_major * 10 + info.cc_minor);
  EXPECT_EQ(info.arch(), DeviceArch(info.cc()));  // sm_90a on the H200: the Hopper tier's arch
  EXPECT_TRUE(RunsOn(info.arch(), info.cc()));
  RecordProperty("device", info.name + " " + info.arch() + " " + info.uuid + " pci " + info.pci_bus_id + " L2 " +
                               std::to_string(info.l2_bytes) + " B, driver " + std::to_string(info.driver_version));
}

TEST_F(GpuRuntimeTest, PrimaryContextIsTheSharedOneAndCurrent) {
  Result<gpu::Context> again = gpu::Context::Primary(0);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->get(), ctx_->get());  // the primary context, the one LibTorch retains too
  const gpu::DriverApi* api = *gpu::Driver();
  CUcontext current = nullptr;
  ASSERT_EQ(api->CtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx_->get());
}

// The persistent kernels' grid: the current context's device's SM count, the same when read again (cached).
TEST_F(GpuRuntimeTest, CurrentDeviceSmCountIsTheContextsDevices) {
  for (int i = 0; i < 2; ++i) {
    Result<int> sms = gpu::CurrentDeviceSmCount();
    ASSERT_TRUE(sms.ok()) << sms.status().ToString();
    EXPECT_EQ(*sms, ctx_->info().sm_count);
  }
}

TEST_F(GpuRuntimeTest, UnknownOrdinalIsInvalidArgument) {
  EXPECT_EQ(gpu::Context::Primary(gpu::DeviceCount()).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(gpu::Context::Primary(-1).status().code(), ErrorCode::kInvalidArgument);
}

TEST_F(GpuRuntimeTest, MakeCurrentLetsAnotherThreadUseTheContext) {
  Status st;
  std::thread t([&] {
    st = ctx_->MakeCurrent();
    if (!st.ok()) return;
    Result<gpu::DeviceBuffer> b = gpu::DeviceBuffer::Alloc(4096, "other thread");
    st = b.ok() ? b->Fill(0x11) : b.status();
  });
  t.join();
  EXPECT_TRUE(st.ok()) << st.ToString();
}

TEST_F(GpuRuntimeTest, UploadDownloadRoundTripsEveryByte) {
  const std::size_t bytes = (1u << 20) + 3;  // odd size: no alignment assumptions
  std::vector<std::uint8_t> host(bytes), back(bytes, 0);
  for (auto& b : host) b = static_cast<std::uint8_t>(rng_());
  gpu::DeviceBuffer d = Alloc(bytes);
  EXPECT_EQ(d.size(), bytes);
  ASSERT_TRUE(d.Upload(host.data(), bytes).ok());
  ASSERT_TRUE(d.Download(back.data(), bytes).ok());
  EXPECT_EQ(back, host);
  EXPECT_EQ(d.Upload(host.data(), bytes + 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(d.Download(back.data(), bytes + 1).code(), ErrorCode::kInvalidArgument);
}

TEST_F(GpuRuntimeTest, FillSetsEveryByteOnTheStream) {
  const std::size_t bytes = 4097;
  std::vector<std::uint8_t> host(bytes);
  for (auto& b : host) b = static_cast<std::uint8_t>(rng_());
  gpu::DeviceBuffer d = Alloc(bytes);
  ASSERT_TRUE(d.Upload(host.data(), bytes).ok());
  const auto value = static_cast<std::uint8_t>(rng_() | 1u);
  ASSERT_TRUE(d.Fill(value, stream_.get()).ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  ASSERT_TRUE(d.Download(host.data(), bytes).ok());
  EXPECT_TRUE(std::all_of(host.begin(), host.end(), [&](std::uint8_t b) { return b == value; }));
}

TEST_F(GpuRuntimeTest, EventsTimeAKernelOfKnownDuration) {
  gpu::DeviceBuffer seen = Alloc(sizeof(std::uint64_t));
  Result<gpu::Event> start = gpu::Event::Create(), end = gpu::Event::Create();
  ASSERT_TRUE(start.ok() && end.ok());
  ASSERT_TRUE(start->Record(stream_.get()).ok());
  ASSERT_TRUE(LaunchSpin(2'000'000, seen, stream_.get()).ok());  // 2 ms
  ASSERT_TRUE(end->Record(stream_.get()).ok());
  ASSERT_TRUE(end->Synchronize().ok());
  Result<bool> done = end->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  Result<float> ms = gpu::Event::Elapsed(*start, *end);
  ASSERT_TRUE(ms.ok()) << ms.status().ToString();
  EXPECT_GE(*ms, 1.9f);
  EXPECT_LT(*ms, 200.0f);
  std::uint64_t ns = 0;
  ASSERT_TRUE(seen.Download(&ns, sizeof ns).ok());
  EXPECT_GE(ns, 2'000'000u);
}

TEST_F(GpuRuntimeTest, CubinFromCompileVariantWritesTheExpectedPattern) {
  const unsigned n = 100'003;
  gpu::DeviceBuffer out = Alloc(n * sizeof(unsigned));
  ASSERT_TRUE(out.Fill(0xFF, stream_.get()).ok());  // poison
  const unsigned seed = static_cast<unsigned>(rng_());
  CUdeviceptr p = out.ptr();
  unsigned count = n, s = seed;
  void* args[] = {&p, &count, &s};
  ASSERT_TRUE(gpu::Launch(Fn(kWritePattern), {(n + 255) / 256}, {256}, 0, stream_.get(), args, "write_pattern")
                  .ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  std::vector<unsigned> host(n);
  ASSERT_TRUE(out.Download(host.data(), n * sizeof(unsigned)).ok());
  for (unsigned i = 0; i < n; ++i) {
    ASSERT_EQ(host[i], i * kMul + seed) << "at " << i;
  }
}

TEST_F(GpuRuntimeTest, UnknownFunctionNameIsAnErrorNamingTheModule) {
  Result<CUfunction> f = module_.Function("_Z14no_such_kernelv");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("runtime-test-kernels"), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find("_Z14no_such_kernelv"), std::string::npos) << f.status().message();
}

TEST_F(GpuRuntimeTest, GarbageCubinIsRejectedNamingTheLabel) {
  std::vector<std::uint8_t> garbage(4096);
  for (auto& b : garbage) b = static_cast<std::uint8_t>(rng_());
  Result<gpu::Module> m = gpu::Module::Load(garbage, "conv1d[garbage]");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("cuModuleLoadData failed for conv1d[garbage]"), std::string::npos)
      << m.status().message();
}

TEST_F(GpuRuntimeTest, LaunchWithBadArgumentsIsALaunchErrorNamingTheLabel) {
  gpu::DeviceBuffer out = Alloc(4096);
  CUdeviceptr p = out.ptr();
  unsigned count = 1024, seed = 1;
  void* args[] = {&p, &count, &seed};
  Status st = gpu::Launch(Fn(kWritePattern), {1}, {4096}, 0, stream_.get(), args, "pattern/variant-x");
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), ErrorCode::kLaunchError);
  EXPECT_NE(st.message().find("cuLaunchKernel"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("for pattern/variant-x: CUDA_ERROR_INVALID_VALUE"), std::string::npos)
      << st.message();
  // Not sticky: the context still runs a good launch.
  EXPECT_TRUE(gpu::Launch(Fn(kWritePattern), {4}, {256}, 0, stream_.get(), args, "pattern").ok());
  EXPECT_TRUE(stream_.Synchronize().ok());
}

TEST_F(GpuRuntimeTest, LaunchRaisesTheDynamicSharedLimitAbove48KiB) {
  const unsigned words = 64 * 1024 / 4 + 256;  // 65 KiB of dynamic shared memory
  const unsigned shared = words * 4;
  if (static_cast<unsigned>(ctx_->info().max_shared_per_block_optin) < shared) {
    GTEST_SKIP() << "device allows only " << ctx_->info().max_shared_per_block_optin << " B per block";
  }
  std::vector<unsigned> in(words), out_host(words);
  for (auto& v : in) v = static_cast<unsigned>(rng_());
  gpu::DeviceBuffer din = Alloc(shared), dout = Alloc(shared);
  ASSERT_TRUE(din.Upload(in.data(), shared).ok());
  ASSERT_TRUE(dout.Fill(0xFF, stream_.get()).ok());
  CUdeviceptr pi = din.ptr(), po = dout.ptr();
  unsigned w = words;
  void* args[] = {&pi, &po, &w};
  CUfunction f = Fn("shared_reverse");
  // Without the opt-in attribute the driver refuses this size: the test would notice Launch not raising it.
  const gpu::DriverApi* api = *gpu::Driver();
  EXPECT_NE(api->LaunchKernel(f, 1, 1, 1, 256, 1, 1, shared, stream_.get(), args, nullptr), CUDA_SUCCESS);
  ASSERT_TRUE(gpu::Launch(f, {1}, {256}, shared, stream_.get(), args, "shared_reverse").ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  ASSERT_TRUE(dout.Download(out_host.data(), shared).ok());
  for (unsigned i = 0; i < words; ++i) ASSERT_EQ(out_host[i], in[words - 1 - i] + 1u) << "at " << i;
}

TEST_F(GpuRuntimeTest, WaitForTimesOutOnALongKernelThenSucceeds) {
  gpu::DeviceBuffer seen = Alloc(sizeof(std::uint64_t));
  Result<gpu::Event> done = gpu::Event::Create();
  ASSERT_TRUE(done.ok());
  ASSERT_TRUE(LaunchSpin(300'000'000, seen, stream_.get()).ok());  // 300 ms
  ASSERT_TRUE(done->Record(stream_.get()).ok());
  Status st = done->WaitFor(20ms, "spin[300ms]");
  EXPECT_EQ(st.code(), ErrorCode::kTimeout);
  EXPECT_NE(st.message().find("spin[300ms]"), std::string::npos) << st.message();
  Result<bool> q = stream_.Query();
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(*q);
  EXPECT_TRUE(done->WaitFor(10s).ok());
  q = stream_.Query();
  ASSERT_TRUE(q.ok());
  EXPECT_TRUE(*q);
}

// ---- Measure ----

TEST_F(GpuRuntimeTest, MeasureTimesAKernelOfKnownDuration) {
  gpu::DeviceBuffer seen = Alloc(sizeof(std::uint64_t));
  BenchOptions o;
  o.label = "spin[0.5ms]";
  // As the tuner does: other processes (ctest -j, a warm-up) may time kernels on this GPU at the same moment.
  Result<cache::NamedLock> lock = LockDeviceForBenchmark(ctx_->info(), 120s);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  Result<Measurement> m = Measure(*ctx_, stream_.get(), [&](CUstream s) { return LaunchSpin(500'000, seen, s); }, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_GE(m->median_ms, 0.49);
  EXPECT_LT(m->median_ms, 5.0);
  EXPECT_LT(m->spread, 1.0);
  EXPECT_EQ(m->repetitions, o.repetitions);
  EXPECT_EQ(m->samples.size(), static_cast<std::size_t>(o.repetitions));
  EXPECT_GE(m->remeasures, 0);
  EXPECT_LE(m->remeasures, o.max_remeasures);
  for (float s : m->samples) EXPECT_GE(s, 0.49f);
  RecordProperty("measurement", std::to_string(m->median_ms) + " ms, spread " + std::to_string(m->spread) +
                                    ", remeasures " + std::to_string(m->remeasures));
}

TEST_F(GpuRuntimeTest, MeasureGivesAPlausibleTimeForABandwidthBoundKernel) {
  const unsigned n = 16u << 20;  // 64 MiB in, 64 MiB out
  std::vector<float> x(n);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (auto& v : x) v = dist(rng_);
  gpu::DeviceBuffer dx = Alloc(n * sizeof(float)), dy = Alloc(n * sizeof(float));
  ASSERT_TRUE(dx.Upload(x.data(), n * sizeof(float)).ok());
  ASSERT_TRUE(dy.Fill(0xFF, stream_.get()).ok());  // NaN poison
  CUdeviceptr px = dx.ptr(), py = dy.ptr();
  unsigned count = n;
  void* args[] = {&px, &py, &count};
  const unsigned blocks = static_cast<unsigned>(ctx_->info().sm_count) * 8;
  BenchOptions o;
  o.label = "affine[16M]";
  Result<cache::NamedLock> lock = LockDeviceForBenchmark(ctx_->info(), 120s);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  Result<Measurement> m = Measure(*ctx_, stream_.get(), [&](CUstream s) {
    return gpu::Launch(Fn("affine"), {blocks}, {256}, 0, s, args, "affine");
  }, o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  // 128 MiB moved: at most ~10 TB/s would be 0.013 ms (no GPU is faster); 50 ms would be < 3 GB/s.
  EXPECT_GT(m->median_ms, 0.013);
  EXPECT_LT(m->median_ms, 50.0);
  EXPECT_LT(m->spread, 1.0);
  RecordProperty("measurement", std::to_string(m->median_ms) + " ms, spread " + std::to_string(m->spread) +
                                    ", remeasures " + std::to_string(m->remeasures));
  std::vector<float> y(n);
  ASSERT_TRUE(dy.Download(y.data(), n * sizeof(float)).ok());
  for (unsigned i = 0; i < n; i += 4099) {
    ASSERT_EQ(y[i], 2.0f * x[i] + 1.0f) << "at " << i;
  }
}

TEST_F(GpuRuntimeTest, MeasureReturnsTheLaunchErrorWithItsPlace) {
  gpu::DeviceBuffer out = Alloc(4096);
  CUdeviceptr p = out.ptr();
  unsigned count = 1024, seed = 1;
  void* args[] = {&p, &count, &seed};
  BenchOptions o;
  o.label = "pattern/bad";
  Result<Measurement> m = Measure(*ctx_, stream_.get(), [&](CUstream s) {
    return gpu::Launch(Fn(kWritePattern), {1}, {4096}, 0, s, args, "pattern/bad");
  }, o);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kLaunchError);
  EXPECT_NE(m.status().message().find("warm-up launch 1 of 3"), std::string::npos) << m.status().message();
  EXPECT_NE(m.status().message().find("pattern/bad"), std::string::npos) << m.status().message();
  EXPECT_TRUE(stream_.Synchronize().ok());
}

TEST_F(GpuRuntimeTest, MeasureTimesOutInsteadOfHangingInWarmUpAndTimedPhases) {
  gpu::DeviceBuffer seen = Alloc(sizeof(std::uint64_t));
  BenchOptions o;
  o.label = "spin[300ms]";
  o.timeout_ms = 50;
  o.flush_l2 = false;  // a timeout leaks the flush buffer on purpose; keep this test from leaking 2x L2
  for (int warmup : {1, 0}) {
    o.warmup_launches = warmup;
    o.repetitions = 2;
    const auto t0 = std::chrono::steady_clock::now();
    Result<Measurement> m =
        Measure(*ctx_, stream_.get(), [&](CUstream s) { return LaunchSpin(300'000'000, seen, s); }, o);
    const auto waited = std::chrono::steady_clock::now() - t0;
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), ErrorCode::kTimeout);
    EXPECT_NE(m.status().message().find(warmup ? "warm-up launch 1 of 1" : "timed launch 1 of 2"),
              std::string::npos)
        << m.status().message();
    EXPECT_LT(waited, 250ms) << "Measure waited for the kernel instead of timing out";
    ASSERT_TRUE(stream_.Synchronize().ok());  // the kernels do end; the stream is usable again
  }
}

// main: a 20 ms spin, then A = 2X + 1; side (after Order(main, side)): B = 2A + 1; main waits for side. If the
// fork or the join did not order the work, B would be computed from A's poison (NaN) or read before it is written.
Status EnqueueForkedAffines(gpu::StreamFork* fork, CUstream main, gpu::DeviceBuffer& seen,
                            gpu::DeviceBuffer& x, gpu::DeviceBuffer& a, gpu::DeviceBuffer& b, unsigned n,
                            const std::function<CUfunction(const std::string&)>& fn) {
  unsigned long long ns = 20'000'000;
  CUdeviceptr seen_p = seen.ptr(), xp = x.ptr(), ap = a.ptr(), bp = b.ptr();
  void* spin_args[] = {&ns, &seen_p};
  DFLASH_RETURN_IF_ERROR(gpu::Launch(fn("spin"), {1}, {32}, 0, main, spin_args, "spin"));
  void* first[] = {&xp, &ap, &n};
  DFLASH_RETURN_IF_ERROR(gpu::Launch(fn("affine"), {64}, {256}, 0, main, first, "affine A"));
  DFLASH_RETURN_IF_ERROR(fork->Order(main, fork->side()));
  void* second[] = {&ap, &bp, &n};
  DFLASH_RETURN_IF_ERROR(gpu::Launch(fn("affine"), {64}, {256}, 0, fork->side(), second, "affine B"));
  return fork->Order(fork->side(), main);
}

TEST_F(GpuRuntimeTest, StreamForkOrdersTheSideStreamBetweenForkAndJoinAlsoInAGraph) {
  const unsigned n = 1 << 16;
  std::vector<float> host_x(n);
  std::uniform_real_distribution<float> u(-4.f, 4.f);
  for (float& v : host_x) v = u(rng_);
  gpu::DeviceBuffer x = Alloc(n * 4), a = Alloc(n * 4), b = Alloc(n * 4), seen = Alloc(8);
  ASSERT_TRUE(x.Upload(host_x.data(), n * 4).ok());
  Result<gpu::StreamFork*> fork = gpu::StreamFork::ForCurrentThread();
  ASSERT_TRUE(fork.ok()) << fork.status().ToString();
  Result<gpu::StreamFork*> again = gpu::StreamFork::ForCurrentThread();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, *fork) << "one fork per thread and context";
  auto fn = [this](const std::string& e) { return Fn(e); };
  auto check = [&](const char* how) {
    std::vector<float> host_b(n);
    ASSERT_TRUE(b.Download(host_b.data(), n * 4).ok());
    for (unsigned i = 0; i < n; ++i) {
      ASSERT_EQ(host_b[i], 2.f * (2.f * host_x[i] + 1.f) + 1.f) << how << " at " << i;
    }
  };
  for (gpu::DeviceBuffer* buf : {&a, &b}) ASSERT_TRUE(buf->Fill(0xFF, stream_.get()).ok());  // NaN
  ASSERT_TRUE(EnqueueForkedAffines(*fork, stream_.get(), seen, x, a, b, n, fn).ok());
  ASSERT_TRUE(stream_.Synchronize().ok()) << "the join makes the caller's stream wait for the side stream";
  check("eager");

  for (gpu::DeviceBuffer* buf : {&a, &b}) ASSERT_TRUE(buf->Fill(0xFF, stream_.get()).ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  Result<gpu::GraphExec> graph = gpu::GraphExec::Capture(
      stream_.get(), [&](CUstream s) { return EnqueueForkedAffines(*fork, s, seen, x, a, b, n, fn); },
      "forked affines");
  ASSERT_TRUE(graph.ok()) << graph.status().ToString();
  ASSERT_TRUE(graph->Launch(stream_.get()).ok());
  ASSERT_TRUE(stream_.Synchronize().ok());
  check("graph replay");
}

// Two rounds, each retaining the primary context (made current), forking, ordering a stream through the fork,
// and releasing the context, which destroys it with its streams and events (nothing else holds it in this
// process). The second round must get a new fork (the handle may be the same), and std::exit must not destroy
// the two dead forks' handles: either mistake crashes or fails here. Exit codes: 0 fine, 2-4 a failed step.
void ForkInTwoContextLifetimesThenExit() {
  for (int round = 0; round < 2; ++round) {
    Result<gpu::Context> ctx = gpu::Context::Primary(0);
    if (!ctx.ok()) std::_Exit(2);
    Result<gpu::StreamFork*> fork = gpu::StreamFork::ForCurrentThread();
    Result<gpu::Stream> s = gpu::Stream::Create();
    if (!fork.ok() || !s.ok()) std::_Exit(3);
    if (!(*fork)->Order(s->get(), (*fork)->side()).ok() || !(*fork)->Order((*fork)->side(), s->get()).ok() ||
        !s->Synchronize().ok()) {
      std::_Exit(4);
    }
  }
  std::exit(0);  // destroys this thread's thread_locals: the forks of two destroyed contexts
}

TEST(StreamForkLifetime, ForksOfADestroyedContextAreNeitherReusedNorDestroyedAgain) {
  if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  // A fresh process (fork + exec): this one has initialised CUDA and holds the primary context.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(ForkInTwoContextLifetimesThenExit(), testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace dflash::tuner

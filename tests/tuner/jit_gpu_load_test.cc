// The JIT's cubins on a real GPU: compiled for the device's arch, loaded, every lowered name resolved to a
// function, and each instantiation's output checked against a float64 reference (output poisoned beforehand).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "jit_test_sources.h"
#include "tuner/gpu_runtime.h"
#include "tuner/nvrtc_compiler.h"

namespace dflash::tuner {
namespace {

std::uint16_t ToBf16(float f) {  // round to nearest even
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<std::uint16_t>(u >> 16);
}

double FromBf16(std::uint16_t b) {
  std::uint32_t u = static_cast<std::uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

struct Instantiation {
  std::string expr;
  int block;
  int vec;
};

TEST(JitOnGpu, CompiledVariantLoadsResolvesAndMatchesFloat64Reference) {
  if (gpu::DeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  Result<gpu::Context> ctx = gpu::Context::Primary(0);
  ASSERT_TRUE(ctx.ok()) << ctx.status().ToString();
  const std::string arch = ctx->info().arch();
  if (!IsValidArch(arch)) GTEST_SKIP() << arch << " is not in the limits table";

  Result<CompiledVariant> v = CompileVariant(testing::kAxpySources, testing::AxpySpec(), arch, "axpy[gpu]");
  ASSERT_TRUE(v.ok()) << v.status().ToString();
  Result<gpu::Module> module = gpu::Module::Load(v->cubin, "axpy[gpu]");
  ASSERT_TRUE(module.ok()) << module.status().ToString();
  Result<gpu::Stream> stream = gpu::Stream::Create();
  ASSERT_TRUE(stream.ok()) << stream.status().ToString();

  std::mt19937_64 rng(std::random_device{}());
  std::uniform_real_distribution<float> dist(-4.f, 4.f);
  const int n = 5000 + static_cast<int>(rng() % 1000);  // not a multiple of any block size
  const int kTail = 64;                                  // elements past n that must stay poisoned
  for (const Instantiation& inst : {Instantiation{"axpy_bf16<128, 2>", 128, 2}, Instantiation{"axpy_bf16<256, 1>", 256, 1}}) {
    SCOPED_TRACE(inst.expr);
    Result<CUfunction> f = module->Function(v->lowered_names.at(inst.expr));
    ASSERT_TRUE(f.ok()) << f.status().ToString();

    std::vector<std::uint16_t> x(static_cast<std::size_t>(n) * inst.vec), y(n), out(n + kTail);
    for (auto& e : x) e = ToBf16(dist(rng));
    for (auto& e : y) e = ToBf16(dist(rng));
    Result<gpu::DeviceBuffer> dx = gpu::DeviceBuffer::Alloc(x.size() * 2, "x");
    Result<gpu::DeviceBuffer> dy = gpu::DeviceBuffer::Alloc(y.size() * 2, "y");
    Result<gpu::DeviceBuffer> dout = gpu::DeviceBuffer::Alloc(out.size() * 2, "out");
    ASSERT_TRUE(dx.ok() && dy.ok() && dout.ok());
    ASSERT_TRUE(dx->Upload(x.data(), x.size() * 2).ok());
    ASSERT_TRUE(dy->Upload(y.data(), y.size() * 2).ok());
    ASSERT_TRUE(dout->Fill(0xff, stream->get()).ok());  // 0xffff is a bf16 NaN

    CUdeviceptr px = dx->ptr(), py = dy->ptr(), pout = dout->ptr();
    int count = n;
    void* args[] = {&px, &py, &pout, &count};
    gpu::Dim3 grid{static_cast<unsigned>((n + inst.block - 1) / inst.block)};
    gpu::Dim3 block{static_cast<unsigned>(inst.block)};
    Status launched = gpu::Launch(*f, grid, block, 0, stream->get(), args, inst.expr);
    ASSERT_TRUE(launched.ok()) << launched.ToString();
    ASSERT_TRUE(stream->Synchronize().ok());
    ASSERT_TRUE(dout->Download(out.data(), out.size() * 2).ok());

    double max_err = 0.0;
    for (int i = 0; i < n; ++i) {
      double sum = 0.0;
      for (int k = 0; k < inst.vec; ++k) sum += FromBf16(x[static_cast<std::size_t>(i) * inst.vec + k]);
      double ref = 2.0 * sum + FromBf16(y[i]);
      double got = FromBf16(out[i]);
      ASSERT_TRUE(std::isfinite(got)) << "output " << i << " not written";
      double err = std::abs(got - ref);
      max_err = std::max(max_err, err);
      ASSERT_LE(err, std::abs(ref) / 128.0 + 1e-6) << "i=" << i << " ref=" << ref << " got=" << got;
    }
    for (int i = n; i < n + kTail; ++i) ASSERT_EQ(out[i], 0xffff) << "wrote past n at " << i;
    RecordProperty(inst.expr + "_max_abs_err", std::to_string(max_err));
  }
}

}  // namespace
}  // namespace dflash::tuner

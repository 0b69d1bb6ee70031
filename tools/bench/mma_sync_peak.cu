// mma_sync_peak: the tensor throughput a kernel can reach through mma.sync.m16n8k16 (bf16 in, fp32 accumulate),
// the only tensor instruction the portable attention and gdn kernels use (kernels.md), next to cuBLAS's bf16 GEMM
// (wgmma on Hopper) measured by tools/bench/isa_ceiling.py. It answers one question for the closing notes: what
// is the ceiling of an mma.sync kernel on this GPU? Operands come from registers (no loads, no shared memory), so
// this is an upper bound no real kernel reaches.
// Build and run (device machine): nvcc -O3 -arch=sm_90 tools/bench/mma_sync_peak.cu -o /tmp/mma_sync_peak &&
// /tmp/mma_sync_peak   (prints one line per (independent accumulator chains, warps per block, blocks per SM)).
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

namespace {

void Check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "mma_sync_peak: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

// CHAINS independent accumulators per warp hide the mma latency; every thread issues iters * CHAINS mma.sync.
template <int CHAINS>
__global__ void MmaLoop(float* sink, int iters) {
  unsigned a0 = 0x3c003c00u ^ threadIdx.x, a1 = a0 + 1, a2 = a0 + 2, a3 = a0 + 3;  // small normal bf16 pairs
  unsigned b0 = a0 ^ 0x00100010u, b1 = b0 + 5;
  float c[CHAINS][4] = {};
  for (int i = 0; i < iters; ++i) {
#pragma unroll
    for (int j = 0; j < CHAINS; ++j) {
      asm volatile(
          "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
          "{%0,%1,%2,%3};"
          : "+f"(c[j][0]), "+f"(c[j][1]), "+f"(c[j][2]), "+f"(c[j][3])
          : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
  }
  float s = 0.f;
#pragma unroll
  for (int j = 0; j < CHAINS; ++j) s += c[j][0] + c[j][1] + c[j][2] + c[j][3];
  if (s == 1234.5f) sink[blockIdx.x * blockDim.x + threadIdx.x] = s;  // keeps the products live
}

template <int CHAINS>
double TflopsOf(int sms, int warps, int blocks_per_sm, float* sink) {
  const int iters = 2048, blocks = sms * blocks_per_sm, threads = 32 * warps;
  MmaLoop<CHAINS><<<blocks, threads>>>(sink, iters);  // warm-up (clocks up, module loaded)
  Check(cudaDeviceSynchronize(), "warm-up");
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  float best_ms = 1e30f;
  for (int rep = 0; rep < 5; ++rep) {
    cudaEventRecord(start);
    MmaLoop<CHAINS><<<blocks, threads>>>(sink, iters);
    cudaEventRecord(stop);
    Check(cudaEventSynchronize(stop), "timed launch");
    float ms = 0.f;
    cudaEventElapsedTime(&ms, start, stop);
    if (ms < best_ms) best_ms = ms;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  const double flop = 2.0 * 16 * 8 * 16 * double(iters) * CHAINS * double(blocks) * warps;
  return flop / (best_ms * 1e-3) / 1e12;
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  Check(cudaGetDeviceProperties(&prop, 0), "device properties");
  float* sink = nullptr;
  Check(cudaMalloc(&sink, sizeof(float) * prop.multiProcessorCount * 8 * 1024), "cudaMalloc");
  std::printf("mma_sync_peak on %s (sm_%d%d, %d SMs): mma.sync.m16n8k16 bf16->fp32, operands in registers\n",
              prop.name, prop.major, prop.minor, prop.multiProcessorCount);
  double best = 0.0;
  for (int warps : {4, 8, 16}) {
    for (int bps : {1, 2, 4}) {
      const double t4 = TflopsOf<4>(prop.multiProcessorCount, warps, bps, sink);
      const double t8 = TflopsOf<8>(prop.multiProcessorCount, warps, bps, sink);
      std::printf("  warps/block %2d  blocks/SM %d  chains 4: %6.1f TFLOP/s  chains 8: %6.1f TFLOP/s\n", warps, bps,
                  t4, t8);
      best = t4 > best ? t4 : best;
      best = t8 > best ? t8 : best;
    }
  }
  std::printf("mma.sync peak: %.1f TFLOP/s\n", best);
  cudaFree(sink);
  return 0;
}

#include <cuda_bf16.h>
// Spills: 96 live accumulators under a 64-register cap (1024 threads, 1 block per SM).
__global__ void __launch_bounds__(1024, 1) pressure(const float* in, float* out, int n) {
  float acc[96];
#pragma unroll
  for (int i = 0; i < 96; ++i) acc[i] = in[threadIdx.x + i * 1024];
  for (int k = 0; k < n; ++k) {
#pragma unroll
    for (int i = 0; i < 96; ++i) acc[i] = acc[i] * acc[(i + 1) % 96] + in[k];
  }
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 96; ++i) s += acc[i] * (i + 1);
  out[threadIdx.x] = s;
}
// Static shared memory.
template <int T>
__global__ void reverse_tile(const __nv_bfloat16* in, __nv_bfloat16* out) {
  __shared__ __nv_bfloat16 tile[T];
  tile[threadIdx.x] = in[threadIdx.x];
  __syncthreads();
  out[threadIdx.x] = tile[T - 1 - threadIdx.x];
}
// A stack frame without spills: a local array indexed at run time.
__global__ void local_array(float* out, const int* idx) {
  float local[256];
  for (int i = 0; i < 256; ++i) local[i] = out[i * threadIdx.x];
  out[threadIdx.x] = local[idx[threadIdx.x] & 255];
}
// A non-inlined device function with its own properties block.
__device__ __noinline__ float helper(const float* p, int i) { float a[32]; for (int j = 0; j < 32; ++j) a[j] = p[j]; return a[i & 31]; }
__global__ void calls_helper(float* out) { out[threadIdx.x] = helper(out, threadIdx.x); }

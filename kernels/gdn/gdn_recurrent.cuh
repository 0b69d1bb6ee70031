// Recurrent (token-by-token) gated delta rule: decoding a few tokens per sequence against a stored fp32 state,
// and the independent check of the chunked path. One block per (column slice of BV, value head, sequence); each
// pair of threads owns one column v of the state S [128 x 128] (64 rows each, in fp32 registers; partial dot
// products meet through one shuffle) and runs, per token t:
//   S <- exp(g_t) S ; u = beta_t (v_t[v] - S[:, v] . k_t) ; S[:, v] += k_t u ; o_t[v] = scale * S[:, v] . q_t
// with g, beta from the raw inputs or as given (g_in, beta_in non-null) and q, k L2-normalised when qk_l2norm (as
// in gdn_chunk_prep), all in fp32.
// Sequences are packed: sequence n spans tokens cu_seqlens[n] .. cu_seqlens[n + 1].
// h0 / ht: fp32 [N, HV, 128, 128] (null: zero start / not written). ht may equal h0 (in-place decoding update).
// Who may call: hosts launching grid (128 / BV, HV, N), block 2 * BV threads, no dynamic shared memory.
// Thread-safety: each thread reads and writes only its own half column of its own sequence's state.
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"

namespace gdn {

template <int BV>
__global__ void __launch_bounds__(2 * BV)
    gdn_recurrent(const bf16* __restrict__ q, long long q_st, long long q_sh,  //
                  const bf16* __restrict__ k, long long k_st, long long k_sh,  //
                  const bf16* __restrict__ v, long long v_st, long long v_sh,  //
                  const bf16* __restrict__ a, const bf16* __restrict__ b, long long ab_st,
                  const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                  const float* __restrict__ g_in, const float* __restrict__ beta_in,
                  const int* __restrict__ cu_seqlens, int H, int HV, int qk_l2norm, float scale,  //
                  const float* h0, float* ht, bf16* __restrict__ o, long long o_st, long long o_sh) {
  static_assert(kDim % BV == 0 && BV % 16 == 0, "BV must be a multiple of 16 dividing 128");
  constexpr int R = kDim / 2;  // rows per thread
  __shared__ float qs[kDim], ks[kDim];
  const int tid = threadIdx.x;
  const int col = blockIdx.x * BV + tid / 2, row0 = (tid % 2) * R;
  const int hv = blockIdx.y, seq = blockIdx.z, hk = hv / (HV / H);
  const long long bos = cu_seqlens[seq], eos = cu_seqlens[seq + 1];
  const long long state_off = (static_cast<long long>(seq) * HV + hv) * kDim * kDim + row0 * kDim + col;

  float s[R];
#pragma unroll
  for (int i = 0; i < R; ++i) s[i] = h0 != nullptr ? h0[state_off + i * kDim] : 0.f;
  const float alog = g_in != nullptr ? 0.f : A_log[hv], dtb = g_in != nullptr ? 0.f : dt_bias[hv];

  for (long long t = bos; t < eos; ++t) {
    __syncthreads();
    if (tid < 32) {  // warp 0 loads and normalises q (scale folded in) and k
      float xq[4], xk[4], sq = 0.f, sk = 0.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        xq[j] = __bfloat162float(q[t * q_st + hk * q_sh + tid + 32 * j]);
        xk[j] = __bfloat162float(k[t * k_st + hk * k_sh + tid + 32 * j]);
        sq += xq[j] * xq[j];
        sk += xk[j] * xk[j];
      }
      const float rq = (qk_l2norm ? rsqrtf(warp_sum(sq) + kL2Eps) : 1.f) * scale,
                  rk = qk_l2norm ? rsqrtf(warp_sum(sk) + kL2Eps) : 1.f;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        qs[tid + 32 * j] = xq[j] * rq;
        ks[tid + 32 * j] = xk[j] * rk;
      }
    }
    __syncthreads();
    const float2 gb = gate_at(a, b, g_in, beta_in, t * ab_st + hv, alog, dtb);
    const float beta = gb.y;
    const float eg = expf(gb.x);
    float dot = 0.f;
#pragma unroll
    for (int i = 0; i < R; ++i) {
      s[i] *= eg;
      dot += s[i] * ks[row0 + i];
    }
    dot += __shfl_xor_sync(0xffffffffu, dot, 1);
    const float uu = beta * (__bfloat162float(v[t * v_st + hv * v_sh + col]) - dot);
    float out = 0.f;
    asm volatile("" ::: "memory");  // reload k from shared memory instead of holding 128 more registers
#pragma unroll
    for (int i = 0; i < R; ++i) {
      s[i] += ks[row0 + i] * uu;
      out += s[i] * qs[row0 + i];
    }
    out += __shfl_xor_sync(0xffffffffu, out, 1);
    if (row0 == 0) o[t * o_st + hv * o_sh + col] = __float2bfloat16(out);
  }
  if (ht != nullptr) {
#pragma unroll
    for (int i = 0; i < R; ++i) ht[state_off + i * kDim] = s[i];
  }
}

}  // namespace gdn

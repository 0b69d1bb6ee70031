// Chunked gated delta rule, stage 1 of 3 (the WY/UT transform), one block per (chunk, value head):
//   g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), gamma = in-chunk inclusive cumsum of g,
//   kn = L2-normalised k of the value head's key head (hv / (HV / H)),
//   L = strictly_lower(diag(beta) (kn kn^T (.) Gamma)), T = (I + L)^-1 (blocked substitution, fp32),
//   W = T diag(beta exp(gamma)) kn, U = T diag(beta) v   (mma.sync GEMMs, bf16 operands, fp32 accumulation).
// Writes gamma [tokens, HV] fp32 and W, U, kd = kn (.) exp(gamma_last - gamma) [tokens, HV, 128] bf16
// (contiguous; gamma_last = the chunk's last gamma). Rows past the chunk's length
// are treated as k = v = 0, g = beta = 0 and are not written.
// FUSED (operands of gdn_chunk_fused): also qn = L2-normalised q of the key head and writes
//   qg = scale diag(exp gamma) qn   [tokens, HV, 128] bf16 (rows < length), and
//   P  = scale tril_incl(qn kn^T (.) Gamma)   [num_chunks, HV, C, C] bf16 (every entry; zero past the length).
// Shared memory: kn, one tile that holds q (FUSED) and then v, the fp32 L / T (its space later holds T in bf16),
// gamma and beta: PrepSharedBytes(C) (52.7 KB at C = 64: 4 blocks per H200 SM).
// Who may call: hosts launching grid (num_chunks, HV), block NWARPS*32, dynamic shared PrepSharedBytes(C); q, q_st, q_sh, scale, qg, pmat are unused (may be null) unless FUSED.
// Thread-safety: each block writes only its own chunk's rows of its own value head.
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"

namespace gdn {

// T = (I + L)^-1 in place for a strictly lower C x C fp32 matrix L in shared memory (row stride ld; diagonal
// and upper part stored as 0): afterwards the strictly lower part holds T's (T has a unit diagonal).
// Diagonal 16 x 16 blocks by forward substitution, one warp each; then block-row by block-row:
// T_ij = -T_ii sum_{k=j}^{i-1} L_ik T_kj. Called by all threads; ends with a barrier.
template <int C, int NWARPS>
__device__ __forceinline__ void invert_unit_lower(float* L, int ld) {
  constexpr int NT = NWARPS * 32, NB = C / 16, PER = (16 * C + NT - 1) / NT;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  for (int bi = warp; bi < NB; bi += NWARPS) {
    float* Lb = L + bi * 16 * ld + bi * 16;
    for (int r = 1; r < 16; ++r) {
      float val = 0.f;
      if (lane < r) {
        float acc = Lb[r * ld + lane];
        for (int s = lane + 1; s < r; ++s) acc += Lb[r * ld + s] * Lb[s * ld + lane];
        val = -acc;
      }
      __syncwarp();
      if (lane < r) Lb[r * ld + lane] = val;
      __syncwarp();
    }
  }
  __syncthreads();
  for (int i = 1; i < NB; ++i) {
    const int nout = 16 * 16 * i, w = 16 * i;
    float rv[PER];
#pragma unroll
    for (int e = 0; e < PER; ++e) {  // R_ij = sum_k L_ik T~_kj (T~ with its unit diagonal)
      const int o = tid + e * NT;
      rv[e] = 0.f;
      if (o < nout) {
        const int r = w + o / w, c = o % w;
        float acc = L[r * ld + c];
        for (int s = c + 1; s < w; ++s) acc += L[r * ld + s] * L[s * ld + c];
        rv[e] = acc;
      }
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int o = tid + e * NT;
      if (o < nout) L[(w + o / w) * ld + o % w] = rv[e];
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; ++e) {  // T_ij = -T~_ii R_ij
      const int o = tid + e * NT;
      if (o < nout) {
        const int r = w + o / w, c = o % w;
        float acc = L[r * ld + c];
        for (int s = w; s < r; ++s) acc += L[r * ld + s] * L[s * ld + c];
        rv[e] = -acc;
      }
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int o = tid + e * NT;
      if (o < nout) L[(w + o / w) * ld + o % w] = rv[e];
    }
    __syncthreads();
  }
}

template <int C, int NWARPS, bool FUSED>
__global__ void __launch_bounds__(NWARPS * 32)
    gdn_chunk_prep(const bf16* __restrict__ q, long long q_st, long long q_sh,   //
                   const bf16* __restrict__ k, long long k_st, long long k_sh,   //
                   const bf16* __restrict__ v, long long v_st, long long v_sh,   //
                   const bf16* __restrict__ a, const bf16* __restrict__ b, long long ab_st,
                   const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                   const int4* __restrict__ chunks,  // {token_start, length, seq, unused}
                   int H, int HV, float* __restrict__ gcum, bf16* __restrict__ w, bf16* __restrict__ u,
                   bf16* __restrict__ kd, float scale, bf16* __restrict__ qg, bf16* __restrict__ pmat) {
  constexpr int NT = NWARPS * 32;
  constexpr int LD = PadBf16Cols(kDim), LDF = PadF32Cols(C), LDT = PadBf16Cols(C);
  static_assert(C % 16 == 0, "chunk length must be a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* kn = reinterpret_cast<bf16*>(smem);
  bf16* vb = kn + C * LD;  // FUSED: holds q first (qs), v once q has been used
  bf16* qs = vb;
  float* L = reinterpret_cast<float*>(vb + C * LD);
  bf16* Tb = reinterpret_cast<bf16*>(L);  // replaces L once T is in registers
  float* gam = L + C * LDF;
  float* bet = gam + C;
  static_assert(C * PadBf16Cols(C) * 2 <= C * PadF32Cols(C) * 4, "Tb must fit in L's space");

  const int tid = threadIdx.x;
  const int4 ch = chunks[blockIdx.x];
  const int hv = blockIdx.y, hk = hv / (HV / H);
  const long long t0 = ch.x;
  const int len = ch.y;

  if constexpr (!FUSED) load_tile_async<C, kDim, NT>(v + t0 * v_st + hv * v_sh, v_st, len, vb, LD);
  const float alog = A_log[hv], dtb = dt_bias[hv];
  for (int r = tid; r < C; r += NT) {
    float g = 0.f, be = 0.f;
    if (r < len) {
      g = gate_g(__bfloat162float(a[(t0 + r) * ab_st + hv]), alog, dtb);
      be = gate_beta(__bfloat162float(b[(t0 + r) * ab_st + hv]));
    }
    gam[r] = g;
    bet[r] = be;
  }
  load_tile_async<C, kDim, NT>(k + t0 * k_st + hk * k_sh, k_st, len, kn, LD);
  if constexpr (FUSED) load_tile_async<C, kDim, NT>(q + t0 * q_st + hk * q_sh, q_st, len, qs, LD);
  cp_async_wait_all();
  __syncthreads();
  l2norm_rows_inplace<C, NWARPS>(kn, LD, 1.f);
  if constexpr (FUSED) l2norm_rows_inplace<C, NWARPS>(qs, LD, 1.f);
  if (tid < 32) {  // inclusive cumsum of g over the chunk, by one warp
    float carry = 0.f;
    for (int base = 0; base < C; base += 32) {
      float x = gam[base + tid];
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const float y = __shfl_up_sync(0xffffffffu, x, o);
        if (tid >= o) x += y;
      }
      gam[base + tid] = x + carry;
      carry += __shfl_sync(0xffffffffu, x, 31);
    }
  }
  __syncthreads();
  for (int r = tid; r < len; r += NT) gcum[(t0 + r) * HV + hv] = gam[r];

  if constexpr (FUSED) {
    bf16* pout = pmat + (static_cast<long long>(blockIdx.x) * HV + hv) * C * C;
    smem_gemm<C, C, kDim, false, false, NWARPS>(qs, LD, kn, LD, [&](int r, int c, float x0, float x1) {
      const float gr = gam[r];
      store_bf16x2(pout + r * C + c, c <= r ? scale * x0 * __expf(gr - gam[c]) : 0.f,
                   c + 1 <= r ? scale * x1 * __expf(gr - gam[c + 1]) : 0.f);
    });
  }
  smem_gemm<C, C, kDim, false, false, NWARPS>(kn, LD, kn, LD, [&](int r, int c, float x0, float x1) {
    const float br = bet[r], gr = gam[r];
    L[r * LDF + c] = c < r ? br * x0 * __expf(gr - gam[c]) : 0.f;
    L[r * LDF + c + 1] = c + 1 < r ? br * x1 * __expf(gr - gam[c + 1]) : 0.f;
  });
  if constexpr (FUSED) {  // qg = scale exp(gamma) qn; then q's space takes v (its load overlaps the inverse)
    for (int i = tid; i < len * (kDim / 2); i += NT) {
      const int r = i / (kDim / 2), c = (i % (kDim / 2)) * 2;
      const float sq = scale * __expf(gam[r]);
      const __nv_bfloat162 x = *reinterpret_cast<const __nv_bfloat162*>(qs + r * LD + c);
      store_bf16x2(qg + ((t0 + r) * HV + hv) * kDim + c, __low2float(x) * sq, __high2float(x) * sq);
    }
    __syncthreads();
    load_tile_async<C, kDim, NT>(v + t0 * v_st + hv * v_sh, v_st, len, vb, LD);
    cp_async_commit();
  } else {
    __syncthreads();
  }
  invert_unit_lower<C, NWARPS>(L, LDF);
  {  // Tb = bf16(T) with its unit diagonal, written over L
    constexpr int PER = (C * C + NT - 1) / NT;
    float tv[PER];
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int i = tid + e * NT, r = i / C, c = i % C;
      tv[e] = i < C * C ? (c < r ? L[r * LDF + c] : (c == r ? 1.f : 0.f)) : 0.f;
    }
    cp_async_wait_all();  // v (FUSED)
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int i = tid + e * NT;
      if (i < C * C) Tb[(i / C) * LDT + i % C] = __float2bfloat16(tv[e]);
    }
  }
  for (int i = tid; i < C * (kDim / 2); i += NT) {
    const int r = i / (kDim / 2), c = (i % (kDim / 2)) * 2;
    const float sk = bet[r] * __expf(gam[r]), sv = bet[r];
    __nv_bfloat162* pk = reinterpret_cast<__nv_bfloat162*>(kn + r * LD + c);
    __nv_bfloat162* pv = reinterpret_cast<__nv_bfloat162*>(vb + r * LD + c);
    if (r < len) {  // kd = kn exp(gamma_last - gamma): the state pass's update operand
      const float sd = __expf(gam[len - 1] - gam[r]);
      store_bf16x2(kd + ((t0 + r) * HV + hv) * kDim + c, __low2float(*pk) * sd, __high2float(*pk) * sd);
    }
    *pk = __floats2bfloat162_rn(__low2float(*pk) * sk, __high2float(*pk) * sk);
    *pv = __floats2bfloat162_rn(__low2float(*pv) * sv, __high2float(*pv) * sv);
  }
  __syncthreads();
  bf16* wout = w + (t0 * HV + hv) * kDim;
  bf16* uout = u + (t0 * HV + hv) * kDim;
  const long long row = static_cast<long long>(HV) * kDim;
  smem_gemm<C, kDim, C, false, true, NWARPS>(Tb, LDT, kn, LD, [&](int r, int c, float x0, float x1) {
    if (r < len) store_bf16x2(wout + r * row + c, x0, x1);
  });
  smem_gemm<C, kDim, C, false, true, NWARPS>(Tb, LDT, vb, LD, [&](int r, int c, float x0, float x1) {
    if (r < len) store_bf16x2(uout + r * row + c, x0, x1);
  });
}

}  // namespace gdn

// Chunked gated delta rule, stage 1 of 3 (the WY/UT transform), one block per (chunk, value head):
//   g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b) (or g, beta as given: g_in, beta_in fp32 non-null),
//   gamma = in-chunk inclusive cumsum of g, kn = k of the value head's key head (hv / (HV / H)), L2-normalised
//   when qk_l2norm (as is otherwise),
//   L = strictly_lower(diag(beta) (kn kn^T (.) Gamma)), T = (I + L)^-1 (blocked substitution, fp32),
//   W = (T diag(beta exp(gamma))) kn, U = (T diag(beta)) v   (mma.sync GEMMs, bf16 operands, fp32 accumulation).
// Writes gamma [tokens, HV] fp32 and W, U, kd = kn (.) exp(gamma_last - gamma) [tokens, HV, 128] bf16
// (contiguous; gamma_last = the chunk's last gamma). Rows past the chunk's length
// are treated as k = v = 0, g = beta = 0 and are not written.
// FUSED (operands of gdn_chunk_fused): also qn = q of the key head (L2-normalised when qk_l2norm) and writes
//   qg = scale diag(exp gamma) qn   [tokens, HV, 128] bf16 (rows < length), and
//   P  = scale tril_incl(qn kn^T (.) Gamma)   [num_chunks, HV, C, C] bf16 (every entry; zero past the length).
// ROWSCALE (operands of gdn_chunk_fused_wgmma, needs FUSED): qg is not written, and kd only where kd is non-null
// (the split pass's transfer kernel reads it); instead the two row factors that turn the raw q and k of the key head
// into qg and kd: rowscale[t, hv] = {scale exp(gamma) / |q|, exp(gamma_last - gamma) / |k|} (fp32 pairs, [tokens,
// HV]; the norms are 1 without qk_l2norm), 8 bytes a row instead of 512.
// The norms are folded, not applied to the tiles: q and k stay raw in shared memory, their rows' inverse norms
// (row_inv_norms) scale the Gram products' epilogues (L, P) and the row scalings (qg, kd, W's diag), so no
// normalised row is rounded to bf16 before a product. W's and U's diagonal factors scale T's columns
// (unit_lower_to_w_u_bf16), so k and v enter the products raw; W and U are written over the k and v tiles
// (smem_gemm_into) and leave as whole 256-byte rows.
// Shared memory: k, one tile that holds q (FUSED) and then v, the T region (fp32 L / T, later Tw and Tu in bf16),
// gamma, beta and the rows' inverse norms: PrepSharedBytes(C) (54 KB at C = 64: 4 blocks per H200 SM).
// Who may call: hosts launching grid (num_chunks, HV), block NWARPS*32, dynamic shared PrepSharedBytes(C); q, q_st,
// q_sh, scale, qg, pmat are unused (may be null) unless FUSED, rowscale unless ROWSCALE; a, b, A_log, dt_bias unused
// when g_in is given.
// Thread-safety: each block writes only its own chunk's rows of its own value head.
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"

namespace gdn {

// acc += l * t, elementwise over the 4 lanes of a float4.
__device__ __forceinline__ void fma4(float l, float4 t, float4& acc) {
  acc.x = fmaf(l, t.x, acc.x);
  acc.y = fmaf(l, t.y, acc.y);
  acc.z = fmaf(l, t.z, acc.z);
  acc.w = fmaf(l, t.w, acc.w);
}

// T = (I + L)^-1 in place for a strictly lower C x C fp32 matrix L in shared memory (row stride ld, a multiple
// of 4; diagonal and upper part stored as 0): afterwards the strictly lower part holds T's (T has a unit
// diagonal), the rest stays 0. All fp32, every loop with a compile-time trip count (a row-by-row substitution with
// two __syncwarp per row was half of gdn_chunk_prep's stall samples):
// 1. Diagonal 16 x 16 blocks: thread p < C owns column p % 16 of block p / 16 and solves (I + L_bb) x = e_j by
//    forward substitution in 16 registers (L read as warp broadcasts), then writes x below the diagonal.
// 2. Block rows i = 1 .. C/16 - 1: R = L_i,<i (I + T_<i,<i) (the strictly lower T of the rows above, already in
//    place), then T_i,<i = -(I + T_ii) R; each thread computes 4 adjacent columns (float4 loads of T / R rows).
// Called by all threads; ends with a barrier.
template <int C, int NWARPS>
__device__ __forceinline__ void invert_unit_lower(float* L, int ld) {
  constexpr int NT = NWARPS * 32, NB = C / 16;
  static_assert(C % 32 == 0 && NT >= C, "one thread per column of the diagonal blocks; whole warps");
  const int tid = threadIdx.x;
  if (tid < C) {
    const int b = tid / 16, j = tid % 16;
    float* Lb = L + b * 16 * ld + b * 16;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float acc = 0.f;
#pragma unroll
      for (int s = 0; s < r; ++s) acc = fmaf(Lb[r * ld + s], x[s], acc);
      x[r] = r == j ? 1.f : (r < j ? 0.f : -acc);
    }
    __syncwarp();  // every read of this warp's blocks before the writes
#pragma unroll
    for (int r = 1; r < 16; ++r) {
      if (r > j) Lb[r * ld + j] = x[r];
    }
  }
  __syncthreads();
#pragma unroll
  for (int i = 1; i < NB; ++i) {
    constexpr int kMaxQuads = 16 * (C - 16) / 4;
    const int w = 16 * i, quads = 16 * w / 4, qpr = w / 4;  // quads of the block row; quads per row
    constexpr int PER = (kMaxQuads + NT - 1) / NT;
    float4 rv[PER];
#pragma unroll
    for (int e = 0; e < PER; ++e) {  // R = L_ic + sum_{s < w} L_is T_sc
      const int q = tid + e * NT;
      if (q < quads) {
        const int r = w + q / qpr, c = (q % qpr) * 4;
        float4 acc = *reinterpret_cast<const float4*>(L + r * ld + c);
#pragma unroll 16
        for (int s = 0; s < w; ++s) {
          fma4(L[r * ld + s], *reinterpret_cast<const float4*>(L + s * ld + c), acc);
        }
        rv[e] = acc;
      }
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int q = tid + e * NT;
      if (q < quads) *reinterpret_cast<float4*>(L + (w + q / qpr) * ld + (q % qpr) * 4) = rv[e];
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; ++e) {  // T_ic = -(R_rc + sum_{s in block i} T_ii[r][s] R_sc)
      const int q = tid + e * NT;
      if (q < quads) {
        const int r = w + q / qpr, c = (q % qpr) * 4;
        float4 acc = *reinterpret_cast<const float4*>(L + r * ld + c);
#pragma unroll
        for (int s = 0; s < 16; ++s) {
          fma4(L[r * ld + w + s], *reinterpret_cast<const float4*>(L + (w + s) * ld + c), acc);
        }
        rv[e] = make_float4(-acc.x, -acc.y, -acc.z, -acc.w);
      }
    }
    __syncthreads();
#pragma unroll
    for (int e = 0; e < PER; ++e) {
      const int q = tid + e * NT;
      if (q < quads) *reinterpret_cast<float4*>(L + (w + q / qpr) * ld + (q % qpr) * 4) = rv[e];
    }
    __syncthreads();
  }
}

// gam[0 .. C) = its inclusive prefix sum (the in-chunk cumulative gate), by the calling warp (all 32 lanes; no
// barrier inside).
template <int C>
__device__ __forceinline__ void warp_chunk_cumsum(float* gam) {
  const int lane = threadIdx.x % 32;
  float carry = 0.f;
  for (int base = 0; base < C; base += 32) {
    float x = gam[base + lane];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, x, o);
      if (lane >= o) x += y;
    }
    gam[base + lane] = x + carry;
    carry += __shfl_sync(0xffffffffu, x, 31);
  }
}

// chunk_cumsum: warp_chunk_cumsum by warp 0 (the other threads pass; callers put barriers around it).
template <int C>
__device__ __forceinline__ void chunk_cumsum(float* gam) {
  if (threadIdx.x < 32) warp_chunk_cumsum<C>(gam);
}

// Two scaled bf16 copies of T = I + the strictly lower fp32 result of invert_unit_lower in L (row stride ldf),
// written over L's own region: Tb[r][c] = T[r][c] col(c).x row(r) and Tb[C + r][c] = T[r][c] col(c).y (row stride
// ldt each; PrepTRegionBytes(C)). For W = Tw k and U = Tu v (`unit_lower_to_w_u_bf16`) the column factors are
// {beta e^gamma / |k|, beta} and there is no row factor: scaling T's columns instead of the C x 128 operands' rows
// touches C^2 elements instead of 128 C and leaves k and v raw (one bf16 rounding less each). Every thread owns
// column c = tid % C of both (NT % C == 0), so it takes column c's factors once (after between(): taken before it,
// they made ptxas spill in three variants). Every thread reads its elements of L into registers, calls between()
// (which must end with a block barrier: nobody writes Tb before everybody has read L), then writes them. Called by
// all NT threads.
template <int C, int NT, class Between, class ColFactors, class RowFactor>
__device__ __forceinline__ void unit_lower_to_scaled_bf16(const float* L, int ldf, bf16* Tb, int ldt, Between between,
                                                          ColFactors col, RowFactor row) {
  static_assert(NT % C == 0, "a fixed column per thread");
  constexpr int PER = C * C / NT, kRowStep = NT / C;
  const int c = threadIdx.x % C, r0 = threadIdx.x / C;
  float tv[PER];
#pragma unroll
  for (int e = 0; e < PER; ++e) {
    const int r = r0 + e * kRowStep;
    tv[e] = c < r ? L[r * ldf + c] : (c == r ? 1.f : 0.f);
  }
  between();
  const float2 f = col(c);
#pragma unroll
  for (int e = 0; e < PER; ++e) {
    const int r = r0 + e * kRowStep;
    Tb[r * ldt + c] = __float2bfloat16(tv[e] * f.x * row(r));
    Tb[(C + r) * ldt + c] = __float2bfloat16(tv[e] * f.y);
  }
}
// Tw = T diag(beta e^gamma / |k|) at Tb and Tu = T diag(beta) at Tb + C ldt, so that W = Tw k and U = Tu v.
template <int C, int NT, class Between>
__device__ __forceinline__ void unit_lower_to_w_u_bf16(const float* L, int ldf, bf16* Tb, int ldt, const float* bet,
                                                       const float* gam, const float* kinv, Between between) {
  unit_lower_to_scaled_bf16<C, NT>(
      L, ldf, Tb, ldt, between, [&](int c) { return make_float2(bet[c] * __expf(gam[c]) * kinv[c], bet[c]); },
      [](int) { return 1.f; });
}

// kd = kn exp(gamma_last - gamma), kn = k / |k| (kinv), for the len rows of the chunk at token t0: the raw k tile
// [C][ld] bf16 in shared memory to kd [tokens, HV, 128] of value head hv (16-byte stores, 8 columns a step). Called
// by all NT threads; no barrier inside.
template <int C, int NT>
__device__ __forceinline__ void store_decayed_k(const bf16* k, int ld, int len, const float* gam, const float* kinv,
                                                bf16* __restrict__ kd, int t0, int HV, int hv) {
  constexpr int kVec8 = C * (kDim / 8);
  static_assert(kVec8 % NT == 0, "no remainder");
#pragma unroll
  for (int e = 0; e < kVec8 / NT; ++e) {
    const int i = static_cast<int>(threadIdx.x) + e * NT, r = i / (kDim / 8), c = (i % (kDim / 8)) * 8;
    if (r < len) {
      *reinterpret_cast<uint4*>(kd + (static_cast<long long>(t0 + r) * HV + hv) * kDim + c) =
          scale_bf16x8(*reinterpret_cast<const uint4*>(k + r * ld + c), __expf(gam[len - 1] - gam[r]) * kinv[r]);
    }
  }
}

// Register caps (minimum blocks per SM). sm_120: 170 (4 warps, 3 blocks per SM) and 255 (8 warps, 1 block): with the
// default hint ptxas caps the prep at 128 / 64 registers there and spills 4-44 B, and at 128 with 8 warps still
// 8-16 B. sm_90: the default (56 registers, 9 blocks of 4 warps per SM) for the fused variants at chunk 32 with 4
// warps and at chunk 64 with 4; 64 (8 blocks) for the unfused one at chunk 32 with 4 warps, 64 (4 blocks) at chunk
// 32 with 8 warps and 85 at chunk 64 with 8, where ptxas's own choice spilled 4-20 B (NVRTC: prep<32, 4, false>,
// prep<32, 8, true>, prep<64, 8, false>). Other caps spilled too: 56 on prep<32, 4, true>, 128 on prep<64, 8, true>.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define GDN_PREP_BOUNDS(chunk, threads, fused) __launch_bounds__(threads, (threads) <= 128 ? 3 : 1)
#else
#define GDN_PREP_BOUNDS(chunk, threads, fused) \
  __launch_bounds__(threads, (threads) > 128 ? ((chunk) == 32 ? 4 : 3) : ((chunk) == 32 && !(fused)) ? 8 : 0)
#endif

template <int C, int NWARPS, bool FUSED, bool ROWSCALE = false>
__global__ void GDN_PREP_BOUNDS(C, NWARPS * 32, FUSED)
    gdn_chunk_prep(const bf16* __restrict__ q, long long q_st, long long q_sh,   //
                   const bf16* __restrict__ k, long long k_st, long long k_sh,   //
                   const bf16* __restrict__ v, long long v_st, long long v_sh,   //
                   const bf16* __restrict__ a, const bf16* __restrict__ b, long long ab_st,
                   const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                   const float* __restrict__ g_in, const float* __restrict__ beta_in,
                   const int4* __restrict__ chunks,  // {token_start, length, seq, unused}
                   int H, int HV, int qk_l2norm, float* __restrict__ gcum, bf16* __restrict__ w, bf16* __restrict__ u,
                   bf16* __restrict__ kd, float scale, bf16* __restrict__ qg, bf16* __restrict__ pmat,
                   float2* __restrict__ rowscale) {
  static_assert(FUSED || !ROWSCALE, "the row factors belong to the fused operands");
  constexpr int NT = NWARPS * 32;
  constexpr int LD = PadBf16Cols(kDim), LDF = PadF32Cols(C), LDT = PadBf16Cols(C);
  static_assert(C % 16 == 0, "chunk length must be a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* kn = reinterpret_cast<bf16*>(smem);
  bf16* vb = kn + C * LD;  // FUSED: holds q first (qs), v once q has been used
  bf16* qs = vb;
  float* L = reinterpret_cast<float*>(vb + C * LD);
  bf16* Tb = reinterpret_cast<bf16*>(L);  // Tw, then Tu: replace L once T is in registers
  float* gam = reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(L) + PrepTRegionBytes(C));
  static_assert(C * LDF * 4 <= PrepTRegionBytes(C) && 2 * C * LDT * 2 == PrepTRegionBytes(C), "the T region");
  float* bet = gam + C;
  float* kinv = bet + C;  // ROWSCALE: 1 / |k| and 1 / |q| of each row (1 without qk_l2norm)
  float* qinv = kinv + C;

  constexpr int kVec8 = C * (kDim / 8);  // 8-column vectors of a C x 128 tile
  static_assert(kVec8 % NT == 0, "the 8-wide elementwise loops have no remainder");
  const int tid = threadIdx.x;
  const int4 ch = chunks[blockIdx.x];
  const int hv = blockIdx.y, hk = hv / (HV / H);
  const int t0 = ch.x;  // 32 bits (a token index), widened where it scales: a 64-bit t0 kept alive spilled
  const int len = ch.y;

  if constexpr (!FUSED) load_tile_async<C, kDim, NT>(v + t0 * v_st + hv * v_sh, v_st, len, vb, LD);
  const float alog = g_in != nullptr ? 0.f : A_log[hv], dtb = g_in != nullptr ? 0.f : dt_bias[hv];
  for (int r = tid; r < C; r += NT) {
    const float2 gb = r < len ? gate_at(a, b, g_in, beta_in, (t0 + r) * ab_st + hv, alog, dtb) : make_float2(0.f, 0.f);
    gam[r] = gb.x;
    bet[r] = gb.y;
    kinv[r] = qinv[r] = 1.f;  // replaced below when qk_l2norm (after the barrier)
  }
  load_tile_async<C, kDim, NT>(k + t0 * k_st + hk * k_sh, k_st, len, kn, LD);
  if constexpr (FUSED) load_tile_async<C, kDim, NT>(q + t0 * q_st + hk * q_sh, q_st, len, qs, LD);
  cp_async_wait_all();
  __syncthreads();
  if (qk_l2norm) {  // the rows stay raw: every product below takes the factors instead
    row_inv_norms<C, NT>(kn, LD, kinv);
    if constexpr (FUSED) row_inv_norms<C, NT>(qs, LD, qinv);
  }
  chunk_cumsum<C>(gam);
  __syncthreads();
  for (int r = tid; r < len; r += NT) gcum[static_cast<long long>(t0 + r) * HV + hv] = gam[r];

  if constexpr (FUSED) {
    bf16* pout = pmat + (static_cast<long long>(blockIdx.x) * HV + hv) * C * C;
    smem_gemm<C, C, kDim, false, false, NWARPS>(qs, LD, kn, LD, [&](int r, int c, float x0, float x1) {
      const float gr = gam[r], sr = scale * qinv[r];
      store_bf16x2(pout + r * C + c, c <= r ? sr * x0 * kinv[c] * __expf(gr - gam[c]) : 0.f,
                   c + 1 <= r ? sr * x1 * kinv[c + 1] * __expf(gr - gam[c + 1]) : 0.f);
    });
  }
  smem_gemm<C, C, kDim, false, false, NWARPS>(kn, LD, kn, LD, [&](int r, int c, float x0, float x1) {
    const float br = bet[r] * kinv[r], gr = gam[r];
    L[r * LDF + c] = c < r ? br * x0 * kinv[c] * __expf(gr - gam[c]) : 0.f;
    L[r * LDF + c + 1] = c + 1 < r ? br * x1 * kinv[c + 1] * __expf(gr - gam[c + 1]) : 0.f;
  });
  if constexpr (ROWSCALE) {  // the factors of qg and kd
    if (tid < len) {  // NT >= C (invert_unit_lower); a strided loop here made NVRTC spill 8 B
      rowscale[static_cast<long long>(t0 + tid) * HV + hv] =
          make_float2(scale * __expf(gam[tid]) * qinv[tid], __expf(gam[len - 1] - gam[tid]) * kinv[tid]);
    }
  } else if constexpr (FUSED) {  // qg = scale exp(gamma) qn
#pragma unroll
    for (int e = 0; e < kVec8 / NT; ++e) {
      const int i = tid + e * NT, r = i / (kDim / 8), c = (i % (kDim / 8)) * 8;
      if (r < len) {
        *reinterpret_cast<uint4*>(qg + (static_cast<long long>(t0 + r) * HV + hv) * kDim + c) =
            scale_bf16x8(*reinterpret_cast<const uint4*>(qs + r * LD + c), scale * __expf(gam[r]) * qinv[r]);
      }
    }
  }
  __syncthreads();
  if constexpr (FUSED) {  // q is used: its space takes v (the load overlaps the inverse)
    load_tile_async<C, kDim, NT>(v + t0 * v_st + hv * v_sh, v_st, len, vb, LD);
    cp_async_commit_group();
  }
  invert_unit_lower<C, NWARPS>(L, LDF);
  unit_lower_to_w_u_bf16<C, NT>(L, LDF, Tb, LDT, bet, gam, kinv, [] {
    cp_async_wait_all();  // v (FUSED)
    __syncthreads();
  });
  if (!ROWSCALE || kd != nullptr) {  // the state pass's operand
    store_decayed_k<C, NT>(kn, LD, len, gam, kinv, kd, t0, HV, hv);
  }
  __syncthreads();
  smem_gemm_into<C, kDim, NWARPS>(Tb, LDT, kn, LD, kn, LD);           // W = Tw kn, over kn
  smem_gemm_into<C, kDim, NWARPS>(Tb + C * LDT, LDT, vb, LD, vb, LD);  // U = Tu v, over v
  __syncthreads();
  const long long row = static_cast<long long>(HV) * kDim;
  store_rows_global<C, NT>(kn, LD, len, w + (static_cast<long long>(t0) * HV + hv) * kDim, row);
  store_rows_global<C, NT>(vb, LD, len, u + (static_cast<long long>(t0) * HV + hv) * kDim, row);
}

}  // namespace gdn

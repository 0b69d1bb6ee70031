// Chunked gated delta rule, stage 3 of 3: the outputs of one chunk, one block per (column slice of BV, chunk,
// value head):  O = scale * ( diag(exp gamma) Q h_n + tril_incl(Q K^T (.) Gamma) V_new )
// with Q, K rows of the key head hv / (HV / H) (L2-normalised when qk_l2norm), h_n and V_new from gdn_chunk_state (bf16), all
// products on mma.sync (bf16 operands, fp32 accumulation). Writes o [tokens, HV, 128] bf16 (strided).
// Who may call: hosts launching grid (128 / BV, num_chunks, HV), block NWARPS*32, dynamic shared
// OutputSharedBytes(C, BV). chunks[i] = {token_start, length, seq, unused}, i = the global chunk index.
// Thread-safety: each block writes only its own rows and columns of o.
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"

namespace gdn {

template <int C, int BV, int NWARPS>
__global__ void __launch_bounds__(NWARPS * 32, 2)  // register cap 255 / 128 (4 / 8 warps): no sm_120 spills
    gdn_chunk_output(const bf16* __restrict__ q, long long q_st, long long q_sh,  //
                     const bf16* __restrict__ k, long long k_st, long long k_sh,  //
                     const float* __restrict__ gcum, const bf16* __restrict__ hbuf, const bf16* __restrict__ vnew,
                     const int4* __restrict__ chunks, int H, int HV, int qk_l2norm, float scale,  //
                     bf16* __restrict__ o, long long o_st, long long o_sh) {
  constexpr int NT = NWARPS * 32;
  constexpr int LD = PadBf16Cols(kDim), LDS = PadF32Cols(C > BV ? C : BV), LDH = PadBf16Cols(BV),
                LDP = PadBf16Cols(C);
  static_assert(kDim % BV == 0 && BV % 16 == 0, "BV must divide 128 and be a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);
  bf16* ks = qs + C * LD;  // later P [C][C+8]
  float* S = reinterpret_cast<float*>(ks + C * LD);  // later O
  bf16* hs = reinterpret_cast<bf16*>(S + C * LDS);
  bf16* vn = hs + kDim * LDH;
  float* gam = reinterpret_cast<float*>(vn + C * LDH);

  const int tid = threadIdx.x;
  const int col0 = blockIdx.x * BV;
  const int chunk = blockIdx.y, hv = blockIdx.z, hk = hv / (HV / H);
  const int4 ch = chunks[chunk];
  const long long t0 = ch.x;
  const int len = ch.y;
  const long long hv_row = static_cast<long long>(HV) * kDim;

  load_tile_async<kDim, BV, NT>(hbuf + (static_cast<long long>(chunk) * HV + hv) * kDim * kDim + col0, kDim, kDim,
                                hs, LDH);
  load_tile_async<C, BV, NT>(vnew + t0 * hv_row + hv * kDim + col0, hv_row, len, vn, LDH);
  load_tile_async<C, kDim, NT>(q + t0 * q_st + hk * q_sh, q_st, len, qs, LD);
  load_tile_async<C, kDim, NT>(k + t0 * k_st + hk * k_sh, k_st, len, ks, LD);
  const float glast = gcum[(t0 + len - 1) * HV + hv];
  for (int r = tid; r < C; r += NT) gam[r] = r < len ? gcum[(t0 + r) * HV + hv] : glast;
  cp_async_wait_all();
  __syncthreads();
  if (qk_l2norm) {
    l2norm_rows_inplace<C, NWARPS>(qs, LD, 1.f);
    l2norm_rows_inplace<C, NWARPS>(ks, LD, 1.f);
    __syncthreads();
  }
  smem_gemm<C, C, kDim, false, false, NWARPS>(qs, LD, ks, LD, [&](int r, int c, float x0, float x1) {
    const float gr = gam[r];
    S[r * LDS + c] = c <= r ? x0 * __expf(gr - gam[c]) : 0.f;
    S[r * LDS + c + 1] = c + 1 <= r ? x1 * __expf(gr - gam[c + 1]) : 0.f;
  });
  __syncthreads();
  bf16* P = ks;
  for (int i = tid; i < C * C; i += NT) P[(i / C) * LDP + i % C] = __float2bfloat16(S[(i / C) * LDS + i % C]);
  __syncthreads();
  float* O = S;
  smem_gemm<C, BV, kDim, false, true, NWARPS>(qs, LD, hs, LDH, [&](int r, int c, float x0, float x1) {
    const float e = __expf(gam[r]);
    O[r * LDS + c] = x0 * e;
    O[r * LDS + c + 1] = x1 * e;
  });
  __syncthreads();
  bf16* out = o + t0 * o_st + hv * o_sh + col0;
  smem_gemm<C, BV, C, false, true, NWARPS>(P, LDP, vn, LDH, [&](int r, int c, float x0, float x1) {
    if (r < len) store_bf16x2(out + r * o_st + c, scale * (O[r * LDS + c] + x0), scale * (O[r * LDS + c + 1] + x1));
  });
}

}  // namespace gdn

// Stage 1 of the chunked gated delta rule (the WY/UT transform) for the Hopper tier's passes, one block per (chunk,
// key head) instead of per (chunk, value head): what gdn_chunk_prep<C, NWARPS, true, true> writes (gcum, W, U, P,
// the row factors; kd where non-null), for every value head of the key head (HV / H of them) in turn. q and k are
// loaded once, their rows' inverse norms taken once and the raw Gram products q k^T and k k^T computed once (fp32,
// the lower 16 x 16 tiles only, in shared memory): the value heads' gates differ, these do not, so at (16, 48) the
// per-value-head prep did them three times. The gates of the value heads and their in-chunk cumsums gamma, a warp
// a value head, while the q / k tiles load (up to kPrepGateHeads of them; beyond, a group at a time). Per value
// head, as gdn_chunk_prep: P and L as the products' epilogues (here from the stored products), the row factors,
// T = (I + L)^-1, W = (T diag(beta e^gamma / |k|)) k into its own tile (raw k stays for the next value head),
// U = (T diag(beta)) v over v.
// FOLD (beside gdn_chunk_fused_wgmma<C, true>): neither v nor W and U; per value head P stays in shared memory and
// leaves as P T diag(beta) (pmat), K2 = (diag(fk) T diag(beta))^T k (w; fk = e^(gamma_last - gamma) / |k|) and the
// row factors {scale e^gamma / |q|, e^gamma / |k|}: the pass computes X = v - diag(e^gamma / |k|) k h itself.
// Shared memory: PrepKeySmem (FOLD: P [C][C+8] bf16, fk [C] and P T diag(beta) staged [C][C+8] bf16 in v's space, so
// that it leaves as whole rows: whole-row stores measured faster than the fragments' 4-byte pairs; the space holds
// them at chunk 32, the only chunk prep_heads 2 takes).
// Who may call: hosts launching grid (num_chunks, H), block NWARPS * 32, dynamic shared PrepKeySharedBytes(C); the
// arguments of gdn_chunk_prep<C, NWARPS, true, true> (qg unused).
// Thread-safety: each block writes only its own chunk's rows of its key head's value heads.
#pragma once

#include "gdn_chunk_prep.cuh"

namespace gdn {

// The block's shared memory, PrepKeySharedBytes(C) of it: raw k, W, q (then each value head's v, then its U) as
// [C][136] bf16; the raw products q k^T and k k^T as [C][C+4] fp32; the T region (L in fp32, then Tw and Tu in bf16,
// PrepTRegionBytes); the rows' inverse norms of k and q (1 without qk_l2norm) [C] fp32; the gates of up to
// kPrepGateHeads value heads, gamma then beta [C] fp32 each (slot s: gam(s), bet(s)).
template <int C>
struct PrepKeySmem {
  static constexpr int LD = PadBf16Cols(kDim), LDF = PadF32Cols(C), LDT = PadBf16Cols(C);
  static_assert(C * LDF * 4 <= PrepTRegionBytes(C) && 2 * C * LDT * 2 == PrepTRegionBytes(C), "the T region");
  static_assert(3 * C * LD * 2 + 2 * C * LDF * 4 + PrepTRegionBytes(C) + (2 + 2 * kPrepGateHeads) * C * 4 ==
                    PrepKeySharedBytes(C),
                "gdn_layout.h's formula");
  bf16 *kraw, *wt, *vb;
  float *gkk, *gqk, *L, *kinv, *qinv, *gates;
  bf16* Tb;
  __device__ explicit PrepKeySmem(unsigned char* smem)
      : kraw(reinterpret_cast<bf16*>(smem)), wt(kraw + C * LD), vb(wt + C * LD),
        gkk(reinterpret_cast<float*>(vb + C * LD)), gqk(gkk + C * LDF), L(gqk + C * LDF),
        kinv(reinterpret_cast<float*>(reinterpret_cast<unsigned char*>(L) + PrepTRegionBytes(C))),
        qinv(kinv + C), gates(qinv + C), Tb(reinterpret_cast<bf16*>(L)) {}
  __device__ float* gam(int slot) const { return gates + 2 * C * slot; }
  __device__ float* bet(int slot) const { return gates + 2 * C * slot + C; }
};

// The gates of value heads hv0 .. hv0 + n - 1 (n <= kPrepGateHeads) into slots 0 .. n - 1, a warp a value head:
// (g, beta) of every row (gate_at; 0 past len), then gamma = g's in-chunk cumsum, also to gcum [tokens, HV] for the
// len rows. No barrier inside (a warp needs no other; the readers wait at the caller's next barrier).
template <int C, int NWARPS>
__device__ __forceinline__ void PrepKeyGates(const PrepKeySmem<C>& sm, const bf16* __restrict__ a,
                                             const bf16* __restrict__ b, long long ab_st,
                                             const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                                             const float* __restrict__ g_in, const float* __restrict__ beta_in,
                                             int t0, int len, int HV, int hv0, int n, float* __restrict__ gcum) {
  const int lane = threadIdx.x % 32;
  for (int s = threadIdx.x / 32; s < n; s += NWARPS) {
    const int hv = hv0 + s;
    const float alog = g_in != nullptr ? 0.f : A_log[hv], dtb = g_in != nullptr ? 0.f : dt_bias[hv];
    float *const gam = sm.gam(s), *const bet = sm.bet(s);
    for (int r = lane; r < C; r += 32) {
      const float2 gb =
          r < len ? gate_at(a, b, g_in, beta_in, (t0 + r) * ab_st + hv, alog, dtb) : make_float2(0.f, 0.f);
      gam[r] = gb.x;
      bet[r] = gb.y;
    }
    __syncwarp();
    warp_chunk_cumsum<C>(gam);
    __syncwarp();
    for (int r = lane; r < len; r += 32) gcum[static_cast<long long>(t0 + r) * HV + hv] = gam[r];
  }
}

// One value head hv of the block's key head: gdn_chunk_prep's work after the gates, over the raw tiles, products,
// norms and gates (slot `slot`) the kernel left in shared memory; ends with a barrier. Not inlined: as the body of
// the kernel's loop over the value heads, every address of it was loop-invariant and hoisted (168 registers; 64 as
// a call).
template <int C, int NWARPS, bool FOLD>
__device__ __noinline__ void PrepKeyValueHead(const bf16* __restrict__ v, long long v_st, long long v_sh, int t0,
                                              int len, int HV, int hv, int slot, bf16* __restrict__ w,
                                              bf16* __restrict__ u, bf16* __restrict__ kd, float scale,
                                              bf16* __restrict__ pmat, float2* __restrict__ rowscale) {
  constexpr int NT = NWARPS * 32;
  using Smem = PrepKeySmem<C>;
  constexpr int LD = Smem::LD, LDF = Smem::LDF, LDT = Smem::LDT;
  static_assert((C * C / 2) % NT == 0, "the P / L loop has no remainder");
  extern __shared__ __align__(16) unsigned char smem[];
  const Smem sm(smem);
  bf16 *const kraw = sm.kraw, *const wt = sm.wt, *const vb = sm.vb, *const Tb = sm.Tb;
  float *const gkk = sm.gkk, *const gqk = sm.gqk, *const L = sm.L, *const kinv = sm.kinv, *const qinv = sm.qinv;
  const float *const gam = sm.gam(slot), *const bet = sm.bet(slot);
  const int tid = threadIdx.x;
  const long long row = static_cast<long long>(HV) * kDim;
  bf16* const pb = vb;                                                    // FOLD: P [C][LDT] bf16 in v's space
  float* const fkr = reinterpret_cast<float*>(vb + C * LDT);              // FOLD: fk [C]
  bf16* const pts = reinterpret_cast<bf16*>(fkr + C);                    // FOLD: P T diag(beta) [C][LDT] staged
  static_assert(!FOLD || 2 * C * LDT * 2 + C * 4 <= C * LD * 2, "P, fk and the staged product fit v's space");
  if constexpr (!FOLD) {
    load_tile_async<C, kDim, NT>(v + t0 * v_st + hv * v_sh, v_st, len, vb, LD);
    cp_async_commit_group();
  }
  // P = scale tril_incl(qn kn^T (.) Gamma) and L = strict_lower(diag(beta) (kn kn^T (.) Gamma)), column pairs.
  bf16* const pout = pmat + (static_cast<long long>(blockIdx.x) * HV + hv) * C * C;
#pragma unroll
  for (int e = 0; e < C * C / 2 / NT; ++e) {
    const int i = tid + e * NT, r = i / (C / 2), c = (i % (C / 2)) * 2;
    const float gr = gam[r], sr = scale * qinv[r], br = bet[r] * kinv[r];
    const float f0 = kinv[c] * __expf(gr - gam[c]), f1 = kinv[c + 1] * __expf(gr - gam[c + 1]);
    store_bf16x2((FOLD ? pb + r * LDT : pout + r * C) + c, c <= r ? sr * gqk[r * LDF + c] * f0 : 0.f,
                 c + 1 <= r ? sr * gqk[r * LDF + c + 1] * f1 : 0.f);
    L[r * LDF + c] = c < r ? br * gkk[r * LDF + c] * f0 : 0.f;
    L[r * LDF + c + 1] = c + 1 < r ? br * gkk[r * LDF + c + 1] * f1 : 0.f;
  }
  if constexpr (FOLD) {  // the factors of qg and of k h in X; fk for Ty's rows
    if (tid < C) fkr[tid] = tid < len ? __expf(gam[len - 1] - gam[tid]) * kinv[tid] : 0.f;
    if (tid < len) {
      rowscale[static_cast<long long>(t0 + tid) * HV + hv] =
          make_float2(scale * __expf(gam[tid]) * qinv[tid], __expf(gam[tid]) * kinv[tid]);
    }
  } else if (tid < len) {  // the factors of qg and kd
    rowscale[static_cast<long long>(t0 + tid) * HV + hv] =
        make_float2(scale * __expf(gam[tid]) * qinv[tid], __expf(gam[len - 1] - gam[tid]) * kinv[tid]);
  }
  __syncthreads();
  invert_unit_lower<C, NWARPS>(L, LDF);
  if constexpr (FOLD) {
    // Ty = diag(fk) T diag(beta) at Tb, Tp = T diag(beta) at Tb + C LDT; then P T diag(beta) to pmat and
    // K2 = Ty^T k into wt (k stays raw).
    unit_lower_to_scaled_bf16<C, NT>(
        L, LDF, Tb, LDT, [] { __syncthreads(); }, [&](int c) { return make_float2(bet[c], bet[c]); },
        [&](int r) { return fkr[r]; });
    __syncthreads();
    smem_gemm<C, C, C, false, true, NWARPS>(pb, LDT, Tb + C * LDT, LDT, [&](int r, int c, float x0, float x1) {
      store_bf16x2(pts + r * LDT + c, x0, x1);
    });
    smem_gemm_into<C, kDim, NWARPS, true>(Tb, LDT, kraw, LD, wt, LD);
    __syncthreads();
    store_rows_global<C, NT>(wt, LD, len, w + (static_cast<long long>(t0) * HV + hv) * kDim, row);
    for (int i = tid; i < C * C / 8; i += NT) {  // P T diag(beta) out as whole rows, 16 bytes a thread
      const int r = i / (C / 8), c = (i % (C / 8)) * 8;
      *reinterpret_cast<uint4*>(pout + r * C + c) = *reinterpret_cast<const uint4*>(pts + r * LDT + c);
    }
    __syncthreads();  // K2, the T region and the gates are free for the next value head
    return;
  }
  unit_lower_to_w_u_bf16<C, NT>(L, LDF, Tb, LDT, bet, gam, kinv, [] {
    cp_async_wait_all();  // v
    __syncthreads();
  });
  if (kd != nullptr) {  // the split pass's transfer kernel
    store_decayed_k<C, NT>(kraw, LD, len, gam, kinv, kd, t0, HV, hv);
  }
  __syncthreads();
  smem_gemm_into<C, kDim, NWARPS>(Tb, LDT, kraw, LD, wt, LD);         // W = Tw k into wt (k stays raw)
  smem_gemm_into<C, kDim, NWARPS>(Tb + C * LDT, LDT, vb, LD, vb, LD);  // U = Tu v, over v
  __syncthreads();
  store_rows_global<C, NT>(wt, LD, len, w + (static_cast<long long>(t0) * HV + hv) * kDim, row);
  store_rows_global<C, NT>(vb, LD, len, u + (static_cast<long long>(t0) * HV + hv) * kDim, row);
  __syncthreads();  // W, U, L and the gates are free for the next value head
}

// Minimum blocks per SM: as many as shared memory lets in (PrepKeySharedBytes: 41 KB at chunk 32, 105 KB at 64), so
// that ptxas never takes registers that would cost a block: sm_90 5 / 2, sm_120 (100 KiB an SM) 2 / -. Without the
// hint ptxas took 64 registers for <32, 8, true> on sm_90a (4 blocks) and spilled 4-8 B in three variants.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1200
#define GDN_PREP_KEY_BOUNDS(chunk, nwarps) __launch_bounds__((nwarps) * 32, (chunk) == 32 ? 2 : 1)
#else
#define GDN_PREP_KEY_BOUNDS(chunk, nwarps) __launch_bounds__((nwarps) * 32, (chunk) == 32 ? 5 : 2)
#endif

template <int C, int NWARPS, bool FOLD = false>
__global__ void GDN_PREP_KEY_BOUNDS(C, NWARPS)
    gdn_chunk_prep_key(const bf16* __restrict__ q, long long q_st, long long q_sh,  //
                       const bf16* __restrict__ k, long long k_st, long long k_sh,  //
                       const bf16* __restrict__ v, long long v_st, long long v_sh,  //
                       const bf16* __restrict__ a, const bf16* __restrict__ b, long long ab_st,
                       const float* __restrict__ A_log, const float* __restrict__ dt_bias,
                       const float* __restrict__ g_in, const float* __restrict__ beta_in,
                       const int4* __restrict__ chunks,  // {token_start, length, seq, unused}
                       int H, int HV, int qk_l2norm, float* __restrict__ gcum, bf16* __restrict__ w,
                       bf16* __restrict__ u, bf16* __restrict__ kd, float scale, bf16* __restrict__ /*qg*/,
                       bf16* __restrict__ pmat, float2* __restrict__ rowscale) {
  constexpr int NT = NWARPS * 32;
  static_assert(C % 16 == 0 && NT >= C, "whole 16-row tiles; a thread per row for the row factors");
  using Smem = PrepKeySmem<C>;
  constexpr int LD = Smem::LD, LDF = Smem::LDF;
  extern __shared__ __align__(16) unsigned char smem[];
  const Smem sm(smem);
  bf16 *const kraw = sm.kraw, *const qs = sm.vb;  // q in v's space until the products are taken
  float *const gkk = sm.gkk, *const gqk = sm.gqk, *const kinv = sm.kinv, *const qinv = sm.qinv;
  const int tid = threadIdx.x;
  const int4 ch = chunks[blockIdx.x];
  const int hk = blockIdx.y, ratio = HV / H;
  const int t0 = ch.x;  // 32 bits (a token index), widened where it scales
  const int len = ch.y;

  for (int r = tid; r < C; r += NT) kinv[r] = qinv[r] = 1.f;  // replaced below when qk_l2norm
  load_tile_async<C, kDim, NT>(k + t0 * k_st + hk * k_sh, k_st, len, kraw, LD);
  load_tile_async<C, kDim, NT>(q + t0 * q_st + hk * q_sh, q_st, len, qs, LD);
  for (int g0 = 0; g0 < ratio; g0 += kPrepGateHeads) {
    // The group's gates (the last group's value heads ended with a barrier: the slots are free); the first
    // group's while the q / k tiles load, then the norms and products.
    const int n = ratio - g0 < kPrepGateHeads ? ratio - g0 : kPrepGateHeads;
    PrepKeyGates<C, NWARPS>(sm, a, b, ab_st, A_log, dt_bias, g_in, beta_in, t0, len, HV, hk * ratio + g0, n, gcum);
    if (g0 == 0) {
      cp_async_wait_all();
      __syncthreads();
      if (qk_l2norm) {
        row_inv_norms<C, NT>(kraw, LD, kinv);
        row_inv_norms<C, NT>(qs, LD, qinv);
      }
      {  // the raw products, lower tiles only (P and L read c <= r): one k fragment for both
        constexpr int kT = C / 16;
        for (int t = tid / 32; t < kT * kT; t += NWARPS) {
          const int mi = t / kT, ni = t % kT;
          if (ni > mi) continue;
          float aq[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f}, ak[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
          warp_tile_mma2<kDim, false, false>(aq, qs, ak, kraw, LD, kraw, LD, mi * 16, ni * 16);
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const int r = tile_row(mi * 16, j), c = tile_col(ni * 16, j);
            gqk[r * LDF + c] = aq[2 * j];
            gqk[r * LDF + c + 1] = aq[2 * j + 1];
            gkk[r * LDF + c] = ak[2 * j];
            gkk[r * LDF + c + 1] = ak[2 * j + 1];
          }
        }
      }
    }
    __syncthreads();  // the gates (and the products) are in; q is used (its space takes v)
    for (int j = 0; j < n; ++j) {
      PrepKeyValueHead<C, NWARPS, FOLD>(v, v_st, v_sh, t0, len, HV, hk * ratio + g0 + j, j, w, u, kd, scale, pmat,
                                        rowscale);
    }
  }
}

}  // namespace gdn

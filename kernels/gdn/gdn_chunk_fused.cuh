// Chunked gated delta rule, stages 2 and 3 fused: the state recurrence over the chunks of one segment AND the
// chunk outputs, one block per (column slice of BV, value head, segment), so h_n and V_new never leave the SM:
//   V_new = U - W h_n
//   O     = qg h_n + P V_new                       (qg = scale diag(exp gamma) qn, P = scale tril(qn kn^T (.) Gamma))
//   h_{n+1} = exp(gamma_last) h_n + kd^T V_new      (kd = kn (.) exp(gamma_last - gamma))
// W, U, kd, gamma, qg, P from gdn_chunk_prep<C, NWARPS, true>. All products on mma.sync (bf16 operands, fp32
// accumulation). h lives in fp32 REGISTERS (each warp owns fixed 16 x 16 tiles of the 128 x BV slice; the update
// accumulates onto exp(gamma_last) h in place); a bf16 copy in shared memory feeds W h and qg h. The O and V_new
// tiles (C x BV) are owned the same way, so O = qg h + P V_new stays in registers between the two products.
// Loads (cp.async): STAGES = 1: one buffer per operand; group A (W, U slice, qg) and group B (kd, P) of the next
// chunk are issued as soon as the current chunk has stopped reading them (3 barriers per chunk).
// STAGES = 2: two buffers; all of chunk n+1 is issued when chunk n starts, a whole chunk ahead (2 barriers per
// chunk; about twice the shared memory).
// FOLD (beside gdn_chunk_prep_key<C, W, true>): W, U, qg and kd are not in memory; the tiles hold the raw k and q of
// the key head, v's slice, K2 = (diag(fk) T diag(beta))^T k (kd's place) and P T diag(beta) (P's), with the rows'
// factors {fq, fx}: X = v - diag(fx) k h takes V_new's place (V_new = T diag(beta) X), O = diag(fq) q h + P T
// diag(beta) X and h_{n+1} = exp(gamma_last) h_n + K2^T X: two multiplies a V_new element more, no product more.
// Starts from h0[h0_index] (zero when h0_index < 0 or h0 is null); writes o (bf16, strided) and, when
// ht_index[segment] >= 0, h to ht[ht_index] (fp32 [*, HV, 128, 128]). The pieces path passes ONE state buffer as
// both h0 and ht (in place), although both are declared __restrict__: correct only because every element of ht
// is written by the thread that read it from h0, after that read (h lives in its registers). Keep it so, or drop
// the __restrict__ (its cost is not measured yet), before staging h0 through shared memory or cp.async.
// Who may call: hosts launching grid (128 / BV, HV, num_segments), block NWARPS*32, dynamic shared
// FusedSharedBytes(C, BV, STAGES). segs[i] = {token_start, token_end, first_chunk, h0_index}.
// Thread-safety: each block owns its segment's rows of o and its head's column slice of the state.
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"

namespace gdn {

// Registers: min 1 block per SM (without a minimum ptxas capped at 128 registers and spilled), except chunk 32
// with 8 warps: min 2 blocks (a 128-register cap; 94-124 used and no spills on sm_90 / sm_120 with the shared
// fragments of the update below), so two blocks share an SM when there are more blocks than SMs (packed sequences,
// BV 32) instead of running in two waves.
template <int C, int BV, int NWARPS, int STAGES, bool FOLD = false>
__global__ void __launch_bounds__(NWARPS * 32, (C == 32 && NWARPS == 8) ? 2 : 1)
    gdn_chunk_fused(const bf16* __restrict__ kd, const bf16* __restrict__ w, const bf16* __restrict__ u,
                    const bf16* __restrict__ qg, const bf16* __restrict__ pmat, const float* __restrict__ gcum,
                    const int4* __restrict__ segs, const int* __restrict__ ht_index, int HV,
                    const float* __restrict__ h0, float* __restrict__ ht, bf16* __restrict__ o, long long o_st,
                    long long o_sh, const bf16* __restrict__ q, long long q_st, long long q_sh,
                    const bf16* __restrict__ k, long long k_st, long long k_sh, const bf16* __restrict__ v,
                    long long v_st, long long v_sh, int H, const float2* __restrict__ rowscale) {
  constexpr int NT = NWARPS * 32;
  constexpr int LD = PadBf16Cols(kDim), LDH = PadBf16Cols(BV), LDP = PadBf16Cols(C);
  static_assert(kDim % BV == 0 && BV % 16 == 0 && C % 16 == 0, "BV must divide 128; BV, C multiples of 16");
  static_assert(STAGES == 1 || STAGES == 2, "one or two load stages");
  constexpr int kTilesN = BV / 16;
  constexpr int kHTiles = (kDim / 16) * kTilesN;  // tiles of the 128 x BV state slice
  static_assert(kHTiles % NWARPS == 0, "the state tiles must split evenly over the warps");
  static_assert(NWARPS % kTilesN == 0, "every tile of a warp in one column strip (the shared V_new fragments)");
  constexpr int kHPerWarp = kHTiles / NWARPS;
  constexpr int kOTiles = (C / 16) * kTilesN;  // tiles of the C x BV output / V_new slice
  constexpr int kOPerWarp = (kOTiles + NWARPS - 1) / NWARPS;
  extern __shared__ __align__(16) unsigned char smem[];
  // hb [128][LDH], vn [C][LDH], then per stage: W, kd, qg [C][LD], P [C][LDP], U slice [C][LDH].
  bf16* hb = reinterpret_cast<bf16*>(smem);
  bf16* vn = hb + kDim * LDH;
  bf16* stage0 = vn + C * LDH;
  constexpr int kStage = 3 * C * LD + C * LDP + C * LDH;  // elements per stage
  auto wsm_of = [&](int s) { return stage0 + s * kStage; };
  auto kds_of = [&](int s) { return stage0 + s * kStage + C * LD; };
  auto qs_of = [&](int s) { return stage0 + s * kStage + 2 * C * LD; };
  auto ps_of = [&](int s) { return stage0 + s * kStage + 3 * C * LD; };
  auto us_of = [&](int s) { return stage0 + s * kStage + 3 * C * LD + C * LDP; };
  // FOLD: per stage the rows' factors {fq, fx} [C] float2 after the stages.
  float2* const rs = reinterpret_cast<float2*>(stage0 + STAGES * kStage);

  const int tid = threadIdx.x, warp = tid / 32;
  const int hv = blockIdx.y;
  const int4 seg = segs[blockIdx.z];
  const int col0 = blockIdx.x * BV;
  const long long hv_row = static_cast<long long>(HV) * kDim;  // row stride of [tokens, HV, 128]

  // Loads of chunk t (len rows): the thread's address parts are loop-invariant (tile_thread_offset); a full chunk
  // (every one but a segment's last) copies without the per-row check and its 64-bit selects.
  const unsigned off_k = tile_thread_offset<kDim, NT>(hv_row);  // W, qg, kd: [C][128] rows of [T, HV, 128]
  const unsigned off_u = tile_thread_offset<BV, NT>(hv_row);    // U slice: [C][BV]
  const unsigned off_p = tile_thread_offset<C, NT>(C);          // P: [C][C], dense
  // FOLD: the W, U and qg tiles take the raw k and q of the key head and v's slice (their own row strides).
  const int hk = FOLD ? hv / (HV / H) : 0;
  const bf16* const qh = q + hk * q_sh;
  const bf16* const kh = k + hk * k_sh;
  const bf16* const vh = v + hv * v_sh + col0;
  const unsigned off_q = FOLD ? tile_thread_offset<kDim, NT>(q_st) : 0u;
  const unsigned off_kr = FOLD ? tile_thread_offset<kDim, NT>(k_st) : 0u;
  const unsigned off_v = FOLD ? tile_thread_offset<BV, NT>(v_st) : 0u;
  auto issue_a = [&](long long t, int len, int s) {
    const long long base = (t * HV + hv) * kDim;
    if constexpr (FOLD) {
      if (len == C) {
        load_tile_async_at<C, kDim, NT, true>(kh + t * k_st, k_st, off_kr, len, wsm_of(s), LD);
        load_tile_async_at<C, BV, NT, true>(vh + t * v_st, v_st, off_v, len, us_of(s), LDH);
        load_tile_async_at<C, kDim, NT, true>(qh + t * q_st, q_st, off_q, len, qs_of(s), LD);
      } else {
        load_tile_async_at<C, kDim, NT, false>(kh + t * k_st, k_st, off_kr, len, wsm_of(s), LD);
        load_tile_async_at<C, BV, NT, false>(vh + t * v_st, v_st, off_v, len, us_of(s), LDH);
        load_tile_async_at<C, kDim, NT, false>(qh + t * q_st, q_st, off_q, len, qs_of(s), LD);
      }
      if (tid < C) {  // rows past the chunk get zero factors
        const float2* src = rowscale + (t + (tid < len ? tid : 0)) * HV + hv;
        cp_async_ca_8_zfill(smem_addr(rs + s * C + tid), src, tid < len ? 8 : 0);
      }
    } else if (len == C) {
      load_tile_async_at<C, kDim, NT, true>(w + base, hv_row, off_k, len, wsm_of(s), LD);
      load_tile_async_at<C, BV, NT, true>(u + base + col0, hv_row, off_u, len, us_of(s), LDH);
      load_tile_async_at<C, kDim, NT, true>(qg + base, hv_row, off_k, len, qs_of(s), LD);
    } else {
      load_tile_async_at<C, kDim, NT, false>(w + base, hv_row, off_k, len, wsm_of(s), LD);
      load_tile_async_at<C, BV, NT, false>(u + base + col0, hv_row, off_u, len, us_of(s), LDH);
      load_tile_async_at<C, kDim, NT, false>(qg + base, hv_row, off_k, len, qs_of(s), LD);
    }
    if constexpr (STAGES == 1) cp_async_commit_group();
  };
  const bf16* const kd_or_k2 = FOLD ? w : kd;  // FOLD: K2 in kd's place
  auto issue_b = [&](long long t, int len, long long chunk, int s) {
    if (len == C) {
      load_tile_async_at<C, kDim, NT, true>(kd_or_k2 + (t * HV + hv) * kDim, hv_row, off_k, len, kds_of(s), LD);
    } else {
      load_tile_async_at<C, kDim, NT, false>(kd_or_k2 + (t * HV + hv) * kDim, hv_row, off_k, len, kds_of(s), LD);
    }
    load_tile_async_at<C, C, NT, true>(pmat + (chunk * HV + hv) * C * C, C, off_p, C, ps_of(s), LDP);
    cp_async_commit_group();
  };
  auto chunk_len = [&](long long t) { return static_cast<int>(seg.y - t < C ? seg.y - t : C); };

  if (seg.x < seg.y) {  // STAGES = 2: A and B of a chunk form one group
    issue_a(seg.x, chunk_len(seg.x), 0);
    issue_b(seg.x, chunk_len(seg.x), seg.z, 0);
  }
  // h in registers: tile i of this warp is warp + i * NWARPS of the 128 x BV slice.
  float h[kHPerWarp][8];
#pragma unroll
  for (int i = 0; i < kHPerWarp; ++i) {
    const int t = warp + i * NWARPS, m0 = (t / kTilesN) * 16, n0 = (t % kTilesN) * 16;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int r = tile_row(m0, j), c = tile_col(n0, j);
      float x0 = 0.f, x1 = 0.f;
      if (h0 != nullptr && seg.w >= 0) {
        const float2 x = *reinterpret_cast<const float2*>(
            h0 + (static_cast<long long>(seg.w) * HV + hv) * kDim * kDim + r * kDim + col0 + c);
        x0 = x.x;
        x1 = x.y;
      }
      h[i][2 * j] = x0;
      h[i][2 * j + 1] = x1;
      store_bf16x2(hb + r * LDH + c, x0, x1);
    }
  }

  long long chunk = seg.z;
  int stage = 0;
  // This lane's o element (row lane / 4 of its first O tile, column 2 (lane % 4) of its strip) in the current
  // chunk, advanced by C rows per chunk (instead of recomputing the 64-bit row products every chunk).
  // Tile i of the warp is i * kORowStep rows further (tile warp + i * NWARPS; NWARPS % kTilesN == 0).
  constexpr int kORowStep = (NWARPS / kTilesN) * 16;
  long long o_lane = (seg.x + (warp / kTilesN) * 16 + (tid % 32) / 4) * o_st + static_cast<long long>(hv) * o_sh +
                     col0 + (warp % kTilesN) * 16 + (tid % 4) * 2;
  // gamma_last of the current chunk, loaded one chunk ahead: loaded in its own chunk, after the chunk's first
  // barrier, its exp and 32 FMULs of h stand between the V_new barrier and the update's first mma (SASS); here the
  // value is in a register a whole chunk early. Same value, same __expf, same products.
  float g_last = seg.x < seg.y ? gcum[(seg.x + chunk_len(seg.x) - 1) * HV + hv] : 0.f;
  for (long long t = seg.x; t < seg.y; t += C, ++chunk, stage = STAGES == 2 ? stage ^ 1 : 0) {
    const int len = chunk_len(t);
    const float decay = __expf(g_last);
    const bf16* wsm = wsm_of(stage);
    const bf16* kds = kds_of(stage);
    const bf16* qs = qs_of(stage);
    const bf16* ps = ps_of(stage);
    const bf16* us = us_of(stage);
    if constexpr (STAGES == 1) {
      cp_async_wait_group<1>();  // group A (W, U, qg) of this chunk has landed; kd, P may still be in flight
      __syncthreads();     // ... for every thread; hb of this chunk is complete
    } else {
      cp_async_wait_group<0>();  // this chunk's only group has landed
      __syncthreads();     // for every thread; hb complete; nobody reads the other stage (chunk n-1) any more
      if (t + C < seg.y) {
        issue_a(t + C, chunk_len(t + C), stage ^ 1);
        issue_b(t + C, chunk_len(t + C), chunk + 1, stage ^ 1);
      }
    }
    // V_new = U - W h and O = qg h, tiles owned by this warp.
    float acc_o[kOPerWarp][8];
#pragma unroll
    for (int i = 0; i < kOPerWarp; ++i) {
      const int tt = warp + i * NWARPS;
      if (kOTiles % NWARPS == 0 || tt < kOTiles) {
        const int m0 = (tt / kTilesN) * 16, n0 = (tt % kTilesN) * 16;
        float acc_v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
        // U read before the products (its latency hides under them) as one ldmatrix: a non-transposed 16 x 16
        // fragment is the accumulator layout, so up[j] holds (tile_row(m0, j), tile_col(n0, j) + {0, 1}) as the
        // four 4-byte loads would (1 LDSM instead of 4 LDS).
        unsigned up_raw[4];
        load_a_frag<false>(up_raw, us, LDH, m0, n0);
        __nv_bfloat162 up[4];
#pragma unroll
        for (int j = 0; j < 4; ++j) up[j] = *reinterpret_cast<const __nv_bfloat162*>(&up_raw[j]);
#pragma unroll
        for (int j = 0; j < 8; ++j) acc_o[i][j] = 0.f;
        warp_tile_mma2<kDim, false, true>(acc_v, wsm, acc_o[i], qs, LD, hb, LDH, m0, n0);  // h's fragment once
        float vx[8];  // V_new (FOLD: X = v - fx (.) k h, O's rows times fq), zero in rows >= len
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const bool in = tile_row(m0, j) < len;
          if constexpr (FOLD) {
            const float2 f = rs[stage * C + tile_row(m0, j)];
            vx[2 * j] = in ? __low2float(up[j]) - acc_v[2 * j] * f.y : 0.f;
            vx[2 * j + 1] = in ? __high2float(up[j]) - acc_v[2 * j + 1] * f.y : 0.f;
            acc_o[i][2 * j] *= f.x;
            acc_o[i][2 * j + 1] *= f.x;
          } else {
            vx[2 * j] = in ? __low2float(up[j]) - acc_v[2 * j] : 0.f;
            vx[2 * j + 1] = in ? __high2float(up[j]) - acc_v[2 * j + 1] : 0.f;
          }
        }
        store_tile_bf16(vn, LDH, m0, n0, vx);
      }
    }
    // h = exp(gamma_last) h here, before the V_new barrier instead of after it: every warp, its FMULs
    // free to fill the gaps of the mma chain above (one basic block where the O tiles need no guard); nothing
    // reads h (registers) between here and the update's mma below. The same products either way. The empty asm
    // pins the products here: without it NVVM sinks them past the barrier to their use (no instruction, no
    // change to the values).
#pragma unroll
    for (int i = 0; i < kHPerWarp; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        h[i][j] *= decay;
        asm volatile("" : "+f"(h[i][j]));
      }
    }
    // The next chunk's gamma_last (its last token t + C + chunk_len(t + C) - 1), issued here, after the products
    // (not between the first barrier and the first ldmatrix, where STAGES = 2 issues its loads), a chunk ahead.
    if (t + C < seg.y) g_last = gcum[((t + 2 * C < seg.y ? t + 2 * C : seg.y) - 1) * HV + hv];
    if constexpr (STAGES == 1) {
      cp_async_wait_group<0>();  // group B (kd, P) has landed
      __syncthreads();     // V_new complete; nobody reads W, U, qg or hb of this chunk any more
      if (t + C < seg.y) issue_a(t + C, chunk_len(t + C), 0);  // overlaps the rest of this chunk
    } else {
      __syncthreads();  // V_new complete; nobody reads hb of this chunk any more
    }
    // O += P V_new and h = exp(gamma_last) h + kd^T V_new, k-step outermost: every tile of this warp (O and h)
    // has the column strip nw0 (NWARPS % kTilesN == 0), so each V_new fragment is loaded once and feeds all of
    // them (36 instead of 52 ldmatrix.x4 per warp and chunk at C32 / BV64 / 8 warps, all of it
    // with the load-stage copies the shared-memory bandwidth the chunk loop is bound by). P's blocks above
    // the diagonal are zero and skipped.
    const int nw0 = (warp % kTilesN) * 16;
#pragma unroll
    for (int k0 = 0; k0 < C; k0 += 16) {
      unsigned bv[4];
      load_b_frag<true>(bv, vn, LDH, nw0, k0);
#pragma unroll
      for (int i = 0; i < kOPerWarp; ++i) {
        const int tt = warp + i * NWARPS, m0 = (tt / kTilesN) * 16;
        if ((kOTiles % NWARPS == 0 || tt < kOTiles) && k0 <= m0) {
          unsigned a[4];
          load_a_frag<false>(a, ps, LDP, m0, k0);
          mma_16x16(acc_o[i], a, bv);
        }
      }
#pragma unroll
      for (int i = 0; i < kHPerWarp; ++i) {
        unsigned a[4];
        load_a_frag<true>(a, kds, LD, ((warp + i * NWARPS) / kTilesN) * 16, k0);
        mma_16x16(h[i], a, bv);
      }
    }
    // Write o; the bf16 copy of h for the next chunk. o_lane + (i * kORowStep + (j % 2) * 8) * o_st + (j / 2) * 8 =
    // t * o_st + hv * o_sh + col0 + r * o_st + c of tile i's pair j (r = tile_row(m0, j), c = tile_col(nw0, j)).
#pragma unroll
    for (int i = 0; i < kOPerWarp; ++i) {
      const int tt = warp + i * NWARPS;
      if (kOTiles % NWARPS == 0 || tt < kOTiles) {
        const int m0 = (tt / kTilesN) * 16;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          if (tile_row(m0, j) < len) {
            store_bf16x2(o + o_lane + (i * kORowStep + (j % 2) * 8) * o_st + (j / 2) * 8, acc_o[i][2 * j],
                         acc_o[i][2 * j + 1]);
          }
        }
      }
    }
    o_lane += C * o_st;
#pragma unroll
    for (int i = 0; i < kHPerWarp; ++i) store_tile_bf16(hb, LDH, ((warp + i * NWARPS) / kTilesN) * 16, nw0, h[i]);
    if constexpr (STAGES == 1) {
      __syncthreads();  // kd, P and V_new are read; hb of the next chunk is written
      if (t + C < seg.y) issue_b(t + C, chunk_len(t + C), chunk + 1, 0);  // overlaps the next chunk's first half
    }  // STAGES = 2: the next chunk's first barrier orders this chunk's reads and hb writes
  }

  const int hi = ht_index != nullptr ? ht_index[blockIdx.z] : -1;
  if (ht != nullptr && hi >= 0) {
    float* dst = ht + (static_cast<long long>(hi) * HV + hv) * kDim * kDim + col0;
#pragma unroll
    for (int i = 0; i < kHPerWarp; ++i) {
      const int tt = warp + i * NWARPS, m0 = (tt / kTilesN) * 16, n0 = (tt % kTilesN) * 16;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        *reinterpret_cast<float2*>(dst + tile_row(m0, j) * kDim + tile_col(n0, j)) =
            make_float2(h[i][2 * j], h[i][2 * j + 1]);
      }
    }
  }
}

}  // namespace gdn

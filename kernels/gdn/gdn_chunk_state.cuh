// Chunked gated delta rule, stage 2 of 3: the state recurrence over the chunks of one segment of a sequence,
// one block per (column slice of BV, value head, segment):
//   V_new = U - W h_n ;  h_{n+1} = exp(gamma_last) h_n + kd^T V_new,   kd = kn (.) exp(gamma_last - gamma)
// (W, U, kd, gamma from gdn_chunk_prep; mma.sync GEMMs on bf16 operands, h kept in fp32 in shared memory, a
// bf16 copy feeds the GEMMs; the next chunk's W/U and kd loads (cp.async) overlap the current chunk's work).
// Columns of h evolve independently, so slices of BV columns run in parallel.
//
// TRANSFER = false (the pass that produces what the outputs need): starts from h0[h0_index] (zero when
// h0_index < 0 or h0 is null), writes h_n before every chunk (bf16, [num_chunks, HV, 128, 128]) and V_new
// (bf16, [tokens, HV, 128]); at the end writes h to ht[ht_index] (fp32 [*, HV, 128, 128]) when ht_index >= 0.
// TRANSFER = true (the parallel split of the recurrence): the segment's affine map h_end = M h_start + c is
// the same recurrence run on X = [M | c] (K x (K + V)) from X = [I | 0], with U = 0 on M's columns; writes X
// to ht (fp32 [num_segments, HV, 128, 256]) and nothing else.
// Who may call: hosts launching grid (cols / BV, HV, num_segments) with cols = 128 (256 with TRANSFER), block
// NWARPS*32, dynamic shared StateSharedBytes(C, BV). segs[i] = {token_start, token_end, first_chunk, h0_index}.
// Thread-safety: each block owns its segment's rows of its head's column slice.
#pragma once

#include "gdn_common.cuh"
#include "gdn_layout.h"

namespace gdn {

// min 2 blocks/SM: a register cap of 128 at 8 warps (without it NVRTC's ptxas settles on 64 and spills 16 B with the
// fully unrolled tile loads).
template <int C, int BV, int NWARPS, bool TRANSFER>
__global__ void __launch_bounds__(NWARPS * 32, 2)
    gdn_chunk_state(const bf16* __restrict__ kd, const bf16* __restrict__ w, const bf16* __restrict__ u,
                    const float* __restrict__ gcum, const int4* __restrict__ segs, const int* __restrict__ ht_index,
                    int HV, const float* __restrict__ h0, float* __restrict__ ht, bf16* __restrict__ hbuf,
                    bf16* __restrict__ vnew) {
  constexpr int NT = NWARPS * 32;
  constexpr int LD = PadBf16Cols(kDim), LDF = PadF32Cols(BV), LDH = PadBf16Cols(BV);
  static_assert(kDim % BV == 0 && BV % 16 == 0, "BV must divide 128 and be a multiple of 16");
  extern __shared__ __align__(16) unsigned char smem[];
  float* hf = reinterpret_cast<float*>(smem);
  bf16* hb = reinterpret_cast<bf16*>(hf + kDim * LDF);
  bf16* wsm = hb + kDim * LDH;
  bf16* kds = wsm + C * LD;
  bf16* us = kds + C * LD;
  bf16* vn = us + C * LDH;

  const int tid = threadIdx.x;
  const int hv = blockIdx.y;
  const int4 seg = segs[blockIdx.z];
  const int col0 = blockIdx.x * BV;                    // column of X (TRANSFER) or of h
  const bool m_cols = TRANSFER && col0 < kDim;         // TRANSFER: this slice holds columns of M
  const int ucol0 = TRANSFER ? (m_cols ? 0 : col0 - kDim) : col0;
  const long long hv_row = static_cast<long long>(HV) * kDim;  // row stride of [tokens, HV, 128]

  // Loads of chunk t: group "W" (W and the U slice, needed first) and group "kd" (needed by the update).
  auto issue_w = [&](long long t, int len) {
    load_tile_async<C, kDim, NT>(w + (t * HV + hv) * kDim, hv_row, len, wsm, LD);
    if (!m_cols) load_tile_async<C, BV, NT>(u + (t * HV + hv) * kDim + ucol0, hv_row, len, us, LDH);
    cp_async_commit_group();
  };
  auto issue_kd = [&](long long t, int len) {
    load_tile_async<C, kDim, NT>(kd + (t * HV + hv) * kDim, hv_row, len, kds, LD);
    cp_async_commit_group();
  };
  auto chunk_len = [&](long long t) { return static_cast<int>(seg.y - t < C ? seg.y - t : C); };

  if (seg.x < seg.y) {
    issue_w(seg.x, chunk_len(seg.x));
    issue_kd(seg.x, chunk_len(seg.x));
  }
  for (int i = tid; i < kDim * BV; i += NT) {
    const int r = i / BV, c = i % BV;
    float x = 0.f;
    if constexpr (TRANSFER) {
      x = (m_cols && r == col0 + c) ? 1.f : 0.f;
    } else {
      if (h0 != nullptr && seg.w >= 0) x = h0[(static_cast<long long>(seg.w) * HV + hv) * kDim * kDim + r * kDim + col0 + c];
    }
    hf[r * LDF + c] = x;
  }
  __syncthreads();

  int n = 0;
  for (long long t = seg.x; t < seg.y; t += C, ++n) {
    const int len = chunk_len(t);
    const float glast = gcum[(t + len - 1) * HV + hv];
    for (int i = tid; i < kDim * BV; i += NT) {
      const int r = i / BV, c = i % BV;
      const bf16 x = __float2bfloat16(hf[r * LDF + c]);
      hb[r * LDH + c] = x;
      if constexpr (!TRANSFER) {
        hbuf[((static_cast<long long>(seg.z) + n) * HV + hv) * kDim * kDim + r * kDim + col0 + c] = x;
      }
    }
    cp_async_wait_group<1>();  // W and U of this chunk have landed (kd may still be in flight)
    __syncthreads();
    // V_new = U - W h  (C x BV)
    smem_gemm<C, BV, kDim, false, true, NWARPS>(wsm, LD, hb, LDH, [&](int r, int c, float x0, float x1) {
      float v0 = 0.f, v1 = 0.f;
      if (r < len) {
        if (!m_cols) {
          const __nv_bfloat162 up = *reinterpret_cast<const __nv_bfloat162*>(us + r * LDH + c);
          v0 = __low2float(up);
          v1 = __high2float(up);
        }
        v0 -= x0;
        v1 -= x1;
        if constexpr (!TRANSFER) store_bf16x2(vnew + (t + r) * hv_row + hv * kDim + col0 + c, v0, v1);
      }
      store_bf16x2(vn + r * LDH + c, v0, v1);
    });
    cp_async_wait_group<0>();
    __syncthreads();
    if (t + C < seg.y) issue_w(t + C, chunk_len(t + C));  // overlaps the update below
    const float decay = __expf(glast);
    // h = exp(gamma_last) h + kd^T V_new  (128 x BV)
    smem_gemm<kDim, BV, C, true, true, NWARPS>(kds, LD, vn, LDH, [&](int r, int c, float x0, float x1) {
      hf[r * LDF + c] = hf[r * LDF + c] * decay + x0;
      hf[r * LDF + c + 1] = hf[r * LDF + c + 1] * decay + x1;
    });
    __syncthreads();
    if (t + C < seg.y) issue_kd(t + C, chunk_len(t + C));  // overlaps the next chunk's V_new
  }

  if constexpr (TRANSFER) {
    float* out = ht + (static_cast<long long>(blockIdx.z) * HV + hv) * kDim * (2 * kDim);
    for (int i = tid; i < kDim * BV; i += NT) {
      const int r = i / BV, c = i % BV;
      out[r * (2 * kDim) + col0 + c] = hf[r * LDF + c];
    }
  } else {
    const int hi = ht_index != nullptr ? ht_index[blockIdx.z] : -1;
    if (ht != nullptr && hi >= 0) {
      float* out = ht + (static_cast<long long>(hi) * HV + hv) * kDim * kDim;
      for (int i = tid; i < kDim * BV; i += NT) {
        const int r = i / BV, c = i % BV;
        out[r * kDim + col0 + c] = hf[r * LDF + c];
      }
    }
  }
}

// Stage 2b of the parallel split: walks the segments of one sequence in order, one block per (column slice of
// BV, value head, sequence): writes each segment's starting state (fp32 [num_segments, HV, 128, 128]), then
// h <- M_s h + c_s (fp32) from X = [M | c] of gdn_chunk_state<..., true>. The first segment starts from h0[seq]
// (zero when h0 is null). seq_segs[seq] .. seq_segs[seq + 1] are the sequence's segments.
// Thread r owns row r of h (BV accumulators); M is staged in shared memory with padded rows (no bank conflicts).
// Who may call: hosts launching grid (128 / BV, HV, num_seqs), block 128 threads, dynamic CombineSharedBytes(BV).
template <int BV>
__global__ void __launch_bounds__(kDim)
    gdn_state_combine(const float* __restrict__ X, const int* __restrict__ seq_segs, int HV,
                      const float* __restrict__ h0, float* __restrict__ seg_states) {
  static_assert(BV % 4 == 0 && kDim % BV == 0, "BV must divide 128 and be a multiple of 4");
  constexpr int LDM = kDim + 1;
  extern __shared__ __align__(16) unsigned char smem[];
  float* ms = reinterpret_cast<float*>(smem);  // [128][129]
  float* hcur = ms + kDim * LDM;                // [128][BV]
  const int tid = threadIdx.x, hv = blockIdx.y, seq = blockIdx.z, col0 = blockIdx.x * BV;
  const long long hsz = static_cast<long long>(kDim) * kDim;
  for (int i = tid; i < kDim * BV; i += kDim) {
    const int r = i / BV, c = i % BV;
    hcur[i] = h0 != nullptr ? h0[(static_cast<long long>(seq) * HV + hv) * hsz + r * kDim + col0 + c] : 0.f;
  }
  __syncthreads();
  const int s0 = seq_segs[seq], s1 = seq_segs[seq + 1];
  for (int s = s0; s < s1; ++s) {
    float* dst = seg_states + (static_cast<long long>(s) * HV + hv) * hsz;
    for (int i = tid; i < kDim * BV; i += kDim) dst[(i / BV) * kDim + col0 + i % BV] = hcur[i];
    if (s + 1 == s1) break;
    const float* x = X + (static_cast<long long>(s) * HV + hv) * kDim * (2 * kDim);
    for (int i = tid; i < kDim * kDim / 4; i += kDim) {
      const int r = i / (kDim / 4), c = (i % (kDim / 4)) * 4;
      const float4 m = *reinterpret_cast<const float4*>(x + r * (2 * kDim) + c);
      ms[r * LDM + c] = m.x;
      ms[r * LDM + c + 1] = m.y;
      ms[r * LDM + c + 2] = m.z;
      ms[r * LDM + c + 3] = m.w;
    }
    float acc[BV];
#pragma unroll
    for (int c = 0; c < BV; ++c) acc[c] = x[tid * (2 * kDim) + kDim + col0 + c];
    __syncthreads();
#pragma unroll 4
    for (int j = 0; j < kDim; ++j) {
      const float m = ms[tid * LDM + j];
#pragma unroll
      for (int c = 0; c < BV; c += 4) {
        const float4 hh = *reinterpret_cast<const float4*>(hcur + j * BV + c);
        acc[c] += m * hh.x;
        acc[c + 1] += m * hh.y;
        acc[c + 2] += m * hh.z;
        acc[c + 3] += m * hh.w;
      }
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < BV; ++c) hcur[tid * BV + c] = acc[c];
    __syncthreads();
  }
}

}  // namespace gdn

// The gdn Hopper tier's state + output pass with its copies taken off the warpgroups (sm_90a only): the chunk step of
// gdn_wgmma_step.cuh, as in gdn_chunk_fused_wgmma, fed by a producer warp. WGS warpgroups compute, one per column block
// of 64 state columns (WGS 2: both blocks of a value head, sharing the stage's W, q, k and P; half the blocks, each
// holding its SM alone by registers, so that prep's blocks of the next piece run on the other SMs); the warp after them
// loads (WGS 2: the first warp of a producer warpgroup that hands its registers to the consumers with setmaxnreg, the
// split of tma.cuh). Per chunk the producer's lane 0 issues W, q, k (two boxes of 64 columns each) and the WGS U slices
// as bulk tensor copies (GdnWgmmaMaps, made by gdn_api.cc) completing on the stage's "full" mbarrier, and its 32 lanes
// copy P (cp.async into the same swizzled layout: its 64-byte rows are no box of the 128-byte swizzle) and the rows'
// factor pairs (zero past the chunk), wait for them, fence them for wgmma's async proxy and arrive on "full" (32
// arrivals, plus the bulk copies' bytes). kWgmmaTmaStages stages; every consumer warp arrives on the stage's "empty" mbarrier (4
// WGS arrivals) once the update's products over it are complete, and the producer refills it after that. Rows past a
// chunk's length are read as they are (the next sequence's rows, or zeros past the tensor's end): every use masks them
// (V_new's columns by select, O^T's by the stores, the update by V_new's zero columns; k and q are the caller's finite
// inputs). A warpgroup's O^T staging tile alternates between two buffers, so one barrier of its 128 threads (named
// barrier 1 + warpgroup) a chunk suffices: a thread writes buffer n % 2 only after every thread of its warpgroup passed
// chunk n-1's barrier, which follows its reads of chunk n-2's.
// Who may call: hosts launching grid (2 / WGS, HV, num_segments), block WgmmaTmaThreads(WGS), dynamic shared
// FusedWgmmaTmaSharedBytes(C, WGS); maps of W, U ([tokens, HV, 128], box rows C), q, k ([tokens, H, 128] with the
// caller's strides, box rows C); the rest as gdn_chunk_fused_wgmma's.
// Thread-safety: each block owns its segment's rows of o and its head's 64 WGS state columns.
#pragma once

#include "gdn_wgmma_step.cuh"
#include "sw128_copy.cuh"
#include "tma.cuh"

namespace gdn {

// The four tensor maps (gdn_api.cc mirrors them with four CUtensorMaps in this order).
struct GdnWgmmaMaps {
  dflash_ptx::TmaDescriptor w, u, q, k;
};

// WGS 2: the producer warpgroup's registers after setmaxnreg (with tma.cuh's 24 its copy loop spilled 4 bytes).
constexpr int kProducerRegs = 40;

template <int C, int WGS>
__global__ void __launch_bounds__(WgmmaTmaThreads(WGS), 1)
    gdn_chunk_fused_wgmma_tma(const __grid_constant__ GdnWgmmaMaps maps, int H, const bf16* __restrict__ pmat,
                              const float* __restrict__ gcum, const float2* __restrict__ rowscale,
                              const int4* __restrict__ segs, const int* __restrict__ ht_index, int HV,
                              const float* __restrict__ h0, float* __restrict__ ht, bf16* __restrict__ o,
                              long long o_st, long long o_sh) {
  static_assert(C == 32 || C == 64, "chunks of 32 or 64 rows");
  static_assert(WGS == 1 || WGS == 2, "one or both column blocks of a value head");
  static_assert(WGS == 1 || C == 32, "two warpgroups at chunk 64 need 241 of their 232 registers");
  constexpr int BV = kWgmmaBv, LDO = PadBf16Cols(BV), NC = 128 * WGS, S = kWgmmaTmaStages;  // NC: consumer threads
  using Stage = WgmmaStage<C, WGS>;
  constexpr unsigned kStageBytes = FusedWgmmaStageBytes(C, WGS), kBox = C * 128;  // a box: C rows of 64 columns
  constexpr unsigned kTxBytes = Stage::kP;  // W, q, k and the U slices (6 + WGS boxes): the bulk copies' bytes
  extern __shared__ __align__(1024) unsigned char smem[];  // swizzled tiles start 1024-byte aligned
  const unsigned base = smem_addr(smem);
  auto stage_at = [&](int s) { return base + s * kStageBytes; };
  bf16* const os = reinterpret_cast<bf16*>(smem + S * kStageBytes);  // O^T staging, [WGS][2][C][LDO]
  const unsigned rs_offset = S * kStageBytes + 2 * WGS * FusedWgmmaOStageBytes(C);
  const float2* const rs = reinterpret_cast<const float2*>(smem + rs_offset);  // [S][C] {fq, fk}
  const unsigned bars = base + rs_offset + S * C * 8;
  auto bar_full = [&](int s) { return bars + 8u * s; };
  auto bar_empty = [&](int s) { return bars + 8u * (S + s); };

  const int tid = threadIdx.x;
  const int hv = blockIdx.y;
  const int4 seg = segs[blockIdx.z];
  const int col_block0 = blockIdx.x * WGS;  // the block's first column block of 64
  auto chunk_len = [&](long long t) { return static_cast<int>(seg.y - t < C ? seg.y - t : C); };
  if (tid == 0) {
    for (int s = 0; s < S; ++s) {
      mbarrier_init(bar_full(s), 32);  // the producer's lanes; the bulk copies by their bytes
      mbarrier_init(bar_empty(s), 4 * WGS);  // the consumer warps
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  if (tid >= NC) {  // the producer warp(group)
    if constexpr (WGS > 1) {  // the register split of tma.cuh, at 40 here (the P and factor copies' addresses)
      setmaxnreg_dec<kProducerRegs>();
      if (tid >= NC + 32) return;
    }
    const int lane = tid - NC, hk = hv / (HV / H);
    if (lane == 0 && seg.x < seg.y) {  // a call without tokens passes zeroed maps
      prefetch_tensormap(&maps.w);
      prefetch_tensormap(&maps.u);
      prefetch_tensormap(&maps.q);
      prefetch_tensormap(&maps.k);
    }
    long long chunk = seg.z;
    int n = 0;
    for (long long t = seg.x; t < seg.y; t += C, ++chunk, ++n) {
      const int s = n % S, len = chunk_len(t), row = static_cast<int>(t);
      if (n >= S) mbarrier_wait(bar_empty(s), (n / S - 1) & 1);  // chunk n-S released the stage
      if (lane == 0) {
        mbarrier_expect_tx(bar_full(s), kTxBytes);
        const unsigned at = stage_at(s), full = bar_full(s);
        tma_load_4d(at + Stage::kW, &maps.w, full, 0, row, hv, 0);
        tma_load_4d(at + Stage::kW + kBox, &maps.w, full, 64, row, hv, 0);
        tma_load_4d(at + Stage::kQ, &maps.q, full, 0, row, hk, 0);
        tma_load_4d(at + Stage::kQ + kBox, &maps.q, full, 64, row, hk, 0);
        tma_load_4d(at + Stage::kK, &maps.k, full, 0, row, hk, 0);
        tma_load_4d(at + Stage::kK + kBox, &maps.k, full, 64, row, hk, 0);
#pragma unroll
        for (int p = 0; p < WGS; ++p) {
          tma_load_4d(at + Stage::kU + p * kBox, &maps.u, full, (col_block0 + p) * BV, row, hv, 0);
        }
      }
      LoadSw128Async<C, C, 32>(stage_at(s) + Stage::kP, pmat + (chunk * HV + hv) * C * C, C, C, lane);
      for (int r = lane; r < C; r += 32) {  // rows past the chunk get zero factors
        const float2* src = rowscale + (t + (r < len ? r : 0)) * HV + hv;
        cp_async_ca_8_zfill(base + rs_offset + (s * C + r) * 8, src, r < len ? 8 : 0);
      }
      cp_async_wait_all();
      fence_proxy_async_shared();  // P, written by this lane's copies, before wgmma (async proxy) reads it
      mbarrier_arrive(bar_full(s));
    }
    return;  // the consumers wait for every copy issued here before the block can exit
  }

  // Warpgroup wg owns the value head's column block col_block0 + wg. It meets once past the producer's branch:
  // without an aligned barrier here ptxas cannot tell that the wgmma below run converged and serialises every one
  // of them (advisory C7520). Named barrier 1 + wg is the warpgroup's own.
  const int wg = tid / 128, ctid = tid % 128, lane = tid % 32, col0 = (col_block0 + wg) * BV;
  if constexpr (WGS > 1) setmaxnreg_inc<ConsumerRegsForProducer(kProducerRegs)>();  // 232
  named_barrier_sync(1 + wg, 128);
  float hT[kDim / 2];
  LoadStateT(hT,
             (h0 != nullptr && seg.w >= 0) ? h0 + (static_cast<long long>(seg.w) * HV + hv) * kDim * kDim + col0
                                           : nullptr,
             ctid);
  bf16* const my_os = os + wg * 2 * C * LDO;
  float g_last = seg.x < seg.y ? gcum[(seg.x + chunk_len(seg.x) - 1) * HV + hv] : 0.f;
  int n = 0;
  for (long long t = seg.x; t < seg.y; t += C, ++n) {
    const int s = n % S, len = chunk_len(t);
    const float decay = __expf(g_last);
    if (t + C < seg.y) g_last = gcum[((t + 2 * C < seg.y ? t + 2 * C : seg.y) - 1) * HV + hv];
    mbarrier_wait(bar_full(s), (n / S) & 1);
    const WgmmaChunkTiles tiles{smem + s * kStageBytes, rs + s * C, wg};
    WgmmaChunkStep<C, WGS>(
        hT, tiles, len, decay, my_os + (n & 1) * C * LDO,
        [&] { return o + t * o_st + static_cast<long long>(hv) * o_sh + col0; }, o_st, ctid,
        [&] {
          __syncwarp();
          if (lane == 0) mbarrier_arrive(bar_empty(s));
        },
        [&] { named_barrier_sync(1 + wg, 128); });
  }

  const int hi = ht_index != nullptr ? ht_index[blockIdx.z] : -1;
  if (ht != nullptr && hi >= 0) {
    StoreStateT(hT, ht + (static_cast<long long>(hi) * HV + hv) * kDim * kDim + col0, ctid);
  }
}

}  // namespace gdn

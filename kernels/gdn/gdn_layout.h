// Shared-memory and launch arithmetic of the gated-delta-net kernels, in plain constexpr C++ with no includes,
// so that the device sources (kernels/gdn/*.cuh, compiled by NVRTC) and the host code (gdn_family.cc, the
// launchers) agree on every byte count. tools/device/gdn_layout.py mirrors it for the GPU checker;
// tests/kernels/gdn/gdn_layout_mirror_test.cc fails when the two disagree.
// Who may call: anyone. Thread-safety: pure functions.
#pragma once

#if defined(__CUDACC__)
#define GDN_HD __host__ __device__
#else
#define GDN_HD
#endif

namespace gdn {

constexpr int kDim = 128;  // K = V

GDN_HD constexpr int PadBf16Cols(int cols) { return cols + 8; }
GDN_HD constexpr int PadF32Cols(int cols) { return cols + 4; }

// The prep kernels' T region: the two scaled bf16 copies Tw and Tu [C][C+8] each, which also hold L / T [C][C+4]
// fp32 before them (16 C bytes fewer).
GDN_HD constexpr int PrepTRegionBytes(int c) { return 2 * c * PadBf16Cols(c) * 2; }
// gdn_chunk_prep<C, NWARPS, FUSED, ROWSCALE>: kn and q-then-v [C][136] bf16; the T region; gamma, beta and the
// inverse norms of k and q [C] fp32. The same for every variant.
GDN_HD constexpr int PrepSharedBytes(int c) { return 2 * c * PadBf16Cols(kDim) * 2 + PrepTRegionBytes(c) + 4 * c * 4; }
// The value heads of one key head whose gates gdn_chunk_prep_key takes at once (more, a group at a time).
constexpr int kPrepGateHeads = 4;
// gdn_chunk_prep_key<C, NWARPS>: raw k, W, q / v [C][136] bf16; q k^T and k k^T [C][C+4] fp32; the T region; the
// two inverse norms [C] fp32; gamma and beta [C] fp32 of kPrepGateHeads value heads.
GDN_HD constexpr int PrepKeySharedBytes(int c) {
  return 3 * c * PadBf16Cols(kDim) * 2 + 2 * c * PadF32Cols(c) * 4 + PrepTRegionBytes(c) +
         (2 + 2 * kPrepGateHeads) * c * 4;
}

// gdn_chunk_state<C, BV, NWARPS, TRANSFER>: hf [128][BV+4] fp32, hb [128][BV+8] bf16, W and kd [C][136] bf16,
// U slice and V_new [C][BV+8] bf16.
GDN_HD constexpr int StateSharedBytes(int c, int bv) {
  return kDim * PadF32Cols(bv) * 4 + kDim * PadBf16Cols(bv) * 2 + 2 * c * PadBf16Cols(kDim) * 2 +
         2 * c * PadBf16Cols(bv) * 2;
}

// gdn_chunk_output<C, BV, NWARPS>: q, k [C][136] bf16 (k's space later holds P [C][C+8] bf16);
// S / O [C][max(C, BV)+4] fp32; h [128][BV+8] bf16; vn [C][BV+8] bf16; gamma [C] fp32.
GDN_HD constexpr int OutputSharedBytes(int c, int bv) {
  return 2 * c * PadBf16Cols(kDim) * 2 + c * PadF32Cols(c > bv ? c : bv) * 4 + kDim * PadBf16Cols(bv) * 2 +
         c * PadBf16Cols(bv) * 2 + c * 4;
}

// gdn_chunk_fused<C, BV, NWARPS, STAGES>: h [128][BV+8] bf16 and V_new [C][BV+8] bf16 (h itself is in
// registers), then per load stage W, kd, qg [C][136] bf16, P [C][C+8] bf16 and the U slice [C][BV+8] bf16.
GDN_HD constexpr int FusedSharedBytes(int c, int bv, int stages) {
  return kDim * PadBf16Cols(bv) * 2 + c * PadBf16Cols(bv) * 2 +
         stages * (3 * c * PadBf16Cols(kDim) * 2 + c * PadBf16Cols(c) * 2 + c * PadBf16Cols(bv) * 2);
}

// gdn_chunk_fused<C, BV, NWARPS, STAGES, true>: the same and per stage the rows' factor pairs [C] float2.
GDN_HD constexpr int FusedFoldSharedBytes(int c, int bv, int stages) { return FusedSharedBytes(c, bv, stages) + stages * c * 8; }

// gdn_chunk_fused_wgmma<C> (sm_90a): one warpgroup, kWgmmaBv state columns per block; per load stage (two) W, q,
// k [C][128] and the U slice and P [C][64] bf16 in the 128-byte swizzled layout (1024-byte aligned tiles, P's rows
// padded to 64 columns), then the O staging tile [C][kWgmmaBv+8] bf16 and per stage the rows' factor pairs [C]
// float2. Not mirrored in tools/device/gdn_layout.py (the CuPy checker runs the portable kernels only).
constexpr int kWgmmaBv = 64;
constexpr int kWgmmaThreads = 128;  // one warpgroup, whatever the variant's prep uses
GDN_HD constexpr int FusedWgmmaStageBytes(int c) { return 3 * c * kDim * 2 + 2 * c * 128; }
GDN_HD constexpr int FusedWgmmaOStageBytes(int c) { return c * PadBf16Cols(kWgmmaBv) * 2; }
GDN_HD constexpr int FusedWgmmaSharedBytes(int c) {
  return 2 * (FusedWgmmaStageBytes(c) + c * 8) + FusedWgmmaOStageBytes(c);
}

// gdn_state_combine<BV>: M [128][129] fp32, h [128][BV] fp32.
GDN_HD constexpr int CombineSharedBytes(int bv) { return kDim * (kDim + 1) * 4 + kDim * bv * 4; }

}  // namespace gdn

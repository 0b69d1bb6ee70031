// The gdn family's tuning space and what a config implies: parameters, the kernels a variant instantiates (NVRTC
// name expressions), their block sizes and dynamic shared memory (from gdn_layout.h, shared with the kernels).
//   chunk           rows per chunk of the WY/UT formulation (C)
//   state_bv        state columns per block of the state pass (and of the combine)
//   out_bv          output columns per block of the output kernel (unfused only; fused configs list 64)
//   fused           0: separate state and output kernels; 1 or 2: the state pass and the outputs in one kernel
//                   (gdn_chunk_fused, state_bv columns per block, h_n and V_new stay on chip) with 1 or 2
//                   load stages (2: the next chunk's operands load a whole chunk ahead, twice the smem);
//                   3: the same pass on wgmma (gdn_chunk_fused_wgmma, the Hopper tier: sm_90a only, one
//                   warpgroup per 64 state columns, so state_bv 64; warps 4, or 8 for the folded prep beside it)
//   warps           warps per block of the prep / state / output kernels and of the portable fused passes
//   segment_chunks  0: one sequential state pass per sequence; else chunks per segment of the parallel split
//                   (transfer maps per segment, combine, state pass per segment); a launch-time choice only
//   prep_heads      0: prep one block per (chunk, value head) (gdn_chunk_prep); 1: per (chunk, key head), looping
//                   over its value heads with q, k, their norms and products taken once (gdn_chunk_prep_key; the
//                   wgmma pass's operands only, chunk 32); 2: that prep with T folded into the pass's operands
//                   (gdn_chunk_prep_key<C, W, true>: K2 and P T diag(beta) instead of W, U, kd and qg; the fused
//                   passes' FOLD forms read v, k and q; fused 1-3, chunk 32, no split pass)
//   piece_chunks    0: prep over the whole call, then the fused state pass; else every sequence is cut into pieces
//                   of this many chunks, prep of piece i+1 runs on the caller's stream while the fused pass of
//                   piece i runs on a second, higher-priority stream (StreamFork) from piece i-1's final state;
//                   fused configs with segment_chunks 0 only; a launch-time choice only
//   pass_reserve    0: the wgmma pass asks for its own shared memory; 1, 2: for more (PassReserveSharedBytes), so
//                   that at most one (1) or no (2) block of the next piece's prep fits on an SM beside it: prep
//                   then runs on the SMs the pass leaves idle (a second block on an SM slows the pass's chain);
//                   fused 3 with pieces only; a launch-time choice only
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "kernels/gdn/gdn_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::gdn {

std::vector<tuner::TunableParam> Params();

struct Geometry {
  int chunk = 64;
  int state_bv = 32;
  int out_bv = 64;
  int warps = 4;
  int segment_chunks = 0;
  int fused = 0;
  int piece_chunks = 0;
  int prep_heads = 0;
  int pass_reserve = 0;
  unsigned threads() const { return static_cast<unsigned>(warps) * 32u; }  // prep, state, output, transfer
  unsigned fused_threads() const;  // the fused pass: threads(), or one warpgroup for the wgmma pass
  bool IsWgmmaPass() const;
};

// Empty when every parameter is present with a value of the space; otherwise the reason.
std::string GeometryInvalidReason(const tuner::Config& config);
Result<Geometry> GeometryOf(const tuner::Config& config);

// Empty unless the (geometrically valid) config is one that measurements showed to be dominated, so the tuner
// does not spend its budget on it (the family's InvalidReason adds this; the kernels still compile and run,
// and the API launches any valid geometry). Measured on the H200 (kernels/gdn/NOTES.md):
//   fused 0: separate state and output kernels, slower than the fused kernel at every measured shape
//            ((16,48) 1x8192: state + output 1.24 ms vs fused 0.51 ms);
//   chunk 64: prep(fused) 0.48 vs 0.29 ms at chunk 32 and the fused loop no faster ((16,48) 1x8192); no tuned
//            winner of 4 shapes tuned over the whole space used it; fused 2 at chunk 64 needs ~150-170 KB (one
//            block per SM: 0.76 vs 0.51 ms);
//   segment_chunks 8, 16: shorter segments than 32 add combine steps and transfer launches; at (16,48) 1x8192
//            every split was slower than the sequential pass and 16-chunk segments slower than 32, and the only
//            tuned winner with a split (1x32768) used 32;
std::string DominatedReason(const tuner::Config& config);
tuner::Config ConfigOf(const Geometry& g);

// The `fused` value of the Hopper tier's wgmma pass (gdn_chunk_fused_wgmma, compiled from gdn_kernels_sm90a.cu).
constexpr int kFusedWgmma = 3;
// True for a config of the Hopper tier (fused kFusedWgmma).
bool IsHopperTier(const tuner::Config& config);
// Empty when the config can be built for `arch`; the Hopper tier's reason otherwise.
std::string ArchInvalidReason(const tuner::Config& config, std::string_view arch);

// The out_bv a fused config carries (the parameter means nothing there; one value keeps the space free of
// duplicate variants).
constexpr int kFusedOutBv = 64;

// The kernels of a variant, by role; state and output are empty in a fused variant, fused in an unfused one.
struct KernelNames {
  std::string prep, state, transfer, combine, output, fused, recurrent;
  std::vector<std::string> All() const;  // the non-empty ones: what a variant compiles
};
KernelNames KernelNamesOf(const Geometry& g);

// Dynamic shared memory per kernel, and the largest (what arch pruning checks).
int PrepSharedBytesOf(const Geometry& g);
int StateSharedBytesOf(const Geometry& g);
int CombineSharedBytesOf(const Geometry& g);
int OutputSharedBytesOf(const Geometry& g);
int FusedSharedBytesOf(const Geometry& g);
int PassReserveSharedBytes(const Geometry& g);  // the wgmma pass's padded shared memory (pass_reserve 1, 2), else 0
int MaxSharedBytesOf(const Geometry& g);
constexpr unsigned kCombineThreads = 128;
constexpr int kRecurrentBv = 32;
// Threads per block and dynamic shared memory of each of the six kernels of a variant (what pruning checks each
// kernel against: the family's KernelBlockShape).
struct KernelShape {
  std::string expression;
  unsigned threads = 0;
  int dynamic_shared = 0;
};
std::vector<KernelShape> KernelShapesOf(const Geometry& g);  // state columns per block of the recurrent kernel (2 threads each)

}  // namespace dflash::gdn

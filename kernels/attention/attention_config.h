// The attention families' parameter spaces and what a config means: the kernels it instantiates (name
// expressions), their launch geometry (grid, threads, dynamic shared memory) and the arch-independent reasons a
// config is invalid for a problem.
// Forward params: block_m (query rows per block), block_n (kv rows per tile), warps, stages (kv buffers), kernel
// (0: AttnFwd on mma.sync, the portable tier; 1: AttnFwdWgmma on wgmma, the Hopper tier, sm_90a only; 2: the same
// with each tile's softmax overlapping the next tile's QK^T, stages 3; 3-5: AttnFwdTma, warp-specialised; 6:
// AttnFwdTmaPersistent, kernel 5 as a persistent kernel; a config without kernel means 0).
// Backward params: block_m (query rows per inner tile), block_n (kv rows per block; warps = block_n / 16),
// stages (query-tile buffers), dq_mode (0: fp32 atomics into an accumulator + a convert pass; 1: a separate
// dQ pass of tile block_m x 64 that recomputes P and dP, deterministic, no accumulator), warp_layout (1: each
// warp owns 16 kv rows, AttnBwdKv; 2: FlashAttention-2's 2-D layout, AttnBwdKv2d, block_m 64 and dq_mode 0 only;
// a config without warp_layout means 1), head_groups (0: the dK/dV kernel's grid (kv heads, tiles, batch); 1: kv
// heads in groups run one after another, grid (heads per group, tiles, groups * batch); none means 0), kernel (0:
// the portable tier; 1: AttnBwdWgmma on wgmma, the Hopper tier, sm_90a only, dq_mode 0; 2: AttnBwdTma, the same
// products warp-specialised with tensor-map copies, 64 x 128 tiles, head dim 128; 3: as 2 with dQ by bulk
// reduce-adds; none means 0).
// Who may call it: the families, the API, tests. Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "kernels/attention/attention_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::attention {

std::vector<tuner::TunableParam> ForwardParams();
std::vector<tuner::TunableParam> BackwardParams();

// One kernel launch of a variant.
struct KernelLaunch {
  std::string name_expression;  // "dflash_attn::AttnFwd<128,64,64,4,2,3>"
  unsigned grid_x = 1, grid_y = 1, grid_z = 1;
  unsigned threads = 0;
  unsigned shared_bytes = 0;
  bool tensor_maps = false;  // takes tensor maps after the AttnParams (AttnTmaMaps forward, AttnBwdTmaMaps backward)
  bool persistent = false;   // grid_x is the work's tile count: the launch clamps it to the device's SM count
};

// The launches of one forward / backward call, in order. The config must be valid (InvalidReason empty);
// the problem supplies the grid.
std::vector<KernelLaunch> ForwardLaunches(const tuner::Config& config, const ProblemSpec& problem);
std::vector<KernelLaunch> BackwardLaunches(const tuner::Config& config, const ProblemSpec& problem);

std::string ForwardInvalidReason(const tuner::Config& config, const ProblemSpec& bucket);
std::string BackwardInvalidReason(const tuner::Config& config, const ProblemSpec& bucket);
// Empty unless the (valid) config is one the tuner should not spend its budget on yet (backward kernel 4: its
// measured gain is not established). The API and kernel_bench --config still run such a config, and the tests
// compile and check it: IsTunerSkip tells its reason from a real invalid reason.
std::string TunerSkipReason(const tuner::Config& config, Direction dir);
bool IsTunerSkip(std::string_view invalid_reason);

// Kv heads per group of the backward config's dK/dV launch (all of them when head_groups is 0 or absent): the
// largest divisor of heads_kv whose Q / dO (/ dQ accumulator) rows fit 32 MiB, at least 1.
int BackwardHeadsPerGroup(const tuner::Config& config, const ProblemSpec& problem);

// True for a config of the Hopper tier (forward kernel 1 .. 5, backward kernel 1 or 2: compiled for sm_90a only,
// from attention_kernels_sm90a.cu).
bool IsHopperTier(const tuner::Config& config);
// True for a forward config of the warp-specialised kernel (kernel 3, 4 or 5: AttnFwdTma, tensor maps, 384 threads).
bool IsWarpSpecialisedForward(const tuner::Config& config);
// True for a backward config of the warp-specialised kernel (kernel 2 or 3: AttnBwdTma, tensor maps, 384 threads).
bool IsWarpSpecialisedBackward(const tuner::Config& config);
// Dynamic shared memory of the forward config's kernel for the problem's head dim (bytes).
int ForwardSmemBytes(const tuner::Config& config, const ProblemSpec& problem);
// Empty when the config can be built for `arch`; the Hopper tier's reason otherwise.
std::string ArchInvalidReason(const tuner::Config& config, std::string_view arch);

// True when the backward config accumulates dQ with fp32 atomics (it then needs the dq_accum workspace).
bool UsesDqAccumulator(const tuner::Config& config);

}  // namespace dflash::attention

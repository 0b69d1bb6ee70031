// The conv1d family's tuning space: its parameters, the block geometry a config implies for each layout, the
// constraints a config must meet, and the kernel name expression NVRTC instantiates for it.
//   block_c  channels per block
//   vec      vector width (bf16 elements per load/store) along the unit-stride dimension: channels for
//            token_major, tokens for channel_major
//   tpt      consecutive tokens each thread computes (its halo of 3 tokens is amortised over these)
//   threads  threads per block
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/conv1d/conv1d_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::conv1d {

std::vector<tuner::TunableParam> Params();

struct Geometry {
  Layout layout = Layout::kTokenMajor;
  int block_c = 0;
  int vec = 0;
  int tpt = 0;
  int threads = 0;
  int block_t = 0;  // tokens per block
};

// Empty when `config` is a structurally valid point for `layout` (all four parameters present with values of
// the space, tiles that divide); otherwise the reason.
std::string GeometryInvalidReason(const tuner::Config& config, Layout layout);
// The geometry of a valid config; InvalidArgument with GeometryInvalidReason otherwise.
Result<Geometry> GeometryOf(const tuner::Config& config, Layout layout);
// GeometryInvalidReason plus the constraints that depend on the bucket.
std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket);
// "dflash_conv1d::conv1d_fwd_token_major<256, 8, 8, 256>" (the one kernel of the variant).
std::string KernelNameExpression(const Geometry& g);

}  // namespace dflash::conv1d

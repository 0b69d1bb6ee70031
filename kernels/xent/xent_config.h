// The xent family's tuning space: its parameters, the geometry a config implies, the constraints a config must meet
// (structural, and per bucket), the kernel name expression NVRTC instantiates for it, and the seeds.
//   threads  threads per block
//   vec      floats per vector load (4: float4; 1: scalar loads)
//   unroll   vectors each thread loads per tile: the loads in flight, and the registers that keep tile 0 of the
//            block's slice for the gradient pass (a slice of one tile is read once)
//   split    blocks per row: 1, or a thread block cluster of 2, 4 or 8 blocks, each a slice of the row
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/xent/xent_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::xent {

std::vector<tuner::TunableParam> Params();

struct Geometry {
  int threads = 0;
  int vec = 0;
  int unroll = 0;
  int split = 0;
};

// Empty when `config` is a structurally valid point (all four parameters present with values of the space, and
// vec = 1 only with split = 1); otherwise the reason.
std::string GeometryInvalidReason(const tuner::Config& config);
// The geometry of a valid config; InvalidArgument with GeometryInvalidReason otherwise.
Result<Geometry> GeometryOf(const tuner::Config& config);
// GeometryInvalidReason plus the constraints that depend on the bucket's vocab (threads or unroll the slice of a
// row cannot use).
std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket);
// "dflash_xent::xent_rows<1024, 4, 8, true>" or "dflash_xent::xent_rows_split<1024, 4, 8, 8, true>": the one kernel
// of the variant (`grad`: the kernel writes the gradient).
std::string KernelNameExpression(const Geometry& g, bool grad);
// The configs to measure first, best guess first (see NOTES.md); those invalid for a bucket are skipped there.
std::vector<tuner::Config> SeedConfigs();

}  // namespace dflash::xent

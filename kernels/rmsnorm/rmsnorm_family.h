// The rmsnorm kernel family: row-wise RMS normalisation (standard or zero-centred weight, optional fused residual
// add, optional SiLU gate), bf16 in and out, fp32 math: the norms of the Qwen3.5/3.6 target and the DFlash drafter.
// Implements tuner::KernelFamily on top of rmsnorm_problem.h (problem + bucket), rmsnorm_config.h (space, geometry,
// seeds) and rmsnorm_workload.h.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: an immutable singleton, every method
// re-entrant.
#pragma once

#include "kernels/rmsnorm/rmsnorm_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

const tuner::KernelFamily& Family();

}  // namespace dflash::rmsnorm

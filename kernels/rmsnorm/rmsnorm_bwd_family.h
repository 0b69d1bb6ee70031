// The rmsnorm_bwd kernel family: the backward of the plain RMS norm (no residual, no gate; standard or zero-centred
// weight, bf16 or fp32), dx in bf16 and per-block fp32 partial sums of dw: the drafter's trained norms.
// Implements tuner::KernelFamily on top of rmsnorm_bwd_space.h (problem, bucket, space, seeds) and
// rmsnorm_bwd_workload.h; its kernel (rmsnorm_bwd.cuh) compiles from the rmsnorm family's embedded sources.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: an immutable singleton, every method
// re-entrant.
#pragma once

#include "kernels/rmsnorm/rmsnorm_bwd_space.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

const tuner::KernelFamily& BackwardFamily();

}  // namespace dflash::rmsnorm

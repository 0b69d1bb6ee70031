// The rope kernel family: rotary position embedding of bf16 heads with fp32 cos / sin tables (neox halves, a rotated
// leading part of each head and an unrotated tail), forward (sign +1) and its backward (sign -1) by one kernel: the
// target's q / k and the drafter's. Implements tuner::KernelFamily on top of rope_space.h and rope_workload.h.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: an immutable singleton, every method
// re-entrant.
#pragma once

#include "kernels/rope/rope_space.h"
#include "tuner/kernel_family.h"

namespace dflash::rope {

const tuner::KernelFamily& Family();

}  // namespace dflash::rope

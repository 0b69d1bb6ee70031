// The swiglu kernel family: out = silu(gate) * up of the target's MLP in bf16, LibTorch's silu-then-product bit for
// bit in one pass (swiglu.cuh). Implements tuner::KernelFamily on top of swiglu_space.h and swiglu_workload.h.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: an immutable singleton, every method
// re-entrant.
#pragma once

#include "kernels/swiglu/swiglu_space.h"
#include "tuner/kernel_family.h"

namespace dflash::swiglu {

const tuner::KernelFamily& Family();

}  // namespace dflash::swiglu

// The xent kernel family: row-wise cross-entropy over fp32 logits (log-sum-exp, weighted loss, argmax and the bf16
// logits gradient in one kernel: the loss through the frozen lm_head of the DFlash drafter). Implements
// tuner::KernelFamily on top of xent_problem.h (problem + bucket), xent_config.h (space + geometry),
// xent_workload.h.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: an immutable singleton, every method
// re-entrant.
#pragma once

#include "kernels/xent/xent_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::xent {

const tuner::KernelFamily& Family();

}  // namespace dflash::xent

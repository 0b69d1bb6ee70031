// The attention kernel families: "attention_fwd" (fused forward: O and LSE) and "attention_bwd" (fused backward:
// dQ, dK, dV), bf16 with fp32 accumulation, head dims 64/128/256 (backward 64/128), GQA of any ratio, masks none,
// causal, doc_causal, dflash_full, dflash_sliding (kernels/attention/NOTES.md). Implements tuner::KernelFamily on
// top of attention_problem.h (problem + bucket), attention_config.h (space + launches), attention_workload.h.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: immutable singletons, every method
// re-entrant.
#pragma once

#include "tuner/kernel_family.h"

namespace dflash::attention {

const tuner::KernelFamily& ForwardFamily();
const tuner::KernelFamily& BackwardFamily();

}  // namespace dflash::attention

// Workloads of the attention families: one problem instance on a GPU (fresh random inputs), its launches through
// attention_api.h, and the check against the CPU reference (reference.h) on a sample of rows: every row of a
// small problem; for a large one 256 query rows (O, LSE, dQ) and, for the backward, the kv rows (dK, dV) whose
// reference fits a budget of 2048 forward rows (in DFlash problems: block rows and late context rows).
// Pass rule per tensor: max |kernel - fp64| <= 2 x max |plain bf16 - fp64| + 1e-4 over the checked elements, no NaN,
// rows that see nothing exactly 0 with LSE -inf.
// The backward workload needs O and LSE: its first launch runs the forward kernel that every backward variant
// carries (attention_family.cc adds it), once.
// Who may call it: the families (MakeWorkload). Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>

#include "base/status.h"
#include "kernels/attention/attention_config.h"
#include "kernels/attention/attention_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::attention {

// The forward kernel every backward variant also instantiates (to produce O and LSE for its workload): its
// launch (name expression, shape).
KernelLaunch BackwardHelperForwardLaunch(const ProblemSpec& problem);

// Problems with doc_bound get random per-block document starts of packed rows in their inputs (reference.h
// RandomInputs), passed to the kernels and to the reference.
Result<std::unique_ptr<tuner::Workload>> MakeAttentionWorkload(const ProblemSpec& spec, Direction direction,
                                                               std::uint64_t seed);

}  // namespace dflash::attention

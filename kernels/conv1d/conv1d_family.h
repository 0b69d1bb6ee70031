// The conv1d kernel family: causal depthwise conv1d (width 4) + SiLU over packed varlen sequences, bf16 in/out,
// fp32 accumulate (the conv before every gated-delta-net layer of Qwen3.5/3.6). Implements tuner::KernelFamily
// on top of conv1d_problem.h (problem + bucket), conv1d_config.h (space + geometry), conv1d_workload.h.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: an immutable singleton, every method
// re-entrant.
#pragma once

#include "kernels/conv1d/conv1d_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::conv1d {

const tuner::KernelFamily& Family();

}  // namespace dflash::conv1d

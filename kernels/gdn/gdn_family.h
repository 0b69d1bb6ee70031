// The gdn kernel family: the chunked gated-delta-net forward of the Qwen3.5 / 3.6 layer (WY/UT chunked
// algorithm on mma.sync, sequential or split state pass) with its recurrent kernel, bf16 in/out, fp32 state.
// Implements tuner::KernelFamily on top of gdn_problem.h (problem + bucket), gdn_config.h (space + kernels),
// gdn_workload.h (random instance + float64 check). Every variant also carries the recurrent kernel
// (gdn_api.h's LaunchRecurrent) so one cached winner serves prefill and decoding.
// Who may call it: the kernel registry, the tuner, tests. Thread-safety: an immutable singleton, every method
// re-entrant.
#pragma once

#include "tuner/kernel_family.h"

namespace dflash::gdn {

const tuner::KernelFamily& ChunkedForwardFamily();

}  // namespace dflash::gdn

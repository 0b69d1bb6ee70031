// gdn workloads: one problem instance on a device with fresh random inputs (q, k, v ~ N(0, 1) in bf16; a, b ~
// N(0, 1); A_log = log U(0.5, 16), dt_bias = softplus^-1(logU(1e-3, 1e-1)) as the Qwen3.5 layer initialises
// them; random packed sequence lengths; h0 ~ 0.1 N(0, 1) when the problem asks for initial states), output
// poisoning (NaN), launch of the chunked forward through gdn_api.h, and the check of o and the final states
// against the float64 token-by-token reference (reference.h). An InputForm picks the API's other input forms:
// the gates precomputed on the host (g, beta fp32 from the same draws) and q, k normalised on the host.
// Who may call it: the family's MakeWorkload and the tests. Thread-safety: a workload belongs to one thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/status.h"
#include "kernels/gdn/gdn_problem.h"
#include "tuner/gpu_runtime.h"
#include "tuner/kernel_family.h"
#include "kernels/bf16.h"

namespace dflash::gdn {

// Check: ||x - ref|| / ||ref|| <= kRelL2Tol for o and for the final states, and no NaN anywhere (bf16
// operands in the tensor-core products put the chunked path near 5e-3 on random inputs).
constexpr double kRelL2Tol = 2e-2;

// The API's input forms beyond the default (raw gates, q and k normalised in the kernels).
struct InputForm {
  bool precomputed_gates = false;  // GdnArgs::g / beta (fp32) instead of a, b, A_log, dt_bias
  bool qk_l2norm = true;           // false: q, k L2-normalised on the host (then rounded to bf16), used as given
  bool one_projection = false;     // q, k, v as strided views of one [T, (2 H + HV) x 128] projection output
};

Result<std::unique_ptr<tuner::Workload>> MakeGdnWorkload(const gpu::Context& ctx, const ProblemSpec& spec,
                                                         std::uint64_t seed, InputForm form = {});

// Random cu_seqlens: num_seqs + 1 offsets from 0 to tokens, every sequence at least one token.
std::vector<std::int32_t> RandomCuSeqlens(std::int64_t tokens, std::int64_t num_seqs, std::uint64_t seed);


}  // namespace dflash::gdn

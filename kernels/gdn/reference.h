// float64 CPU references of the gated-delta-net forward (the Qwen3.5 layer's recurrence, dflash-training.md §1):
//   ReferenceRecurrent: token by token, straight from the definition;
//   ReferenceChunked:   the chunked WY/UT formulation (kernels.md) in plain double, an independent formulation
//                       used to cross-check the first and to mirror what the GPU kernels compute; its folded
//                       form (ChunkedForm::kFolded) is what the folded prep and passes compute (T folded into the
//                       output's and the update's operands, X = v - diag(e^gamma) K h instead of V_new).
// Inputs are given as doubles (callers convert their bf16 data), in the kernels' logical layouts (contiguous):
// q, k [T, H, K], v [T, HV, V], a, b [T, HV], A_log, dt_bias [HV] (or the precomputed g, beta [T, HV] instead of
// those four), optional h0 [N, HV, K, V].
// Who may call: tests, workloads' checks. Thread-safety: pure functions (ReferenceRecurrent spreads the
// (sequence, head) pairs over all cores internally).
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"

namespace dflash::gdn {

struct ReferenceProblem {
  int heads = 0;         // H (key heads)
  int value_heads = 0;   // HV = r * H; value head j uses key head j / r
  int key_dim = 0;       // K
  int value_dim = 0;     // V
  std::vector<std::int32_t> cu_seqlens;  // [N + 1]
  std::vector<double> q, k, v, a, b, A_log, dt_bias;
  std::vector<double> g, beta;  // [T, HV] each, non-empty: the gates as given (a, b, A_log, dt_bias then empty)
  std::vector<double> h0;       // empty: zero initial states
  double scale = 0.0;           // 0: K^-1/2
  bool qk_l2norm = true;        // false: q and k as given
};

struct ReferenceResult {
  std::vector<double> o;   // [T, HV, V]
  std::vector<double> ht;  // [N, HV, K, V]
};

// Checks shapes and consistency (sizes, HV % H, cu_seqlens) with one-line messages.
Status ValidateReferenceProblem(const ReferenceProblem& p);

// g = -exp(A_log) * softplus(a + dt_bias) (softplus with torch's threshold 20), beta = sigmoid(b).
double GateG(double a, double a_log, double dt_bias);
double GateBeta(double b);

Result<ReferenceResult> ReferenceRecurrent(const ReferenceProblem& p);
enum class ChunkedForm { kWyUt, kFolded };
Result<ReferenceResult> ReferenceChunked(const ReferenceProblem& p, int chunk_len,
                                         ChunkedForm form = ChunkedForm::kWyUt);

}  // namespace dflash::gdn

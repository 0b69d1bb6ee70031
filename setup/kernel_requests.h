// Which tuned kernels one operation of the models needs at one shape: OpShape (an operation and its sizes, one row of
// batch 1) -> KernelRequest (family + problem JSON). The one derivation of kernel keys: `dflash-tune warmup` tunes
// the requests of a training setup's shapes (training_setup.h), and CachedKernelOps derives the problem of every
// launch through these same functions, so a warmed key is exactly a key the trainer looks up.
// Who may call: training_setup.h, CachedKernelOps, tests. Thread-safety: pure functions.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/attention_problem.h"
#include "kernels/conv1d/conv1d_problem.h"
#include "kernels/gdn/gdn_problem.h"
#include "kernels/rmsnorm/rmsnorm_problem.h"
#include "kernels/rope/rope_space.h"
#include "kernels/swiglu/swiglu_space.h"
#include "kernels/xent/xent_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::setup {

enum class OpKind { kDraftAttention, kCausalAttention, kConv1d, kGatedDeltaRule, kRmsNorm, kCrossEntropy, kRope, kSwiglu };
// "draft_attention", "causal_attention", "conv1d", "gated_delta_rule", "rms_norm", "cross_entropy", "rope", "swiglu"
const char* OpName(OpKind op);

// Packed rows hold a different number of documents each. Their problems (doc-causal attention, conv1d, gated delta
// rule) are looked up under one key, tuned at kMinPackedDocs documents, whatever the row's count: every kernel
// variant is correct for any document count, so a packed run never meets a missing key mid-training. The launches
// use the row's real count (the attention pads cu_seqlens with empty documents up to at least kMinPackedDocs).
constexpr std::int64_t kMinPackedDocs = 8;
std::int64_t KeyDocCount(std::int64_t num_docs);  // 1 for one document, else kMinPackedDocs

struct OpShape {
  OpKind op = OpKind::kDraftAttention;
  attention::ProblemSpec attention;  // draft / causal attention: the launched problem (batch 1)
  conv1d::ProblemSpec conv1d;
  gdn::ProblemSpec gdn;
  rmsnorm::ProblemSpec rmsnorm;
  bool rmsnorm_trained = false;  // rms norm: the weight and input are trained (a backward runs too)
  xent::ProblemSpec xent;
  rope::ProblemSpec rope;
  swiglu::ProblemSpec swiglu;

  // Every field as numbers: equal keys are equal shapes (a map key for callers that resolve each shape once).
  using Key = std::array<std::int64_t, 40>;
  Key key() const;

  // Drafter attention over S context rows and N blocks of B rows; window 0 = the full mask. `packed_rows`: the
  // blocks carry document starts (DraftMask::doc_start), the problem's doc_bound variant.
  static OpShape DraftAttention(std::int64_t context_len, std::int64_t num_blocks, std::int64_t block_size,
                                std::int64_t window, std::int64_t heads_q, std::int64_t heads_kv,
                                std::int64_t head_dim, bool packed_rows);
  // Target attention over T tokens in `num_docs` documents (1: the plain causal mask, else doc-causal with
  // KeyDocCount's count).
  static OpShape CausalAttention(std::int64_t tokens, std::int64_t num_docs, std::int64_t heads_q,
                                 std::int64_t heads_kv, std::int64_t head_dim);
  // Depthwise causal conv1d + SiLU over [T, C] token-major, restarting at each of `num_docs` documents (the
  // problem's count is KeyDocCount's).
  static OpShape Conv1d(std::int64_t tokens, std::int64_t channels, std::int64_t num_docs);
  // Gated delta rule over T tokens of `num_docs` documents (KeyDocCount), no initial and no final state.
  static OpShape GatedDeltaRule(std::int64_t tokens, int heads, int value_heads, std::int64_t num_docs);
  // RMS norm of `rows` rows of `cols` (TargetOps::RmsNorm, AddRmsNorm with `residual`, GatedRmsNorm with `gate`).
  static OpShape RmsNorm(std::int64_t rows, std::int64_t cols, rmsnorm::Kind kind, bool residual, bool gate,
                         rmsnorm::WeightDtype weight);
  // A trained RMS norm (DrafterOps::TrainedRmsNorm: the drafter's norms, weights the fp32 masters): its forward and
  // its backward (no residual, no gate).
  static OpShape TrainedRmsNorm(std::int64_t rows, std::int64_t cols, rmsnorm::Kind kind, rmsnorm::WeightDtype weight);
  // The rotary embedding of `tokens` tokens of `heads` heads (TargetOps::Rope, DrafterOps::TrainedRope: forward and
  // backward run one kernel); only for dims rope::Supported serves.
  static OpShape Rope(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim);
  // silu(gate) * up over `rows` rows of `cols` (TargetOps::SwiGlu); only for widths swiglu::Supported serves.
  static OpShape Swiglu(std::int64_t rows, std::int64_t cols);
  // The loss's row-wise pass over `rows` rows of `vocab` logits, with the logits' gradient (DrafterOps::CrossEntropy).
  static OpShape CrossEntropy(std::int64_t rows, std::int64_t vocab);
};

struct KernelRequest {
  std::string operation;  // "draft_attention forward", "conv1d (packed rows)", "--problem conv1d", ...
  const tuner::KernelFamily* family = nullptr;
  tuner::Problem problem;
};

// The kernels `shape` launches: draft attention -> attention_fwd and attention_bwd; causal attention ->
// attention_fwd; conv1d -> conv1d; gated delta rule -> gdn; rms norm -> rmsnorm (and rmsnorm_bwd when trained);
// cross-entropy -> xent; rope -> rope; swiglu -> swiglu.
std::vector<KernelRequest> KernelRequestsFor(const OpShape& shape);
// The requests of every shape, in order (repeats kept: CachedKernelOps::Prepare reports each key once).
std::vector<KernelRequest> KernelRequestsFor(const std::vector<OpShape>& shapes);

}  // namespace dflash::setup

// Which tuned kernels one trainer operation needs at one shape: OpShape (an operation and its sizes, one row of
// batch 1) -> KernelRequest (family + problem JSON). The problems are built the way kernels/presets.cc builds the
// warmup problems (same fields, same mask kinds, doc counts padded into the preset's bucket), so a key warmed by
// `dflash-tune warmup --preset/--config` is the key CachedKernelOps looks up. CachedKernelOps derives the problems
// of every launch through these same functions, so Prepare() resolves exactly what the ops will use.
// Who may call: CachedKernelOps, the trainer (to list the shapes of a run), tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/attention/attention_problem.h"
#include "kernels/conv1d/conv1d_problem.h"
#include "kernels/gdn/gdn_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::trainer {

enum class OpKind { kDraftAttention, kCausalAttention, kConv1d, kGatedDeltaRule };
const char* OpName(OpKind op);  // "draft_attention", "causal_attention", "conv1d", "gated_delta_rule"

// Documents of a packed row are padded (with empty documents) up to this count for the doc-causal attention, the
// count kernels/presets.cc warms (kPackedDocs there), so rows of up to 8 documents share the warmed key.
constexpr std::int64_t kMinPackedDocs = 8;

struct OpShape {
  OpKind op = OpKind::kDraftAttention;
  attention::ProblemSpec attention;  // draft / causal attention: the launched problem (batch 1)
  conv1d::ProblemSpec conv1d;
  gdn::ProblemSpec gdn;

  // Drafter attention over S context rows and N blocks of B rows; window 0 = the full mask.
  static OpShape DraftAttention(std::int64_t context_len, std::int64_t num_blocks, std::int64_t block_size,
                                std::int64_t window, std::int64_t heads_q, std::int64_t heads_kv,
                                std::int64_t head_dim);
  // Target attention over T tokens in `num_docs` documents (1: the plain causal mask, else doc-causal with the
  // document count padded to at least kMinPackedDocs).
  static OpShape CausalAttention(std::int64_t tokens, std::int64_t num_docs, std::int64_t heads_q,
                                 std::int64_t heads_kv, std::int64_t head_dim);
  // Depthwise causal conv1d + SiLU over [T, C] token-major, restarting at each of `num_docs` documents.
  static OpShape Conv1d(std::int64_t tokens, std::int64_t channels, std::int64_t num_docs);
  // Gated delta rule over T tokens of `num_docs` documents, no initial and no final state (training).
  static OpShape GatedDeltaRule(std::int64_t tokens, int heads, int value_heads, std::int64_t num_docs);
};

struct KernelRequest {
  std::string operation;  // "draft_attention forward", ...
  const tuner::KernelFamily* family = nullptr;
  tuner::Problem problem;
};

// The kernels `shape` launches: draft attention -> attention_fwd and attention_bwd; causal attention ->
// attention_fwd; conv1d -> conv1d; gated delta rule -> gdn.
std::vector<KernelRequest> KernelRequestsFor(const OpShape& shape);

}  // namespace dflash::trainer

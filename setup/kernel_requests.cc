#include "setup/kernel_requests.h"

#include <algorithm>

#include "kernels/attention/attention_family.h"
#include "kernels/attention/attention_params.cuh"
#include "kernels/conv1d/conv1d_family.h"
#include "kernels/gdn/gdn_family.h"
#include "kernels/rmsnorm/rmsnorm_bwd_family.h"
#include "kernels/rmsnorm/rmsnorm_family.h"
#include "kernels/rope/rope_family.h"
#include "kernels/swiglu/swiglu_family.h"
#include "kernels/xent/xent_family.h"

namespace dflash::setup {

const char* OpName(OpKind op) {
  switch (op) {
    case OpKind::kDraftAttention: return "draft_attention";
    case OpKind::kCausalAttention: return "causal_attention";
    case OpKind::kConv1d: return "conv1d";
    case OpKind::kGatedDeltaRule: return "gated_delta_rule";
    case OpKind::kRmsNorm: return "rms_norm";
    case OpKind::kCrossEntropy: return "cross_entropy";
    case OpKind::kRope: return "rope";
    case OpKind::kSwiglu: return "swiglu";
  }
  return "unknown";
}

std::int64_t KeyDocCount(std::int64_t num_docs) { return num_docs <= 1 ? 1 : kMinPackedDocs; }

OpShape::Key OpShape::key() const {
  const attention::ProblemSpec& a = attention;
  return {static_cast<std::int64_t>(op), a.mask, a.batch, a.heads_q, a.heads_kv, a.head_dim, a.seq_q, a.seq_kv,
          a.num_docs, a.block_size, a.ctx_len, a.window, a.doc_bound, conv1d.tokens, conv1d.channels,
          conv1d.num_seqs, static_cast<std::int64_t>(conv1d.layout), gdn.heads, gdn.value_heads, gdn.tokens,
          gdn.num_seqs, gdn.initial_state, gdn.final_state, rmsnorm.rows, rmsnorm.cols,
          static_cast<std::int64_t>(rmsnorm.kind), rmsnorm.residual, rmsnorm.gate,
          static_cast<std::int64_t>(rmsnorm.weight), xent.rows, xent.vocab, xent.grad, rmsnorm_trained, rope.tokens, rope.heads, rope.head_dim,
          rope.rotary_dim, swiglu.rows, swiglu.cols, 0};
}

OpShape OpShape::DraftAttention(std::int64_t context_len, std::int64_t num_blocks, std::int64_t block_size,
                                std::int64_t window, std::int64_t heads_q, std::int64_t heads_kv,
                                std::int64_t head_dim, bool packed_rows) {
  OpShape s;
  s.op = OpKind::kDraftAttention;
  attention::ProblemSpec& a = s.attention;
  a.mask = window > 0 ? dflash_attn::kMaskDflashSliding : dflash_attn::kMaskDflashFull;
  a.batch = 1;
  a.heads_q = heads_q;
  a.heads_kv = heads_kv;
  a.head_dim = head_dim;
  a.block_size = block_size;
  a.ctx_len = context_len;
  a.seq_q = num_blocks * block_size;
  a.seq_kv = context_len + a.seq_q;
  if (window > 0) a.window = window;  // the full mask keeps the default (not part of its problem)
  a.doc_bound = packed_rows;
  return s;
}

OpShape OpShape::CausalAttention(std::int64_t tokens, std::int64_t num_docs, std::int64_t heads_q,
                                 std::int64_t heads_kv, std::int64_t head_dim) {
  OpShape s;
  s.op = OpKind::kCausalAttention;
  attention::ProblemSpec& a = s.attention;
  a.mask = num_docs <= 1 ? dflash_attn::kMaskCausal : dflash_attn::kMaskDocCausal;
  a.batch = 1;
  a.heads_q = heads_q;
  a.heads_kv = heads_kv;
  a.head_dim = head_dim;
  a.seq_q = a.seq_kv = tokens;
  if (num_docs > 1) a.num_docs = KeyDocCount(num_docs);
  return s;
}

OpShape OpShape::Conv1d(std::int64_t tokens, std::int64_t channels, std::int64_t num_docs) {
  OpShape s;
  s.op = OpKind::kConv1d;
  s.conv1d.tokens = tokens;
  s.conv1d.channels = channels;
  s.conv1d.num_seqs = KeyDocCount(num_docs);
  s.conv1d.layout = conv1d::Layout::kTokenMajor;
  return s;
}

OpShape OpShape::GatedDeltaRule(std::int64_t tokens, int heads, int value_heads, std::int64_t num_docs) {
  OpShape s;
  s.op = OpKind::kGatedDeltaRule;
  s.gdn.heads = heads;
  s.gdn.value_heads = value_heads;
  s.gdn.tokens = tokens;
  s.gdn.num_seqs = KeyDocCount(num_docs);
  s.gdn.initial_state = false;
  s.gdn.final_state = false;
  return s;
}

OpShape OpShape::RmsNorm(std::int64_t rows, std::int64_t cols, rmsnorm::Kind kind, bool residual, bool gate,
                         rmsnorm::WeightDtype weight) {
  OpShape s;
  s.op = OpKind::kRmsNorm;
  s.rmsnorm = {rows, cols, kind, residual, gate, weight};
  return s;
}

OpShape OpShape::TrainedRmsNorm(std::int64_t rows, std::int64_t cols, rmsnorm::Kind kind,
                                rmsnorm::WeightDtype weight) {
  OpShape s = RmsNorm(rows, cols, kind, false, false, weight);
  s.rmsnorm_trained = true;
  return s;
}

OpShape OpShape::Rope(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim) {
  OpShape s;
  s.op = OpKind::kRope;
  s.rope = {tokens, heads, head_dim, rotary_dim};
  return s;
}

OpShape OpShape::Swiglu(std::int64_t rows, std::int64_t cols) {
  OpShape s;
  s.op = OpKind::kSwiglu;
  s.swiglu = {rows, cols};
  return s;
}

OpShape OpShape::CrossEntropy(std::int64_t rows, std::int64_t vocab) {
  OpShape s;
  s.op = OpKind::kCrossEntropy;
  s.xent = {rows, vocab, /*grad=*/true};
  return s;
}

namespace {
// True when the shape is a packed row's (several documents), which the provenance table and errors say.
bool PackedRows(const OpShape& shape) {
  switch (shape.op) {
    case OpKind::kDraftAttention: return shape.attention.doc_bound;
    case OpKind::kCausalAttention: return shape.attention.mask == dflash_attn::kMaskDocCausal;
    case OpKind::kConv1d: return shape.conv1d.num_seqs > 1;
    case OpKind::kGatedDeltaRule: return shape.gdn.num_seqs > 1;
    case OpKind::kRmsNorm:
    case OpKind::kCrossEntropy:
    case OpKind::kRope:
    case OpKind::kSwiglu: return false;  // row-wise: one key for padded and packed rows
  }
  return false;
}
}  // namespace

std::vector<KernelRequest> KernelRequestsFor(const OpShape& shape) {
  const std::string op = std::string(OpName(shape.op)) + (PackedRows(shape) ? " (packed rows)" : "");
  switch (shape.op) {
    case OpKind::kDraftAttention:
      return {{op + " forward", &attention::ForwardFamily(), attention::ToJson(shape.attention)},
              {op + " backward", &attention::BackwardFamily(), attention::ToJson(shape.attention)}};
    case OpKind::kCausalAttention:
      return {{op + " forward", &attention::ForwardFamily(), attention::ToJson(shape.attention)}};
    case OpKind::kConv1d:
      return {{op, &conv1d::Family(), conv1d::ToJson(shape.conv1d)}};
    case OpKind::kGatedDeltaRule:
      return {{op, &gdn::ChunkedForwardFamily(), gdn::ToJson(shape.gdn)}};
    case OpKind::kRmsNorm: {
      const rmsnorm::ProblemSpec& r = shape.rmsnorm;
      const std::string what = r.gate ? " (gated)" : r.residual ? " (residual add)" : "";
      const std::string name = op + what + " " + std::to_string(r.cols);
      if (!shape.rmsnorm_trained) return {{name, &rmsnorm::Family(), rmsnorm::ToJson(r)}};
      return {{name + " forward", &rmsnorm::Family(), rmsnorm::ToJson(r)},
              {name + " backward", &rmsnorm::BackwardFamily(),
               rmsnorm::MakeBwdProblem(r.rows, r.cols, r.kind, r.weight)}};
    }
    case OpKind::kCrossEntropy:
      return {{op, &xent::Family(), xent::ToJson(shape.xent)}};
    case OpKind::kSwiglu:
      return {{op + " " + std::to_string(shape.swiglu.cols), &swiglu::Family(), swiglu::ToJson(shape.swiglu)}};
    case OpKind::kRope:
      return {{op + " " + std::to_string(shape.rope.heads) + "x" + std::to_string(shape.rope.head_dim), &rope::Family(),
               rope::ToJson(shape.rope)}};
  }
  return {};
}

std::vector<KernelRequest> KernelRequestsFor(const std::vector<OpShape>& shapes) {
  std::vector<KernelRequest> out;
  for (const OpShape& shape : shapes) {
    for (KernelRequest& r : KernelRequestsFor(shape)) out.push_back(std::move(r));
  }
  return out;
}

}  // namespace dflash::setup

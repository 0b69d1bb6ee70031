#include "setup/training_setup.h"

#include <algorithm>
#include <set>
#include <utility>

#include "kernels/gdn/gdn_problem.h"
#include "kernels/rmsnorm/rmsnorm_bwd_space.h"

namespace dflash::setup {
namespace {

// The conv1d family's kernel width (kernels/conv1d: the kernels are written for 4 taps).
constexpr std::int64_t kConvWidth = 4;

void AddTargetShapes(const TrainingSetup& s, std::int64_t docs, std::vector<OpShape>& shapes) {
  const TargetConfig& t = s.target;
  if (t.arch == TargetArch::kQwen3_5Hybrid) {
    const std::int64_t channels = 2 * t.linear_num_key_heads * t.linear_key_head_dim +
                                  t.linear_num_value_heads * t.linear_value_head_dim;
    shapes.push_back(OpShape::Conv1d(s.max_length, channels, docs));
    shapes.push_back(OpShape::GatedDeltaRule(s.max_length, static_cast<int>(t.linear_num_key_heads),
                                             static_cast<int>(t.linear_num_value_heads), docs));
  }
  shapes.push_back(OpShape::CausalAttention(s.max_length, docs, t.num_attention_heads, t.num_key_value_heads,
                                            t.head_dim));
}

void AddDrafterShapes(const TrainingSetup& s, bool packed, std::vector<OpShape>& shapes) {
  if (!s.drafter) return;
  const DrafterConfig& d = *s.drafter;
  bool full = d.layer_kinds.empty(), sliding = false;
  for (auto kind : d.layer_kinds) (kind == DrafterLayerKind::kFullAttention ? full : sliding) = true;
  if (full) {
    shapes.push_back(OpShape::DraftAttention(s.max_length, s.num_anchors, d.block_size, 0, d.num_attention_heads,
                                             d.num_key_value_heads, d.head_dim, packed));
  }
  if (sliding && d.sliding_window) {
    shapes.push_back(OpShape::DraftAttention(s.max_length, s.num_anchors, d.block_size, *d.sliding_window,
                                             d.num_attention_heads, d.num_key_value_heads, d.head_dim, packed));
  }
}

// The target's norms (target_layers.cc): input / post-attention norms over [T, hidden] (layer 0's input norm has no
// residual add before it, every other one fuses the add), the attention's q / k norms over [T * heads, head_dim],
// the delta net's gated norm over [T * value_heads, value_head_dim]. Weights in the activation dtype (bf16).
void AddTargetNormShapes(const TrainingSetup& s, std::vector<OpShape>& shapes) {
  const TargetConfig& t = s.target;
  const auto kind = t.arch == TargetArch::kQwen3_5Hybrid ? rmsnorm::Kind::kZeroCentred : rmsnorm::Kind::kStandard;
  const auto bf16 = rmsnorm::WeightDtype::kBf16;
  const std::int64_t tokens = s.max_length;
  shapes.push_back(OpShape::RmsNorm(tokens, t.hidden_size, kind, false, false, bf16));
  shapes.push_back(OpShape::RmsNorm(tokens, t.hidden_size, kind, true, false, bf16));
  shapes.push_back(OpShape::RmsNorm(tokens * t.num_attention_heads, t.head_dim, kind, false, false, bf16));
  shapes.push_back(OpShape::RmsNorm(tokens * t.num_key_value_heads, t.head_dim, kind, false, false, bf16));
  if (t.arch == TargetArch::kQwen3_5Hybrid) {
    shapes.push_back(OpShape::RmsNorm(tokens * t.linear_num_value_heads, t.linear_value_head_dim,
                                      rmsnorm::Kind::kStandard, false, true, bf16));
  }
}

// The drafter's norms (models/drafter.cc), trained with fp32 master weights: the context norm over [S, hidden], the
// input / post-attention / final norms over the N*B block rows, q norms over [N*B * heads, head_dim], k norms over
// the context and block rows [(S + N*B) * kv_heads, head_dim]. Standard kind. Rows wider than the backward serves
// (rmsnorm::BwdServes) run LibTorch's chain: no key.
void AddDrafterNormShapes(const TrainingSetup& s, std::vector<OpShape>& shapes) {
  if (!s.drafter) return;
  const DrafterConfig& d = *s.drafter;
  const auto standard = rmsnorm::Kind::kStandard;
  const auto fp32 = rmsnorm::WeightDtype::kFp32;
  const std::int64_t block_rows = s.num_anchors * d.block_size;
  if (rmsnorm::BwdServes(d.hidden_size)) {
    shapes.push_back(OpShape::TrainedRmsNorm(s.max_length, d.hidden_size, standard, fp32));
    shapes.push_back(OpShape::TrainedRmsNorm(block_rows, d.hidden_size, standard, fp32));
  }
  if (rmsnorm::BwdServes(d.head_dim)) {
    shapes.push_back(OpShape::TrainedRmsNorm(block_rows * d.num_attention_heads, d.head_dim, standard, fp32));
    shapes.push_back(
        OpShape::TrainedRmsNorm((s.max_length + block_rows) * d.num_key_value_heads, d.head_dim, standard, fp32));
  }
}

// The rotary embeddings (one kernel serves forward and backward): the target's q and k over its tokens (the
// rotated part of its heads: TargetRotaryDim), the drafter's q over the block rows and k over the context and
// block rows (every dim rotated). Dims the rope family does not serve run LibTorch's rotation: no key.
// The target MLP's silu(gate) * up over [T, intermediate] (the drafter's, trained, stays LibTorch's).
void AddTargetSwigluShapes(const TrainingSetup& s, std::vector<OpShape>& shapes) {
  if (swiglu::Supported(s.target.intermediate_size))
    shapes.push_back(OpShape::Swiglu(s.max_length, s.target.intermediate_size));
}

void AddTargetRopeShapes(const TrainingSetup& s, std::vector<OpShape>& shapes) {
  const TargetConfig& t = s.target;
  const std::int64_t rotary = TargetRotaryDim(t);
  if (!rope::Supported(t.head_dim, rotary)) return;
  shapes.push_back(OpShape::Rope(s.max_length, t.num_attention_heads, t.head_dim, rotary));
  shapes.push_back(OpShape::Rope(s.max_length, t.num_key_value_heads, t.head_dim, rotary));
}

void AddDrafterRopeShapes(const TrainingSetup& s, std::vector<OpShape>& shapes) {
  if (!s.drafter || !rope::Supported(s.drafter->head_dim, s.drafter->head_dim)) return;
  const DrafterConfig& d = *s.drafter;
  const std::int64_t block_rows = s.num_anchors * d.block_size;
  shapes.push_back(OpShape::Rope(block_rows, d.num_attention_heads, d.head_dim, d.head_dim));
  shapes.push_back(OpShape::Rope(s.max_length + block_rows, d.num_key_value_heads, d.head_dim, d.head_dim));
}

// The loss's chunks (train/block_loss.cc): rows of num_anchors * block_size in chunks of loss_chunk_rows. The xent
// kernels read whole 16-byte vectors of a row: a vocabulary that is not a multiple of 4 runs LibTorch's pass instead
// (CachedKernelOps::CrossEntropy), so it has no key.
void AddLossShapes(const TrainingSetup& s, std::vector<OpShape>& shapes) {
  if (!s.drafter || s.loss_chunk_rows < 1 || s.target.vocab_size % 4 != 0) return;
  const std::int64_t rows = s.num_anchors * s.drafter->block_size;
  const std::int64_t full = std::min(rows, s.loss_chunk_rows), last = rows % s.loss_chunk_rows;
  if (full > 0) shapes.push_back(OpShape::CrossEntropy(full, s.target.vocab_size));
  if (last > 0 && last != full) shapes.push_back(OpShape::CrossEntropy(last, s.target.vocab_size));
}

}  // namespace

std::vector<OpShape> OpShapesFor(const TrainingSetup& setup, OpSide side) {
  std::vector<OpShape> shapes;
  for (const bool packed : {false, true}) {
    if (!(packed ? setup.packed_rows : setup.padded_rows)) continue;
    if (side != OpSide::kDrafter) AddTargetShapes(setup, packed ? kMinPackedDocs : 1, shapes);
    if (side != OpSide::kTarget) AddDrafterShapes(setup, packed, shapes);
  }
  if (side != OpSide::kDrafter) AddTargetNormShapes(setup, shapes);
  if (side != OpSide::kDrafter) AddTargetRopeShapes(setup, shapes);
  if (side != OpSide::kDrafter) AddTargetSwigluShapes(setup, shapes);
  if (side != OpSide::kTarget) AddDrafterNormShapes(setup, shapes);
  if (side != OpSide::kTarget) AddDrafterRopeShapes(setup, shapes);
  if (side != OpSide::kTarget) AddLossShapes(setup, shapes);
  return shapes;
}

Result<SetupRequests> KernelRequestsFor(const TrainingSetup& setup, OpSide side) {
  const TargetConfig& t = setup.target;
  if (side != OpSide::kDrafter && t.arch == TargetArch::kQwen3_5Hybrid && t.linear_conv_kernel_dim != kConvWidth) {
    return Unsupported("linear_conv_kernel_dim " + std::to_string(t.linear_conv_kernel_dim) +
                       " is not supported by the conv1d family (kernel width " + std::to_string(kConvWidth) + ")");
  }
  SetupRequests out;
  std::set<std::pair<std::string, std::string>> seen;
  bool gdn_noted = false;
  for (const OpShape& shape : OpShapesFor(setup, side)) {
    if (shape.op == OpKind::kGatedDeltaRule &&
        (t.linear_key_head_dim != gdn::kHeadDim || t.linear_value_head_dim != gdn::kHeadDim)) {
      if (!gdn_noted) {
        out.notes.push_back("gdn: head dims " + std::to_string(t.linear_key_head_dim) + "/" +
                            std::to_string(t.linear_value_head_dim) + " are not supported (the family is written for " +
                            std::to_string(gdn::kHeadDim) + "); skipped");
        gdn_noted = true;
      }
      continue;
    }
    for (KernelRequest& r : KernelRequestsFor(shape)) {
      if (seen.insert({std::string(r.family->name()), r.problem.dump()}).second) out.requests.push_back(std::move(r));
    }
  }
  return out;
}

}  // namespace dflash::setup

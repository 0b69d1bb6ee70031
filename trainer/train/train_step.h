// One row of a training step (spec dflash-training.md §4, §5): target features -> anchors and blocks -> drafter
// forward with the DFlash masks -> chunked block loss over the labelled rows (data::SelectLabelledRows: the others
// have weight 0 and no argmax is read) -> backward of the UNNORMALISED weighted loss sum.
// The caller sums RowResult::weight_sum over every row of the global batch (all accumulation micro-steps and, later,
// all ranks) and divides the gradients by it in the optimizer step (AdamW::Update), which makes the update
// exactly that of the loss normalised over the whole global batch.
// Who may call: the Trainer and tests. Thread-safety: one thread (autograd graph per call).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "base/status.h"
#include "trainer/data/batcher.h"
#include "trainer/models/drafter.h"
#include "trainer/models/target_model.h"
#include "trainer/ops/ops.h"
#include "trainer/train/step_timer.h"

namespace dflash::trainer {

struct RowStepOptions {
  std::int64_t num_anchors = 512;
  std::uint64_t anchor_seed = 0;      // data::StepAnchorSeed(seed, row counter, rank)
  torch::Dtype compute_dtype = torch::kBFloat16;
  std::int64_t loss_chunk_rows = 2048;
  bool backward = true;               // false: evaluation (no graph kept, no gradients)
  // true: a one-document row runs the target over its whole length (padding included), so every row of a run has
  // the same shapes and hits the same tuned kernel keys (the cached-kernel backend needs that). Exact either way:
  // padding follows the real tokens, so causal layers never let it reach them, and no anchor sees it.
  bool fixed_shapes = false;
  // Target and drafter in pairs (--target-device-offset, dist/placement.h): the drafter's side of the row runs on
  // `drafter_device` (the features move there from the target's device), with `embed_tokens` and `lm_head` the
  // target's frozen tensors already copied to it. Unset / undefined: the target's device and tensors.
  std::optional<torch::Device> drafter_device;
  torch::Tensor embed_tokens, lm_head;
  // The step's phase marks (step_timer.h); null: not timed.
  StepTimer* timer = nullptr;
  // Where the row's features come from. Unset: the target's forward runs here, in line. Set: they were computed
  // ahead (feature_pipeline.h: FeaturePipeline::Take, which waits for them) and are returned on the drafter's
  // device; the time spent waiting counts as the target_forward phase. Its error ends the row.
  std::function<Result<torch::Tensor>()> features;
};

// What the target runs over for a row: its tokens (the real ones, or the whole row under fixed_shapes with one
// document) and their document bounds, on the host.
struct TargetInput {
  torch::Tensor input_ids;   // int64 [context_len], CPU
  torch::Tensor cu_seqlens;  // int32 [documents + 1], CPU
  std::int64_t context_len = 0;
  bool whole_row = false;    // the whole row (padding included) under fixed_shapes, not only the real tokens
};
TargetInput TargetInputOf(const data::Row& row, bool fixed_shapes);
// The target's features of that input (no autograd), moved to `to` (GPU to GPU when in pairs): what a row's step
// runs in line, and what the feature pipeline's worker runs ahead of it.
torch::Tensor TargetFeatures(const TargetInput& input, const TargetModel& target, Ops& ops, torch::Device to);

struct RowResult {
  double weighted_ce = 0.0;           // sum of w * CE over the row's block slots
  double weight_sum = 0.0;            // sum of w
  std::int64_t context_tokens = 0;    // target tokens of the row (its real tokens)
  std::int64_t labelled = 0;          // slots with weight > 0
  std::int64_t correct = 0;           // of those, argmax == label
  std::vector<int> accept_lengths;    // one per valid block (data/loss_weights.h BlockAcceptLengths)
};

// Errors: InvalidArgument from the data layer (lengths, anchors), or a row without any real token.
Result<RowResult> TrainRow(const data::Row& row, const TargetModel& target, const Drafter& drafter, Ops& ops,
                           const RowStepOptions& options);

}  // namespace dflash::trainer

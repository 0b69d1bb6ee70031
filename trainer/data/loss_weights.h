// DFlash loss targets (spec dflash-training.md §5) and the training accuracy proxy (§7).
// Owns: per-slot labels and weights, the rows the loss needs, and the per-block accepted length from given argmaxes.
//   Slot k (0 <= k < B) of block j predicts the token at a_j + k (no shift); slot 0 (the anchor) is excluded.
//   weight = valid_j * [a_j + k < S_j] * loss_mask[a_j + k] * exp(-(k - 1) / gamma)   (0 for k = 0)
//   label  = input_ids[a_j + k] where valid_j, k >= 1 and a_j + k < S_j; otherwise kIgnoreLabel.
//   S_j is the end of block j's document (Blocks::doc_end): the row length for an unpacked row, the document's end
//   in a packed row (a block never learns across a document boundary; see anchors.h).
//   gamma: 7 for B = 16, 5 for B = 10, 4 for B = 8 (the published values); any other block size is InvalidArgument
//   unless the caller passes gamma explicitly.
// Accuracy proxy: per valid block, 1 + the length of the prefix of slots 1, 2, ... whose argmax equals the label
// (a slot without a label, past the document end, ends the prefix). 0 for padding blocks.
// Who may call: the training step and metrics. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "trainer/data/anchors.h"

namespace dflash::trainer::data {

inline constexpr std::int32_t kIgnoreLabel = -100;  // PyTorch cross_entropy's default ignore_index

// gamma for a block size: 16 -> 7, 10 -> 5, 8 -> 4; InvalidArgument otherwise.
Result<double> DecayGamma(int block_size);

struct LossTargets {
  std::vector<std::int32_t> labels;  // N*B
  std::vector<float> weights;        // N*B
  double weight_sum = 0.0;           // sum of weights (in double), this row's share of the global normaliser
};

// Errors: InvalidArgument when input_ids/loss_mask lengths differ, blocks are inconsistent or gamma is unknown.
Result<LossTargets> BuildLossTargets(std::span<const std::int32_t> input_ids, std::span<const std::uint8_t> loss_mask,
                                     const Blocks& blocks, std::optional<double> gamma = std::nullopt);

// The slots with a label, in order: the only rows the loss's head product and row-wise pass need (the others, slot 0
// of every block, padding blocks and slots past a document's end, have weight 0 and no argmax is read for them).
struct LabelledRows {
  std::vector<std::int32_t> index;  // slot numbers (into the N*B rows), ascending
  std::vector<std::int32_t> labels;
  std::vector<float> weights;
};
LabelledRows SelectLabelledRows(const LossTargets& targets);

// argmax: N*B predicted token ids (slot 0 ignored). Returns N accepted lengths (0 for padding blocks).
Result<std::vector<int>> BlockAcceptLengths(std::span<const std::int32_t> argmax, const LossTargets& targets,
                                            const Blocks& blocks);

// Mean accepted length over valid blocks (0 when there is none).
double MeanAcceptLength(std::span<const int> accept_lengths, const Blocks& blocks);

}  // namespace dflash::trainer::data

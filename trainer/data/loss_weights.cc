#include "trainer/data/loss_weights.h"

#include <cmath>
#include <string>

namespace dflash::trainer::data {
namespace {

Status CheckBlocks(const Blocks& b) {
  const std::size_t n = static_cast<std::size_t>(b.num_blocks);
  const std::size_t nb = n * static_cast<std::size_t>(b.block_size);
  if (b.num_blocks < 0 || b.block_size < 2 || b.anchors.size() != n || b.valid.size() != n || b.doc_start.size() != n ||
      b.doc_end.size() != n || b.tokens.size() != nb || b.position_ids.size() != nb) {
    return InvalidArgument("blocks: inconsistent sizes");
  }
  return Status::Ok();
}

}  // namespace

Result<double> DecayGamma(int block_size) {
  switch (block_size) {
    case 16: return 7.0;
    case 10: return 5.0;
    case 8: return 4.0;
    default:
      return InvalidArgument("no loss decay gamma is defined for block size " + std::to_string(block_size) +
                             " (known: 16 -> 7, 10 -> 5, 8 -> 4); pass gamma explicitly");
  }
}

Result<LossTargets> BuildLossTargets(std::span<const std::int32_t> input_ids, std::span<const std::uint8_t> loss_mask,
                                     const Blocks& blocks, std::optional<double> gamma) {
  if (input_ids.size() != loss_mask.size()) return InvalidArgument("input_ids and loss_mask lengths differ");
  DFLASH_RETURN_IF_ERROR(CheckBlocks(blocks));
  double g = 0.0;
  if (gamma) {
    if (!(*gamma > 0.0) || !std::isfinite(*gamma)) return InvalidArgument("gamma must be a positive number");
    g = *gamma;
  } else {
    DFLASH_ASSIGN_OR_RETURN(g, DecayGamma(blocks.block_size));
  }
  const int B = blocks.block_size;
  LossTargets t;
  t.labels.assign(blocks.tokens.size(), kIgnoreLabel);
  t.weights.assign(blocks.tokens.size(), 0.0f);
  for (int j = 0; j < blocks.num_blocks; ++j) {
    if (!blocks.valid[j]) continue;
    const std::int64_t a = blocks.anchors[j];
    const std::int64_t end = blocks.doc_end[j];
    if (a < 0 || end > static_cast<std::int64_t>(input_ids.size()) || a >= end) {
      return InvalidArgument("block " + std::to_string(j) + ": anchor " + std::to_string(a) + " outside its document");
    }
    for (int k = 1; k < B; ++k) {
      const std::int64_t p = a + k;
      if (p >= end) break;
      const std::size_t slot = static_cast<std::size_t>(j) * B + k;
      t.labels[slot] = input_ids[p];
      if (loss_mask[p]) {
        const double w = std::exp(-(k - 1) / g);
        t.weights[slot] = static_cast<float>(w);
        t.weight_sum += static_cast<double>(t.weights[slot]);
      }
    }
  }
  return t;
}

LabelledRows SelectLabelledRows(const LossTargets& targets) {
  LabelledRows rows;
  for (std::size_t i = 0; i < targets.labels.size(); ++i) {
    if (targets.labels[i] == kIgnoreLabel) continue;
    rows.index.push_back(static_cast<std::int32_t>(i));
    rows.labels.push_back(targets.labels[i]);
    rows.weights.push_back(targets.weights[i]);
  }
  return rows;
}

Result<std::vector<int>> BlockAcceptLengths(std::span<const std::int32_t> argmax, const LossTargets& targets,
                                            const Blocks& blocks) {
  DFLASH_RETURN_IF_ERROR(CheckBlocks(blocks));
  if (argmax.size() != blocks.tokens.size() || targets.labels.size() != blocks.tokens.size()) {
    return InvalidArgument("argmax and labels must hold num_blocks * block_size entries");
  }
  const int B = blocks.block_size;
  std::vector<int> out(blocks.num_blocks, 0);
  for (int j = 0; j < blocks.num_blocks; ++j) {
    if (!blocks.valid[j]) continue;
    int accepted = 0;
    for (int k = 1; k < B; ++k) {
      const std::size_t slot = static_cast<std::size_t>(j) * B + k;
      if (targets.labels[slot] == kIgnoreLabel || argmax[slot] != targets.labels[slot]) break;
      ++accepted;
    }
    out[j] = accepted + 1;
  }
  return out;
}

double MeanAcceptLength(std::span<const int> accept_lengths, const Blocks& blocks) {
  double sum = 0.0;
  int n = 0;
  for (int j = 0; j < blocks.num_blocks && static_cast<std::size_t>(j) < accept_lengths.size(); ++j) {
    if (!blocks.valid[j]) continue;
    sum += accept_lengths[j];
    ++n;
  }
  return n == 0 ? 0.0 : sum / n;
}

}  // namespace dflash::trainer::data

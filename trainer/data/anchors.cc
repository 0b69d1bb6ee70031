#include "trainer/data/anchors.h"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>

#include "trainer/data/rng.h"

namespace dflash::trainer::data {
namespace {

// Document boundaries as [0, e_1, ..., e_d]; the whole row when cu_seqlens is empty.
Result<std::vector<std::int32_t>> Boundaries(std::size_t row_length, std::span<const std::int32_t> cu_seqlens) {
  if (cu_seqlens.empty()) return std::vector<std::int32_t>{0, static_cast<std::int32_t>(row_length)};
  if (cu_seqlens.size() < 2 || cu_seqlens[0] != 0) {
    return InvalidArgument("cu_seqlens must start at 0 and hold at least one document");
  }
  for (std::size_t i = 1; i < cu_seqlens.size(); ++i) {
    if (cu_seqlens[i] <= cu_seqlens[i - 1]) return InvalidArgument("cu_seqlens must be strictly increasing");
  }
  if (static_cast<std::size_t>(cu_seqlens.back()) > row_length) {
    return InvalidArgument("cu_seqlens ends at " + std::to_string(cu_seqlens.back()) + ", past the row length " +
                           std::to_string(row_length));
  }
  return std::vector<std::int32_t>(cu_seqlens.begin(), cu_seqlens.end());
}

}  // namespace

Result<std::vector<std::int32_t>> AnchorCandidates(std::span<const std::uint8_t> loss_mask,
                                                   std::span<const std::int32_t> cu_seqlens) {
  if (loss_mask.size() > static_cast<std::size_t>(INT32_MAX)) return InvalidArgument("row too long");
  DFLASH_ASSIGN_OR_RETURN(std::vector<std::int32_t> bounds, Boundaries(loss_mask.size(), cu_seqlens));
  std::vector<std::int32_t> out;
  for (std::size_t d = 0; d + 1 < bounds.size(); ++d) {
    for (std::int32_t p = bounds[d]; p + 1 < bounds[d + 1]; ++p) {
      if (loss_mask[p] && loss_mask[p + 1]) out.push_back(p);
    }
  }
  return out;
}

std::uint64_t StepAnchorSeed(std::uint64_t base_seed, std::uint64_t step, std::uint64_t rank) {
  // The leading constant keeps anchor seeds apart from the batcher's epoch seeds derived from the same base.
  return DeriveSeed(base_seed, {0x616e63686f7273ULL /* "anchors" */, step, rank});
}

Result<Blocks> SampleBlocks(std::span<const std::int32_t> input_ids, std::span<const std::uint8_t> loss_mask,
                            std::span<const std::int32_t> cu_seqlens, const BlockOptions& options,
                            std::uint64_t seed) {
  if (input_ids.size() != loss_mask.size()) {
    return InvalidArgument("input_ids has " + std::to_string(input_ids.size()) + " tokens but loss_mask has " +
                           std::to_string(loss_mask.size()));
  }
  if (options.num_anchors < 1) return InvalidArgument("num_anchors must be at least 1");
  if (options.block_size < 2) return InvalidArgument("block_size must be at least 2");
  DFLASH_ASSIGN_OR_RETURN(std::vector<std::int32_t> bounds, Boundaries(loss_mask.size(), cu_seqlens));
  DFLASH_ASSIGN_OR_RETURN(std::vector<std::int32_t> candidates, AnchorCandidates(loss_mask, cu_seqlens));

  // Partial Fisher-Yates: the first k entries become a uniform k-subset.
  const std::size_t n = static_cast<std::size_t>(options.num_anchors);
  const std::size_t k = std::min(n, candidates.size());
  std::mt19937_64 rng(seed);
  for (std::size_t i = 0; i < k; ++i) {
    const std::size_t j = i + static_cast<std::size_t>(UniformBelow(rng, candidates.size() - i));
    std::swap(candidates[i], candidates[j]);
  }
  candidates.resize(k);
  std::sort(candidates.begin(), candidates.end());

  const int B = options.block_size;
  Blocks b;
  b.num_blocks = options.num_anchors;
  b.block_size = B;
  b.num_valid = static_cast<int>(k);
  b.anchors.assign(n, 0);
  b.valid.assign(n, 0);
  b.doc_start.assign(n, 0);
  b.doc_end.assign(n, 0);
  b.tokens.assign(n * B, options.mask_token_id);
  b.position_ids.resize(n * B);
  for (std::size_t j = 0; j < n; ++j) {
    std::int32_t base = 0;
    if (j < k) {
      const std::int32_t a = candidates[j];
      // The document holding a: the last boundary <= a.
      const auto it = std::upper_bound(bounds.begin(), bounds.end(), a);
      const std::int32_t start = *(it - 1);
      b.anchors[j] = a;
      b.valid[j] = 1;
      b.doc_start[j] = start;
      b.doc_end[j] = *it;
      b.tokens[j * B] = input_ids[a];
      base = a - start;
    }
    for (int s = 0; s < B; ++s) b.position_ids[j * B + s] = base + s;
  }
  return b;
}

}  // namespace dflash::trainer::data

// Anchor sampling and DFlash block construction (spec dflash-training.md §4).
// Owns: which positions may be anchors, the per-step draw, and the block inputs (tokens, positions, validity).
//   candidates: positions p with loss_mask[p] == 1 and loss_mask[p+1] == 1, where p+1 lies in the same document as p.
//   draw:       up to N candidates uniformly without replacement (partial Fisher-Yates, rng.h), sorted ascending;
//               the RNG is seeded per step by the caller (StepAnchorSeed), so every step draws afresh and a resumed
//               run draws the same anchors.
//   blocks:     valid block j: tokens [input_ids[a_j], MASK x (B-1)], positions pos(a_j) + 0 ... pos(a_j) + B-1.
//               Padding block (fewer than N candidates): anchor 0, valid false, tokens all MASK, positions 0 ... B-1.
// Packed rows (several documents, cu_seqlens): a candidate's p+1 must be in p's document, because slot 1 of its block
// is trained to predict token p+1, and the first token of the next document is not a continuation of p's context (it
// would teach the drafter to guess document starts). For the same reason positions are document-relative:
// pos(p) = p - doc_start, which equals p for an unpacked row (one document starting at 0), so the spec's
// "a_j ... a_j+B-1" holds there exactly. Each block also reports its document's [start, end) so masks and loss
// weights can keep it inside its document (loss_weights.h treats doc_end as the sequence end S).
// Who may call: the training step. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"

namespace dflash::trainer::data {

struct BlockOptions {
  int num_anchors = 512;             // N
  int block_size = 16;               // B
  std::int32_t mask_token_id = 248070;
};

struct Blocks {
  int num_blocks = 0;                      // N (valid + padding)
  int block_size = 0;                      // B
  int num_valid = 0;                       // valid blocks come first (sorted anchors), then padding blocks
  std::vector<std::int32_t> anchors;       // N: absolute row positions; 0 for padding blocks
  std::vector<std::uint8_t> valid;         // N
  std::vector<std::int32_t> doc_start;     // N: the anchor's document [doc_start, doc_end) in the row; 0,0 if invalid
  std::vector<std::int32_t> doc_end;       // N
  std::vector<std::int32_t> tokens;        // N*B, row-major by block
  std::vector<std::int32_t> position_ids;  // N*B
};

// All candidate positions, ascending. cu_seqlens empty means one document covering the whole row; otherwise
// [0, e_1, ..., e_d] with e_d <= loss_mask.size() (positions past e_d belong to no document and are never candidates).
Result<std::vector<std::int32_t>> AnchorCandidates(std::span<const std::uint8_t> loss_mask,
                                                   std::span<const std::int32_t> cu_seqlens = {});

// The seed of step `step` on data-parallel rank `rank`: fresh every step and rank, reproducible on resume.
std::uint64_t StepAnchorSeed(std::uint64_t base_seed, std::uint64_t step, std::uint64_t rank = 0);

// Draws the anchors with `seed` and builds the blocks. input_ids and loss_mask have the row's length.
// Errors: InvalidArgument for mismatched lengths, bad cu_seqlens, num_anchors < 1 or block_size < 2.
Result<Blocks> SampleBlocks(std::span<const std::int32_t> input_ids, std::span<const std::uint8_t> loss_mask,
                            std::span<const std::int32_t> cu_seqlens, const BlockOptions& options,
                            std::uint64_t seed);

}  // namespace dflash::trainer::data

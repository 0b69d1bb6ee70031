// Batcher: turns a JsonlDataset into fixed-length training rows, epoch after epoch, and can stop and resume exactly.
// Owns: the per-epoch order (a Fisher-Yates shuffle seeded by DeriveSeed(seed, {epoch}), see rng.h), truncation,
// padding / packing, and the position in the stream (BatcherState).
//   kPad:  one sample per row, truncated to max_length, padded to max_length.
//   kPack: consecutive samples (in epoch order, each truncated to max_length) are placed whole into one row while
//          they fit; the first that does not fit starts the next row. A row never spans two epochs.
// Every row is max_length long. Padding tokens carry pad_token_id, loss_mask 0 and position id 0; they belong to no
// document: cu_seqlens = [0, len_1, len_1+len_2, ..., num_tokens] covers the real tokens only, and position_ids
// restart at 0 in each document.
// Resume: State() after a row, persisted as JSON, then Restore() on a fresh Batcher over the same file gives the same
// following rows bit-for-bit (the order is a pure function of seed, epoch and dataset size; no hidden RNG state).
// Who may call: the training loop (one Batcher per rank). Thread-safety: one thread at a time; the dataset it reads
// is shared read-only.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "base/status.h"
#include "trainer/data/jsonl_dataset.h"

namespace dflash::trainer::data {

enum class RowMode { kPad, kPack };

struct BatcherOptions {
  std::size_t max_length = 4096;
  RowMode mode = RowMode::kPad;
  std::uint64_t seed = 0;
  bool shuffle = true;           // false: file order every epoch
  std::int32_t pad_token_id = 0;
};

struct Row {
  std::vector<std::int32_t> input_ids;     // max_length
  std::vector<std::uint8_t> loss_mask;     // max_length, 0 on padding
  std::vector<std::int32_t> position_ids;  // max_length, restart at 0 per document, 0 on padding
  std::vector<std::int32_t> cu_seqlens;    // documents + 1 entries, from 0 to num_tokens
  std::vector<std::uint64_t> sample_indices;  // dataset indices of the documents, in row order
  std::int64_t epoch = 0;
  std::size_t num_tokens = 0;              // real (non-padding) tokens
  std::size_t num_documents() const { return cu_seqlens.empty() ? 0 : cu_seqlens.size() - 1; }
};

// Where the stream stands: the next row starts at position `cursor` of epoch `epoch`'s order.
struct BatcherState {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;
  std::uint64_t cursor = 0;
  std::uint64_t rows_emitted = 0;  // over all epochs; informational (checked on restore only for consistency)
  // What the state is only valid for; Restore refuses a state taken with other values.
  std::uint64_t dataset_samples = 0;
  std::uint64_t dataset_tokens = 0;
  std::uint64_t max_length = 0;
  RowMode mode = RowMode::kPad;
  bool shuffle = true;

  nlohmann::json ToJson() const;
  static Result<BatcherState> FromJson(const nlohmann::json& j);
};

class Batcher {
 public:
  // Errors: InvalidArgument for max_length 0 or a null dataset.
  static Result<Batcher> Create(std::shared_ptr<const JsonlDataset> dataset, const BatcherOptions& options);

  // The next row; moves to the next epoch (reshuffled) after the last sample of an epoch. Errors from the dataset.
  Result<Row> Next();

  BatcherState State() const;
  // Continues from `state`. Errors: InvalidArgument when the state belongs to another dataset, seed, length or mode.
  Status Restore(const BatcherState& state);

  // Rows that epoch `epoch` yields in total (computed from the index, no reads).
  std::uint64_t RowsInEpoch(std::int64_t epoch) const;
  // The order of dataset indices for `epoch`.
  std::vector<std::uint32_t> EpochOrder(std::int64_t epoch) const;

  std::int64_t epoch() const { return epoch_; }
  const BatcherOptions& options() const { return options_; }

 private:
  Batcher(std::shared_ptr<const JsonlDataset> dataset, const BatcherOptions& options);
  void EnsureOrder();
  std::size_t Truncated(std::uint32_t index) const;

  std::shared_ptr<const JsonlDataset> dataset_;
  BatcherOptions options_;
  std::int64_t epoch_ = 0;
  std::uint64_t cursor_ = 0;
  std::uint64_t rows_emitted_ = 0;
  std::int64_t order_epoch_ = -1;  // epoch whose order is in order_
  std::vector<std::uint32_t> order_;
};

}  // namespace dflash::trainer::data

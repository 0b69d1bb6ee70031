#include "trainer/data/batcher.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "trainer/data/rng.h"

namespace dflash::trainer::data {
namespace {

const char* ModeName(RowMode m) { return m == RowMode::kPack ? "pack" : "pad"; }

}  // namespace

nlohmann::json BatcherState::ToJson() const {
  return nlohmann::json{{"format", "dflash-batcher-state/1"},
                        {"seed", seed},
                        {"epoch", epoch},
                        {"cursor", cursor},
                        {"rows_emitted", rows_emitted},
                        {"dataset_samples", dataset_samples},
                        {"dataset_tokens", dataset_tokens},
                        {"max_length", max_length},
                        {"mode", ModeName(mode)},
                        {"shuffle", shuffle}};
}

Result<BatcherState> BatcherState::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) return InvalidArgument("batcher state: expected a JSON object");
  if (j.value("format", "") != "dflash-batcher-state/1") {
    return InvalidArgument("batcher state: unknown format (want \"dflash-batcher-state/1\")");
  }
  BatcherState s;
  auto get_u64 = [&](const char* key, std::uint64_t& out) -> Status {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_unsigned()) {
      // A non-negative integer may be stored as signed after a round trip through another JSON library.
      if (it != j.end() && it->is_number_integer() && it->get<std::int64_t>() >= 0) {
        out = static_cast<std::uint64_t>(it->get<std::int64_t>());
        return Status::Ok();
      }
      return InvalidArgument(std::string("batcher state: \"") + key + "\" missing or not a non-negative integer");
    }
    out = it->get<std::uint64_t>();
    return Status::Ok();
  };
  std::uint64_t epoch = 0;
  DFLASH_RETURN_IF_ERROR(get_u64("seed", s.seed));
  DFLASH_RETURN_IF_ERROR(get_u64("epoch", epoch));
  DFLASH_RETURN_IF_ERROR(get_u64("cursor", s.cursor));
  DFLASH_RETURN_IF_ERROR(get_u64("rows_emitted", s.rows_emitted));
  DFLASH_RETURN_IF_ERROR(get_u64("dataset_samples", s.dataset_samples));
  DFLASH_RETURN_IF_ERROR(get_u64("dataset_tokens", s.dataset_tokens));
  DFLASH_RETURN_IF_ERROR(get_u64("max_length", s.max_length));
  if (epoch > static_cast<std::uint64_t>(INT64_MAX)) return InvalidArgument("batcher state: epoch out of range");
  s.epoch = static_cast<std::int64_t>(epoch);
  const std::string mode = j.value("mode", "");
  if (mode == "pad") {
    s.mode = RowMode::kPad;
  } else if (mode == "pack") {
    s.mode = RowMode::kPack;
  } else {
    return InvalidArgument("batcher state: \"mode\" must be \"pad\" or \"pack\"");
  }
  auto sh = j.find("shuffle");
  if (sh == j.end() || !sh->is_boolean()) return InvalidArgument("batcher state: \"shuffle\" missing or not a boolean");
  s.shuffle = sh->get<bool>();
  return s;
}

Result<Batcher> Batcher::Create(std::shared_ptr<const JsonlDataset> dataset, const BatcherOptions& options) {
  if (!dataset) return InvalidArgument("batcher: no dataset");
  if (options.max_length == 0) return InvalidArgument("batcher: max_length must be at least 1");
  if (options.max_length > static_cast<std::size_t>(INT32_MAX)) return InvalidArgument("batcher: max_length too large");
  if (options.pad_token_id < 0) return InvalidArgument("batcher: pad_token_id must be a token id (>= 0)");
  return Batcher(std::move(dataset), options);
}

Batcher::Batcher(std::shared_ptr<const JsonlDataset> dataset, const BatcherOptions& options)
    : dataset_(std::move(dataset)), options_(options) {}

std::vector<std::uint32_t> Batcher::EpochOrder(std::int64_t epoch) const {
  std::vector<std::uint32_t> order(dataset_->size());
  std::iota(order.begin(), order.end(), 0u);
  if (options_.shuffle) {
    std::mt19937_64 rng(DeriveSeed(options_.seed, {static_cast<std::uint64_t>(epoch)}));
    DeterministicShuffle(order, rng);
  }
  return order;
}

void Batcher::EnsureOrder() {
  if (order_epoch_ != epoch_) {
    order_ = EpochOrder(epoch_);
    order_epoch_ = epoch_;
  }
}

std::size_t Batcher::Truncated(std::uint32_t index) const {
  return std::min<std::size_t>(dataset_->tokens(index), options_.max_length);
}

std::uint64_t Batcher::RowsInEpoch(std::int64_t epoch) const {
  if (options_.mode == RowMode::kPad) return dataset_->size();
  std::uint64_t rows = 0;
  std::size_t used = options_.max_length;  // "full": the first sample opens a row
  for (std::uint32_t idx : EpochOrder(epoch)) {
    const std::size_t len = Truncated(idx);
    if (used + len > options_.max_length) {
      ++rows;
      used = 0;
    }
    used += len;
  }
  return rows;
}

Result<Row> Batcher::Next() {
  if (cursor_ >= dataset_->size()) {
    ++epoch_;
    cursor_ = 0;
  }
  EnsureOrder();
  const std::size_t L = options_.max_length;
  Row row;
  row.epoch = epoch_;
  row.input_ids.assign(L, options_.pad_token_id);
  row.loss_mask.assign(L, 0);
  row.position_ids.assign(L, 0);
  row.cu_seqlens.push_back(0);
  std::size_t used = 0;
  std::uint64_t cursor = cursor_;
  while (cursor < order_.size()) {
    const std::uint32_t idx = order_[cursor];
    const std::size_t len = Truncated(idx);
    if (used > 0 && (options_.mode == RowMode::kPad || used + len > L)) break;
    auto sample = dataset_->Get(idx);
    if (!sample.ok()) return sample.status();
    std::copy_n(sample->input_ids.begin(), len, row.input_ids.begin() + used);
    std::copy_n(sample->loss_mask.begin(), len, row.loss_mask.begin() + used);
    for (std::size_t i = 0; i < len; ++i) row.position_ids[used + i] = static_cast<std::int32_t>(i);
    used += len;
    row.cu_seqlens.push_back(static_cast<std::int32_t>(used));
    row.sample_indices.push_back(idx);
    ++cursor;
  }
  row.num_tokens = used;
  // Commit the position only once the whole row was read: a failed read leaves the state unchanged.
  cursor_ = cursor;
  ++rows_emitted_;
  return row;
}

BatcherState Batcher::State() const {
  BatcherState s;
  s.seed = options_.seed;
  s.epoch = epoch_;
  s.cursor = cursor_;
  s.rows_emitted = rows_emitted_;
  s.dataset_samples = dataset_->size();
  s.dataset_tokens = dataset_->total_tokens();
  s.max_length = options_.max_length;
  s.mode = options_.mode;
  s.shuffle = options_.shuffle;
  return s;
}

Status Batcher::Restore(const BatcherState& s) {
  auto mismatch = [](const char* what, std::uint64_t have, std::uint64_t want) {
    return InvalidArgument(std::string("batcher state was saved with ") + what + " " + std::to_string(want) +
                           ", this run has " + std::to_string(have));
  };
  if (s.dataset_samples != dataset_->size()) return mismatch("dataset samples", dataset_->size(), s.dataset_samples);
  if (s.dataset_tokens != dataset_->total_tokens()) {
    return mismatch("dataset tokens", dataset_->total_tokens(), s.dataset_tokens);
  }
  if (s.seed != options_.seed) return mismatch("seed", options_.seed, s.seed);
  if (s.max_length != options_.max_length) return mismatch("max_length", options_.max_length, s.max_length);
  if (s.mode != options_.mode) {
    return InvalidArgument(std::string("batcher state was saved in mode ") + ModeName(s.mode) + ", this run uses " +
                           ModeName(options_.mode));
  }
  if (s.shuffle != options_.shuffle) return InvalidArgument("batcher state was saved with another shuffle setting");
  if (s.epoch < 0 || s.cursor > dataset_->size()) return InvalidArgument("batcher state: position out of range");
  epoch_ = s.epoch;
  cursor_ = s.cursor;
  rows_emitted_ = s.rows_emitted;
  return Status::Ok();
}

}  // namespace dflash::trainer::data

// Synthetic training data for the tiny preset: samples drawn from a (random) target the way the real recipe
// regenerates responses with the target (spec dflash-training.md §6). Sample i is a random prompt of P tokens
// (loss_mask 0) followed by the target's greedy continuation of G tokens (loss_mask 1); held-out eval prompts are
// random prompts of P tokens from another stream. Everything is deterministic in the seed: prompt i depends only on
// (seed, i) through data/rng.h (portable across standard libraries), and the continuations are decoded with
// TargetDecoder, batch_size sequences in lockstep (the prompts all have P tokens), which is what makes a few hundred
// samples take seconds on a CPU. Written in the JSONL format of data/jsonl_dataset.h (the README's format).
// Who may call: the tiny preset's setup, tools and tests. Thread-safety: pure functions over a read-only model.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "base/status.h"
#include "trainer/data/jsonl_dataset.h"
#include "trainer/models/target_model.h"

namespace dflash::trainer {

struct SyntheticDataOptions {
  std::int64_t num_samples = 256;
  std::int64_t prompt_tokens = 32;         // P
  std::int64_t continuation_tokens = 224;  // G
  std::int64_t num_eval_prompts = 16;
  std::uint64_t seed = 0;
  std::int64_t batch_size = 64;            // sequences decoded together
  std::vector<std::int64_t> excluded_token_ids;  // never drawn into prompts (e.g. the drafter's mask token)
};

struct SyntheticData {
  std::vector<data::Sample> train;         // P + G tokens each
  std::vector<data::Sample> eval_prompts;  // P tokens each, loss_mask all 0
};

// The prompt of index `index` of stream `stream` (0: training samples, 1: eval prompts): `length` tokens uniform over
// [0, vocab) minus `excluded`.
std::vector<std::int32_t> SyntheticPrompt(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                                          std::int64_t length, std::int64_t vocab,
                                          const std::vector<std::int64_t>& excluded);

// Errors: InvalidArgument for non-positive sizes, a target without all layers (options.full), or a vocabulary
// that excludes every token; Internal when the target fails.
Result<SyntheticData> GenerateSyntheticData(const TargetModel& target, const SyntheticDataOptions& options);

// Writes the samples as JSON Lines ({"input_ids": [...], "loss_mask": [...]}), atomically (base/atomic_file.h).
Status WriteJsonl(const std::filesystem::path& file, const std::vector<data::Sample>& samples);

}  // namespace dflash::trainer

// The tiny preset of dflash-train (`--preset tiny`): a tiny random target of the Qwen3.5 architecture (both layer
// kinds; the models and shapes of setup::Preset("tiny"), so `dflash-tune warmup --preset tiny` covers its kernels), a
// synthetic dataset sampled from it (synthetic_data.h: random prompts + the target's greedy continuations), a drafter
// config, and the training options that make loss fall and tau rise within a few minutes on a CPU. It exercises every
// path the full-size setup runs: gated-delta-net key heads shared by several value heads, layers that each matter
// for the output, a drafter sliding window shorter than the sequences, packed rows (two documents a row).
//   <dir>/target/{config.json, model.safetensors}   <dir>/drafter_config.json
//   <dir>/data/train.jsonl                          <dir>/data/eval_prompts.jsonl
//   <dir>/preset.json                               what was generated (a complete preset is reused, not rebuilt)
// Who may call: tools/dflash_train and tests. Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>

#include "base/status.h"
#include "trainer/models/target_model.h"
#include "trainer/train/train_options.h"

namespace dflash::trainer {

struct TinyPresetSize {
  std::int64_t samples = 192;           // training samples
  std::int64_t prompt_tokens = 32;
  std::int64_t continuation_tokens = 224;
  std::int64_t eval_prompts = 8;
  std::uint64_t seed = 0;
  double target_init_std = 0.02;        // the target's Linear weights (HF init)
  // The target's token embedding, 5x the layers' scale: small enough that every layer changes the greedy
  // continuation (at 1.0 the residual stream stayed the current token's embedding and a wrong layer could pass a
  // greedy comparison), large enough that the random model's greedy continuations still fall into near-cycles
  // (at 0.02-0.05 they look random and a drafter learns nothing in the preset's steps): structure to learn.
  double target_embed_std = 0.1;
};

// The preset's target: setup::Preset("tiny")'s config (2 key heads of 2 value heads each in its gated delta nets)
// with random weights of `size`'s seed and scales, fp32 on the CPU, loaded in full with the drafter's taps.
std::unique_ptr<TargetModel> TinyPresetTarget(const TinyPresetSize& size);

// Generates (or reuses) the preset's files under `dir`. IoError / Internal from the writers and the target.
Status PrepareTinyPreset(const std::filesystem::path& dir, const TinyPresetSize& size, std::ostream& log);

// Training options of the preset (paths under `dir`, shapes, schedule); the caller may override fields afterwards.
TrainOptions TinyPresetOptions(const std::filesystem::path& dir, const std::filesystem::path& output_dir);

}  // namespace dflash::trainer

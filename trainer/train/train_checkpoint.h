// Training checkpoints: everything a run needs to continue bit-for-bit as if never stopped, and the drafter in the
// public layout next to it.
//   <output>/checkpoints/step-<8 digits>/
//       drafter/{model.safetensors (bf16), config.json}   the public DFlash layout (Drafter::Save)
//       master.safetensors                               fp32 master weights (public names)
//       optimizer.safetensors                            AdamW moments ("<name>.exp_avg", "<name>.exp_avg_sq")
//       state.json                                       step, optimizer step, batcher position, options, metrics
//   <output>/checkpoints/latest                          the name of the newest complete checkpoint folder
// A checkpoint is written into step-N.partial/ (every file published with base/atomic_file.h), renamed to step-N
// (the checkpoints folder fsync'ed with FsyncDirectory), and only then named in `latest` (AtomicWriteText). A crash
// at any point leaves the previous checkpoint and `latest` intact; leftover .partial folders are removed by the next
// save. Only the newest `keep` checkpoints are kept.
// The anchors need no RNG state: they are seeded per step (data/anchors.h StepAnchorSeed).
// Who may call: the Trainer (one writer per output folder: rank 0). Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/status.h"
#include "trainer/data/batcher.h"
#include "trainer/models/drafter.h"
#include "trainer/train/adamw.h"

namespace dflash::trainer {

struct TrainState {
  std::int64_t step = 0;              // optimizer steps completed
  data::BatcherState batcher;         // where the data stream continues
  nlohmann::json options;             // TrainOptions::ToJson() of the run
  nlohmann::json progress;            // counters the metrics continue from (tokens seen, elapsed time, ...)
};

// Writes the checkpoint of `state.step`; returns its folder. IoError / InvalidArgument from the writers.
Result<std::filesystem::path> SaveTrainCheckpoint(const std::filesystem::path& output_dir, const Drafter& drafter,
                                                  const AdamW& optimizer, const TrainState& state, int keep);

// The folder named by <output>/checkpoints/latest. NotFound when there is none; Corruption when `latest` names a
// folder that is missing.
Result<std::filesystem::path> LatestCheckpoint(const std::filesystem::path& output_dir);

// Loads master weights into `drafter` and moments into `optimizer` (both built with the same config), and returns
// the state. Errors name the file and the tensor.
Result<TrainState> LoadTrainCheckpoint(const std::filesystem::path& checkpoint_dir, Drafter& drafter,
                                       AdamW& optimizer);

}  // namespace dflash::trainer

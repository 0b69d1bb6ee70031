// TrainOptions: everything a dflash-train run is configured with (spec dflash-training.md §6 defaults), as the
// command line sets it and as checkpoints record it (a resumed run must agree with the saved options on everything
// that changes the math: model, data, lengths, anchors, batch, schedule, seed).
// Who may call: tools/dflash_train (CLI), the Trainer, checkpoints. Thread-safety: plain value.
#pragma once

#include <cstdint>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "trainer/data/batcher.h"

namespace dflash::trainer {

enum class KernelBackend {
  kAuto,       // cached kernels on a GPU, LibTorch's own ops on the CPU
  kReference,  // LibTorch's own ops (trainer/ops/reference_ops.h)
  kCached,     // the tuned winners from the kernel cache (GPU only)
};

// Whether the target's forward of the next row runs ahead, beside the drafter's training (train/feature_pipeline.h).
// It changes when work runs, never what is computed, so checkpoints do not record it.
enum class PipelineMode {
  kAuto,  // on when the target has a GPU of its own (--target-device-offset), else off
  kOn,    // also with target and drafter on one device: two streams of one GPU, or two threads on the CPU
  kOff,   // in series: the target's forward, then the drafter's step, row after row
};

struct TrainOptions {
  // Models and data.
  std::filesystem::path target_dir;       // HF folder: config.json + safetensors, or
  std::filesystem::path random_target;    // an HF config.json: a randomly initialised target of that shape, drawn on
                                          // the run's device (benchmarks and smoke tests of full-size shapes)
  std::filesystem::path drafter_config;   // drafter config.json (fresh drafter), or
  std::filesystem::path drafter_init;     // a saved drafter folder to start from
  std::filesystem::path data;             // tokenized JSONL
  std::filesystem::path output_dir;       // checkpoints/, metrics.jsonl
  // Shapes.
  std::int64_t max_length = 4096;
  data::RowMode row_mode = data::RowMode::kPad;
  std::int64_t num_anchors = 512;
  std::int64_t batch_size = 1;            // rows per micro-step
  std::int64_t grad_accum = 1;            // micro-steps per optimizer step
  // Schedule (spec §6).
  std::int64_t epochs = 6;
  std::int64_t max_steps = 0;             // > 0: stop after this many optimizer steps (and size the schedule to it)
  double lr = 6e-4;
  double warmup_fraction = 0.04;
  double weight_decay = 0.0;
  double max_grad_norm = 1.0;
  std::uint64_t seed = 0;
  std::int64_t loss_chunk_rows = 2048;
  // Device and kernels.
  std::string device = "auto";            // auto | cpu | cuda | cuda:N
  std::string compute_dtype = "auto";     // auto (bf16 on a GPU, fp32 on the CPU) | bf16 | fp32
  KernelBackend kernels = KernelBackend::kAuto;
  std::filesystem::path cache_dir;        // kernel cache (default: $DFLASH_CACHE_DIR or ~/.cache/dflash-tune)
  bool tune_missing = false;
  std::int64_t target_device_offset = 0;  // > 0: the target on cuda:(drafter's GPU + this) (dist/placement.h)
  PipelineMode pipeline = PipelineMode::kAuto;
  // Checkpoints and logging.
  std::int64_t save_every = 0;            // optimizer steps; 0: only at the end
  std::int64_t keep_checkpoints = 3;
  std::int64_t log_every = 1;
  std::int64_t profile_steps = 0;         // > 0: a Kineto trace of this many steps (after the first) in --output
  bool resume = false;
  // Data parallelism (trainer/dist): the ranks come from the torchrun environment (RANK, WORLD_SIZE, ...).
  std::int64_t dist_timeout_s = 600;      // bound of every collective and of the rendezvous
  std::int64_t bucket_mb = 25;            // gradient all-reduce bucket size
  std::int64_t world_size = 1;            // set by the Trainer from the environment; checkpoints record it

  nlohmann::json ToJson() const;
  // The fields a resumed run must share with the checkpoint; InvalidArgument naming the first that differs.
  Status CheckResumable(const nlohmann::json& saved) const;
};

}  // namespace dflash::trainer

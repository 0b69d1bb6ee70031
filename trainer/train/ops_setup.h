// Chooses and prepares the Ops backend of a run (ops.h): resolves the device and compute dtype from the options,
// and for the cached-kernel backend resolves every kernel the configured shapes need before the first step, printing
// the provenance table (operation -> cache entry, variant, tuned time). A missing key stops the run with the list of
// missing keys and the exact warmup command, unless --tune-missing asked to tune them first.
// Who may call: the Trainer. Thread-safety: one thread.
#pragma once

#include <memory>
#include <ostream>
#include <vector>

#include "base/status.h"
#include "cache/kernel_cache.h"
#include "setup/model_config.h"
#include "setup/training_setup.h"
#include "trainer/ops/cached_kernel_ops.h"
#include "trainer/ops/ops.h"
#include "trainer/train/train_options.h"

namespace dflash::trainer {

struct RunDevice {
  torch::Device device = torch::kCPU;
  torch::Dtype compute_dtype = torch::kFloat;
};

// "auto" picks the first GPU when LibTorch has a CUDA backend and sees one, else the CPU. InvalidArgument for an
// unknown device or dtype name, Unsupported for cuda without a GPU / CUDA backend.
Result<RunDevice> ResolveDevice(const TrainOptions& options);

// The backend and what it needs to stay alive (the kernel cache the cached kernels were loaded from).
struct OpsBackend {
  std::unique_ptr<cache::KernelCache> cache;  // null for the reference backend
  std::unique_ptr<Ops> ops;
  std::vector<KernelUse> uses;  // the cached kernels it resolved (the provenance table); empty for the reference
};

// The training setup of a run with these options (rows of up to max_length tokens, num_anchors blocks, the row layout
// of --rows): the one description from which warmup and this run derive their kernel keys (setup/training_setup.h).
setup::TrainingSetup RunSetup(const TrainOptions& options, const setup::TargetConfig& target,
                              const setup::DrafterConfig& drafter);

// The backend for `device`, resolving (or with --tune-missing, tuning) the cached kernels of `side`'s shapes.
Result<OpsBackend> MakeOps(const TrainOptions& options, const RunDevice& device, const setup::TargetConfig& target,
                           const setup::DrafterConfig& drafter, setup::OpSide side, std::ostream& log);

}  // namespace dflash::trainer

// Named and file-described training setups (training_setup.h), and the explicit problems of `dflash-tune warmup`.
// Presets: "dflash-27b" (default: the Qwen3.6-27B target + its 5-layer DFlash drafter, 4096 tokens, 512 anchors)
// and "tiny" (the tiny random model of the tests and of `dflash-train --preset tiny`, 512 tokens, 16 anchors). Their
// models are the Hugging Face config.json files in setup/presets/ (<preset>.target.json, <preset>.drafter.json),
// embedded in the binary and parsed like any other config (model_config.h); the benchmarks read the same files.
// Config file: {"target_config": "path/config.json", "drafter_config": "path/config.json" (optional),
//               "max_length": 4096, "batch_size": 1 (accepted; dflash-train runs the kernels one row at a time,
//               so it changes no key), "num_anchors": 512, "loss_chunk_rows": 2048 (dflash-train's
//               --loss-chunk-rows), "rows": "both" (default) | "pad" | "pack"}
// (paths relative to the file). "rows" picks the row layouts of `dflash-train --rows` to warm; presets warm both.
// Who may call: dflash-tune, dflash-train's tiny preset, tests. Thread-safety: pure functions.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/status.h"
#include "setup/kernel_requests.h"
#include "setup/training_setup.h"

namespace dflash::setup {

std::vector<std::string> PresetNames();
// InvalidArgument for an unknown name.
Result<TrainingSetup> Preset(const std::string& name);
// NotFound for a missing file; InvalidArgument naming the file and field for a bad one.
Result<TrainingSetup> SetupFromConfigFile(const std::filesystem::path& file);

// "family=JSON" as given to `dflash-tune warmup --problem` (operation "--problem <family>").
Result<KernelRequest> ParseProblemArg(const std::string& arg);

}  // namespace dflash::setup

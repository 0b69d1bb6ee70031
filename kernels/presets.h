// Warmup problem sets: which (family, problem) pairs a training setup needs, from an embedded preset or derived
// from a JSON file that names the target's and drafter's Hugging Face config.json plus the training shapes.
// Presets: "dflash-27b" (default: Qwen3.6-27B target + its 5-layer DFlash drafter, 4096 tokens, 512 anchors) and
// "tiny" (the tiny random model of the tests and of `dflash-train --preset tiny`).
// Config file: {"target_config": "path/config.json", "drafter_config": "path/config.json" (optional),
//               "max_length": 4096, "batch_size": 1 (accepted; dflash-train runs the kernels one row at a time,
//               so it changes no key), "num_anchors": 512,
//               "rows": "both" (default) | "pad" | "pack"} (paths relative to the file).
// "rows" says which row layouts of `dflash-train --rows` to warm: padded rows (one sequence per row) and/or packed
// rows (several documents per row: document-causal target attention, conv1d and gated delta rule over 8 sequences,
// the drafter attention's doc_bound variant). The presets warm both.
// Families not compiled into this binary are skipped with a note. Thread-safety: pure functions.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::kernels {

struct WorkItem {
  const tuner::KernelFamily* family = nullptr;
  tuner::Problem problem;
  std::string what;  // "target gated-delta-net conv1d", ...
};

// Shapes of a training setup, the input of the derivation.
struct TrainingShapes {
  nlohmann::json target;   // the target's (text) config.json
  nlohmann::json drafter;  // may be null
  std::int64_t max_length = 4096;
  std::int64_t batch_size = 1;
  std::int64_t num_anchors = 512;
  bool padded_rows = true;  // warm the keys of padded rows
  bool packed_rows = true;  // warm the keys of packed rows
};

std::vector<std::string> PresetNames();
Result<TrainingShapes> PresetShapes(const std::string& name);
Result<TrainingShapes> ShapesFromConfigFile(const std::filesystem::path& file);
// The work items of a setup; `notes` receives what was skipped and why.
Result<std::vector<WorkItem>> ProblemsFor(const TrainingShapes& shapes, std::vector<std::string>* notes);
// "family=JSON" as given to `dflash-tune warmup --problem`.
Result<WorkItem> ParseProblemArg(const std::string& arg);

}  // namespace dflash::kernels

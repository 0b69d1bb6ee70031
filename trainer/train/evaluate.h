// `dflash-train eval`: real speculative decoding of a saved drafter against its target on held-out prompts
// (spec_decode.h), reported as tau and the measured speedup over plain greedy decoding.
// Who may call: tools/dflash_train. Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <vector>

#include "base/status.h"
#include "trainer/models/drafter.h"
#include "trainer/models/target_model.h"
#include "trainer/train/spec_decode.h"
#include "trainer/train/train_options.h"

namespace dflash::trainer {

struct EvalOptions {
  std::filesystem::path target_dir;
  std::filesystem::path drafter_dir;   // a saved drafter (e.g. <run>/checkpoints/step-N/drafter)
  std::filesystem::path prompts;       // JSONL; each line's input_ids is one prompt
  std::int64_t max_prompts = 0;        // 0: all
  std::int64_t max_new_tokens = 128;
  std::string device = "auto";
  std::string compute_dtype = "auto";
  std::filesystem::path report;        // optional: the report as JSON
};

// The prompts of a JSONL file (at most max_prompts; 0 = all). Errors from the dataset; InvalidArgument when empty.
Result<std::vector<std::vector<std::int64_t>>> ReadPrompts(const std::filesystem::path& file, std::int64_t max_prompts);

// The summary line on `log` (both tau figures, speedup).
void PrintSpecDecodeReport(std::ostream& log, const std::string& label, const SpecDecodeReport& report);

Result<SpecDecodeReport> RunEval(const EvalOptions& options, std::ostream& log);

}  // namespace dflash::trainer

// Training metrics: what one optimizer step measured (spec dflash-training.md §7 proxy included), the JSONL metrics
// log (one object per step, flushed at once so a crash loses nothing written) and the console progress line.
// Who may call: the Trainer (rank 0 writes). Thread-safety: one thread.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <ostream>
#include <vector>

#include "base/status.h"
#include "trainer/train/step_timer.h"

namespace dflash::trainer {

struct StepMetrics {
  std::int64_t step = 0;         // optimizer steps completed, 1-based in the log
  std::int64_t total_steps = 0;
  std::int64_t epoch = 0;
  double loss = 0.0;             // sum(w CE) / sum(w) over the global batch
  double accuracy = 0.0;         // top-1 over weighted slots
  double accept_length = 0.0;    // mean per-block accepted length proxy (1 + correct prefix)
  std::vector<double> position_acceptance;  // [k-1]: fraction of blocks whose first k slots are all correct
  double lr = 0.0;
  double grad_norm = 0.0;
  double step_time_s = 0.0;
  std::int64_t tokens = 0;       // target context tokens in the step
  double tokens_per_s = 0.0;
  double eta_s = 0.0;
  std::int64_t peak_memory_bytes = 0;  // GPU allocator peak (GPU runs) or the process's peak RSS (CPU)
  StepPhaseTimes phases;               // where the step's time went (step_timer.h)
  // The target's own forward time for the step's rows. In series it is phases' target_forward; with the pipeline
  // (feature_pipeline.h) it runs beside the drafter's work, and target_forward is only what the drafter waited.
  double target_ms = 0.0;

  nlohmann::json ToJson() const;
};

// Per-position acceptance from accepted lengths (1 + correct prefix) of valid blocks: out[k-1] = fraction of blocks
// with accepted length > k, k = 1 ... block_size - 1.
std::vector<double> PositionAcceptance(const std::vector<int>& accept_lengths, int block_size);

class MetricsLog {
 public:
  // Appends to `path` (created when missing). IoError when it cannot be opened.
  static Result<MetricsLog> Open(const std::filesystem::path& path);
  Status Write(const nlohmann::json& record);

 private:
  std::ofstream out_;
  std::filesystem::path path_;
};

// "step 12/300 [####......] loss 4.123 acc 21.0% tau 1.42 | 1.2k tok/s | ETA 3m12s | ms tgt 240 dft 60 loss 40
// bwd 190 sync 0 opt 30 host 5": one line, rewritten in place on a terminal (carriage return), a new line otherwise.
void PrintProgress(std::ostream& out, const StepMetrics& m, bool terminal);

// Seconds since this process started (the kernel's start time of /proc/self: dynamic loading included), or -1 when
// it cannot be read. The start-up cost a user waits for before the first step.
double SecondsSinceProcessStart();

// Peak memory of the run so far (see StepMetrics::peak_memory_bytes) on `device_index` (< 0: CPU).
std::int64_t PeakMemoryBytes(int device_index);

}  // namespace dflash::trainer

// TrainingSetup: what a DFlash training run is, as far as its kernels are concerned (the target's and the drafter's
// configs, the row length, the anchors per row, the row layouts), and the one derivation of the kernels it runs:
// `dflash-tune warmup --preset/--config` tunes exactly KernelRequestsFor(setup), and dflash-train resolves exactly
// the requests of its own setup (one row layout, one side of a target / drafter GPU pair) before the first step.
// Per row layout (padded: one sequence per row; packed: several documents per row, kernel_requests.h):
//   target (Qwen3.5 hybrid): conv1d and gated delta rule over max_length tokens; every target: causal attention
//     (document-causal for packed rows);
//   drafter: its attention over max_length context rows and num_anchors blocks, full and/or sliding as its layers
//     are, forward and backward (the doc_bound variant for packed rows).
// And once (row-wise, the same for both layouts): the target's norms (the hidden norm without and with the fused
// residual add, the q / k norms of its attention, the gated norm of its delta nets) and the loss's row-wise pass
// over the lm_head chunks (a full chunk and the last, shorter one).
// Who may call: dflash-tune, the trainer, tests. Thread-safety: pure functions over values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "setup/kernel_requests.h"
#include "setup/model_config.h"

namespace dflash::setup {

struct TrainingSetup {
  TargetConfig target;
  std::optional<DrafterConfig> drafter;  // none: the target's kernels only
  std::int64_t max_length = 4096;        // tokens per row (every kernel runs on one row: batch 1)
  std::int64_t num_anchors = 512;        // blocks per row
  std::int64_t loss_chunk_rows = 2048;   // block rows per lm_head chunk of the loss (dflash-train --loss-chunk-rows)
  bool padded_rows = true;               // the keys of padded rows (dflash-train --rows pad)
  bool packed_rows = true;               // the keys of packed rows (dflash-train --rows pack)
};

// Which model's operations a list serves: both (one GPU), or one side of a target / drafter pair of GPUs
// (dflash-train --target-device-offset): the target runs conv1d, gated delta rule and causal attention; the
// drafter its attention.
enum class OpSide { kBoth, kTarget, kDrafter };

// The operations' shapes, padded rows first, then packed rows; per layout the target's (conv1d, gated delta rule,
// causal attention), then the drafter's (full, then sliding attention).
std::vector<OpShape> OpShapesFor(const TrainingSetup& setup, OpSide side = OpSide::kBoth);

struct SetupRequests {
  std::vector<KernelRequest> requests;  // in OpShapesFor order, each (family, problem) once
  std::vector<std::string> notes;       // operations no kernel family serves at these shapes, and why
};
// The kernel requests of the setup's shapes. Operations outside every family's support (a gated delta rule whose head
// dims are not the family's) are left out with a note; Unsupported for a target no cached kernel can run at all
// (a conv1d kernel width other than 4).
Result<SetupRequests> KernelRequestsFor(const TrainingSetup& setup, OpSide side = OpSide::kBoth);

}  // namespace dflash::setup

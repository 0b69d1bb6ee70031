// The data-parallel shard rule: which rows of the data stream a rank trains on.
// Every rank runs the same Batcher (same seed, same order) over the whole stream; one optimizer step consumes
// world_size x batch_size x grad_accum consecutive rows of it, and rank r trains on the rows at positions
// r, r + W, r + 2W, ... of the step. So W ranks x batch b see exactly the rows 1 rank x batch W*b sees, every rank's
// Batcher state is the same after each step (a checkpoint holds one state for all ranks; resume is exact), and the
// anchors of a row are seeded by its index in the global stream (the same in any world size).
// Who may call: the Trainer and tests. Thread-safety: plain value.
#pragma once

#include <cstdint>

namespace dflash::trainer::dist {

struct StepShard {
  int rank = 0;
  int world_size = 1;
  std::int64_t rows_per_rank = 1;  // batch_size x grad_accum

  // Rows of the global stream one optimizer step consumes.
  std::int64_t global_rows() const { return rows_per_rank * world_size; }
  // Whether this rank trains on row `index_in_step` (0 <= index_in_step < global_rows()) of the step.
  bool Owns(std::int64_t index_in_step) const { return index_in_step % world_size == rank; }
};

}  // namespace dflash::trainer::dist

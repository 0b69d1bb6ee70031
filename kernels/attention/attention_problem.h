// The attention families' problem signature: parsing and validation of the JSON problem, its tuning bucket, and
// MakeProblem for callers. Shared by "attention_fwd" and "attention_bwd".
// Problem JSON: {"mask": "none" | "causal" | "doc_causal" | "dflash_full" | "dflash_sliding",
//   "batch", "heads_q", "heads_kv", "head_dim" (64 | 128 | 256), "seq_q", "seq_kv",
//   "num_docs" (doc_causal), "block_size" (DFlash, default 16), "ctx_len" (DFlash), "window" (dflash_sliding,
//   default 2048), "doc_bound" (DFlash, default false: packed rows, each block's context also bounded below by its
//   document's start, given per call as AttentionArgs::doc_start), "dtype": "bf16"}.
// DFlash problems have seq_q = num_blocks * block_size and seq_kv = ctx_len + seq_q; doc_causal has seq_q == seq_kv.
// Bucket: seq lengths (for DFlash: the block count and ctx_len) and num_docs rounded up to a power of two (at
// least 128 rows / 8 blocks / 1 doc); batch, heads, head_dim, mask, block_size, window, doc_bound exact. Every kernel is correct
// for any size, so a variant valid for the bucket is valid for every problem in it (the only size limit, the
// tile-class table, is checked against the bucket's larger sizes).
// Who may call it: the families, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::attention {

enum class Direction { kForward, kBackward };

struct ProblemSpec {
  int mask = 0;  // dflash_attn::MaskKind
  std::int64_t batch = 1, heads_q = 1, heads_kv = 1, head_dim = 128;
  std::int64_t seq_q = 0, seq_kv = 0;
  std::int64_t num_docs = 0;      // doc_causal
  std::int64_t block_size = 16;   // DFlash
  std::int64_t ctx_len = 0;       // DFlash
  std::int64_t window = 2048;     // dflash_sliding
  bool doc_bound = false;         // DFlash: per-block document starts (packed rows), a kernel variant of its own
  std::int64_t num_blocks() const { return block_size > 0 ? seq_q / block_size : 0; }
  bool is_dflash() const;
  int compiled_mask() const;  // the kernels' MASK template argument: mask, plus kMaskDocBound with doc_bound
};

constexpr std::int64_t kMaxSeq = std::int64_t{1} << 20;

std::string_view MaskName(int mask);          // "dflash_full"
Result<int> ParseMaskName(std::string_view name);

// Validates a problem (unknown fields, wrong types and inconsistent sizes are InvalidArgument naming the field).
// `direction` adds its own limits (the backward supports head_dim 64 and 128).
Result<ProblemSpec> ParseProblem(const tuner::Problem& problem, Direction direction);
Status Validate(const ProblemSpec& spec, Direction direction);
tuner::Problem ToJson(const ProblemSpec& spec);
ProblemSpec BucketOf(const ProblemSpec& spec);
std::int64_t RoundUpPow2(std::int64_t v, std::int64_t floor);

}  // namespace dflash::attention

// The gdn family's problem signature: parsing and validation of the JSON problem and its tuning bucket.
// Problem JSON: {"heads": H >= 1, "value_heads": HV (a multiple of H), "head_dim": 128, "tokens": T >= 1,
//                "num_seqs": 1..T (default 1), "initial_state": bool (default false),
//                "final_state": bool (default true), "dtype": "bf16"}
// Bucket: tokens rounded up to a power of two (at least 1024), num_seqs up to a power of two; heads exact.
// Who may call it: the family, the API, workloads, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::gdn {

constexpr int kHeadDim = 128;                         // K = V; the kernels are written for 128
constexpr std::int64_t kMaxTokens = std::int64_t{1} << 30;
constexpr std::int64_t kMinTokenBucket = 1024;

struct ProblemSpec {
  int heads = 0;
  int value_heads = 0;
  std::int64_t tokens = 0;
  std::int64_t num_seqs = 1;
  bool initial_state = false;
  bool final_state = true;
};

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem);
tuner::Problem ToJson(const ProblemSpec& spec);
ProblemSpec BucketOf(const ProblemSpec& spec);
tuner::Problem MakeProblem(int heads, int value_heads, std::int64_t tokens, std::int64_t num_seqs = 1,
                           bool initial_state = false, bool final_state = true);

}  // namespace dflash::gdn

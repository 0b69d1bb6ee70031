// The xent family's problem signature: parsing and validation of the JSON problem, the mapping of a problem to its
// tuning bucket, and MakeProblem for callers.
// Problem JSON: {"rows": 1..2^24, "vocab": 1..2^20, "grad": bool, "dtype": "fp32"}; "grad" (whether the launch
// writes the logits gradient) defaults to true, "dtype" (of the logits) to "fp32". Unknown fields are rejected.
// Bucket: rows rounded up to a power of two (at least 256), vocab and grad exact (every variant handles any row
// count and any vocab, but the best geometry depends on the vocab).
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::xent {

constexpr std::int64_t kMaxRows = std::int64_t{1} << 24;
constexpr std::int64_t kMaxVocab = std::int64_t{1} << 20;
constexpr std::int64_t kMinRowBucket = 256;

struct ProblemSpec {
  std::int64_t rows = 0;
  std::int64_t vocab = 0;
  bool grad = true;
};

// Validates a problem (unknown fields and out-of-range values are InvalidArgument, naming the field).
Result<ProblemSpec> ParseProblem(const tuner::Problem& problem);
tuner::Problem ToJson(const ProblemSpec& spec);
// The bucket a problem maps to (see the header comment).
ProblemSpec BucketOf(const ProblemSpec& spec);

// A problem for callers: {"rows", "vocab", "grad", "dtype": "fp32"}.
tuner::Problem MakeProblem(std::int64_t rows, std::int64_t vocab, bool grad);

}  // namespace dflash::xent

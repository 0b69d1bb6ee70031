// The rmsnorm family's problem signature: parsing and validation of the JSON problem, the mapping of a problem to
// its tuning bucket, and MakeProblem for callers.
// Problem JSON: {"rows": R >= 1, "cols": N (a multiple of 8 in [8, 16384]), "kind": "standard" | "zero_centred",
// "residual": bool, "gate": bool, "weight": "bf16" | "fp32", "dtype": "bf16"}; "rows", "cols" and "kind" are
// required, "residual" and "gate" default to false, "weight" and "dtype" to "bf16"; any other field is an error.
// Bucket: rows rounded up to a power of two (at least 1024); every other field exact (cols, the kind, the options
// and the weight's storage are template parameters of the kernel).
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

enum class Kind {
  kStandard,     // n * w            (Qwen3, the DFlash drafter, Qwen3.5's gated norm)
  kZeroCentred,  // n * (1 + w)      (Qwen3.5's input / post-attention / q / k norms)
};
enum class WeightDtype { kBf16, kFp32 };

std::string_view KindName(Kind kind);                // "standard" / "zero_centred"
Result<Kind> ParseKind(std::string_view name);
std::string_view WeightDtypeName(WeightDtype dtype);  // "bf16" / "fp32"
Result<WeightDtype> ParseWeightDtype(std::string_view name);

constexpr std::int64_t kMaxRows = std::int64_t{1} << 30;
constexpr std::int64_t kMaxCols = 16384;
constexpr std::int64_t kColsMultiple = 8;  // a row is whole 16-byte vectors
constexpr std::int64_t kMinRowBucket = 1024;

struct ProblemSpec {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Kind kind = Kind::kStandard;
  bool residual = false;
  bool gate = false;
  WeightDtype weight = WeightDtype::kBf16;

  bool operator==(const ProblemSpec&) const = default;
};

// Validates a problem (unknown fields and out-of-range values are InvalidArgument, naming the field).
Result<ProblemSpec> ParseProblem(const tuner::Problem& problem);
tuner::Problem ToJson(const ProblemSpec& spec);  // every field, "dtype": "bf16" included
// The bucket a problem maps to (see the header comment).
ProblemSpec BucketOf(const ProblemSpec& spec);

// A problem for callers, every field written.
tuner::Problem MakeProblem(std::int64_t rows, std::int64_t cols, Kind kind, bool residual = false, bool gate = false,
                           WeightDtype weight = WeightDtype::kBf16);

}  // namespace dflash::rmsnorm

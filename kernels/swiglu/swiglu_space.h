// The swiglu family's problem and tuning space.
// Problem JSON: {"rows": R >= 1, "cols": C (a multiple of 8 in [8, 2^20]), "dtype": "bf16"}; "rows" and "cols"
// required; any other field is an error. Bucket: rows rounded up to a power of two (at least 1024), cols exact.
// Space:
//   threads   threads per block
//   vec       bf16 elements per vector access (4 = 8 bytes, 8 = 16 bytes)
//   items     work items per thread (1 or 4; the grid is ceil(items of the launch / (threads * items)) blocks, at
//             most kMaxGridBlocks, walked grid-stride: any value is correct for any launch)
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::swiglu {

constexpr std::int64_t kMaxRows = std::int64_t{1} << 30;
constexpr std::int64_t kMaxCols = std::int64_t{1} << 20;
constexpr std::int64_t kMinRowBucket = 1024;
constexpr std::int64_t kMaxGridBlocks = std::int64_t{1} << 20;

// True when the family serves rows of `cols` (the problem's rule): what the setup requests keys for and the trainer
// launches; other widths run LibTorch's silu and product.
bool Supported(std::int64_t cols);

struct ProblemSpec {
  std::int64_t rows = 0;
  std::int64_t cols = 0;

  bool operator==(const ProblemSpec&) const = default;
};

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem);
tuner::Problem ToJson(const ProblemSpec& spec);  // every field, "dtype": "bf16" included
ProblemSpec BucketOf(const ProblemSpec& spec);
tuner::Problem MakeProblem(std::int64_t rows, std::int64_t cols);

std::vector<tuner::TunableParam> Params();

struct Geometry {
  int threads = 0;
  int vec = 0;
  int items = 0;
};

// The geometry of a config that is a point of the space; InvalidArgument naming the reason otherwise.
Result<Geometry> GeometryOf(const tuner::Config& config);
// Not a point of the space; empty when valid (every vector width splits a row: cols is a multiple of 8).
std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket);
std::int64_t GridBlocks(const Geometry& g, const ProblemSpec& spec);
// "dflash_swiglu::swiglu<8, 256>": vec, threads.
std::string KernelNameExpression(const Geometry& g);
std::vector<tuner::Config> SeedConfigsFor(const ProblemSpec& bucket);

}  // namespace dflash::swiglu

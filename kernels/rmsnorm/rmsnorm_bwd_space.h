// The rmsnorm_bwd family's problem and tuning space: the backward of the plain norm (no residual, no gate) that the
// drafter's trained norms need (rmsnorm_bwd.cuh), dx and per-block partial sums of dw.
// Problem JSON: {"rows": R >= 1, "cols": N (a multiple of 8 in [8, 8192]), "kind": "standard" | "zero_centred",
// "weight": "bf16" | "fp32", "dtype": "bf16"}; "rows", "cols" and "kind" required, "weight" and "dtype" default to
// "bf16"; any other field is an error, and so are more than kMaxBwdCols cols. Bucket: rows rounded up to a power of two (at least 1024), the rest exact.
// Space: the forward's three parameters (threads, row_threads, vec: rmsnorm_config.h) plus
//   row_groups   row groups (of threads / row_threads rows) each block walks, keeping its dw sums in registers;
//                the grid is ceil(groups / row_groups) blocks, and dw_partial has grid * rows-per-block rows
// A thread holds at most 32 elements of a row (x and dy packed, dw in fp32).
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/rmsnorm/rmsnorm_config.h"
#include "kernels/rmsnorm/rmsnorm_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

// The widest rows a config holds in registers without spilling: 8192 cols (16 elements a thread of 512, or 32 of
// 256, within the register estimate). Wider rows are not problems of this family: the training setup requests no key
// and the trainer runs LibTorch's backward for them.
constexpr std::int64_t kMaxBwdCols = 8192;
bool BwdServes(std::int64_t cols);  // both weight storages fit the same rows

struct BwdProblemSpec {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  Kind kind = Kind::kStandard;
  WeightDtype weight = WeightDtype::kBf16;

  bool operator==(const BwdProblemSpec&) const = default;
};

Result<BwdProblemSpec> ParseBwdProblem(const tuner::Problem& problem);
tuner::Problem ToJson(const BwdProblemSpec& spec);  // every field, "dtype": "bf16" included
BwdProblemSpec BucketOf(const BwdProblemSpec& spec);
tuner::Problem MakeBwdProblem(std::int64_t rows, std::int64_t cols, Kind kind, WeightDtype weight);

constexpr int kMaxBwdElementsPerThread = 32;

std::vector<tuner::TunableParam> BwdParams();

struct BwdGeometry {
  Geometry row;        // threads, row_threads, vec, rows_per_block
  int row_groups = 0;  // row groups per block
};

// The geometry of a structurally valid config (every parameter present with a value of the space, row_threads <=
// threads); InvalidArgument naming the reason otherwise.
Result<BwdGeometry> BwdGeometryOf(const tuner::Config& config);
// The structural checks plus the bucket's (no thread without a vector of its row, at most
// kMaxBwdElementsPerThread elements a thread, the register budget); empty when valid.
std::string BwdInvalidReasonFor(const tuner::Config& config, const BwdProblemSpec& bucket);
// Blocks of a launch over `rows` rows, and the rows of dw_partial it writes (blocks * rows per block).
std::int64_t BwdGridBlocks(const BwdGeometry& g, std::int64_t rows);
std::int64_t DwPartialRows(const BwdGeometry& g, std::int64_t rows);
// "dflash_rmsnorm::rmsnorm_bwd<5120, 8, 256, 256, 1, 0, 1>": cols, vec, row_threads, threads, blocks per SM for
// __launch_bounds__ (always 1: with the backward's register estimate no row fits the 64-register cap of the
// forward's several-blocks rule, rmsnorm_config.h MinBlocksPerSm), kind, fp32 weight.
std::string BwdKernelNameExpression(const BwdGeometry& g, const BwdProblemSpec& spec);
// Best guesses, best first: 16-byte vectors, the row split with the fewest idle vector slots, 16 row groups.
std::vector<tuner::Config> BwdSeedConfigsFor(const BwdProblemSpec& bucket);

}  // namespace dflash::rmsnorm

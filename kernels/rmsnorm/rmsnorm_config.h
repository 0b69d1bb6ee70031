// The rmsnorm family's tuning space: its parameters, the block geometry a config implies, the constraints a config
// must meet for a bucket, the kernel name expression NVRTC instantiates for it, and the seed configs per cols class.
//   threads      threads per block
//   row_threads  threads that share one row (a power of two, 1 .. 1024; < 32: several rows per warp)
//   vec          bf16 elements per vector load / store (4 = 8 bytes, 8 = 16 bytes)
// A block covers threads / row_threads rows; each thread holds ceil(cols / (vec * row_threads)) vectors of its row.
// Every valid point is correct for every row count of its bucket (the last block's rows past the end are masked).
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "kernels/rmsnorm/rmsnorm_problem.h"
#include "tuner/kernel_family.h"

namespace dflash::rmsnorm {

std::vector<tuner::TunableParam> Params();

struct Geometry {
  int threads = 0;
  int row_threads = 0;
  int vec = 0;
  int rows_per_block = 0;  // threads / row_threads
};

// The register budget of a thread's row data. While the loads are in flight a thread holds its elements of x, the
// residual and the gate (packed bf16 pairs); while it scales, its elements of s, the gate and the weight (packed, or
// one register per element for fp32 weights). The rest of the kernel (addresses, the reduction, the scaling) needs
// about kOtherRegisters more; a config whose estimate exceeds what a block of its threads may hold per thread
// (65536 / threads, at most 255) is invalid: it would spill.
constexpr int kMaxElementsPerThread = 64;
constexpr int kOtherRegisters = 40;
// The larger of the two row-data figures above for `elements` per thread.
int RowRegisters(int elements, const ProblemSpec& bucket);

// Empty when `config` is a structurally valid point (all three parameters present with values of the space,
// row_threads <= threads); otherwise the reason.
std::string GeometryInvalidReason(const tuner::Config& config);
// The geometry of a structurally valid config; InvalidArgument with GeometryInvalidReason otherwise.
Result<Geometry> GeometryOf(const tuner::Config& config);
// Vectors of its row each thread holds for `cols`.
int VectorsPerThread(const Geometry& g, std::int64_t cols);
// GeometryInvalidReason plus the constraints that depend on the bucket (no thread without a vector of its row, at
// most kMaxElementsPerThread elements per thread, the register budget).
std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket);
// The blocks per SM the kernel's __launch_bounds__ asks for, which fixes ptxas's register cap at 65536 / (threads *
// blocks): max(1, 1024 / threads) when the register estimate (RowRegisters + kOtherRegisters) fits in 64 (a cap of
// 64, so 1024 threads stay resident per SM), else 1 (the cap is all a block may hold). Pinned rather than left to
// ptxas: given the thread count alone it capped 1024-thread blocks at 32 registers on sm_90 and spilled, and given
// one block per SM it takes what the cap allows (93 registers for 5120 cols with a residual in 256-thread blocks,
// where 75 suffice).
int MinBlocksPerSm(const Geometry& g, const ProblemSpec& bucket);
// "dflash_rmsnorm::rmsnorm_fwd<5120, 8, 128, 256, 1, 1, 1, 0, 0>": cols, vec, row_threads, threads, MinBlocksPerSm,
// kind (0 standard, 1 zero-centred), residual, gate, fp32 weight. `spec`'s rows do not enter it.
std::string KernelNameExpression(const Geometry& g, const ProblemSpec& spec);
// Best guesses for the bucket's cols, best first (16-byte vectors, the row split with the fewest idle vector slots,
// 256-thread blocks; kernels/rmsnorm/NOTES.md).
std::vector<tuner::Config> SeedConfigsFor(const ProblemSpec& bucket);

}  // namespace dflash::rmsnorm

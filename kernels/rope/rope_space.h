// The rope family's problem and tuning space.
// Problem JSON: {"tokens": T >= 1, "heads": H in [1, 1024], "head_dim": D (a multiple of 8 in [16, 1024]),
// "rotary_dim": R (a multiple of 16 in [16, D]), "dtype": "bf16"}; all but "dtype" required; any other field is an
// error. Bucket: tokens rounded up to a power of two (at least 1024); heads, head_dim and rotary_dim exact (the
// dims are template parameters, the heads fix the work per token).
// Space:
//   threads   threads per block
//   vec       bf16 elements per vector access (4 = 8 bytes, 8 = 16 bytes; the tables are read as float4)
//   items     work items per thread (1 or 4) (the grid is ceil(items of the launch / (threads * items)) blocks, walked
//             grid-stride, so any value is correct for any launch)
// A work item is VEC pairs of one head's rotated part, or VEC elements of its unrotated tail.
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::rope {

constexpr std::int64_t kMaxTokens = std::int64_t{1} << 30;
constexpr std::int64_t kMaxHeads = 1024;
constexpr std::int64_t kMaxHeadDim = 1024;
constexpr std::int64_t kMinTokenBucket = 1024;

// True when the family serves heads of head_dim dims whose first rotary_dim rotate (the problem's rules): what the
// training setup requests keys for and the trainer launches, everything else runs LibTorch's rotation.
bool Supported(std::int64_t head_dim, std::int64_t rotary_dim);

struct ProblemSpec {
  std::int64_t tokens = 0;
  std::int64_t heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t rotary_dim = 0;

  bool operator==(const ProblemSpec&) const = default;
};

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem);
tuner::Problem ToJson(const ProblemSpec& spec);  // every field, "dtype": "bf16" included
ProblemSpec BucketOf(const ProblemSpec& spec);
tuner::Problem MakeProblem(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim);

std::vector<tuner::TunableParam> Params();

struct Geometry {
  int threads = 0;
  int vec = 0;
  int items = 0;
};

// The geometry of a config that is a point of the space; InvalidArgument naming the reason otherwise.
Result<Geometry> GeometryOf(const tuner::Config& config);
// Not a point of the space, or a vector width that does not split the bucket's rotated half and tail; empty when
// valid.
std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket);
// Work items of a launch over `spec` with vector width `vec`, and its grid (at most kMaxGridBlocks blocks: the
// walk is grid-stride, so a capped grid only gives each thread more items).
constexpr std::int64_t kMaxGridBlocks = std::int64_t{1} << 20;
std::int64_t WorkItems(const ProblemSpec& spec, int vec);
std::int64_t GridBlocks(const Geometry& g, const ProblemSpec& spec);
// "dflash_rope::rope<256, 64, 8, 256>": head_dim, rotary_dim, vec, threads.
std::string KernelNameExpression(const Geometry& g, const ProblemSpec& spec);
// Best guesses, best first: 16-byte vectors (when they split the head), 256 threads, 4 items a thread.
std::vector<tuner::Config> SeedConfigsFor(const ProblemSpec& bucket);

}  // namespace dflash::rope

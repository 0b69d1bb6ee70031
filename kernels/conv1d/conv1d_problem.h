// The conv1d family's problem signature: parsing and validation of the JSON problem, the mapping of a problem to
// its tuning bucket, and MakeProblem for callers.
// Problem JSON: {"tokens": T >= 1, "channels": 1..65535, "num_seqs": 1..T, "layout": "token_major" |
// "channel_major", "dtype": "bf16"}; "num_seqs" defaults to 1, "layout" to "token_major", "dtype" to "bf16".
// Bucket: tokens rounded up to a power of two (at least 256), num_seqs up to a power of two, channels exact.
// Who may call it: the family, the API, tests. Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "tuner/kernel_family.h"

namespace dflash::conv1d {

enum class Layout {
  kTokenMajor,    // [tokens, channels], channel stride 1 (what in_proj produces)
  kChannelMajor,  // [channels, tokens], token stride 1
};

std::string_view LayoutName(Layout layout);  // "token_major" / "channel_major"
Result<Layout> ParseLayout(std::string_view name);

constexpr std::int64_t kMaxTokens = std::int64_t{1} << 30;
constexpr std::int64_t kMaxChannels = 65535;  // channel tiles go to grid.y
constexpr std::int64_t kMinTokenBucket = 256;

struct ProblemSpec {
  std::int64_t tokens = 0;
  std::int64_t channels = 0;
  std::int64_t num_seqs = 1;
  Layout layout = Layout::kTokenMajor;
};

// Validates a problem (unknown fields and out-of-range values are InvalidArgument, naming the field).
Result<ProblemSpec> ParseProblem(const tuner::Problem& problem);
tuner::Problem ToJson(const ProblemSpec& spec);
// The bucket a problem maps to (see the header comment).
ProblemSpec BucketOf(const ProblemSpec& spec);
// Smallest power of two >= max(v, floor).
std::int64_t RoundUpPow2(std::int64_t v, std::int64_t floor);

// A problem for callers: {"tokens", "channels", "num_seqs", "layout", "dtype": "bf16"}.
tuner::Problem MakeProblem(std::int64_t tokens, std::int64_t channels, std::int64_t num_seqs = 1,
                           Layout layout = Layout::kTokenMajor);

}  // namespace dflash::conv1d

#include "kernels/conv1d/conv1d_problem.h"

#include <string>

namespace dflash::conv1d {
namespace {

Result<std::int64_t> IntField(const tuner::Problem& p, const char* key, std::int64_t def, std::int64_t lo,
                              std::int64_t hi) {
  if (!p.contains(key)) {
    if (def >= 0) return def;
    return InvalidArgument(std::string("conv1d problem: missing field \"") + key + "\"");
  }
  const auto& v = p.at(key);
  if (!v.is_number_integer())
    return InvalidArgument(std::string("conv1d problem: \"") + key + "\" must be an integer, got " + v.dump());
  const std::int64_t n = v.get<std::int64_t>();
  if (n < lo || n > hi)
    return InvalidArgument(std::string("conv1d problem: \"") + key + "\" = " + std::to_string(n) +
                           " is outside [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  return n;
}

}  // namespace

std::string_view LayoutName(Layout layout) {
  return layout == Layout::kTokenMajor ? "token_major" : "channel_major";
}

Result<Layout> ParseLayout(std::string_view name) {
  if (name == "token_major") return Layout::kTokenMajor;
  if (name == "channel_major") return Layout::kChannelMajor;
  return InvalidArgument("conv1d problem: \"layout\" must be \"token_major\" or \"channel_major\", got \"" +
                         std::string(name) + "\"");
}

std::int64_t RoundUpPow2(std::int64_t v, std::int64_t floor) {
  std::int64_t r = 1;
  while (r < v || r < floor) r <<= 1;
  return r;
}

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem) {
  if (!problem.is_object()) return InvalidArgument("conv1d problem must be a JSON object, got " + problem.dump());
  for (const auto& [key, value] : problem.items()) {
    if (key != "tokens" && key != "channels" && key != "num_seqs" && key != "layout" && key != "dtype")
      return InvalidArgument("conv1d problem: unknown field \"" + key +
                             "\" (known: tokens, channels, num_seqs, layout, dtype)");
  }
  ProblemSpec spec;
  DFLASH_ASSIGN_OR_RETURN(spec.tokens, IntField(problem, "tokens", -1, 1, kMaxTokens));
  DFLASH_ASSIGN_OR_RETURN(spec.channels, IntField(problem, "channels", -1, 1, kMaxChannels));
  DFLASH_ASSIGN_OR_RETURN(spec.num_seqs, IntField(problem, "num_seqs", 1, 1, spec.tokens));
  if (problem.contains("layout")) {
    if (!problem["layout"].is_string())
      return InvalidArgument("conv1d problem: \"layout\" must be a string, got " + problem["layout"].dump());
    DFLASH_ASSIGN_OR_RETURN(spec.layout, ParseLayout(problem["layout"].get<std::string>()));
  }
  if (problem.contains("dtype")) {
    if (!problem["dtype"].is_string() || problem["dtype"].get<std::string>() != "bf16")
      return InvalidArgument("conv1d problem: \"dtype\" must be \"bf16\" (the only dtype), got " +
                             problem["dtype"].dump());
  }
  return spec;
}

tuner::Problem ToJson(const ProblemSpec& spec) {
  return tuner::Problem{{"tokens", spec.tokens},
                        {"channels", spec.channels},
                        {"num_seqs", spec.num_seqs},
                        {"layout", std::string(LayoutName(spec.layout))},
                        {"dtype", "bf16"}};
}

ProblemSpec BucketOf(const ProblemSpec& spec) {
  ProblemSpec b = spec;
  b.tokens = RoundUpPow2(spec.tokens, kMinTokenBucket);
  b.num_seqs = RoundUpPow2(spec.num_seqs, 1);
  return b;
}

tuner::Problem MakeProblem(std::int64_t tokens, std::int64_t channels, std::int64_t num_seqs, Layout layout) {
  return ToJson(ProblemSpec{tokens, channels, num_seqs, layout});
}

}  // namespace dflash::conv1d

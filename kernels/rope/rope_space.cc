#include "kernels/rope/rope_space.h"

#include <algorithm>
#include <array>

#include "kernels/common/space_check.h"

namespace dflash::rope {
namespace {

std::string Str(std::int64_t v) { return std::to_string(v); }

Status Bad(const std::string& what) { return InvalidArgument("rope problem: " + what); }

constexpr std::array<const char*, 5> kFields = {"tokens", "heads", "head_dim", "rotary_dim", "dtype"};

Result<std::int64_t> RequiredInt(const tuner::Problem& p, const char* key, std::int64_t lo, std::int64_t hi) {
  if (!p.contains(key)) return Bad(std::string("missing field \"") + key + "\"");
  const auto& v = p.at(key);
  if (!v.is_number_integer()) return Bad(std::string("\"") + key + "\" must be an integer, got " + v.dump());
  const std::int64_t n = v.get<std::int64_t>();
  if (n < lo || n > hi)
    return Bad(std::string("\"") + key + "\" = " + Str(n) + " is outside [" + Str(lo) + ", " + Str(hi) + "]");
  return n;
}

tuner::Config ConfigOf(int threads, int vec, int items) {
  return {{"items", items}, {"threads", threads}, {"vec", vec}};
}

}  // namespace

bool Supported(std::int64_t head_dim, std::int64_t rotary_dim) {
  return head_dim >= 16 && head_dim <= kMaxHeadDim && head_dim % 8 == 0 && rotary_dim >= 16 &&
         rotary_dim <= head_dim && rotary_dim % 16 == 0;
}

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem) {
  if (!problem.is_object()) return Bad("must be a JSON object, got " + problem.dump());
  for (const auto& [key, value] : problem.items()) {
    if (std::find_if(kFields.begin(), kFields.end(), [&](const char* f) { return key == f; }) == kFields.end())
      return Bad("unknown field \"" + key + "\" (known: tokens, heads, head_dim, rotary_dim, dtype)");
  }
  ProblemSpec s;
  DFLASH_ASSIGN_OR_RETURN(s.tokens, RequiredInt(problem, "tokens", 1, kMaxTokens));
  DFLASH_ASSIGN_OR_RETURN(s.heads, RequiredInt(problem, "heads", 1, kMaxHeads));
  DFLASH_ASSIGN_OR_RETURN(s.head_dim, RequiredInt(problem, "head_dim", 16, kMaxHeadDim));
  if (s.head_dim % 8 != 0) return Bad("\"head_dim\" = " + Str(s.head_dim) + " is not a multiple of 8");
  DFLASH_ASSIGN_OR_RETURN(s.rotary_dim, RequiredInt(problem, "rotary_dim", 16, s.head_dim));
  if (s.rotary_dim % 16 != 0)
    return Bad("\"rotary_dim\" = " + Str(s.rotary_dim) + " is not a multiple of 16 (each half whole 16-byte vectors)");
  if (problem.contains("dtype") && problem.at("dtype") != "bf16")
    return Bad("\"dtype\" must be \"bf16\" (the only dtype), got " + problem.at("dtype").dump());
  return s;
}

tuner::Problem ToJson(const ProblemSpec& s) {
  return tuner::Problem{{"tokens", s.tokens},
                        {"heads", s.heads},
                        {"head_dim", s.head_dim},
                        {"rotary_dim", s.rotary_dim},
                        {"dtype", "bf16"}};
}

ProblemSpec BucketOf(const ProblemSpec& spec) {
  ProblemSpec b = spec;
  b.tokens = kMinTokenBucket;
  while (b.tokens < spec.tokens) b.tokens <<= 1;
  return b;
}

tuner::Problem MakeProblem(std::int64_t tokens, std::int64_t heads, std::int64_t head_dim, std::int64_t rotary_dim) {
  return ToJson(ProblemSpec{tokens, heads, head_dim, rotary_dim});
}

std::vector<tuner::TunableParam> Params() {
  return {
      {"items", {1, 4}, "work items per thread (grid-stride)"},
      {"threads", {128, 256, 512}, "threads per block"},
      {"vec", {4, 8}, "bf16 elements per vector access (8 = 16 bytes)"},
  };
}

Result<Geometry> GeometryOf(const tuner::Config& config) {
  const std::string why = kernels::NotInSpaceReason(Params(), config);
  if (!why.empty()) return InvalidArgument("rope config " + tuner::ConfigLabel(config) + " is invalid: " + why);
  return Geometry{static_cast<int>(config.at("threads")), static_cast<int>(config.at("vec")),
                  static_cast<int>(config.at("items"))};
}

std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec& bucket) {
  const std::string why = kernels::NotInSpaceReason(Params(), config);
  if (!why.empty()) return why;
  const int vec = static_cast<int>(config.at("vec"));
  if ((bucket.rotary_dim / 2) % vec != 0 || (bucket.head_dim - bucket.rotary_dim) % vec != 0)
    return "vec=" + Str(vec) + " does not split the rotated half (" + Str(bucket.rotary_dim / 2) +
           ") and the tail (" + Str(bucket.head_dim - bucket.rotary_dim) + ") into whole vectors";
  return {};
}

std::int64_t WorkItems(const ProblemSpec& spec, int vec) {
  return spec.tokens * spec.heads * ((spec.rotary_dim / 2) / vec + (spec.head_dim - spec.rotary_dim) / vec);
}

std::int64_t GridBlocks(const Geometry& g, const ProblemSpec& spec) {
  const std::int64_t per_block = static_cast<std::int64_t>(g.threads) * g.items;
  return std::min(kMaxGridBlocks, (WorkItems(spec, g.vec) + per_block - 1) / per_block);
}

std::string KernelNameExpression(const Geometry& g, const ProblemSpec& spec) {
  return "dflash_rope::rope<" + Str(spec.head_dim) + ", " + Str(spec.rotary_dim) + ", " + Str(g.vec) + ", " +
         Str(g.threads) + ">";
}

std::vector<tuner::Config> SeedConfigsFor(const ProblemSpec& bucket) {
  std::vector<tuner::Config> seeds;
  for (const tuner::Config& c : {ConfigOf(256, 8, 4), ConfigOf(256, 4, 4), ConfigOf(512, 8, 2)}) {
    if (InvalidReasonFor(c, bucket).empty()) seeds.push_back(c);
  }
  return seeds;
}

}  // namespace dflash::rope

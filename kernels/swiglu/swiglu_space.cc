#include "kernels/swiglu/swiglu_space.h"

#include <algorithm>
#include <array>

#include "kernels/common/space_check.h"

namespace dflash::swiglu {
namespace {

std::string Str(std::int64_t v) { return std::to_string(v); }

Status Bad(const std::string& what) { return InvalidArgument("swiglu problem: " + what); }

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

bool Supported(std::int64_t cols) { return cols >= 8 && cols <= kMaxCols && cols % 8 == 0; }

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem) {
  if (!problem.is_object()) return Bad("must be a JSON object, got " + problem.dump());
  for (const auto& [key, value] : problem.items()) {
    if (key != "rows" && key != "cols" && key != "dtype")
      return Bad("unknown field \"" + key + "\" (known: rows, cols, dtype)");
  }
  ProblemSpec s;
  DFLASH_ASSIGN_OR_RETURN(s.rows, RequiredInt(problem, "rows", 1, kMaxRows));
  DFLASH_ASSIGN_OR_RETURN(s.cols, RequiredInt(problem, "cols", 8, kMaxCols));
  if (s.cols % 8 != 0) return Bad("\"cols\" = " + Str(s.cols) + " is not a multiple of 8 (16-byte vectors)");
  if (problem.contains("dtype") && problem.at("dtype") != "bf16")
    return Bad("\"dtype\" must be \"bf16\" (the only dtype), got " + problem.at("dtype").dump());
  return s;
}

tuner::Problem ToJson(const ProblemSpec& s) {
  return tuner::Problem{{"rows", s.rows}, {"cols", s.cols}, {"dtype", "bf16"}};
}

ProblemSpec BucketOf(const ProblemSpec& spec) {
  ProblemSpec b = spec;
  b.rows = kMinRowBucket;
  while (b.rows < spec.rows) b.rows <<= 1;
  return b;
}

tuner::Problem MakeProblem(std::int64_t rows, std::int64_t cols) { return ToJson(ProblemSpec{rows, cols}); }

std::vector<tuner::TunableParam> Params() {
  return {
      {"items", {1, 4}, "work items per thread (grid-stride)"},
      {"threads", {128, 256, 512}, "threads per block"},
      {"vec", {4, 8}, "bf16 elements per vector access (8 = 16 bytes)"},
  };
}

Result<Geometry> GeometryOf(const tuner::Config& config) {
  const std::string why = kernels::NotInSpaceReason(Params(), config);
  if (!why.empty()) return InvalidArgument("swiglu config " + tuner::ConfigLabel(config) + " is invalid: " + why);
  return Geometry{static_cast<int>(config.at("threads")), static_cast<int>(config.at("vec")),
                  static_cast<int>(config.at("items"))};
}

std::string InvalidReasonFor(const tuner::Config& config, const ProblemSpec&) {
  return kernels::NotInSpaceReason(Params(), config);
}

std::int64_t GridBlocks(const Geometry& g, const ProblemSpec& spec) {
  const std::int64_t items = spec.rows * (spec.cols / g.vec);
  const std::int64_t per_block = static_cast<std::int64_t>(g.threads) * g.items;
  return std::min(kMaxGridBlocks, (items + per_block - 1) / per_block);
}

std::string KernelNameExpression(const Geometry& g) {
  return "dflash_swiglu::swiglu<" + Str(g.vec) + ", " + Str(g.threads) + ">";
}

std::vector<tuner::Config> SeedConfigsFor(const ProblemSpec&) {
  return {ConfigOf(256, 8, 4), ConfigOf(256, 8, 1), ConfigOf(512, 8, 1)};
}

}  // namespace dflash::swiglu

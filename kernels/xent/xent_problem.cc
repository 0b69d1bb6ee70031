#include "kernels/xent/xent_problem.h"

#include <algorithm>
#include <bit>
#include <string>

namespace dflash::xent {
namespace {

Status Invalid(const std::string& what) { return InvalidArgument("xent problem: " + what); }

Result<std::int64_t> RequiredInt(const tuner::Problem& p, const char* key, std::int64_t lo, std::int64_t hi) {
  if (!p.contains(key)) return Invalid(std::string("missing field \"") + key + "\"");
  const auto& v = p.at(key);
  if (!v.is_number_integer()) return Invalid(std::string("\"") + key + "\" must be an integer, got " + v.dump());
  const std::int64_t n = v.get<std::int64_t>();
  if (n < lo || n > hi)
    return Invalid(std::string("\"") + key + "\" = " + std::to_string(n) + " is outside [" + std::to_string(lo) + ", " +
                   std::to_string(hi) + "]");
  return n;
}

}  // namespace

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem) {
  if (!problem.is_object()) return Invalid("must be a JSON object, got " + problem.dump());
  for (const auto& [key, value] : problem.items()) {
    if (key != "rows" && key != "vocab" && key != "grad" && key != "dtype")
      return Invalid("unknown field \"" + key + "\" (known: rows, vocab, grad, dtype)");
  }
  ProblemSpec spec;
  DFLASH_ASSIGN_OR_RETURN(spec.rows, RequiredInt(problem, "rows", 1, kMaxRows));
  DFLASH_ASSIGN_OR_RETURN(spec.vocab, RequiredInt(problem, "vocab", 1, kMaxVocab));
  if (problem.contains("grad")) {
    if (!problem["grad"].is_boolean()) return Invalid("\"grad\" must be a boolean, got " + problem["grad"].dump());
    spec.grad = problem["grad"].get<bool>();
  }
  if (problem.contains("dtype")) {
    if (!problem["dtype"].is_string() || problem["dtype"].get<std::string>() != "fp32")
      return Invalid("\"dtype\" must be \"fp32\" (the only dtype of the logits), got " + problem["dtype"].dump());
  }
  return spec;
}

tuner::Problem ToJson(const ProblemSpec& spec) {
  return tuner::Problem{{"rows", spec.rows}, {"vocab", spec.vocab}, {"grad", spec.grad}, {"dtype", "fp32"}};
}

ProblemSpec BucketOf(const ProblemSpec& spec) {
  ProblemSpec b = spec;
  b.rows = static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(std::max(spec.rows, kMinRowBucket))));
  return b;
}

tuner::Problem MakeProblem(std::int64_t rows, std::int64_t vocab, bool grad) {
  return ToJson(ProblemSpec{rows, vocab, grad});
}

}  // namespace dflash::xent

#include "kernels/rmsnorm/rmsnorm_problem.h"

#include <array>
#include <string>

namespace dflash::rmsnorm {
namespace {

constexpr std::array<const char*, 7> kFields = {"rows", "cols", "kind", "residual", "gate", "weight", "dtype"};

Status Bad(const std::string& what) { return InvalidArgument("rmsnorm problem: " + what); }

Result<std::int64_t> RequiredInt(const tuner::Problem& p, const char* key, std::int64_t lo, std::int64_t hi) {
  if (!p.contains(key)) return Bad(std::string("missing field \"") + key + "\"");
  const auto& v = p.at(key);
  if (!v.is_number_integer()) return Bad(std::string("\"") + key + "\" must be an integer, got " + v.dump());
  const std::int64_t n = v.get<std::int64_t>();
  if (n < lo || n > hi)
    return Bad(std::string("\"") + key + "\" = " + std::to_string(n) + " is outside [" + std::to_string(lo) + ", " +
               std::to_string(hi) + "]");
  return n;
}

Result<bool> OptionalBool(const tuner::Problem& p, const char* key) {
  if (!p.contains(key)) return false;
  const auto& v = p.at(key);
  if (!v.is_boolean()) return Bad(std::string("\"") + key + "\" must be true or false, got " + v.dump());
  return v.get<bool>();
}

// The string value of `key` (`def` when absent and `def` is non-null).
Result<std::string> StringField(const tuner::Problem& p, const char* key, const char* def) {
  if (!p.contains(key)) {
    if (def != nullptr) return std::string(def);
    return Bad(std::string("missing field \"") + key + "\"");
  }
  const auto& v = p.at(key);
  if (!v.is_string()) return Bad(std::string("\"") + key + "\" must be a string, got " + v.dump());
  return v.get<std::string>();
}

}  // namespace

std::string_view KindName(Kind kind) { return kind == Kind::kStandard ? "standard" : "zero_centred"; }

Result<Kind> ParseKind(std::string_view name) {
  if (name == "standard") return Kind::kStandard;
  if (name == "zero_centred") return Kind::kZeroCentred;
  return Bad("\"kind\" must be \"standard\" or \"zero_centred\", got \"" + std::string(name) + "\"");
}

std::string_view WeightDtypeName(WeightDtype dtype) { return dtype == WeightDtype::kBf16 ? "bf16" : "fp32"; }

Result<WeightDtype> ParseWeightDtype(std::string_view name) {
  if (name == "bf16") return WeightDtype::kBf16;
  if (name == "fp32") return WeightDtype::kFp32;
  return Bad("\"weight\" must be \"bf16\" or \"fp32\", got \"" + std::string(name) + "\"");
}

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem) {
  if (!problem.is_object()) return Bad("must be a JSON object, got " + problem.dump());
  for (const auto& [key, value] : problem.items()) {
    bool known = false;
    for (const char* f : kFields) known |= key == f;
    if (!known)
      return Bad("unknown field \"" + key + "\" (known: rows, cols, kind, residual, gate, weight, dtype)");
  }
  ProblemSpec spec;
  DFLASH_ASSIGN_OR_RETURN(spec.rows, RequiredInt(problem, "rows", 1, kMaxRows));
  DFLASH_ASSIGN_OR_RETURN(spec.cols, RequiredInt(problem, "cols", kColsMultiple, kMaxCols));
  if (spec.cols % kColsMultiple != 0)
    return Bad("\"cols\" = " + std::to_string(spec.cols) + " is not a multiple of " + std::to_string(kColsMultiple) +
               " (rows are whole 16-byte vectors)");
  DFLASH_ASSIGN_OR_RETURN(const std::string kind, StringField(problem, "kind", nullptr));
  DFLASH_ASSIGN_OR_RETURN(spec.kind, ParseKind(kind));
  DFLASH_ASSIGN_OR_RETURN(spec.residual, OptionalBool(problem, "residual"));
  DFLASH_ASSIGN_OR_RETURN(spec.gate, OptionalBool(problem, "gate"));
  DFLASH_ASSIGN_OR_RETURN(const std::string weight, StringField(problem, "weight", "bf16"));
  DFLASH_ASSIGN_OR_RETURN(spec.weight, ParseWeightDtype(weight));
  DFLASH_ASSIGN_OR_RETURN(const std::string dtype, StringField(problem, "dtype", "bf16"));
  if (dtype != "bf16") return Bad("\"dtype\" must be \"bf16\" (the only dtype), got \"" + dtype + "\"");
  return spec;
}

tuner::Problem ToJson(const ProblemSpec& spec) {
  return tuner::Problem{{"rows", spec.rows},
                        {"cols", spec.cols},
                        {"kind", std::string(KindName(spec.kind))},
                        {"residual", spec.residual},
                        {"gate", spec.gate},
                        {"weight", std::string(WeightDtypeName(spec.weight))},
                        {"dtype", "bf16"}};
}

ProblemSpec BucketOf(const ProblemSpec& spec) {
  ProblemSpec b = spec;
  b.rows = kMinRowBucket;
  while (b.rows < spec.rows) b.rows <<= 1;
  return b;
}

tuner::Problem MakeProblem(std::int64_t rows, std::int64_t cols, Kind kind, bool residual, bool gate,
                           WeightDtype weight) {
  return ToJson(ProblemSpec{rows, cols, kind, residual, gate, weight});
}

}  // namespace dflash::rmsnorm

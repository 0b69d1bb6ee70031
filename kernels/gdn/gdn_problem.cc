#include "kernels/gdn/gdn_problem.h"

#include <string>

namespace dflash::gdn {
namespace {

std::int64_t RoundUpPow2(std::int64_t v, std::int64_t floor) {
  std::int64_t p = 1;
  while (p < v || p < floor) p *= 2;
  return p;
}

}  // namespace

Result<ProblemSpec> ParseProblem(const tuner::Problem& problem) {
  if (!problem.is_object()) return InvalidArgument("gdn problem: not a JSON object");
  static const char* kKnown[] = {"heads", "value_heads", "head_dim", "tokens", "num_seqs",
                                 "initial_state", "final_state", "dtype"};
  for (auto it = problem.begin(); it != problem.end(); ++it) {
    bool known = false;
    for (const char* k : kKnown) known = known || it.key() == k;
    if (!known) return InvalidArgument("gdn problem: unknown field '" + it.key() + "'");
  }
  auto get_int = [&](const char* name, std::int64_t dflt, bool required) -> Result<std::int64_t> {
    auto it = problem.find(name);
    if (it == problem.end()) {
      if (required) return InvalidArgument(std::string("gdn problem: missing field '") + name + "'");
      return dflt;
    }
    if (!it->is_number_integer()) return InvalidArgument(std::string("gdn problem: '") + name + "' is not an integer");
    return it->get<std::int64_t>();
  };
  auto get_bool = [&](const char* name, bool dflt) -> Result<bool> {
    auto it = problem.find(name);
    if (it == problem.end()) return dflt;
    if (!it->is_boolean()) return InvalidArgument(std::string("gdn problem: '") + name + "' is not a boolean");
    return it->get<bool>();
  };
  ProblemSpec s;
  DFLASH_ASSIGN_OR_RETURN(std::int64_t heads, get_int("heads", 0, true));
  DFLASH_ASSIGN_OR_RETURN(std::int64_t value_heads, get_int("value_heads", 0, true));
  DFLASH_ASSIGN_OR_RETURN(std::int64_t head_dim, get_int("head_dim", kHeadDim, false));
  DFLASH_ASSIGN_OR_RETURN(s.tokens, get_int("tokens", 0, true));
  DFLASH_ASSIGN_OR_RETURN(s.num_seqs, get_int("num_seqs", 1, false));
  DFLASH_ASSIGN_OR_RETURN(s.initial_state, get_bool("initial_state", false));
  DFLASH_ASSIGN_OR_RETURN(s.final_state, get_bool("final_state", true));
  if (auto it = problem.find("dtype"); it != problem.end() && (!it->is_string() || it->get<std::string>() != "bf16")) {
    return InvalidArgument("gdn problem: dtype must be \"bf16\"");
  }
  if (heads < 1 || heads > 1024) return InvalidArgument("gdn problem: heads must be in 1..1024");
  if (value_heads < heads || value_heads > 4096 || value_heads % heads != 0) {
    return InvalidArgument("gdn problem: value_heads must be a multiple of heads (at most 4096)");
  }
  if (head_dim != kHeadDim) {
    return Unsupported("gdn problem: head_dim " + std::to_string(head_dim) + " (only 128 is implemented)");
  }
  if (s.tokens < 1 || s.tokens > kMaxTokens) return InvalidArgument("gdn problem: tokens must be in 1..2^30");
  if (s.num_seqs < 1 || s.num_seqs > s.tokens) return InvalidArgument("gdn problem: num_seqs must be in 1..tokens");
  s.heads = static_cast<int>(heads);
  s.value_heads = static_cast<int>(value_heads);
  return s;
}

tuner::Problem ToJson(const ProblemSpec& s) {
  return tuner::Problem{{"heads", s.heads},           {"value_heads", s.value_heads},
                        {"head_dim", kHeadDim},       {"tokens", s.tokens},
                        {"num_seqs", s.num_seqs},     {"initial_state", s.initial_state},
                        {"final_state", s.final_state}, {"dtype", "bf16"}};
}

ProblemSpec BucketOf(const ProblemSpec& spec) {
  ProblemSpec b = spec;
  b.tokens = RoundUpPow2(spec.tokens, kMinTokenBucket);
  b.num_seqs = RoundUpPow2(spec.num_seqs, 1);
  if (b.num_seqs > b.tokens) b.num_seqs = b.tokens;
  return b;
}

tuner::Problem MakeProblem(int heads, int value_heads, std::int64_t tokens, std::int64_t num_seqs,
                           bool initial_state, bool final_state) {
  ProblemSpec s;
  s.heads = heads;
  s.value_heads = value_heads;
  s.tokens = tokens;
  s.num_seqs = num_seqs;
  s.initial_state = initial_state;
  s.final_state = final_state;
  return ToJson(s);
}

}  // namespace dflash::gdn

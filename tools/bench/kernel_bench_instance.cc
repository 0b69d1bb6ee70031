#include "kernel_bench_instance.h"

#include <random>
#include <vector>

#include "base/atomic_file.h"
#include "kernels/attention/attention_problem.h"
#include "kernels/attention/reference.h"
#include "kernels/gdn/gdn_problem.h"
#include "kernels/gdn/gdn_workload.h"

namespace dflash::bench {
namespace {

Result<nlohmann::json> AttentionFacts(const tuner::Problem& problem, attention::Direction dir, std::uint64_t seed) {
  DFLASH_ASSIGN_OR_RETURN(attention::ProblemSpec spec, attention::ParseProblem(problem, dir));
  // The very function MakeAttentionWorkload(spec, dir, seed) draws its inputs with.
  const attention::HostInputs in = attention::RandomInputs(spec, seed);
  nlohmann::json out = nlohmann::json::object();
  if (spec.is_dflash()) {
    const std::int64_t n = spec.num_blocks();
    nlohmann::json anchors = nlohmann::json::array(), valid = nlohmann::json::array();
    for (std::int64_t b = 0; b < spec.batch; ++b) {
      std::vector<std::int32_t> a(in.anchors.begin() + b * n, in.anchors.begin() + (b + 1) * n);
      std::vector<int> v(in.valid.begin() + b * n, in.valid.begin() + (b + 1) * n);
      anchors.push_back(a);
      valid.push_back(v);
    }
    out["anchors"] = anchors;
    out["valid"] = valid;
  }
  if (!in.cu_seqlens.empty()) out["cu_seqlens"] = in.cu_seqlens;
  out["pairs"] = attention::VisiblePairs(in);
  return out;
}

Result<nlohmann::json> GdnFacts(const tuner::Problem& problem, std::uint64_t seed) {
  DFLASH_ASSIGN_OR_RETURN(gdn::ProblemSpec spec, gdn::ParseProblem(problem));
  // GdnWorkload::Init: rng(seed); cu_ = RandomCuSeqlens(T, num_seqs, rng()) is its first draw.
  std::mt19937_64 rng(seed);
  const std::uint64_t first = rng();
  nlohmann::json out = nlohmann::json::object();
  out["cu_seqlens"] = gdn::RandomCuSeqlens(spec.tokens, spec.num_seqs, first);
  return out;
}

}  // namespace

Result<nlohmann::json> InstanceFacts(const std::string& family, const tuner::Problem& problem, std::uint64_t seed) {
  Result<nlohmann::json> facts = Unsupported("family " + family + " has no instance facts (attention_fwd, "
                                             "attention_bwd and gdn do)");
  if (family == "attention_fwd") facts = AttentionFacts(problem, attention::Direction::kForward, seed);
  if (family == "attention_bwd") facts = AttentionFacts(problem, attention::Direction::kBackward, seed);
  if (family == "gdn") facts = GdnFacts(problem, seed);
  if (!facts.ok()) return facts.status();
  nlohmann::json out = {{"family", family}, {"problem", problem}, {"seed", seed}};
  out.update(*facts);
  return out;
}

Status WriteJsonFile(const std::string& path, const nlohmann::json& facts) {
  return AtomicWriteText(path, facts.dump(1) + "\n");
}

}  // namespace dflash::bench

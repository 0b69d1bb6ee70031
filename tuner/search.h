// SearchPlan: which variants of a tuning problem to benchmark, in what order. The seeds (the family's earlier
// winners) that are candidates come first; then exhaustive over the (pruned) space by default; with a budget
// smaller than the space, a random sample (up to half the budget, seeds included) then local refinement: the
// unmeasured neighbours of the best variant so far (one parameter moved one step), then random again.
// Owns: only its own bookkeeping; pure logic (no GPU), so it is tested on the CPU with synthetic timings.
// Thread-safety: one plan per tuning problem, used by one thread.
#pragma once

#include <cstdint>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tuner/kernel_family.h"

namespace dflash::tuner {

struct SearchBudget {
  int max_variants = 0;      // 0: no limit
  double max_seconds = 0.0;  // 0: no limit (enforced by the caller, who owns the clock)
};

class SearchPlan {
 public:
  SearchPlan(std::vector<TunableParam> params, std::vector<Config> candidates, SearchBudget budget,
             std::uint64_t seed, std::vector<Config> seeds = {});
  // The next variant to measure, or nullopt when the plan is done.
  std::optional<Config> Next();
  // The outcome of the variant Next returned: its time, or nullopt when it failed.
  void Report(const Config& config, std::optional<double> median_ms);
  bool exhaustive() const { return exhaustive_; }
  int proposed() const { return proposed_; }

 private:
  std::vector<Config> Neighbours(const Config& c) const;
  std::optional<Config> TakeSeed();
  std::optional<Config> TakeInOrder();
  std::optional<Config> TakeNeighbourOfBest();
  std::optional<Config> TakeRandom();

  std::vector<TunableParam> params_;
  std::vector<Config> candidates_;
  std::vector<Config> seeds_;
  std::size_t next_seed_ = 0;
  std::set<std::string> remaining_;  // canonical JSON of candidates not yet proposed
  bool exhaustive_ = true;
  int limit_ = 0;
  int proposed_ = 0;
  std::size_t next_in_order_ = 0;
  std::mt19937_64 rng_;
  std::optional<std::pair<Config, double>> best_;
};

}  // namespace dflash::tuner

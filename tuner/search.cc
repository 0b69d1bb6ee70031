#include "tuner/search.h"

#include <algorithm>

namespace dflash::tuner {

SearchPlan::SearchPlan(std::vector<TunableParam> params, std::vector<Config> candidates, SearchBudget budget,
                       std::uint64_t seed, std::vector<Config> seeds)
    : params_(std::move(params)), candidates_(std::move(candidates)), seeds_(std::move(seeds)), rng_(seed) {
  for (const Config& c : candidates_) remaining_.insert(ConfigToJson(c));
  const int n = static_cast<int>(candidates_.size());
  exhaustive_ = budget.max_variants <= 0 || budget.max_variants >= n;
  limit_ = exhaustive_ ? n : budget.max_variants;
}

std::optional<Config> SearchPlan::TakeRandom() {
  std::vector<const Config*> pool;
  for (const Config& c : candidates_) {
    if (remaining_.count(ConfigToJson(c))) pool.push_back(&c);
  }
  if (pool.empty()) return std::nullopt;
  return *pool[rng_() % pool.size()];
}

std::vector<Config> SearchPlan::Neighbours(const Config& c) const {
  std::vector<Config> out;
  for (const TunableParam& p : params_) {
    auto it = c.find(p.name);
    if (it == c.end()) continue;
    auto pos = std::find(p.values.begin(), p.values.end(), it->second);
    if (pos == p.values.end()) continue;
    for (int step : {-1, 1}) {
      const auto idx = (pos - p.values.begin()) + step;
      if (idx < 0 || idx >= static_cast<long>(p.values.size())) continue;
      Config n = c;
      n[p.name] = p.values[static_cast<std::size_t>(idx)];
      out.push_back(std::move(n));
    }
  }
  return out;
}

std::optional<Config> SearchPlan::TakeSeed() {
  while (next_seed_ < seeds_.size()) {  // seeds that are not (or no longer) candidates are skipped
    const Config& s = seeds_[next_seed_++];
    if (remaining_.count(ConfigToJson(s))) return s;
  }
  return std::nullopt;
}

std::optional<Config> SearchPlan::TakeInOrder() {
  while (next_in_order_ < candidates_.size() && !remaining_.count(ConfigToJson(candidates_[next_in_order_]))) {
    ++next_in_order_;
  }
  if (next_in_order_ < candidates_.size()) return candidates_[next_in_order_++];
  return std::nullopt;
}

std::optional<Config> SearchPlan::TakeNeighbourOfBest() {
  if (!best_) return std::nullopt;
  for (const Config& n : Neighbours(best_->first)) {
    if (remaining_.count(ConfigToJson(n))) return n;
  }
  return std::nullopt;
}

std::optional<Config> SearchPlan::Next() {
  if (proposed_ >= limit_ || remaining_.empty()) return std::nullopt;
  std::optional<Config> pick = TakeSeed();
  if (!pick && exhaustive_) pick = TakeInOrder();
  if (!pick && proposed_ >= (limit_ + 1) / 2) pick = TakeNeighbourOfBest();
  if (!pick) pick = TakeRandom();
  if (!pick) return std::nullopt;
  remaining_.erase(ConfigToJson(*pick));
  ++proposed_;
  return pick;
}

void SearchPlan::Report(const Config& config, std::optional<double> median_ms) {
  if (median_ms && (!best_ || *median_ms < best_->second)) best_ = {config, *median_ms};
}

}  // namespace dflash::tuner

#include "tuner/final_round.h"

#include <algorithm>
#include <numeric>
#include <string>

namespace dflash::tuner {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Status ValidateFinalRoundOptions(const FinalRoundOptions& o) {
  if (o.rounds < 0) return InvalidArgument("final round: rounds must be >= 0, got " + std::to_string(o.rounds));
  if (!(o.margin >= 0.0)) return InvalidArgument("final round: margin must be >= 0, got " + std::to_string(o.margin));
  if (o.max_finalists < 1) {
    return InvalidArgument("final round: max_finalists must be >= 1, got " + std::to_string(o.max_finalists));
  }
  return Status::Ok();
}

std::vector<std::size_t> SelectFinalists(const std::vector<double>& sweep_ms, const FinalRoundOptions& o) {
  std::vector<std::size_t> order(sweep_ms.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return sweep_ms[a] < sweep_ms[b]; });
  std::vector<std::size_t> out;
  for (std::size_t i : order) {
    if (static_cast<int>(out.size()) >= o.max_finalists) break;
    if (!out.empty() && sweep_ms[i] > sweep_ms[order.front()] * (1.0 + o.margin)) break;
    out.push_back(i);
  }
  return out;
}

Result<FinalRoundResult> RunFinalRound(std::size_t finalists, int rounds,
                                       const std::function<Result<double>(std::size_t)>& measure) {
  if (finalists == 0 || rounds < 1) {
    return InvalidArgument("final round needs at least one finalist and one round");
  }
  std::vector<std::vector<double>> times(finalists);
  for (int r = 0; r < rounds; ++r) {
    for (std::size_t k = 0; k < finalists; ++k) {
      const std::size_t i = (static_cast<std::size_t>(r) + k) % finalists;
      Result<double> t = measure(i);
      if (!t.ok()) return t.status();
      times[i].push_back(*t);
    }
  }
  FinalRoundResult out;
  for (const auto& t : times) out.median_ms.push_back(Median(t));
  out.winner = static_cast<std::size_t>(
      std::min_element(out.median_ms.begin(), out.median_ms.end()) - out.median_ms.begin());
  return out;
}

}  // namespace dflash::tuner

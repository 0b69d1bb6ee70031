// FinalRound: how the tuner settles one key among its fastest variants. The sweep over the space measures each
// variant once, each at its own moment of the GPU's clock and thermal state, and the lowest of many noisy times
// is the luckiest one: a stored winner's time ran up to 7 % below what a benchmark of the same variant measured
// minutes later, and variants closer than that were ranked by the noise. So the variants within `margin` of the
// sweep's best (at most `max_finalists`) are measured again in turns, `rounds` times, each round in a rotated
// order so that drift falls on every finalist alike; the winner has the lowest median over its rounds, and that
// median is its stored time. Pure: the measuring is a callback, so CPU tests drive it with synthetic timings.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "base/status.h"

namespace dflash::tuner {

struct FinalRoundOptions {
  int rounds = 3;          // 0: off (the sweep's best wins with its sweep time)
  double margin = 0.05;    // a finalist's sweep time is at most best * (1 + margin)
  int max_finalists = 4;   // the fastest this many within the margin, the sweep's best included
};

// InvalidArgument naming the first bad field (rounds < 0, margin < 0 or NaN, max_finalists < 1).
Status ValidateFinalRoundOptions(const FinalRoundOptions& options);

// Indices into sweep_ms of the finalists, fastest first (ties by index); empty for an empty sweep.
std::vector<std::size_t> SelectFinalists(const std::vector<double>& sweep_ms, const FinalRoundOptions& options);

struct FinalRoundResult {
  std::size_t winner = 0;          // which finalist (0 .. finalists - 1)
  std::vector<double> median_ms;   // per finalist: the median of its round times
};

// Times finalist i by measure(i) once per round, every finalist once a round, round r starting at finalist
// r % finalists. The first error ends the final and is returned as it is. Ties go to the earlier finalist.
Result<FinalRoundResult> RunFinalRound(std::size_t finalists, int rounds,
                                       const std::function<Result<double>(std::size_t)>& measure);

}  // namespace dflash::tuner

// Portable deterministic randomness for the data path (shuffles, anchor draws).
// Owns: seed derivation (SplitMix64) and unbiased bounded integers on top of std::mt19937_64, whose output sequence
// the C++ standard fixes. std::shuffle and std::uniform_int_distribution are NOT used: their results differ between
// standard libraries, and a resumed run must reproduce the same order bit-for-bit on any machine.
// Who may call: anything in trainer/. Thread-safety: free functions are pure; a std::mt19937_64 is one thread's.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace dflash::trainer::data {

// SplitMix64 finaliser: a well-mixed 64-bit value from x.
std::uint64_t Mix64(std::uint64_t x);

// A seed derived from a base seed and a list of counters (epoch, step, rank...): different lists -> independent seeds.
std::uint64_t DeriveSeed(std::uint64_t base, std::initializer_list<std::uint64_t> counters);

// Uniform integer in [0, n) without modulo bias (rejection sampling). n must be > 0.
std::uint64_t UniformBelow(std::mt19937_64& rng, std::uint64_t n);

// Fisher-Yates shuffle of v with UniformBelow: the same rng state gives the same order everywhere.
template <typename T>
void DeterministicShuffle(std::vector<T>& v, std::mt19937_64& rng) {
  for (std::size_t i = v.size(); i > 1; --i) {
    const std::size_t j = static_cast<std::size_t>(UniformBelow(rng, i));
    std::swap(v[i - 1], v[j]);
  }
}

}  // namespace dflash::trainer::data

#include "trainer/data/rng.h"

namespace dflash::trainer::data {

std::uint64_t Mix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

std::uint64_t DeriveSeed(std::uint64_t base, std::initializer_list<std::uint64_t> counters) {
  std::uint64_t h = Mix64(base);
  for (std::uint64_t c : counters) h = Mix64(h ^ Mix64(c + 0x632be59bd9b4e019ULL));
  return h;
}

std::uint64_t UniformBelow(std::mt19937_64& rng, std::uint64_t n) {
  // Reject the top partial range so every residue is equally likely.
  const std::uint64_t limit = UINT64_MAX - (UINT64_MAX % n + 1) % n;
  std::uint64_t x;
  do {
    x = rng();
  } while (x > limit);
  return x % n;
}

}  // namespace dflash::trainer::data

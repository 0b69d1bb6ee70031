// Anchors and blocks against the spec text (§4) written out by brute force in the test, on random rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "trainer/data/anchors.h"

namespace dflash::trainer::data {
namespace {

constexpr std::int32_t kMask = 248070;

struct RandomRow {
  std::vector<std::int32_t> ids;
  std::vector<std::uint8_t> mask;
  std::vector<std::int32_t> cu;  // empty: one document
};

RandomRow MakeRow(std::mt19937_64& rng, int S, double p_one, bool packed) {
  RandomRow r;
  for (int i = 0; i < S; ++i) {
    r.ids.push_back(static_cast<std::int32_t>(rng() % 248320));
    r.mask.push_back(static_cast<std::uint8_t>((rng() % 1000) < p_one * 1000 ? 1 : 0));
  }
  if (packed) {
    r.cu = {0};
    while (r.cu.back() < S) {
      const int len = 1 + static_cast<int>(rng() % 12);
      r.cu.push_back(std::min(S, r.cu.back() + len));
    }
    if (rng() % 2 == 0 && r.cu.size() > 2) r.cu.pop_back();  // sometimes a padded tail that is in no document
  }
  return r;
}

// Document of position p: [start, end) from cu (or the whole row).
std::pair<int, int> DocOf(const RandomRow& r, int p) {
  if (r.cu.empty()) return {0, static_cast<int>(r.mask.size())};
  for (std::size_t d = 0; d + 1 < r.cu.size(); ++d) {
    if (r.cu[d] <= p && p < r.cu[d + 1]) return {r.cu[d], r.cu[d + 1]};
  }
  return {-1, -1};
}

std::vector<std::int32_t> BruteCandidates(const RandomRow& r) {
  std::vector<std::int32_t> out;
  for (int p = 0; p < static_cast<int>(r.mask.size()); ++p) {
    auto [s, e] = DocOf(r, p);
    if (s < 0 || p + 1 >= e) continue;  // p+1 must exist in p's document
    if (r.mask[p] == 1 && r.mask[p + 1] == 1) out.push_back(p);
  }
  return out;
}

TEST(Anchors, CandidatesAreMaskedPairsInsideOneDocument) {
  std::mt19937_64 rng(std::random_device{}());
  for (int t = 0; t < 300; ++t) {
    const bool packed = t % 2;
    RandomRow r = MakeRow(rng, 1 + static_cast<int>(rng() % 80), (rng() % 100) / 100.0, packed);
    auto c = AnchorCandidates(r.mask, r.cu);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(*c, BruteCandidates(r));
  }
}

TEST(Anchors, LastPositionIsNeverACandidateAndTheOneBeforeItIs) {
  const std::vector<std::uint8_t> mask = {0, 0, 1, 1};
  auto c = AnchorCandidates(mask);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(*c, (std::vector<std::int32_t>{2}));
  const std::vector<std::uint8_t> one = {1};
  EXPECT_TRUE(AnchorCandidates(one)->empty());
  // Packed: [1 1 | 1 1]: 1 -> 2 crosses the boundary, so only 0 and 2.
  const std::vector<std::uint8_t> four = {1, 1, 1, 1};
  const std::vector<std::int32_t> cu = {0, 2, 4};
  EXPECT_EQ(*AnchorCandidates(four, cu), (std::vector<std::int32_t>{0, 2}));
}

TEST(Anchors, BlocksMatchTheSpecOnRandomRows) {
  std::mt19937_64 rng(std::random_device{}());
  for (int t = 0; t < 300; ++t) {
    const bool packed = t % 3 == 0;
    RandomRow r = MakeRow(rng, 2 + static_cast<int>(rng() % 200), 0.3 + (rng() % 70) / 100.0, packed);
    BlockOptions o;
    o.num_anchors = 1 + static_cast<int>(rng() % 40);
    o.block_size = std::vector<int>{8, 10, 16}[rng() % 3];
    o.mask_token_id = kMask;
    auto b = SampleBlocks(r.ids, r.mask, r.cu, o, rng());
    ASSERT_TRUE(b.ok()) << b.status().ToString();
    const auto cand = BruteCandidates(r);
    const std::set<std::int32_t> cand_set(cand.begin(), cand.end());
    const int n_valid = std::min<int>(o.num_anchors, static_cast<int>(cand.size()));
    const int B = o.block_size;
    ASSERT_EQ(b->num_blocks, o.num_anchors);
    ASSERT_EQ(b->num_valid, n_valid);
    ASSERT_EQ(b->tokens.size(), static_cast<std::size_t>(o.num_anchors * B));
    for (int j = 0; j < o.num_anchors; ++j) {
      if (j < n_valid) {
        const int a = b->anchors[j];
        EXPECT_TRUE(b->valid[j]);
        EXPECT_TRUE(cand_set.count(a)) << "anchor " << a << " is not a candidate";
        if (j > 0) {
          EXPECT_LT(b->anchors[j - 1], a) << "sorted ascending, no repeats";
        }
        auto [s, e] = DocOf(r, a);
        EXPECT_EQ(b->doc_start[j], s);
        EXPECT_EQ(b->doc_end[j], e);
        EXPECT_EQ(b->tokens[j * B], r.ids[a]);
        for (int k = 1; k < B; ++k) EXPECT_EQ(b->tokens[j * B + k], kMask);
        for (int k = 0; k < B; ++k) EXPECT_EQ(b->position_ids[j * B + k], (a - s) + k);
      } else {
        EXPECT_FALSE(b->valid[j]);
        EXPECT_EQ(b->anchors[j], 0);
        for (int k = 0; k < B; ++k) {
          EXPECT_EQ(b->tokens[j * B + k], kMask);
          EXPECT_EQ(b->position_ids[j * B + k], k);
        }
      }
    }
    if (static_cast<int>(cand.size()) <= o.num_anchors) {
      // Every candidate is taken when there are no more than N.
      EXPECT_EQ(std::vector<std::int32_t>(b->anchors.begin(), b->anchors.begin() + n_valid), cand);
    }
  }
}

TEST(Anchors, UnpackedPositionsAreTheAbsoluteAnchorPositions) {
  const std::vector<std::int32_t> ids = {10, 11, 12, 13, 14, 15};
  const std::vector<std::uint8_t> mask = {0, 0, 0, 1, 1, 0};
  BlockOptions o{.num_anchors = 2, .block_size = 8, .mask_token_id = kMask};
  auto b = SampleBlocks(ids, mask, {}, o, 99);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->num_valid, 1);
  EXPECT_EQ(b->anchors[0], 3);
  EXPECT_EQ(b->tokens[0], 13);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(b->position_ids[k], 3 + k) << "a_j ... a_j+B-1, past the row end too";
  EXPECT_FALSE(b->valid[1]);
}

TEST(Anchors, NoCandidatesGivesOnlyInvalidBlocks) {
  const std::vector<std::int32_t> ids = {1, 2, 3, 4};
  const std::vector<std::uint8_t> mask = {1, 0, 1, 0};
  BlockOptions o{.num_anchors = 3, .block_size = 16, .mask_token_id = kMask};
  auto b = SampleBlocks(ids, mask, {}, o, 1);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->num_valid, 0);
  for (int j = 0; j < 3; ++j) EXPECT_FALSE(b->valid[j]);
  EXPECT_TRUE(std::all_of(b->tokens.begin(), b->tokens.end(), [](std::int32_t t) { return t == kMask; }));
}

TEST(Anchors, DrawIsUniformWithoutReplacement) {
  // 10 candidates, N = 3: each candidate is drawn with probability 3/10; pairs with probability 1/15.
  std::vector<std::uint8_t> mask(11, 1);
  std::vector<std::int32_t> ids(11, 5);
  BlockOptions o{.num_anchors = 3, .block_size = 16, .mask_token_id = kMask};
  const int trials = 30000;
  std::vector<int> hits(10, 0);
  int pair01 = 0;
  const std::uint64_t base = std::random_device{}();
  for (int t = 0; t < trials; ++t) {
    auto b = SampleBlocks(ids, mask, {}, o, StepAnchorSeed(base, t));
    ASSERT_TRUE(b.ok());
    ASSERT_EQ(b->num_valid, 3);
    for (int j = 0; j < 3; ++j) hits[b->anchors[j]]++;
    if (b->anchors[0] == 0 && b->anchors[1] == 1) pair01++;
  }
  const double p = 0.3, sigma = std::sqrt(trials * p * (1 - p));
  for (int h : hits) EXPECT_NEAR(h, trials * p, 6 * sigma);
  const double q = 1.0 / 15, sq = std::sqrt(trials * q * (1 - q));
  EXPECT_NEAR(pair01, trials * q, 6 * sq);
}

TEST(Anchors, SameSeedSameBlocksAndEveryStepDrawsAfresh) {
  std::mt19937_64 rng(std::random_device{}());
  RandomRow r = MakeRow(rng, 400, 0.9, false);
  BlockOptions o{.num_anchors = 16, .block_size = 16, .mask_token_id = kMask};
  const std::uint64_t base = rng();
  auto a = SampleBlocks(r.ids, r.mask, {}, o, StepAnchorSeed(base, 5));
  auto b = SampleBlocks(r.ids, r.mask, {}, o, StepAnchorSeed(base, 5));
  auto c = SampleBlocks(r.ids, r.mask, {}, o, StepAnchorSeed(base, 6));
  auto d = SampleBlocks(r.ids, r.mask, {}, o, StepAnchorSeed(base, 5, 1));
  ASSERT_TRUE(a.ok() && b.ok() && c.ok() && d.ok());
  EXPECT_EQ(a->anchors, b->anchors);
  EXPECT_NE(a->anchors, c->anchors);
  EXPECT_NE(a->anchors, d->anchors) << "ranks draw differently";
}

TEST(Anchors, BadInputsAreRefused) {
  const std::vector<std::int32_t> ids = {1, 2, 3};
  const std::vector<std::uint8_t> mask = {1, 1, 1};
  const std::vector<std::uint8_t> short_mask = {1, 1};
  BlockOptions o;
  EXPECT_FALSE(SampleBlocks(ids, short_mask, {}, o, 0).ok());
  const std::vector<std::int32_t> cu_past = {0, 4};
  EXPECT_FALSE(SampleBlocks(ids, mask, cu_past, o, 0).ok());
  const std::vector<std::int32_t> cu_flat = {0, 2, 2};
  EXPECT_FALSE(SampleBlocks(ids, mask, cu_flat, o, 0).ok());
  const std::vector<std::int32_t> cu_start = {1, 3};
  EXPECT_FALSE(SampleBlocks(ids, mask, cu_start, o, 0).ok());
  BlockOptions zero = o;
  zero.num_anchors = 0;
  EXPECT_FALSE(SampleBlocks(ids, mask, {}, zero, 0).ok());
  BlockOptions tiny = o;
  tiny.block_size = 1;
  EXPECT_FALSE(SampleBlocks(ids, mask, {}, tiny, 0).ok());
}

}  // namespace
}  // namespace dflash::trainer::data

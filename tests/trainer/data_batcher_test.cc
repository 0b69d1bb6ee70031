// Batcher: rows equal a straightforward re-implementation of pad / pack over the epoch order; the order is a
// deterministic permutation per (seed, epoch); a state saved as JSON and restored continues identically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "tests/temp_dir.h"
#include "trainer/data/batcher.h"

namespace dflash::trainer::data {
namespace {

using dflash::testing::TempDir;

struct Fixture {
  TempDir dir;
  std::vector<Sample> samples;
  std::filesystem::path file;
  std::shared_ptr<const JsonlDataset> ds;

  Fixture(std::uint64_t seed, int n, int max_len) {
    std::mt19937_64 rng(seed);
    samples.resize(n);
    file = dir.path() / "train.jsonl";
    std::ofstream f(file);
    for (auto& s : samples) {
      const int len = 1 + static_cast<int>(rng() % max_len);
      for (int i = 0; i < len; ++i) {
        s.input_ids.push_back(static_cast<std::int32_t>(1 + rng() % 1000));
        s.loss_mask.push_back(static_cast<std::uint8_t>(rng() % 2));
      }
      nlohmann::json j;
      j["input_ids"] = s.input_ids;
      j["loss_mask"] = s.loss_mask;
      f << j.dump() << "\n";
    }
    f.close();
    ds = Open();
  }
  std::shared_ptr<const JsonlDataset> Open() const {
    auto r = JsonlDataset::Open(file);
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    return std::make_shared<const JsonlDataset>(std::move(r).value());
  }
};

Batcher Make(std::shared_ptr<const JsonlDataset> ds, const BatcherOptions& o) {
  auto b = Batcher::Create(std::move(ds), o);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
  return std::move(b).value();
}

// The spec of a row, written out plainly: documents = the given samples, each cut to L, laid end to end, then
// padding (pad id, mask 0, position 0).
Row ExpectedRow(const std::vector<Sample>& samples, const std::vector<std::uint32_t>& docs, std::size_t L,
                std::int32_t pad) {
  Row r;
  r.cu_seqlens = {0};
  for (std::uint32_t d : docs) {
    const Sample& s = samples[d];
    const std::size_t len = std::min(L, s.input_ids.size());
    for (std::size_t i = 0; i < len; ++i) {
      r.input_ids.push_back(s.input_ids[i]);
      r.loss_mask.push_back(s.loss_mask[i]);
      r.position_ids.push_back(static_cast<std::int32_t>(i));
    }
    r.cu_seqlens.push_back(static_cast<std::int32_t>(r.input_ids.size()));
    r.sample_indices.push_back(d);
  }
  r.num_tokens = r.input_ids.size();
  while (r.input_ids.size() < L) {
    r.input_ids.push_back(pad);
    r.loss_mask.push_back(0);
    r.position_ids.push_back(0);
  }
  return r;
}

void ExpectSameRow(const Row& got, const Row& want, const std::string& where) {
  EXPECT_EQ(got.input_ids, want.input_ids) << where;
  EXPECT_EQ(got.loss_mask, want.loss_mask) << where;
  EXPECT_EQ(got.position_ids, want.position_ids) << where;
  EXPECT_EQ(got.cu_seqlens, want.cu_seqlens) << where;
  EXPECT_EQ(got.sample_indices, want.sample_indices) << where;
  EXPECT_EQ(got.num_tokens, want.num_tokens) << where;
}

TEST(Batcher, EpochOrderIsADeterministicPermutationPerSeedAndEpoch) {
  Fixture fx(std::random_device{}(), 200, 8);
  BatcherOptions o;
  o.seed = std::random_device{}();
  Batcher a = Make(fx.ds, o);
  Batcher b = Make(fx.Open(), o);
  BatcherOptions o2 = o;
  o2.seed = o.seed + 1;
  Batcher c = Make(fx.ds, o2);
  for (std::int64_t e = 0; e < 4; ++e) {
    const auto order = a.EpochOrder(e);
    EXPECT_EQ(order, b.EpochOrder(e)) << "same seed and epoch, same order";
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    for (std::uint32_t i = 0; i < sorted.size(); ++i) ASSERT_EQ(sorted[i], i) << "not a permutation";
    EXPECT_NE(order, a.EpochOrder(e + 1)) << "each epoch reshuffles";
    EXPECT_NE(order, c.EpochOrder(e)) << "another seed gives another order";
  }
  BatcherOptions plain = o;
  plain.shuffle = false;
  const auto identity = Make(fx.ds, plain).EpochOrder(3);
  for (std::uint32_t i = 0; i < identity.size(); ++i) EXPECT_EQ(identity[i], i);
}

TEST(Batcher, ShuffleIsUniformOverPositions) {
  // Where sample 0 lands over many seeds: each of 8 slots about 1/8 of the time (binomial, 6 sigma bounds).
  Fixture fx(1, 8, 3);
  const int trials = 16000;
  std::vector<int> hits(8, 0);
  BatcherOptions o;
  for (int t = 0; t < trials; ++t) {
    o.seed = static_cast<std::uint64_t>(t) * 7919u;
    const auto order = Make(fx.ds, o).EpochOrder(0);
    hits[std::find(order.begin(), order.end(), 0u) - order.begin()]++;
  }
  const double mean = trials / 8.0, sigma = std::sqrt(trials * (1.0 / 8) * (7.0 / 8));
  for (int h : hits) EXPECT_NEAR(h, mean, 6 * sigma);
}

TEST(Batcher, PadModeRowsAreTruncatedPaddedSamplesInEpochOrder) {
  Fixture fx(std::random_device{}(), 37, 40);
  BatcherOptions o;
  o.max_length = 24;  // shorter than some samples: truncation
  o.seed = std::random_device{}();
  o.pad_token_id = 7;
  Batcher b = Make(fx.ds, o);
  for (std::int64_t e = 0; e < 3; ++e) {
    EXPECT_EQ(b.RowsInEpoch(e), fx.samples.size());
    for (std::uint32_t idx : b.EpochOrder(e)) {
      auto row = b.Next();
      ASSERT_TRUE(row.ok()) << row.status().ToString();
      EXPECT_EQ(row->epoch, e);
      ExpectSameRow(*row, ExpectedRow(fx.samples, {idx}, o.max_length, o.pad_token_id), "pad");
    }
  }
}

TEST(Batcher, PackModeFillsRowsGreedilyWithWholeDocumentsWithinAnEpoch) {
  Fixture fx(std::random_device{}(), 120, 30);
  BatcherOptions o;
  o.max_length = 64;
  o.mode = RowMode::kPack;
  o.seed = std::random_device{}();
  o.pad_token_id = 3;
  Batcher b = Make(fx.ds, o);
  for (std::int64_t e = 0; e < 3; ++e) {
    // Reference packing: walk the order, open a new row when the next (truncated) document does not fit.
    std::vector<std::vector<std::uint32_t>> rows;
    std::size_t used = 0;
    for (std::uint32_t idx : b.EpochOrder(e)) {
      const std::size_t len = std::min<std::size_t>(o.max_length, fx.samples[idx].input_ids.size());
      if (rows.empty() || used + len > o.max_length) {
        rows.emplace_back();
        used = 0;
      }
      rows.back().push_back(idx);
      used += len;
    }
    EXPECT_EQ(b.RowsInEpoch(e), rows.size());
    EXPECT_LT(rows.size(), fx.samples.size()) << "packing must actually pack";
    for (const auto& docs : rows) {
      auto row = b.Next();
      ASSERT_TRUE(row.ok()) << row.status().ToString();
      EXPECT_EQ(row->epoch, e);
      ExpectSameRow(*row, ExpectedRow(fx.samples, docs, o.max_length, o.pad_token_id), "pack");
    }
  }
}

TEST(Batcher, PackModeGivesAnOverlongSampleARowOfItsOwn) {
  Fixture fx(5, 3, 1);  // three 1-token samples
  const auto file = fx.dir.path() / "long.jsonl";
  {
    std::ofstream f(file);
    f << R"({"input_ids": [1], "loss_mask": [1]})" "\n";
    f << R"({"input_ids": [1,2,3,4,5,6,7,8,9,10], "loss_mask": [1,1,1,1,1,1,1,1,1,1]})" "\n";
    f << R"({"input_ids": [2], "loss_mask": [0]})" "\n";
  }
  auto ds = JsonlDataset::Open(file);
  ASSERT_TRUE(ds.ok());
  BatcherOptions o;
  o.max_length = 4;
  o.mode = RowMode::kPack;
  o.shuffle = false;
  Batcher b = Make(std::make_shared<const JsonlDataset>(std::move(ds).value()), o);
  auto r1 = b.Next(), r2 = b.Next(), r3 = b.Next();
  ASSERT_TRUE(r1.ok() && r2.ok() && r3.ok());
  EXPECT_EQ(r1->cu_seqlens, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(r2->input_ids, (std::vector<std::int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(r2->cu_seqlens, (std::vector<std::int32_t>{0, 4}));
  EXPECT_EQ(r3->cu_seqlens, (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(r3->epoch, 0);
  auto r4 = b.Next();
  ASSERT_TRUE(r4.ok());
  EXPECT_EQ(r4->epoch, 1);
}

TEST(Batcher, StateSavedAsJsonAndRestoredContinuesBitForBit) {
  for (RowMode mode : {RowMode::kPad, RowMode::kPack}) {
    Fixture fx(std::random_device{}(), 50, 20);
    BatcherOptions o;
    o.max_length = 32;
    o.mode = mode;
    o.seed = std::random_device{}();
    Batcher a = Make(fx.ds, o);
    std::mt19937_64 rng(std::random_device{}());
    const int stop_after = 1 + static_cast<int>(rng() % 120);  // often past an epoch boundary
    for (int i = 0; i < stop_after; ++i) ASSERT_TRUE(a.Next().ok());
    const std::string saved = a.State().ToJson().dump();

    // A new process: reopen the file, a fresh batcher, restore from the text.
    Batcher b = Make(fx.Open(), o);
    auto state = BatcherState::FromJson(nlohmann::json::parse(saved));
    ASSERT_TRUE(state.ok()) << state.status().ToString();
    ASSERT_TRUE(b.Restore(*state).ok());
    for (int i = 0; i < 150; ++i) {
      auto ra = a.Next();
      auto rb = b.Next();
      ASSERT_TRUE(ra.ok() && rb.ok());
      EXPECT_EQ(ra->epoch, rb->epoch);
      ExpectSameRow(*rb, *ra, "row " + std::to_string(i) + " after resume");
    }
    EXPECT_EQ(a.State().ToJson(), b.State().ToJson());
  }
}

TEST(Batcher, RestoreRefusesAStateOfAnotherRunOrDataset) {
  Fixture fx(11, 20, 10);
  BatcherOptions o;
  o.seed = 42;
  Batcher a = Make(fx.ds, o);
  ASSERT_TRUE(a.Next().ok());
  const BatcherState s = a.State();

  BatcherOptions other_seed = o;
  other_seed.seed = 43;
  EXPECT_FALSE(Make(fx.ds, other_seed).Restore(s).ok());
  BatcherOptions other_len = o;
  other_len.max_length = 100;
  EXPECT_FALSE(Make(fx.ds, other_len).Restore(s).ok());
  BatcherOptions other_mode = o;
  other_mode.mode = RowMode::kPack;
  EXPECT_FALSE(Make(fx.ds, other_mode).Restore(s).ok());
  Fixture other_data(12, 21, 10);
  EXPECT_FALSE(Make(other_data.ds, o).Restore(s).ok());
  EXPECT_TRUE(Make(fx.ds, o).Restore(s).ok());

  auto j = s.ToJson();
  j.erase("cursor");
  EXPECT_FALSE(BatcherState::FromJson(j).ok());
  j = s.ToJson();
  j["mode"] = "zip";
  EXPECT_FALSE(BatcherState::FromJson(j).ok());
  EXPECT_FALSE(BatcherState::FromJson(nlohmann::json::array()).ok());
}

TEST(Batcher, CreateRefusesZeroLength) {
  Fixture fx(3, 2, 2);
  BatcherOptions o;
  o.max_length = 0;
  EXPECT_FALSE(Batcher::Create(fx.ds, o).ok());
  EXPECT_FALSE(Batcher::Create(nullptr, BatcherOptions{}).ok());
}

}  // namespace
}  // namespace dflash::trainer::data

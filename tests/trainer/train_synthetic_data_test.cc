// trainer/train/synthetic_data: deterministic in the seed, prompts + the target's greedy continuation (checked against
// the whole-sequence reference forward), written in the JSONL format that data/jsonl_dataset.h reads back.
#include "trainer/train/synthetic_data.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>

#include <unistd.h>

#include "decode_test_util.h"

namespace dflash::trainer {
namespace {

SyntheticDataOptions SmallOptions() {
  SyntheticDataOptions o;
  o.num_samples = 5;
  o.prompt_tokens = 7;
  o.continuation_tokens = 20;
  o.num_eval_prompts = 3;
  o.batch_size = 2;  // three decoder batches: 2, 2, 1
  o.seed = 42;
  o.excluded_token_ids = {1023};
  return o;
}

std::filesystem::path TempDir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() /
             ("dflash_synth_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(SyntheticData, SameSeedSameDataOtherSeedOtherPrompts) {
  auto target = testing::RandomTarget(testing::TinyHybridConfig(), {1}, 201);
  auto a = GenerateSyntheticData(*target, SmallOptions());
  auto b = GenerateSyntheticData(*target, SmallOptions());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().ToString();
  ASSERT_EQ(a->train.size(), 5u);
  ASSERT_EQ(a->eval_prompts.size(), 3u);
  for (std::size_t i = 0; i < 5; ++i) {
    EXPECT_EQ(a->train[i].input_ids, b->train[i].input_ids);
    EXPECT_EQ(a->train[i].loss_mask, b->train[i].loss_mask);
  }
  auto other = SmallOptions();
  other.seed = 43;
  auto c = GenerateSyntheticData(*target, other);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(std::vector<std::int32_t>(a->train[0].input_ids.begin(), a->train[0].input_ids.begin() + 7),
            std::vector<std::int32_t>(c->train[0].input_ids.begin(), c->train[0].input_ids.begin() + 7));
  // Prompts depend on (seed, index) only; eval prompts come from another stream than the training prompts.
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(a->eval_prompts[i].input_ids, SyntheticPrompt(42, 1, i, 7, 1024, {1023}));
    EXPECT_NE(a->eval_prompts[i].input_ids,
              std::vector<std::int32_t>(a->train[i].input_ids.begin(), a->train[i].input_ids.begin() + 7));
    EXPECT_EQ(a->eval_prompts[i].loss_mask, std::vector<std::uint8_t>(7, 0));
  }
}

TEST(SyntheticData, PromptsAvoidExcludedTokensAndCoverTheRest) {
  const std::vector<std::int64_t> excluded{0, 3, 5, 9};
  std::vector<int> seen(10, 0);
  for (std::uint64_t i = 0; i < 50; ++i) {
    for (auto t : SyntheticPrompt(7, 0, i, 20, 10, excluded)) {
      ASSERT_TRUE(t >= 0 && t < 10);
      ++seen[static_cast<std::size_t>(t)];
    }
  }
  for (int t = 0; t < 10; ++t) {
    const bool is_excluded = t == 0 || t == 3 || t == 5 || t == 9;
    EXPECT_EQ(seen[t] == 0, is_excluded) << "token " << t << " seen " << seen[t] << " times";
  }
}

TEST(SyntheticData, ContinuationIsTheTargetsGreedyContinuation) {
  auto target = testing::RandomTarget(testing::TinyHybridConfig(), {1}, 211);
  auto data = GenerateSyntheticData(*target, SmallOptions());
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  auto ops = MakeReferenceOps();
  for (const auto& s : data->train) {
    ASSERT_EQ(s.input_ids.size(), 27u);
    EXPECT_EQ(s.loss_mask, [] {
      std::vector<std::uint8_t> m(7, 0);
      m.resize(27, 1);
      return m;
    }());
    const auto ids = torch::tensor(std::vector<std::int64_t>(s.input_ids.begin(), s.input_ids.end()), torch::kLong);
    const auto logits = target->Logits(ids, {}, *ops);  // whole sequence, independent of the decoder
    int exact = 0;
    for (std::int64_t t = 6; t < 26; ++t) {
      const auto row = logits[t];
      const float chosen = row[s.input_ids[t + 1]].item<float>();
      EXPECT_GE(chosen, row.max().item<float>() - 1e-3f) << "position " << t + 1 << " is not the greedy choice";
      exact += row.argmax().item<std::int64_t>() == s.input_ids[t + 1];
    }
    EXPECT_GE(exact, 19);  // at most a near tie may resolve differently
  }
}

TEST(SyntheticData, WrittenJsonlLoadsBack) {
  auto target = testing::RandomTarget(testing::SmallDenseConfig(), {1}, 221);
  auto options = SmallOptions();
  options.excluded_token_ids = {};
  auto data = GenerateSyntheticData(*target, options);
  ASSERT_TRUE(data.ok()) << data.status().ToString();
  const auto dir = TempDir("jsonl");
  ASSERT_TRUE(WriteJsonl(dir / "train.jsonl", data->train).ok());
  ASSERT_TRUE(WriteJsonl(dir / "eval.jsonl", data->eval_prompts).ok());
  auto train = data::JsonlDataset::Open(dir / "train.jsonl");
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  ASSERT_EQ(train->size(), data->train.size());
  for (std::size_t i = 0; i < train->size(); ++i) {
    auto s = train->Get(i);
    ASSERT_TRUE(s.ok());
    EXPECT_EQ(s->input_ids, data->train[i].input_ids);
    EXPECT_EQ(s->loss_mask, data->train[i].loss_mask);
  }
  auto eval = data::JsonlDataset::Open(dir / "eval.jsonl");
  ASSERT_TRUE(eval.ok()) << eval.status().ToString();
  EXPECT_EQ(eval->size(), 3u);
  EXPECT_FALSE(WriteJsonl(dir / "bad.jsonl", {data::Sample{{1, 2}, {1}}}).ok());
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.jsonl"));
  std::filesystem::remove_all(dir);
}

TEST(SyntheticData, BadOptionsAreErrors) {
  auto target = testing::RandomTarget(testing::SmallDenseConfig(), {1}, 231);
  auto o = SmallOptions();
  o.continuation_tokens = 0;
  EXPECT_FALSE(GenerateSyntheticData(*target, o).ok());
  o = SmallOptions();
  for (std::int64_t t = 0; t < 300; ++t) o.excluded_token_ids.push_back(t);
  EXPECT_FALSE(GenerateSyntheticData(*target, o).ok());
}

// The tiny preset's size on this machine: run with --gtest_also_run_disabled_tests (prints the time).
TEST(SyntheticData, DISABLED_TinyPresetTiming) {
  auto target = testing::RandomTarget(testing::TinyHybridConfig(), {1, 5}, 1, 0.02);
  const SyntheticDataOptions o;  // defaults: 256 samples of 32 + 224 tokens, batches of 64
  const auto start = std::chrono::steady_clock::now();
  auto data = GenerateSyntheticData(*target, o);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(data.ok());
  std::printf("%lld samples x %lld tokens, batch %lld: %.2f s\n", (long long)data->train.size(),
              (long long)(o.prompt_tokens + o.continuation_tokens), (long long)o.batch_size, s);
}

}  // namespace
}  // namespace dflash::trainer

// trainer/train/spec_decode: speculative greedy decoding equals plain greedy decoding token for token, the accepted
// lengths are exactly what the proposals deserve (oracle: the block size every step; a proposer right for a chosen
// number of tokens: that number + 1; the last step capped at the token budget, as z-lab's dflash_generate counts),
// tau pooled over steps and averaged per prompt, the drafter sees exactly the target's features of the committed
// context, and the real DFlash drafter runs end to end (its last, shorter block included).
#include "trainer/train/spec_decode.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "decode_test_util.h"

namespace dflash::trainer {
namespace {

using testing::RandomTarget;

std::vector<std::int64_t> Prompt(std::int64_t n, std::int64_t vocab, std::uint64_t seed) {
  const auto t = testing::RandomTokens(n, vocab, seed);
  return {t.data_ptr<std::int64_t>(), t.data_ptr<std::int64_t>() + n};
}

// Knows the greedy continuation of each prompt; proposes the next `right` greedy tokens of a block (right drawn per
// step from `rng`, or always B - 1 when perfect) and then tokens that are surely wrong. `budget`: the run's
// max_new_tokens, to know what a step may count.
class ScriptedProposer final : public BlockProposer {
 public:
  ScriptedProposer(std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> greedy, std::int64_t vocab,
                   bool perfect, std::int64_t budget)
      : greedy_(std::move(greedy)), vocab_(vocab), perfect_(perfect), budget_(budget) {}

  std::vector<std::int64_t> Propose(const DraftRequest& r) override {
    for (const auto& [prompt, continuation] : greedy_) {
      if (r.tokens.size() < prompt.size() || !std::equal(prompt.begin(), prompt.end(), r.tokens.begin())) continue;
      const std::size_t generated = r.tokens.size() - prompt.size();  // the pending token included
      const std::int64_t right = perfect_ ? r.block_size - 1 : std::int64_t(rng_() % std::uint64_t(r.block_size));
      std::vector<std::int64_t> out;
      for (std::int64_t i = 0; i < r.block_size - 1; ++i) {
        const std::int64_t want = continuation.at(generated + i);
        out.push_back(i < right ? want : (want + 1 + std::int64_t(rng_() % 7)) % vocab_);
      }
      const std::int64_t left = budget_ - std::int64_t(generated);
      planned.push_back(std::min(right + 1, left));
      requested_blocks.push_back(r.block_size);
      return out;
    }
    ADD_FAILURE() << "no prompt matches the request";
    return std::vector<std::int64_t>(r.block_size - 1, 0);
  }

  std::vector<std::int64_t> planned;           // per call: right + 1, capped at the tokens left in the budget
  std::vector<std::int64_t> requested_blocks;  // per call: the block size asked for

 private:
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> greedy_;
  std::int64_t vocab_;
  bool perfect_;
  std::int64_t budget_;
  std::mt19937_64 rng_{7};
};

struct TinyWorld {
  std::unique_ptr<TargetModel> target = RandomTarget(testing::TinyHybridConfig(), {1, 5}, 101);
  std::vector<std::vector<std::int64_t>> prompts{Prompt(9, 1024, 102), Prompt(23, 1024, 103)};
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> Greedy(std::int64_t n) const {
    std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> out;
    for (const auto& p : prompts) {
      auto g = GreedyDecode(*target, p, n);
      EXPECT_TRUE(g.ok()) << g.status().ToString();
      out[p] = g->tokens;
    }
    return out;
  }
};

// Runs a ScriptedProposer over the setup's prompts and checks that every output is the greedy continuation.
struct ScriptedRun {
  SpecDecodeReport report;
  std::vector<std::int64_t> planned;           // what the proposer's steps deserve, over all prompts
  std::vector<std::int64_t> requested_blocks;  // the block size of each step, over all prompts
};
ScriptedRun RunScripted(const TinyWorld& s, std::int64_t block, std::int64_t max_new, bool perfect) {
  const auto greedy = s.Greedy(max_new + block);
  ScriptedProposer proposer(greedy, 1024, perfect, max_new);
  SpecDecodeOptions o;
  o.max_new_tokens = max_new;
  o.warmup = false;
  auto report = EvaluateSpeculative(*s.target, proposer, block, s.prompts, o);
  EXPECT_TRUE(report.ok()) << report.status().ToString();
  if (!report.ok()) return {};
  for (std::size_t i = 0; i < s.prompts.size(); ++i) {
    const auto& want = greedy.at(s.prompts[i]);
    EXPECT_EQ(report->prompts[i].tokens, std::vector<std::int64_t>(want.begin(), want.begin() + max_new));
    EXPECT_EQ(report->prompts[i].near_tie_divergence, -1);
  }
  return {*report, proposer.planned, proposer.requested_blocks};
}

TEST(SpecDecode, PerfectProposalsGiveTauEqualToTheBlockSizeWhenTheBudgetIsWholeBlocks) {
  TinyWorld s;
  // 1 token from the prefill, then 30 = 5 steps of 6.
  const auto run = RunScripted(s, /*block=*/6, /*max_new=*/31, /*perfect=*/true);
  EXPECT_DOUBLE_EQ(run.report.tau_pooled, 6.0);
  EXPECT_DOUBLE_EQ(run.report.tau_per_prompt_mean, 6.0);
  ASSERT_EQ(run.report.prompts.size(), 2u);
  for (const auto& p : run.report.prompts) EXPECT_EQ(p.accept_lengths, std::vector<std::int64_t>(5, 6));
  EXPECT_EQ(run.report.generated_tokens, 62);
  EXPECT_GT(run.report.speedup, 0);
}

// As z-lab's dflash_generate counts: the last step verifies only the tokens left (pending + left proposals) and a
// bonus token past max_new_tokens is neither committed nor counted.
TEST(SpecDecode, TheLastStepStopsAtTheBudget) {
  TinyWorld s;
  // 1 token from the prefill, 26 left: 4 steps of 6, then 2 left: a block of 3 (pending + 2 proposals), counted 2.
  const auto run = RunScripted(s, /*block=*/6, /*max_new=*/27, /*perfect=*/true);
  ASSERT_EQ(run.report.prompts.size(), 2u);
  for (const auto& p : run.report.prompts) {
    EXPECT_EQ(p.accept_lengths, (std::vector<std::int64_t>{6, 6, 6, 6, 2}));
    EXPECT_EQ(p.tokens.size(), 27u);
  }
  EXPECT_EQ(run.requested_blocks, (std::vector<std::int64_t>{6, 6, 6, 6, 3, 6, 6, 6, 6, 3}));
  EXPECT_DOUBLE_EQ(run.report.tau_pooled, 26.0 / 5.0);
  EXPECT_EQ(run.report.generated_tokens, 54);
  // 29 left after the prefill: the last step may count 5 of the block's 6 (5 proposals right, the bonus dropped).
  const auto odd = RunScripted(s, /*block=*/6, /*max_new=*/30, /*perfect=*/true);
  for (const auto& p : odd.report.prompts) EXPECT_EQ(p.accept_lengths, (std::vector<std::int64_t>{6, 6, 6, 6, 5}));
  EXPECT_DOUBLE_EQ(odd.report.tau_pooled, 29.0 / 5.0);
}

// tau_pooled weighs every step alike; tau_per_prompt_mean (the public benchmark's average) every prompt alike.
TEST(SpecDecode, PooledAndPerPromptTauAreTheTwoPublicAverages) {
  TinyWorld s;
  const auto run = RunScripted(s, /*block=*/5, /*max_new=*/40, /*perfect=*/false);
  std::int64_t sum = 0, steps = 0;
  double per_prompt = 0;
  for (const auto& p : run.report.prompts) {
    std::int64_t prompt_sum = 0;
    for (auto a : p.accept_lengths) prompt_sum += a;
    EXPECT_EQ(prompt_sum, 39);  // every generated token but the prefill's is counted once
    EXPECT_DOUBLE_EQ(p.tau, double(prompt_sum) / double(p.accept_lengths.size()));
    sum += prompt_sum;
    steps += std::int64_t(p.accept_lengths.size());
    per_prompt += p.tau;
  }
  EXPECT_EQ(run.report.steps, steps);
  EXPECT_DOUBLE_EQ(run.report.tau_pooled, double(sum) / double(steps));
  EXPECT_DOUBLE_EQ(run.report.tau_per_prompt_mean, per_prompt / 2.0);
  // The two prompts take different numbers of steps here, so the averages differ.
  ASSERT_NE(run.report.prompts[0].accept_lengths.size(), run.report.prompts[1].accept_lengths.size());
  EXPECT_NE(run.report.tau_pooled, run.report.tau_per_prompt_mean);
  const auto j = run.report.ToJson();
  EXPECT_DOUBLE_EQ(j.at("tau_pooled").get<double>(), run.report.tau_pooled);
  EXPECT_DOUBLE_EQ(j.at("tau_per_prompt_mean").get<double>(), run.report.tau_per_prompt_mean);
  EXPECT_FALSE(j.contains("tau"));
}

TEST(SpecDecode, PartlyRightProposalsAcceptExactlyTheRightPrefixAndOutputStaysGreedy) {
  TinyWorld s;
  const auto run = RunScripted(s, /*block=*/5, /*max_new=*/40, /*perfect=*/false);
  std::vector<std::int64_t> accepted;
  for (const auto& p : run.report.prompts) accepted.insert(accepted.end(), p.accept_lengths.begin(), p.accept_lengths.end());
  EXPECT_EQ(accepted, run.planned);
  EXPECT_LT(run.report.tau_pooled, 5.0);
  EXPECT_GT(run.report.tau_pooled, 1.0);
}

TEST(SpecDecode, RandomProposalsStillDecodeExactlyGreedy) {
  TinyWorld s;
  const std::int64_t max_new = 20;
  class Random final : public BlockProposer {
   public:
    std::vector<std::int64_t> Propose(const DraftRequest& r) override {
      std::vector<std::int64_t> out;
      for (std::int64_t i = 0; i + 1 < r.block_size; ++i) out.push_back(std::int64_t(rng() % 1024));
      return out;
    }
    std::mt19937_64 rng{3};
  } random;
  SpecDecodeOptions o;
  o.max_new_tokens = max_new;
  auto report = EvaluateSpeculative(*s.target, random, 8, s.prompts, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  const auto greedy = s.Greedy(max_new);
  for (std::size_t i = 0; i < s.prompts.size(); ++i) EXPECT_EQ(report->prompts[i].tokens, greedy.at(s.prompts[i]));
  EXPECT_GE(report->tau_pooled, 1.0);
}

setup::DrafterConfig TinyDrafterConfig() {
  const nlohmann::json j = {{"hidden_size", 256},     {"intermediate_size", 512}, {"num_hidden_layers", 2},
                            {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 64},
                            {"vocab_size", 1024},     {"rms_norm_eps", 1e-6},      {"rope_theta", 10000000.0},
                            {"block_size", 8},        {"mask_token_id", 1023},     {"num_target_layers", 8},
                            {"sliding_window", 16},
                            {"layer_types", {"sliding_attention", "full_attention"}}};
  auto c = setup::ParseDrafterConfig(j);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// Wraps the real drafter proposer and checks what it is given against the whole-sequence features.
class CheckingProposer final : public BlockProposer {
 public:
  CheckingProposer(BlockProposer& inner, const TargetModel& target) : inner_(inner), target_(target) {}
  std::vector<std::int64_t> Propose(const DraftRequest& r) override {
    const std::vector<std::int64_t> context(r.tokens.begin(), r.tokens.end() - 1);
    const auto want = target_.Features(torch::tensor(context, torch::kLong), {}, *ops_);
    EXPECT_EQ(r.context_features.sizes(), want.sizes());
    EXPECT_LT((r.context_features - want).abs().max().item<double>(), 1e-3);
    ++calls;
    return inner_.Propose(r);
  }
  int calls = 0;

 private:
  BlockProposer& inner_;
  const TargetModel& target_;
  std::unique_ptr<Ops> ops_ = MakeReferenceOps();
};

TEST(SpecDecode, DflashDrafterSeesTheTargetFeaturesOfTheCommittedContext) {
  TinyWorld s;
  const auto config = TinyDrafterConfig();
  const TargetModel* target = s.target.get();  // taps {1, 5} = TappedLayers(8, 2), the drafter's
  ASSERT_EQ(target->taps(), *setup::TappedLayers(8, 2));
  auto drafter = Drafter::Create(config, torch::kCPU, 5);
  auto ops = MakeReferenceOps();
  DrafterProposer dflash(*drafter, *target, *ops, torch::kFloat);
  CheckingProposer checking(dflash, *target);
  SpecDecodeOptions o;
  o.max_new_tokens = 24;
  o.warmup = false;
  auto report = EvaluateSpeculative(*target, checking, config.block_size, s.prompts, o);
  ASSERT_TRUE(report.ok()) << report.status().ToString();
  EXPECT_EQ(checking.calls, report->steps);
  // The public entry point: same drafter, exact output, the numbers in the JSON.
  auto direct = EvaluateSpeculative(*target, *drafter, s.prompts, o, *ops);
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_EQ(direct->prompts[0].tokens, report->prompts[0].tokens);
  const auto j = direct->ToJson();
  EXPECT_EQ(j.at("block_size"), 8);
  EXPECT_EQ(j.at("generated_tokens"), 48);
  EXPECT_EQ(j.at("prompts").size(), 2u);
  EXPECT_GE(j.at("tau_pooled").get<double>(), 1.0);
  EXPECT_GE(j.at("tau_per_prompt_mean").get<double>(), 1.0);
}

TEST(SpecDecode, BadInputsAreErrors) {
  TinyWorld s;
  class Never final : public BlockProposer {
   public:
    std::vector<std::int64_t> Propose(const DraftRequest&) override { return {}; }
  } never;
  SpecDecodeOptions o;
  o.max_new_tokens = 4;
  EXPECT_FALSE(EvaluateSpeculative(*s.target, never, 4, {{}}, o).ok());           // empty prompt
  EXPECT_FALSE(EvaluateSpeculative(*s.target, never, 4, {{5, 2000}}, o).ok());    // outside the vocabulary
  EXPECT_FALSE(EvaluateSpeculative(*s.target, never, 1, s.prompts, o).ok());     // block of 1
  auto wrong_size = EvaluateSpeculative(*s.target, never, 4, s.prompts, o);      // proposer returns nothing
  ASSERT_FALSE(wrong_size.ok());
  EXPECT_NE(wrong_size.status().message().find("returned 0 tokens"), std::string::npos);
}

}  // namespace
}  // namespace dflash::trainer

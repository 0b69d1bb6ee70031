// trainer/train/spec_decode: speculative greedy decoding equals plain greedy decoding token for token, the accepted
// lengths are exactly what the proposals deserve (oracle: the block size every step; a proposer right for a chosen
// number of tokens: that number + 1), the drafter sees exactly the target's features of the committed context, and the
// real DFlash drafter runs end to end.
#include "trainer/train/spec_decode.h"

#include <gtest/gtest.h>

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
// step from `rng`, or always B - 1 when perfect) and then tokens that are surely wrong.
class ScriptedProposer final : public BlockProposer {
 public:
  ScriptedProposer(std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> greedy, std::int64_t vocab,
                   bool perfect)
      : greedy_(std::move(greedy)), vocab_(vocab), perfect_(perfect) {}

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
      planned.push_back(right + 1);
      return out;
    }
    ADD_FAILURE() << "no prompt matches the request";
    return std::vector<std::int64_t>(r.block_size - 1, 0);
  }

  std::vector<std::int64_t> planned;  // per call: right + 1

 private:
  std::map<std::vector<std::int64_t>, std::vector<std::int64_t>> greedy_;
  std::int64_t vocab_;
  bool perfect_;
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
  std::vector<std::int64_t> planned;  // the proposer's right + 1, per step over all prompts
};
ScriptedRun RunScripted(const TinyWorld& s, std::int64_t block, std::int64_t max_new, bool perfect) {
  const auto greedy = s.Greedy(max_new + block);
  ScriptedProposer proposer(greedy, 1024, perfect);
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
  return {*report, proposer.planned};
}

TEST(SpecDecode, PerfectProposalsGiveTauEqualToTheBlockSize) {
  TinyWorld s;
  const auto run = RunScripted(s, /*block=*/6, /*max_new=*/30, /*perfect=*/true);
  EXPECT_DOUBLE_EQ(run.report.tau, 6.0);
  ASSERT_EQ(run.report.prompts.size(), 2u);
  // 1 token from the prefill, then ceil(29 / 6) = 5 steps of 6.
  for (const auto& p : run.report.prompts) EXPECT_EQ(p.accept_lengths, std::vector<std::int64_t>(5, 6));
  EXPECT_EQ(run.report.generated_tokens, 60);
  EXPECT_GT(run.report.speedup, 0);
}

TEST(SpecDecode, PartlyRightProposalsAcceptExactlyTheRightPrefixAndOutputStaysGreedy) {
  TinyWorld s;
  const auto run = RunScripted(s, /*block=*/5, /*max_new=*/40, /*perfect=*/false);
  std::vector<std::int64_t> accepted;
  for (const auto& p : run.report.prompts) accepted.insert(accepted.end(), p.accept_lengths.begin(), p.accept_lengths.end());
  EXPECT_EQ(accepted, run.planned);
  EXPECT_LT(run.report.tau, 5.0);
  EXPECT_GT(run.report.tau, 1.0);
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
  EXPECT_GE(report->tau, 1.0);
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
  EXPECT_GE(j.at("tau").get<double>(), 1.0);
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

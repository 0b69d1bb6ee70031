#include "trainer/train/spec_decode.h"

#include <algorithm>
#include <chrono>
#include <string>

#include "trainer/models/target_decoder.h"
#include "trainer/nn/layers.h"

namespace dflash::trainer {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

torch::Tensor Ids(std::span<const std::int64_t> ids, const torch::Device& device) {
  return torch::tensor(std::vector<std::int64_t>(ids.begin(), ids.end()), torch::kLong).to(device);
}

std::vector<std::int64_t> ToVector(const torch::Tensor& ids) {
  const auto cpu = ids.to(torch::kCPU, torch::kLong).contiguous();
  return {cpu.data_ptr<std::int64_t>(), cpu.data_ptr<std::int64_t>() + cpu.numel()};
}

// The top-1 token of logits [vocab] and its lead over the second.
std::pair<std::int64_t, double> TopWithMargin(const torch::Tensor& logits) {
  const auto top = std::get<0>(logits.topk(2)).to(torch::kCPU, torch::kDouble);
  return {logits.argmax().item<std::int64_t>(), (top[0] - top[1]).item<double>()};
}

struct SpecRun {
  std::vector<std::int64_t> tokens;  // generated
  std::vector<std::int64_t> accept_lengths;
  double seconds = 0;
};

SpecRun RunSpeculative(const TargetModel& target, BlockProposer& proposer, std::int64_t block_size,
                       const std::vector<std::int64_t>& prompt, std::int64_t max_new_tokens) {
  const auto device = target.embed_tokens().device();
  const std::int64_t vocab = target.config().vocab_size;
  const auto start = Clock::now();
  TargetDecoder decoder(target);
  const auto prefill = decoder.Extend(Ids(prompt, device));
  std::vector<std::int64_t> committed = prompt;
  committed.push_back(prefill.logits[-1].argmax().item<std::int64_t>());
  torch::Tensor features = prefill.features;  // of positions 0 ... S-1
  SpecRun run;
  std::int64_t generated = 1;
  while (generated < max_new_tokens) {
    const std::int64_t left = max_new_tokens - generated;
    const std::int64_t verify_size = std::min(block_size, left + 1);
    const std::vector<std::int64_t> proposals = proposer.Propose({features, committed, verify_size});
    TORCH_CHECK(static_cast<std::int64_t>(proposals.size()) == verify_size - 1, "the proposer returned ",
                proposals.size(), " tokens for a block of ", verify_size);
    for (auto t : proposals) TORCH_CHECK(t >= 0 && t < vocab, "the proposer returned token ", t, " outside the vocabulary");
    std::vector<std::int64_t> block{committed.back()};
    block.insert(block.end(), proposals.begin(), proposals.end());
    const std::int64_t s = decoder.length();
    const auto verify = decoder.Extend(Ids(block, device), /*keep_rollback=*/true);
    const auto choices = ToVector(verify.logits.argmax(-1));  // the target's token after each block token
    std::int64_t accepted = 0;
    while (accepted < verify_size - 1 && proposals[accepted] == choices[accepted]) ++accepted;
    // The accepted proposals and the target's choice after them, within the budget.
    const std::int64_t produced = std::min(accepted + 1, left);
    committed.insert(committed.end(), proposals.begin(), proposals.begin() + accepted);
    if (produced == accepted + 1) committed.push_back(choices[accepted]);
    decoder.Truncate(s + produced);
    features = torch::cat({features, verify.features.narrow(0, 0, produced)});
    run.accept_lengths.push_back(produced);
    generated += produced;
  }
  run.seconds = SecondsSince(start);
  TORCH_CHECK(static_cast<std::int64_t>(committed.size() - prompt.size()) == max_new_tokens, "speculative decoding ",
              "committed ", committed.size() - prompt.size(), " tokens for a budget of ", max_new_tokens);
  run.tokens.assign(committed.begin() + static_cast<std::ptrdiff_t>(prompt.size()), committed.end());
  return run;
}

GreedyDecodeResult RunGreedy(const TargetModel& target, const std::vector<std::int64_t>& prompt,
                             std::int64_t max_new_tokens) {
  const auto device = target.embed_tokens().device();
  const auto start = Clock::now();
  TargetDecoder decoder(target);
  auto logits = decoder.Extend(Ids(prompt, device)).logits[-1];
  GreedyDecodeResult r;
  while (true) {
    const auto [token, margin] = TopWithMargin(logits);
    r.tokens.push_back(token);
    r.margins.push_back(margin);
    if (static_cast<std::int64_t>(r.tokens.size()) == max_new_tokens) break;
    logits = decoder.Step(torch::full({1}, token, torch::TensorOptions().dtype(torch::kLong).device(device))).logits[0];
  }
  r.seconds = SecondsSince(start);
  return r;
}

Status CheckInputs(const TargetModel& target, const std::vector<std::vector<std::int64_t>>& prompts,
                   std::int64_t max_new_tokens) {
  if (!target.options().full) return InvalidArgument("decoding needs a target loaded with full = true");
  if (max_new_tokens < 1) return InvalidArgument("max_new_tokens must be >= 1, got " + std::to_string(max_new_tokens));
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return InvalidArgument("prompt " + std::to_string(i) + " is empty");
    for (auto t : prompts[i]) {
      if (t < 0 || t >= target.config().vocab_size) {
        return InvalidArgument("prompt " + std::to_string(i) + " holds token " + std::to_string(t) +
                               " outside the vocabulary of " + std::to_string(target.config().vocab_size));
      }
    }
  }
  return Status::Ok();
}

double Ratio(double a, double b) { return b > 0 ? a / b : 0; }

}  // namespace

DrafterProposer::DrafterProposer(const Drafter& drafter, const TargetModel& target, Ops& ops,
                                 torch::Dtype compute_dtype)
    : drafter_(drafter), target_(target), ops_(ops), compute_dtype_(compute_dtype) {}

std::vector<std::int64_t> DrafterProposer::Propose(const DraftRequest& request) {
  torch::NoGradGuard no_grad;
  const setup::DrafterConfig& c = drafter_.config();
  const std::int64_t b = request.block_size, s = request.context_features.size(0);
  TORCH_CHECK(b >= 2 && b <= c.block_size, "DrafterProposer: block of ", b, " for a drafter of block_size ",
              c.block_size);
  TORCH_CHECK(!request.tokens.empty() && s == static_cast<std::int64_t>(request.tokens.size()) - 1,
              "DrafterProposer: ", s, " context features for ", request.tokens.size(), " committed tokens");
  const auto device = target_.embed_tokens().device();
  const auto longs = torch::TensorOptions().dtype(torch::kLong).device(device);
  auto block_tokens = torch::full({b}, c.mask_token_id, longs);
  block_tokens[0] = request.tokens.back();
  DraftMask mask;
  mask.anchors = torch::full({1}, s, longs.dtype(torch::kInt));
  mask.valid = torch::ones({1}, longs.dtype(torch::kByte));
  mask.context_len = s;
  mask.block_size = static_cast<int>(b);
  const auto hidden = drafter_.Forward(request.context_features, block_tokens, torch::arange(s, s + b, longs),
                                       torch::arange(s, longs), mask, target_.embed_tokens(), compute_dtype_, ops_);
  return ToVector(nn::Linear(hidden.narrow(0, 1, b - 1), target_.lm_head()).argmax(-1));
}

nlohmann::json SpecDecodeReport::ToJson() const {
  nlohmann::json per_prompt = nlohmann::json::array();
  for (const auto& p : prompts) {
    per_prompt.push_back({{"prompt_tokens", p.prompt_tokens},
                          {"generated_tokens", p.tokens.size()},
                          {"steps", p.accept_lengths.size()},
                          {"tau", p.tau},
                          {"spec_seconds", p.spec_seconds},
                          {"greedy_seconds", p.greedy_seconds},
                          {"speedup", p.speedup},
                          {"near_tie_divergence", p.near_tie_divergence}});
  }
  return {{"block_size", block_size},
          {"steps", steps},
          {"generated_tokens", generated_tokens},
          {"tau_pooled", tau_pooled},
          {"tau_per_prompt_mean", tau_per_prompt_mean},
          {"tau_convention", "budget-capped (dflash_generate): a step counts min(accepted + 1, tokens left)"},
          {"spec_seconds", spec_seconds},
          {"greedy_seconds", greedy_seconds},
          {"speedup", speedup},
          {"prompts", per_prompt}};
}

Result<GreedyDecodeResult> GreedyDecode(const TargetModel& target, const std::vector<std::int64_t>& prompt,
                                        std::int64_t max_new_tokens) {
  DFLASH_RETURN_IF_ERROR(CheckInputs(target, {prompt}, max_new_tokens));
  try {
    return RunGreedy(target, prompt, max_new_tokens);
  } catch (const c10::Error& e) {
    return Internal(std::string("greedy decoding: ") + e.what_without_backtrace());
  }
}

Result<SpecDecodeReport> EvaluateSpeculative(const TargetModel& target, const Drafter& drafter,
                                             const std::vector<std::vector<std::int64_t>>& prompts,
                                             const SpecDecodeOptions& options, Ops& ops) {
  DrafterProposer proposer(drafter, target, ops, target.options().dtype);
  return EvaluateSpeculative(target, proposer, drafter.config().block_size, prompts, options);
}

Result<SpecDecodeReport> EvaluateSpeculative(const TargetModel& target, BlockProposer& proposer,
                                             std::int64_t block_size,
                                             const std::vector<std::vector<std::int64_t>>& prompts,
                                             const SpecDecodeOptions& options) {
  DFLASH_RETURN_IF_ERROR(CheckInputs(target, prompts, options.max_new_tokens));
  if (block_size < 2) return InvalidArgument("block_size must be >= 2, got " + std::to_string(block_size));
  const double tie_tolerance =
      options.tie_tolerance >= 0 ? options.tie_tolerance : (target.options().dtype == torch::kFloat ? 1e-3 : 0.1);
  SpecDecodeReport report;
  report.block_size = block_size;
  try {
    if (options.warmup && !prompts.empty()) {
      const std::int64_t n = std::min<std::int64_t>(options.max_new_tokens, 2 * block_size);
      RunGreedy(target, prompts[0], n);
      RunSpeculative(target, proposer, block_size, prompts[0], n);
    }
    std::int64_t accepted_sum = 0, prompts_with_steps = 0;
    double prompt_tau_sum = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      const GreedyDecodeResult greedy = RunGreedy(target, prompts[i], options.max_new_tokens);
      SpecRun spec = RunSpeculative(target, proposer, block_size, prompts[i], options.max_new_tokens);
      PromptDecodeReport p;
      p.prompt_tokens = static_cast<std::int64_t>(prompts[i].size());
      const auto diff = std::mismatch(spec.tokens.begin(), spec.tokens.end(), greedy.tokens.begin());
      if (diff.first != spec.tokens.end()) {
        const auto at = diff.first - spec.tokens.begin();
        if (greedy.margins[at] > tie_tolerance) {
          return Internal("speculative decoding diverged from greedy decoding on prompt " + std::to_string(i) +
                          " at generated token " + std::to_string(at) + " (" + std::to_string(*diff.first) +
                          " vs " + std::to_string(*diff.second) + ", the target's top-2 logit gap " +
                          std::to_string(greedy.margins[at]) + " exceeds the tie tolerance " +
                          std::to_string(tie_tolerance) + ")");
        }
        p.near_tie_divergence = at;
      }
      p.tokens = std::move(spec.tokens);
      p.accept_lengths = std::move(spec.accept_lengths);
      std::int64_t sum = 0;
      for (auto a : p.accept_lengths) sum += a;
      p.tau = Ratio(double(sum), double(p.accept_lengths.size()));
      p.spec_seconds = spec.seconds;
      p.greedy_seconds = greedy.seconds;
      p.speedup = Ratio(greedy.seconds, spec.seconds);
      accepted_sum += sum;
      if (!p.accept_lengths.empty()) {
        ++prompts_with_steps;
        prompt_tau_sum += p.tau;
      }
      report.steps += static_cast<std::int64_t>(p.accept_lengths.size());
      report.generated_tokens += static_cast<std::int64_t>(p.tokens.size());
      report.spec_seconds += p.spec_seconds;
      report.greedy_seconds += p.greedy_seconds;
      report.prompts.push_back(std::move(p));
    }
    report.tau_pooled = Ratio(double(accepted_sum), double(report.steps));
    report.tau_per_prompt_mean = Ratio(prompt_tau_sum, double(prompts_with_steps));
    report.speedup = Ratio(report.greedy_seconds, report.spec_seconds);
  } catch (const c10::Error& e) {
    return Internal(std::string("speculative decoding: ") + e.what_without_backtrace());
  }
  return report;
}

}  // namespace dflash::trainer

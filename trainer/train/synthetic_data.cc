#include "trainer/train/synthetic_data.h"

#include <algorithm>
#include <random>
#include <span>
#include <string>

#include "base/atomic_file.h"
#include "trainer/data/rng.h"
#include "trainer/models/target_decoder.h"

namespace dflash::trainer {
namespace {

// Excluded ids inside [0, vocab), sorted, without repeats.
std::vector<std::int64_t> ExcludedInVocab(const std::vector<std::int64_t>& excluded, std::int64_t vocab) {
  std::vector<std::int64_t> out;
  for (auto t : excluded) {
    if (t >= 0 && t < vocab) out.push_back(t);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// The greedy continuations [rows, G] of prompts [rows, P] (int64, on the target's device), decoded together.
torch::Tensor GreedyContinuations(const TargetModel& target, const torch::Tensor& prompts, std::int64_t length) {
  TargetDecoder decoder(target, prompts.size(0));
  auto next = decoder.Extend(prompts).logits.select(1, -1).argmax(-1);  // [rows]
  std::vector<torch::Tensor> tokens{next};
  while (static_cast<std::int64_t>(tokens.size()) < length) {
    next = decoder.Step(next).logits.argmax(-1);
    tokens.push_back(next);
  }
  return torch::stack(tokens, 1).to(torch::kCPU);
}

void AppendList(std::string& out, const char* key, std::span<const std::int32_t> values) {
  out += '"';
  out += key;
  out += "\": [";
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(values[i]);
  }
  out += ']';
}

}  // namespace

std::vector<std::int32_t> SyntheticPrompt(std::uint64_t seed, std::uint64_t stream, std::uint64_t index,
                                          std::int64_t length, std::int64_t vocab,
                                          const std::vector<std::int64_t>& excluded) {
  const auto skip = ExcludedInVocab(excluded, vocab);
  const std::uint64_t allowed = static_cast<std::uint64_t>(vocab) - skip.size();
  std::mt19937_64 rng(data::DeriveSeed(seed, {stream, index}));
  std::vector<std::int32_t> prompt(static_cast<std::size_t>(std::max<std::int64_t>(length, 0)));
  for (auto& token : prompt) {
    // The r-th allowed id: step over every excluded id at or below it.
    auto r = static_cast<std::int64_t>(data::UniformBelow(rng, allowed));
    for (auto e : skip) r += r >= e ? 1 : 0;
    token = static_cast<std::int32_t>(r);
  }
  return prompt;
}

Result<SyntheticData> GenerateSyntheticData(const TargetModel& target, const SyntheticDataOptions& o) {
  if (o.num_samples < 1 || o.prompt_tokens < 1 || o.continuation_tokens < 1 || o.num_eval_prompts < 0 ||
      o.batch_size < 1) {
    return InvalidArgument("synthetic data: num_samples, prompt_tokens, continuation_tokens and batch_size must be "
                           ">= 1 and num_eval_prompts >= 0");
  }
  if (!target.options().full) return InvalidArgument("synthetic data: the target must be loaded with full = true");
  const std::int64_t vocab = target.config().vocab_size;
  if (ExcludedInVocab(o.excluded_token_ids, vocab).size() >= static_cast<std::size_t>(vocab)) {
    return InvalidArgument("synthetic data: excluded_token_ids leave no token to draw prompts from");
  }
  SyntheticData out;
  const auto device = target.embed_tokens().device();
  const auto p = static_cast<std::size_t>(o.prompt_tokens);
  try {
    torch::NoGradGuard no_grad;
    for (std::int64_t first = 0; first < o.num_samples; first += o.batch_size) {
      const std::int64_t rows = std::min(o.batch_size, o.num_samples - first);
      auto prompts = torch::empty({rows, o.prompt_tokens}, torch::kInt);
      for (std::int64_t r = 0; r < rows; ++r) {
        const auto prompt = SyntheticPrompt(o.seed, 0, first + r, o.prompt_tokens, vocab, o.excluded_token_ids);
        std::copy(prompt.begin(), prompt.end(), prompts[r].data_ptr<std::int32_t>());
      }
      const auto continuations =
          GreedyContinuations(target, prompts.to(device, torch::kLong), o.continuation_tokens).to(torch::kInt);
      for (std::int64_t r = 0; r < rows; ++r) {
        data::Sample s;
        const auto* prompt = prompts[r].data_ptr<std::int32_t>();
        const auto row = continuations[r].contiguous();
        const auto* cont = row.data_ptr<std::int32_t>();
        s.input_ids.assign(prompt, prompt + p);
        s.input_ids.insert(s.input_ids.end(), cont, cont + o.continuation_tokens);
        s.loss_mask.assign(p, 0);
        s.loss_mask.resize(s.input_ids.size(), 1);
        out.train.push_back(std::move(s));
      }
    }
  } catch (const c10::Error& e) {
    return Internal(std::string("synthetic data: decoding failed: ") + e.what_without_backtrace());
  }
  for (std::int64_t i = 0; i < o.num_eval_prompts; ++i) {
    data::Sample s;
    s.input_ids = SyntheticPrompt(o.seed, 1, static_cast<std::uint64_t>(i), o.prompt_tokens, vocab,
                                  o.excluded_token_ids);
    s.loss_mask.assign(p, 0);
    out.eval_prompts.push_back(std::move(s));
  }
  return out;
}

Status WriteJsonl(const std::filesystem::path& file, const std::vector<data::Sample>& samples) {
  for (std::size_t i = 0; i < samples.size(); ++i) {
    if (samples[i].input_ids.empty() || samples[i].input_ids.size() != samples[i].loss_mask.size()) {
      return InvalidArgument("sample " + std::to_string(i) + " has " + std::to_string(samples[i].input_ids.size()) +
                             " input_ids and " + std::to_string(samples[i].loss_mask.size()) +
                             " loss_mask entries (both must be the same, non-zero)");
    }
  }
  return AtomicWriteFile(file, [&](const ByteSink& sink) -> Status {
    std::string line;
    for (const auto& s : samples) {
      line.clear();
      line += '{';
      AppendList(line, "input_ids", s.input_ids);
      line += ", ";
      const std::vector<std::int32_t> mask(s.loss_mask.begin(), s.loss_mask.end());
      AppendList(line, "loss_mask", mask);
      line += "}\n";
      DFLASH_RETURN_IF_ERROR(sink(std::as_bytes(std::span(line.data(), line.size()))));
    }
    return Status::Ok();
  });
}

}  // namespace dflash::trainer

// interop_dump: writes what dflash-train computes for given prompts to a .safetensors file, for the interop suite
// (tests/interop/interop_test.py) to set beside transformers' Qwen3.5 and the public DFlash drafter. Test-only.
//   interop_dump target  TARGET_DIR PROMPTS.jsonl MAX_NEW OUT.safetensors
//       per prompt i: greedy.i int64 [MAX_NEW] (GreedyDecode), and over prompt + those tokens minus the last:
//       logits.i fp32 [T, vocab], features.i fp32 [T, L * hidden] (the outputs of every layer 0 ... L-1, in order)
//   interop_dump drafter TARGET_DIR DRAFTER_DIR PROMPTS.jsonl OUT.safetensors
//       per prompt i (S + 1 tokens): context.i fp32 [S, taps * hidden] (the target's features of tokens 0 ... S-1),
//       block.i int64 [B] ([token S, MASK x (B-1)]), logits.i fp32 [B, vocab] (the drafter's block at anchor S
//       through the target's lm_head)
// Everything runs on the CPU in fp32 on LibTorch's reference operations. Exit 0, or 2 with one line on stderr.
#include <torch/torch.h>

#include <cstdlib>
#include <iostream>
#include <numeric>
#include <string>

#include "trainer/models/drafter.h"
#include "trainer/models/target_model.h"
#include "trainer/nn/layers.h"
#include "trainer/nn/tensor_io.h"
#include "trainer/ops/reference_ops.h"
#include "trainer/train/evaluate.h"
#include "trainer/train/spec_decode.h"

namespace {

using namespace dflash;
using namespace dflash::trainer;

int Fail(const Status& s) {
  std::cerr << "interop_dump: " << s.ToString() << "\n";
  return 2;
}

Result<std::unique_ptr<TargetModel>> LoadTarget(const std::filesystem::path& dir, std::vector<std::int64_t> taps) {
  DFLASH_ASSIGN_OR_RETURN(setup::TargetConfig config, setup::LoadTargetConfig(dir / "config.json"));
  TargetLoadOptions o;
  o.device = torch::kCPU;
  o.dtype = torch::kFloat;
  o.full = true;
  if (taps.empty()) {
    taps.resize(config.num_hidden_layers);
    std::iota(taps.begin(), taps.end(), 0);
  }
  o.taps = std::move(taps);
  return TargetModel::Load(dir, o);
}

torch::Tensor Ids(const std::vector<std::int64_t>& ids) { return torch::tensor(ids, torch::kLong); }

Status DumpTarget(const std::filesystem::path& target_dir, const std::filesystem::path& prompts_file,
                  std::int64_t max_new, const std::filesystem::path& out) {
  DFLASH_ASSIGN_OR_RETURN(auto target, LoadTarget(target_dir, {}));
  DFLASH_ASSIGN_OR_RETURN(auto prompts, ReadPrompts(prompts_file, 0));
  auto ops = MakeReferenceOps();
  nn::NamedTensors tensors;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    DFLASH_ASSIGN_OR_RETURN(GreedyDecodeResult greedy, GreedyDecode(*target, prompts[i], max_new));
    std::vector<std::int64_t> seq = prompts[i];
    seq.insert(seq.end(), greedy.tokens.begin(), greedy.tokens.end() - 1);
    const auto ids = Ids(seq);
    const std::string n = std::to_string(i);
    tensors.emplace_back("greedy." + n, Ids(greedy.tokens));
    tensors.emplace_back("logits." + n, target->Logits(ids, {}, *ops));
    tensors.emplace_back("features." + n, target->Features(ids, {}, *ops));
  }
  return nn::SaveTensors(out, tensors);
}

Status DumpDrafter(const std::filesystem::path& target_dir, const std::filesystem::path& drafter_dir,
                   const std::filesystem::path& prompts_file, const std::filesystem::path& out) {
  torch::NoGradGuard no_grad;
  DFLASH_ASSIGN_OR_RETURN(auto drafter, Drafter::Load(drafter_dir, torch::kCPU));
  DFLASH_ASSIGN_OR_RETURN(setup::TargetConfig config, setup::LoadTargetConfig(target_dir / "config.json"));
  DFLASH_ASSIGN_OR_RETURN(auto taps, setup::ResolveTappedLayers(drafter->config(), config));
  DFLASH_ASSIGN_OR_RETURN(auto target, LoadTarget(target_dir, taps));
  DFLASH_ASSIGN_OR_RETURN(auto prompts, ReadPrompts(prompts_file, 0));
  auto ops = MakeReferenceOps();
  const std::int64_t b = drafter->config().block_size;
  nn::NamedTensors tensors;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = prompts[i];
    const std::int64_t s = static_cast<std::int64_t>(p.size()) - 1;
    if (s < 1) return InvalidArgument("prompt " + std::to_string(i) + " needs at least 2 tokens");
    const auto context = target->Features(Ids({p.begin(), p.end() - 1}), {}, *ops);
    auto block = torch::full({b}, drafter->config().mask_token_id, torch::kLong);
    block[0] = p.back();
    DraftMask mask;
    mask.anchors = torch::full({1}, s, torch::kInt);
    mask.valid = torch::ones({1}, torch::kByte);
    mask.context_len = s;
    mask.block_size = static_cast<int>(b);
    const auto hidden = drafter->Forward(context, block, torch::arange(s, s + b, torch::kLong),
                                         torch::arange(s, torch::kLong), mask, target->embed_tokens(), torch::kFloat,
                                         *ops);
    const std::string n = std::to_string(i);
    tensors.emplace_back("context." + n, context);
    tensors.emplace_back("block." + n, block);
    tensors.emplace_back("logits." + n, nn::Linear(hidden, target->lm_head()));
  }
  return nn::SaveTensors(out, tensors);
}

}  // namespace

int main(int argc, char** argv) {
  torch::set_num_threads(1);
  const std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd == "target" && argc == 6) {
      Status s = DumpTarget(argv[2], argv[3], std::atoll(argv[4]), argv[5]);
      return s.ok() ? 0 : Fail(s);
    }
    if (cmd == "drafter" && argc == 6) {
      Status s = DumpDrafter(argv[2], argv[3], argv[4], argv[5]);
      return s.ok() ? 0 : Fail(s);
    }
  } catch (const c10::Error& e) {
    return Fail(Internal(e.what_without_backtrace()));
  }
  std::cerr << "usage: interop_dump target TARGET_DIR PROMPTS.jsonl MAX_NEW OUT.safetensors\n"
               "       interop_dump drafter TARGET_DIR DRAFTER_DIR PROMPTS.jsonl OUT.safetensors\n";
  return 2;
}

#include "trainer/train/evaluate.h"

#include <cstdio>

#include "base/atomic_file.h"
#include "trainer/data/jsonl_dataset.h"
#include "trainer/ops/reference_ops.h"
#include "trainer/train/ops_setup.h"

namespace dflash::trainer {

Result<std::vector<std::vector<std::int64_t>>> ReadPrompts(const std::filesystem::path& file,
                                                           std::int64_t max_prompts) {
  DFLASH_ASSIGN_OR_RETURN(auto dataset, data::JsonlDataset::Open(file));
  std::vector<std::vector<std::int64_t>> prompts;
  for (std::size_t i = 0; i < dataset.size() && (max_prompts <= 0 || std::int64_t(i) < max_prompts); ++i) {
    DFLASH_ASSIGN_OR_RETURN(data::Sample s, dataset.Get(i));
    if (s.input_ids.empty()) continue;
    prompts.emplace_back(s.input_ids.begin(), s.input_ids.end());
  }
  if (prompts.empty()) return InvalidArgument(file.string() + " holds no prompt");
  return prompts;
}

void PrintSpecDecodeReport(std::ostream& log, const std::string& label, const SpecDecodeReport& r) {
  char line[512];
  std::snprintf(line, sizeof line,
                "%s: tau_per_prompt_mean %.3f (mean of %zu prompts' tau), tau_pooled %.3f (over %lld steps; block "
                "%lld), %lld tokens; speculative %.3f s vs greedy %.3f s: speedup %.2fx\n",
                label.c_str(), r.tau_per_prompt_mean, r.prompts.size(), r.tau_pooled, static_cast<long long>(r.steps),
                static_cast<long long>(r.block_size),
                static_cast<long long>(r.generated_tokens), r.spec_seconds, r.greedy_seconds, r.speedup);
  log << line;
}

Result<SpecDecodeReport> RunEval(const EvalOptions& options, std::ostream& log) {
  if (options.target_dir.empty() || options.drafter_dir.empty() || options.prompts.empty()) {
    return InvalidArgument("eval needs --target, --drafter and --prompts");
  }
  TrainOptions device_options;
  device_options.device = options.device;
  device_options.compute_dtype = options.compute_dtype;
  DFLASH_ASSIGN_OR_RETURN(RunDevice device, ResolveDevice(device_options));
  DFLASH_ASSIGN_OR_RETURN(auto drafter, Drafter::Load(options.drafter_dir, device.device));
  DFLASH_ASSIGN_OR_RETURN(setup::TargetConfig target_config,
                          setup::LoadTargetConfig(options.target_dir / "config.json"));
  DFLASH_ASSIGN_OR_RETURN(auto taps, setup::ResolveTappedLayers(drafter->config(), target_config));
  TargetLoadOptions target_options;
  target_options.device = device.device;
  target_options.dtype = device.device.is_cuda() ? torch::kBFloat16 : device.compute_dtype;
  target_options.full = true;
  target_options.taps = taps;
  DFLASH_ASSIGN_OR_RETURN(auto target, TargetModel::Load(options.target_dir, target_options));
  DFLASH_ASSIGN_OR_RETURN(auto prompts, ReadPrompts(options.prompts, options.max_prompts));
  SpecDecodeOptions decode;
  decode.max_new_tokens = options.max_new_tokens;
  auto ops = MakeReferenceOps();  // decoding is not a hot training kernel: LibTorch ops on the model's device
  DFLASH_ASSIGN_OR_RETURN(SpecDecodeReport report, EvaluateSpeculative(*target, *drafter, prompts, decode, *ops));
  PrintSpecDecodeReport(log, "eval " + options.drafter_dir.string(), report);
  if (!options.report.empty()) {
    DFLASH_RETURN_IF_ERROR(AtomicWriteText(options.report, report.ToJson().dump(2) + "\n"));
  }
  return report;
}

}  // namespace dflash::trainer

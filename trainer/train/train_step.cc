#include "trainer/train/train_step.h"

#include <span>
#include <vector>

#include "trainer/data/anchors.h"
#include "trainer/data/loss_weights.h"
#include "trainer/train/block_loss.h"

namespace dflash::trainer {
namespace {

torch::Tensor ToTensor(std::span<const std::int32_t> v, torch::Dtype dtype, torch::Device device) {
  return torch::from_blob(const_cast<std::int32_t*>(v.data()), {static_cast<std::int64_t>(v.size())}, torch::kInt32)
      .to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

}  // namespace

TargetInput TargetInputOf(const data::Row& row, bool fixed_shapes) {
  const auto T = static_cast<std::int64_t>(row.num_tokens);
  TargetInput in;
  in.whole_row = fixed_shapes && row.num_documents() <= 1;
  in.context_len = in.whole_row ? static_cast<std::int64_t>(row.input_ids.size()) : T;
  in.cu_seqlens = in.whole_row ? torch::tensor({0, static_cast<std::int32_t>(in.context_len)}, torch::kInt32)
                               : torch::from_blob(const_cast<std::int32_t*>(row.cu_seqlens.data()),
                                                  {static_cast<std::int64_t>(row.cu_seqlens.size())}, torch::kInt32)
                                     .clone();
  in.input_ids = torch::from_blob(const_cast<std::int32_t*>(row.input_ids.data()), {in.context_len}, torch::kInt32)
                     .to(torch::kLong);
  return in;
}

torch::Tensor TargetFeatures(const TargetInput& input, const TargetModel& target, Ops& ops, torch::Device to) {
  torch::NoGradGuard no_grad;
  return target.Features(input.input_ids.to(target.options().device), input.cu_seqlens, ops).to(to);
}

Result<RowResult> TrainRow(const data::Row& row, const TargetModel& target, const Drafter& drafter, Ops& ops,
                           const RowStepOptions& options) {
  const auto T = static_cast<std::int64_t>(row.num_tokens);
  if (T < 2) return InvalidArgument("a training row needs at least 2 real tokens, this one has " + std::to_string(T));
  const torch::Device target_device = target.options().device;
  const torch::Device device = options.drafter_device.value_or(target_device);
  const setup::DrafterConfig& dc = drafter.config();
  const std::span<const std::int32_t> ids(row.input_ids.data(), T);
  const std::span<const std::uint8_t> loss_mask(row.loss_mask.data(), T);

  data::BlockOptions block_options;
  block_options.num_anchors = static_cast<int>(options.num_anchors);
  block_options.block_size = static_cast<int>(dc.block_size);
  block_options.mask_token_id = static_cast<std::int32_t>(dc.mask_token_id);
  DFLASH_ASSIGN_OR_RETURN(data::Blocks blocks,
                          data::SampleBlocks(ids, loss_mask, row.cu_seqlens, block_options, options.anchor_seed));
  DFLASH_ASSIGN_OR_RETURN(data::LossTargets targets, data::BuildLossTargets(ids, loss_mask, blocks));

  RowResult result;
  result.context_tokens = T;
  result.weight_sum = targets.weight_sum;

  const TargetInput target_input = TargetInputOf(row, options.fixed_shapes);
  const std::int64_t context_len = target_input.context_len;
  const bool whole_row = target_input.whole_row;
  auto mark = [&](std::optional<StepPhase> phase) -> Status {
    if (!options.timer) return Status::Ok();
    return phase ? options.timer->End(*phase) : options.timer->Lap();
  };
  DFLASH_RETURN_IF_ERROR(mark(std::nullopt));  // the row's data and anchors: host work of no phase
  torch::Tensor features;
  if (options.features) {
    DFLASH_ASSIGN_OR_RETURN(features, options.features());
  } else {
    features = TargetFeatures(target_input, target, ops, device);
  }
  DFLASH_RETURN_IF_ERROR(mark(StepPhase::kTargetForward));
  const torch::Tensor& embed = options.embed_tokens.defined() ? options.embed_tokens : target.embed_tokens();
  const torch::Tensor& lm_head = options.lm_head.defined() ? options.lm_head : target.lm_head();

  DraftMask mask;
  mask.anchors = ToTensor(blocks.anchors, torch::kInt32, device);
  mask.valid = torch::from_blob(blocks.valid.data(), {blocks.num_blocks}, torch::kUInt8).to(device, torch::kUInt8,
                                                                                         false, /*copy=*/true);
  if (row.num_documents() > 1) mask.doc_start = ToTensor(blocks.doc_start, torch::kInt32, device);
  mask.context_len = context_len;
  mask.block_size = blocks.block_size;

  // The loss runs over the labelled rows only (gathered from the drafter's output when some are not).
  data::LabelledRows loss_rows = data::SelectLabelledRows(targets);
  const auto labels = ToTensor(loss_rows.labels, torch::kLong, device);
  const auto weights =
      torch::from_blob(loss_rows.weights.data(), {static_cast<std::int64_t>(loss_rows.weights.size())}, torch::kFloat)
          .to(device, torch::kFloat, false, /*copy=*/true);
  const auto block_tokens = ToTensor(blocks.tokens, torch::kLong, device);
  const auto block_positions = ToTensor(blocks.position_ids, torch::kLong, device);
  // Positions of the context rows: document-relative (the row's position_ids); a whole-row context continues them.
  const auto context_positions =
      whole_row ? torch::arange(context_len, torch::TensorOptions().dtype(torch::kLong).device(device))
                : ToTensor(std::span(row.position_ids.data(), T), torch::kLong, device);

  std::optional<torch::NoGradGuard> no_grad;
  if (!options.backward) no_grad.emplace();
  const torch::Tensor hidden = drafter.Forward(features, block_tokens, block_positions, context_positions, mask,
                                               embed, options.compute_dtype, ops);
  DFLASH_RETURN_IF_ERROR(mark(StepPhase::kDrafterForward));
  const bool every_row = loss_rows.index.size() == targets.labels.size();
  const torch::Tensor loss_hidden =
      every_row ? hidden : hidden.index_select(0, ToTensor(loss_rows.index, torch::kLong, device));
  BlockLossResult loss = ChunkedBlockLoss(loss_hidden, lm_head, labels, weights, options.loss_chunk_rows, &ops);
  DFLASH_RETURN_IF_ERROR(mark(StepPhase::kLoss));
  if (options.backward && targets.weight_sum > 0) loss.weighted_ce_sum.backward();
  DFLASH_RETURN_IF_ERROR(mark(StepPhase::kBackward));
  result.weighted_ce = loss.weighted_ce_sum.item<double>();

  const auto argmax = loss.argmax.to(torch::kCPU, torch::kInt32).contiguous();
  std::vector<std::int32_t> predicted(targets.labels.size(), -1);  // -1: a row without a label (never compared)
  const std::int32_t* got = argmax.data_ptr<std::int32_t>();
  for (std::size_t i = 0; i < loss_rows.index.size(); ++i) predicted[loss_rows.index[i]] = got[i];
  for (std::size_t i = 0; i < targets.labels.size(); ++i) {
    if (targets.weights[i] <= 0.f) continue;
    ++result.labelled;
    result.correct += predicted[i] == targets.labels[i];
  }
  DFLASH_ASSIGN_OR_RETURN(auto accept, data::BlockAcceptLengths(predicted, targets, blocks));
  for (int j = 0; j < blocks.num_blocks; ++j) {
    if (blocks.valid[j]) result.accept_lengths.push_back(accept[j]);
  }
  return result;
}

}  // namespace dflash::trainer

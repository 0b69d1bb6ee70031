#include "trainer/train/train_options.h"

namespace dflash::trainer {

nlohmann::json TrainOptions::ToJson() const {
  return {{"target_dir", target_dir.string()},
          {"random_target", random_target.string()},
          {"drafter_config", drafter_config.string()},
          {"drafter_init", drafter_init.string()},
          {"data", data.string()},
          {"max_length", max_length},
          {"row_mode", row_mode == data::RowMode::kPack ? "pack" : "pad"},
          {"num_anchors", num_anchors},
          {"batch_size", batch_size},
          {"grad_accum", grad_accum},
          {"epochs", epochs},
          {"max_steps", max_steps},
          {"lr", lr},
          {"warmup_fraction", warmup_fraction},
          {"weight_decay", weight_decay},
          {"max_grad_norm", max_grad_norm},
          {"seed", seed},
          {"loss_chunk_rows", loss_chunk_rows},
          {"compute_dtype", compute_dtype}};
}

Status TrainOptions::CheckResumable(const nlohmann::json& saved) const {
  const nlohmann::json now = ToJson();
  for (const char* key : {"max_length", "row_mode", "num_anchors", "batch_size", "grad_accum", "epochs", "max_steps",
                          "lr", "warmup_fraction", "weight_decay", "max_grad_norm", "seed", "loss_chunk_rows"}) {
    if (!saved.contains(key) || saved.at(key) != now.at(key)) {
      return InvalidArgument(std::string("cannot resume: option '") + key + "' was " +
                             (saved.contains(key) ? saved.at(key).dump() : "unset") + " in the checkpoint, now " +
                             now.at(key).dump());
    }
  }
  return Status::Ok();
}

}  // namespace dflash::trainer

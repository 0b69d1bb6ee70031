#include "trainer/models/target_decoder.h"

#include <algorithm>
#include <limits>
#include <string>

#include "trainer/models/target_layers.h"
#include "trainer/models/target_weights.h"
#include "trainer/nn/layers.h"

namespace dflash::trainer {

// The TargetOps the model's decoder layers run through during one Extend of `tokens` tokens per sequence: every call
// continues the selected layer's state. All rows of a call are [batch * tokens] (sequence-major).
class TargetDecoder::LayerOps final : public TargetOps {
 public:
  LayerOps(std::int64_t batch, std::int64_t tokens) : batch_(batch), tokens_(tokens) {}

  // The layer the next calls belong to; rollback is null when the Extend keeps no rollback record.
  void Select(LayerState* state, LayerRollback* rollback) {
    state_ = state;
    rollback_ = rollback;
  }

  // Appends k, v to the cache; query i of each sequence (position past + i) sees cache rows <= past + i.
  torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& cu_seqlens, double scale) override {
    CheckOneDocument(cu_seqlens);
    const std::int64_t hq = q.size(1), hkv = k.size(1), d = q.size(2);
    const auto kb = k.reshape({batch_, tokens_, hkv, d}), vb = v.reshape({batch_, tokens_, hkv, d});
    state_->k = state_->k.defined() ? torch::cat({state_->k, kb}, 1) : kb;
    state_->v = state_->v.defined() ? torch::cat({state_->v, vb}, 1) : vb;
    const std::int64_t total = state_->k.size(1), past = total - tokens_, group = hq / hkv;
    // Query head h uses KV head h / group: [B, Hkv, group * T, D] against [B, Hkv, total, D].
    const auto q32 = q.to(torch::kFloat).reshape({batch_, tokens_, hkv, group, d}).permute({0, 2, 3, 1, 4})
                         .reshape({batch_, hkv, group * tokens_, d});
    const auto k32 = state_->k.to(torch::kFloat).permute({0, 2, 1, 3});
    const auto v32 = state_->v.to(torch::kFloat).permute({0, 2, 1, 3});
    const auto long_opts = torch::TensorOptions().dtype(torch::kLong).device(q.device());
    const auto query_pos = (torch::arange(tokens_, long_opts) + past).repeat({group}).unsqueeze(1);
    const auto visible = torch::arange(total, long_opts).unsqueeze(0) <= query_pos;  // [group * T, total]
    const auto scores = torch::matmul(q32, k32.transpose(-1, -2)) * scale;
    const auto probs = torch::softmax(scores.masked_fill(~visible, -std::numeric_limits<float>::infinity()), -1);
    return torch::matmul(probs, v32)
        .reshape({batch_, hkv, group, tokens_, d})
        .permute({0, 3, 1, 2, 4})
        .reshape({batch_ * tokens_, hq, d})
        .to(q.scalar_type());
  }

  // Tap j of the kernel reads input t - (W - 1) + j; the first W - 1 come from the carried conv state.
  torch::Tensor CausalConv1dSilu(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& cu_seqlens) override {
    CheckOneDocument(cu_seqlens);
    const std::int64_t channels = x.size(1), width = weight.size(1);
    const auto xb = x.reshape({batch_, tokens_, channels});
    const auto prev = state_->conv.defined() ? state_->conv : torch::zeros({batch_, width - 1, channels}, x.options());
    const auto inputs = torch::cat({prev, xb}, 1);  // [B, W - 1 + T, C]
    const auto in32 = inputs.to(torch::kFloat), w32 = weight.to(torch::kFloat);
    auto acc = torch::zeros({batch_, tokens_, channels}, in32.options());
    for (std::int64_t j = 0; j < width; ++j) acc = acc + in32.narrow(1, j, tokens_) * w32.select(1, j);
    state_->conv = inputs.narrow(1, tokens_, width - 1);
    if (rollback_ != nullptr) rollback_->conv_inputs = inputs;
    return torch::silu(acc).reshape({batch_ * tokens_, channels}).to(x.scalar_type());
  }

  torch::Tensor GatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                               const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                               const torch::Tensor& dt_bias, const torch::Tensor& cu_seqlens) override {
    CheckOneDocument(cu_seqlens);
    const auto per_sequence = [&](const torch::Tensor& x) {
      std::vector<std::int64_t> shape{batch_, tokens_};
      for (std::int64_t i = 1; i < x.dim(); ++i) shape.push_back(x.size(i));
      return x.reshape(shape);
    };
    auto result = GatedDeltaChunked(per_sequence(q), per_sequence(k), per_sequence(v), per_sequence(a),
                                    per_sequence(b), A_log, dt_bias, state_->recurrent, rollback_ != nullptr);
    state_->recurrent = result.state;
    if (rollback_ != nullptr) rollback_->trace = std::move(result.trace);
    return result.o.reshape({batch_ * tokens_, v.size(1), v.size(2)}).to(v.scalar_type());
  }

 private:
  static void CheckOneDocument(const torch::Tensor& cu_seqlens) {
    TORCH_CHECK(!cu_seqlens.defined(), "TargetDecoder: decoding runs one document per sequence");
  }

  std::int64_t batch_, tokens_;
  LayerState* state_ = nullptr;
  LayerRollback* rollback_ = nullptr;
};

TargetDecoder::TargetDecoder(const TargetModel& model, std::int64_t batch)
    : model_(model), batch_(batch), layers_(static_cast<std::size_t>(model.config().num_hidden_layers)) {
  TORCH_CHECK(model.options().full, "TargetDecoder needs a target loaded with full = true (all layers, lm_head)");
  TORCH_CHECK(batch >= 1, "TargetDecoder: batch must be >= 1, got ", batch);
}

DecodeOutput TargetDecoder::Extend(const torch::Tensor& tokens, bool keep_rollback) {
  TORCH_CHECK(tokens.defined() && tokens.scalar_type() == torch::kLong, "TargetDecoder::Extend: tokens must be int64");
  TORCH_CHECK(tokens.dim() == 2 || (tokens.dim() == 1 && batch_ == 1), "TargetDecoder::Extend: tokens must be [",
              batch_, ", T]", batch_ == 1 ? " or [T]" : "", ", got ", tokens.sizes());
  const bool flat = tokens.dim() == 1;
  const auto ids = flat ? tokens.unsqueeze(0) : tokens;
  TORCH_CHECK(ids.size(0) == batch_ && ids.size(1) >= 1, "TargetDecoder::Extend: tokens ", tokens.sizes(),
              " for a batch of ", batch_);
  const std::int64_t t = ids.size(1);
  const setup::TargetConfig& c = model_.config();
  const auto& embed = model_.embed_tokens();
  const auto flat_ids = ids.to(embed.device()).reshape({-1});
  TORCH_CHECK(flat_ids.min().item<std::int64_t>() >= 0 && flat_ids.max().item<std::int64_t>() < c.vocab_size,
              "TargetDecoder::Extend: token ids must lie in [0, ", c.vocab_size, ")");
  torch::NoGradGuard no_grad;

  // Work on copies of the state handles and commit at the end: a failing call leaves the decoder as it was.
  std::vector<LayerState> layers = layers_;
  std::vector<LayerRollback> rollback(keep_rollback ? layers.size() : 0);
  const auto positions =
      (torch::arange(t, torch::TensorOptions().dtype(torch::kLong).device(embed.device())) + length_).repeat({batch_});
  const auto rope = nn::MakeRope(positions, setup::TargetRotaryDim(c), c.rope_theta);
  const torch::Tensor one_document;
  LayerOps ops(batch_, t);
  const TargetForwardContext ctx{c, model_.weights(), one_document, rope, ops};

  const auto& taps = model_.taps();
  std::vector<torch::Tensor> features;
  auto h = embed.index_select(0, flat_ids);  // [B * T, hidden]
  for (std::size_t i = 0; i < layers.size(); ++i) {
    ops.Select(&layers[i], keep_rollback ? &rollback[i] : nullptr);
    h = TargetDecoderLayer(h, static_cast<std::int64_t>(i), ctx);
    if (std::find(taps.begin(), taps.end(), static_cast<std::int64_t>(i)) != taps.end()) features.push_back(h);
  }
  const auto x = nn::RmsNorm(h, TargetWeight(model_.weights(), TargetFinalNormName(c)), c.rms_norm_eps,
                             TargetNormKind(c));
  const auto logits = nn::Linear(x, model_.lm_head()).to(torch::kFloat);

  layers_ = std::move(layers);
  rollback_ = std::move(rollback);
  rollback_start_ = keep_rollback ? length_ : -1;
  length_ += t;
  const auto shaped = [&](const torch::Tensor& y) {
    return flat ? y.reshape({t, y.size(-1)}) : y.reshape({batch_, t, y.size(-1)});
  };
  DecodeOutput out;
  out.logits = shaped(logits);
  out.features = features.empty() ? shaped(torch::empty({batch_ * t, 0}, h.options())) : shaped(torch::cat(features, 1));
  return out;
}

DecodeOutput TargetDecoder::Step(const torch::Tensor& tokens) {
  TORCH_CHECK(tokens.defined() && tokens.dim() == 1 && tokens.size(0) == batch_, "TargetDecoder::Step: tokens must be [",
              batch_, "], got ", tokens.sizes());
  DecodeOutput out = Extend(tokens.unsqueeze(1));
  out.logits = out.logits.squeeze(1);
  out.features = out.features.squeeze(1);
  return out;
}

TargetDecoder::Snapshot TargetDecoder::Save() const {
  Snapshot s;
  s.length_ = length_;
  s.batch_ = batch_;
  s.layers_ = layers_;
  return s;
}

void TargetDecoder::Restore(const Snapshot& snapshot) {
  TORCH_CHECK(snapshot.layers_.size() == layers_.size(), "TargetDecoder::Restore: a snapshot of another model");
  TORCH_CHECK(snapshot.batch_ == batch_, "TargetDecoder::Restore: a snapshot of a batch of ", snapshot.batch_,
              ", this decoder runs ", batch_);
  length_ = snapshot.length_;
  layers_ = snapshot.layers_;
  rollback_start_ = -1;
  rollback_.clear();
}

void TargetDecoder::Truncate(std::int64_t n) {
  TORCH_CHECK(rollback_start_ >= 0, "TargetDecoder::Truncate: the last Extend kept no rollback record");
  TORCH_CHECK(n >= rollback_start_ && n <= length_, "TargetDecoder::Truncate: ", n, " is outside [", rollback_start_,
              ", ", length_, "], the range the rollback record covers");
  const setup::TargetConfig& c = model_.config();
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    LayerState& s = layers_[i];
    if (c.layer_kinds[i] == setup::TargetLayerKind::kFullAttention) {
      s.k = s.k.narrow(1, 0, n);
      s.v = s.v.narrow(1, 0, n);
    } else {
      const LayerRollback& r = rollback_[i];
      s.conv = r.conv_inputs.narrow(1, n - rollback_start_, c.linear_conv_kernel_dim - 1);
      s.recurrent = GatedDeltaStateAfter(r.trace, n - rollback_start_);
    }
  }
  length_ = n;
}

}  // namespace dflash::trainer

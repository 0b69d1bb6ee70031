// trainer/models/drafter: the forward and its gradients against an independent double-precision implementation
// written from the words of spec §3/§4 (explicit per-row mask, explicit softmax, explicit rotation), fresh weights,
// and the Save -> Load round trip in the public drafters' layout.
#include "trainer/models/drafter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "tests/trainer/checkpoint_test_util.h"
#include "trainer/checkpoint/checkpoint.h"
#include "trainer/ops/reference_ops.h"

namespace dflash::trainer {
namespace {

constexpr std::int64_t kHidden = 64, kInter = 96, kHeads = 4, kKvHeads = 2, kHeadDim = 16, kVocab = 101;
constexpr std::int64_t kMask = 100, kWindow = 8;

setup::DrafterConfig TinyConfig(std::int64_t block_size) {
  setup::DrafterConfig c;
  c.hidden_size = kHidden;
  c.intermediate_size = kInter;
  c.num_hidden_layers = 2;
  c.num_attention_heads = kHeads;
  c.num_key_value_heads = kKvHeads;
  c.head_dim = kHeadDim;
  c.vocab_size = kVocab;
  c.rms_norm_eps = 1e-6;
  c.rope_theta = 10000.0;
  c.block_size = block_size;
  c.mask_token_id = kMask;
  c.num_target_layers = 12;
  c.target_layer_ids = {1, 5, 10};
  c.layer_kinds = {setup::DrafterLayerKind::kSlidingAttention, setup::DrafterLayerKind::kFullAttention};
  c.sliding_window = kWindow;
  return c;
}

// One row of drafter inputs: S context rows, N blocks of B (the last `invalid` blocks are padding).
struct Inputs {
  std::int64_t S = 0, N = 0, B = 0;
  std::vector<std::int64_t> anchors;
  std::vector<bool> valid;
  torch::Tensor features, tokens, positions, context_positions, embed;
  DraftMask mask;
};

Inputs MakeInputs(std::int64_t S, std::int64_t num_valid, std::int64_t invalid, std::int64_t B, std::uint64_t seed,
                  std::int64_t taps) {
  std::mt19937_64 rng(seed);
  Inputs in;
  in.S = S;
  in.N = num_valid + invalid;
  in.B = B;
  // Distinct sorted anchors in [0, S - 1], always including 0 (a block that sees no context row).
  std::set<std::int64_t> picked = {0};
  while (static_cast<std::int64_t>(picked.size()) < num_valid) picked.insert(static_cast<std::int64_t>(rng() % S));
  std::vector<std::int64_t> tokens, positions;
  for (std::int64_t a : picked) {
    in.anchors.push_back(a);
    in.valid.push_back(true);
    tokens.push_back(static_cast<std::int64_t>(rng() % (kVocab - 1)));
    for (std::int64_t t = 1; t < B; ++t) tokens.push_back(kMask);
    for (std::int64_t t = 0; t < B; ++t) positions.push_back(a + t);
  }
  for (std::int64_t j = 0; j < invalid; ++j) {
    in.anchors.push_back(0);
    in.valid.push_back(false);
    for (std::int64_t t = 0; t < B; ++t) {
      tokens.push_back(kMask);
      positions.push_back(t);
    }
  }
  torch::manual_seed(seed);
  in.features = torch::randn({S, taps * kHidden});
  in.embed = torch::randn({kVocab, kHidden});
  in.tokens = torch::tensor(tokens, torch::kLong);
  in.positions = torch::tensor(positions, torch::kLong);
  in.context_positions = torch::arange(S, torch::kLong);
  std::vector<std::int32_t> a32(in.anchors.begin(), in.anchors.end());
  std::vector<std::uint8_t> v8(in.valid.begin(), in.valid.end());
  in.mask.anchors = torch::tensor(a32, torch::kInt);
  in.mask.valid = torch::tensor(v8, torch::kUInt8);
  in.mask.context_len = S;
  in.mask.block_size = static_cast<int>(B);
  return in;
}

// ---- The independent implementation (double precision, written from the spec's words). ----

using Params = std::map<std::string, torch::Tensor>;

torch::Tensor Rms(const torch::Tensor& x, const torch::Tensor& w) {
  return x / torch::sqrt((x * x).mean(-1, true) + 1e-6) * w;
}
torch::Tensor Lin(const torch::Tensor& x, const torch::Tensor& w) { return torch::matmul(x, w.t()); }

// x [T, heads, D]: dims i and i + D/2 rotated by angle pos * theta^(-2i/D).
torch::Tensor Rotate(const torch::Tensor& x, const std::vector<std::int64_t>& pos) {
  const std::int64_t T = x.size(0), half = kHeadDim / 2;
  auto cos = torch::zeros({T, 1, half}, torch::kDouble), sin = torch::zeros({T, 1, half}, torch::kDouble);
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(pos[t]) * std::pow(10000.0, -2.0 * i / kHeadDim);
      cos[t][0][i] = std::cos(angle);
      sin[t][0][i] = std::sin(angle);
    }
  const auto a = x.narrow(2, 0, half), b = x.narrow(2, half, half);
  return torch::cat({a * cos - b * sin, b * cos + a * sin}, 2);
}

// 1 where query row r may see kv row c (spec §4), built row by row.
torch::Tensor MaskOf(const Inputs& in, std::int64_t window) {
  const std::int64_t rows = in.N * in.B;
  auto m = torch::zeros({rows, in.S + rows}, torch::kDouble);
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t j = r / in.B, o = r % in.B, a = in.anchors[j];
    if (!in.valid[j]) continue;
    for (std::int64_t c = 0; c < in.S; ++c) {
      const bool before_anchor = c < a;
      const bool in_window = window == 0 || c >= a + o - (window - 1);
      if (before_anchor && in_window) m[r][c] = 1.0;
    }
    for (std::int64_t t = 0; t < in.B; ++t) {
      if (window == 0 || t <= o) m[r][in.S + j * in.B + t] = 1.0;
    }
  }
  return m;
}

torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& mask) {
  std::vector<torch::Tensor> heads;
  for (std::int64_t h = 0; h < kHeads; ++h) {
    const std::int64_t g = h / (kHeads / kKvHeads);
    const auto s = torch::matmul(q.select(1, h), k.select(1, g).t()) / std::sqrt(double(kHeadDim));
    // Explicit softmax over the visible entries; the row max is taken over all entries (any constant works).
    const auto e = torch::exp(s - std::get<0>(s.max(1, true)).detach()) * mask;
    const auto denom = e.sum(1, true);
    const auto p = e / torch::where(denom > 0, denom, torch::ones_like(denom));
    heads.push_back(torch::matmul(p, v.select(1, g)));
  }
  return torch::stack(heads, 1);  // [rows, heads, D]
}

torch::Tensor ReferenceForward(const Params& p, const Inputs& in, const std::vector<std::int64_t>& windows) {
  const std::int64_t rows = in.N * in.B;
  const auto ctx = Rms(Lin(in.features.to(torch::kDouble), p.at("fc.weight")), p.at("hidden_norm.weight"));
  auto h = in.embed.to(torch::kDouble).index_select(0, in.tokens);
  std::vector<std::int64_t> qpos(in.positions.data_ptr<std::int64_t>(), in.positions.data_ptr<std::int64_t>() + rows);
  std::vector<std::int64_t> kvpos;
  for (std::int64_t i = 0; i < in.S; ++i) kvpos.push_back(i);
  kvpos.insert(kvpos.end(), qpos.begin(), qpos.end());
  for (std::size_t i = 0; i < windows.size(); ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    const auto x = Rms(h, p.at(l + "input_layernorm.weight"));
    const auto kv = torch::cat({ctx, x});
    auto q = Rms(Lin(x, p.at(l + "self_attn.q_proj.weight")).view({rows, kHeads, kHeadDim}),
                 p.at(l + "self_attn.q_norm.weight"));
    auto k = Rms(Lin(kv, p.at(l + "self_attn.k_proj.weight")).view({in.S + rows, kKvHeads, kHeadDim}),
                 p.at(l + "self_attn.k_norm.weight"));
    const auto v = Lin(kv, p.at(l + "self_attn.v_proj.weight")).view({in.S + rows, kKvHeads, kHeadDim});
    q = Rotate(q, qpos);
    k = Rotate(k, kvpos);
    const auto attn = Attend(q, k, v, MaskOf(in, windows[i])).reshape({rows, kHeads * kHeadDim});
    h = h + Lin(attn, p.at(l + "self_attn.o_proj.weight"));
    const auto y = Rms(h, p.at(l + "post_attention_layernorm.weight"));
    const auto gate = Lin(y, p.at(l + "mlp.gate_proj.weight"));
    h = h + Lin(gate / (1 + torch::exp(-gate)) * Lin(y, p.at(l + "mlp.up_proj.weight")),
                p.at(l + "mlp.down_proj.weight"));
  }
  return Rms(h, p.at("norm.weight"));
}

// Gives the drafter weights large enough that attention is far from uniform and every norm weight matters.
void Randomize(Drafter& d, std::uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& [name, t] : d.named_parameters()) {
    if (t.dim() == 1) {
      t.copy_(1.0 + 0.3 * torch::randn_like(t));
    } else {
      t.copy_(torch::randn_like(t) / std::sqrt(static_cast<double>(t.size(1))) * 1.5);
    }
  }
}

Params DoubleCopies(const Drafter& d, bool requires_grad) {
  Params p;
  for (const auto& [name, t] : d.named_parameters()) {
    p[name] = t.detach().to(torch::kDouble).clone().requires_grad_(requires_grad);
  }
  return p;
}

double MaxAbs(const torch::Tensor& t) { return t.abs().max().item<double>(); }

TEST(Drafter, ForwardMatchesDoubleReferenceIncludingInvalidBlocks) {
  for (std::int64_t B : {4, 16}) {
    auto drafter = Drafter::Create(TinyConfig(B), torch::kCPU, 7);
    Randomize(*drafter, 11);
    const Inputs in = MakeInputs(/*S=*/40, /*valid=*/5, /*invalid=*/2, B, 21 + B, 3);
    auto ops = MakeReferenceOps();
    const auto got = drafter->Forward(in.features, in.tokens, in.positions, in.context_positions, in.mask, in.embed,
                                      torch::kFloat, *ops);
    ASSERT_EQ(got.sizes(), torch::IntArrayRef({in.N * B, kHidden}));
    EXPECT_EQ(got.scalar_type(), torch::kFloat);
    EXPECT_TRUE(torch::isfinite(got).all().item<bool>()) << "invalid blocks must give finite rows";
    const auto want = ReferenceForward(DoubleCopies(*drafter, false), in, {kWindow, 0});
    const double err = MaxAbs(got.to(torch::kDouble) - want);
    EXPECT_LT(err, 2e-4) << "block " << B;
    // The comparison can see a wrong mask: treating the sliding layer as full moves the output by far more.
    const auto all_full = ReferenceForward(DoubleCopies(*drafter, false), in, {0, 0});
    EXPECT_GT(MaxAbs(all_full - want), 100 * 2e-4) << "block " << B;
  }
}

TEST(Drafter, GradientsMatchDoubleReferenceThroughAutograd) {
  auto drafter = Drafter::Create(TinyConfig(4), torch::kCPU, 3);
  Randomize(*drafter, 5);
  const Inputs in = MakeInputs(/*S=*/28, /*valid=*/4, /*invalid=*/1, 4, 99, 3);
  torch::manual_seed(123);
  const auto probe = torch::randn({in.N * 4, kHidden}, torch::kDouble);
  auto ops = MakeReferenceOps();
  const auto out = drafter->Forward(in.features, in.tokens, in.positions, in.context_positions, in.mask, in.embed,
                                    torch::kFloat, *ops);
  (out.to(torch::kDouble) * probe).sum().backward();

  Params ref = DoubleCopies(*drafter, true);
  (ReferenceForward(ref, in, {kWindow, 0}) * probe).sum().backward();

  std::map<std::string, torch::Tensor> got;
  for (const auto& [name, t] : drafter->named_parameters()) {
    ASSERT_TRUE(t.grad().defined()) << name << " got no gradient";
    EXPECT_EQ(t.grad().scalar_type(), torch::kFloat) << name;
    EXPECT_TRUE(torch::isfinite(t.grad()).all().item<bool>()) << name;
    got[name] = t.grad().to(torch::kDouble);
  }
  for (const std::string name :
       {"fc.weight", "hidden_norm.weight", "layers.0.self_attn.k_proj.weight", "layers.0.self_attn.q_norm.weight",
        "layers.0.self_attn.k_norm.weight", "layers.1.self_attn.v_proj.weight", "layers.1.self_attn.o_proj.weight",
        "layers.1.input_layernorm.weight", "layers.1.mlp.down_proj.weight", "norm.weight"}) {
    const auto want = ref.at(name).grad();
    const double scale = MaxAbs(want);
    ASSERT_GT(scale, 0) << name;
    EXPECT_LT(MaxAbs(got.at(name) - want), 1e-3 * scale) << name;
  }
}

TEST(Drafter, FreshWeightsAreDeterministicInSeedWithPublicInit) {
  const auto a = Drafter::Create(TinyConfig(4), torch::kCPU, 42);
  const auto b = Drafter::Create(TinyConfig(4), torch::kCPU, 42);
  const auto c = Drafter::Create(TinyConfig(4), torch::kCPU, 43);
  const auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  ASSERT_EQ(pa.size(), 2u + 2u * 11u + 1u);
  for (std::size_t i = 0; i < pa.size(); ++i) {
    const auto& [name, t] = pa[i];
    EXPECT_EQ(t.scalar_type(), torch::kFloat) << name;
    EXPECT_TRUE(t.requires_grad() && t.is_leaf()) << name;
    EXPECT_TRUE(torch::equal(t, pb[i].second)) << name;
    if (t.dim() == 1) {
      EXPECT_TRUE(torch::equal(t, torch::ones_like(t))) << name;
    } else {
      EXPECT_FALSE(torch::equal(t, pc[i].second)) << name;
      EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.003) << name;
      EXPECT_NEAR(t.std().item<double>(), 0.02, 0.0015) << name;
    }
  }
  // fc maps the 3 tapped layers' features to the hidden size.
  EXPECT_EQ(pa[0].first, "fc.weight");
  EXPECT_EQ(pa[0].second.sizes(), torch::IntArrayRef({kHidden, 3 * kHidden}));
}

TEST(Drafter, TapsDerivedFromNumTargetLayersWhenAbsent) {
  setup::DrafterConfig c = TinyConfig(4);
  c.target_layer_ids.clear();
  c.num_target_layers = 36;  // Qwen3-8B: 2 drafter layers -> [1, 33]
  const auto d = Drafter::Create(c, torch::kCPU, 1);
  EXPECT_EQ(d->config().target_layer_ids, (std::vector<std::int64_t>{1, 33}));
  EXPECT_EQ(d->num_taps(), 2);
  c.num_target_layers.reset();
  EXPECT_THROW(Drafter::Create(c, torch::kCPU, 1), c10::Error);
}

TEST(Drafter, SaveLoadRoundTripInThePublicLayout) {
  testing::TempDir tmp;
  auto drafter = Drafter::Create(TinyConfig(4), torch::kCPU, 9);
  Randomize(*drafter, 10);
  const auto dir = tmp.path() / "drafter";
  ASSERT_TRUE(drafter->Save(dir, torch::kFloat).ok());

  // Tensor names exactly as the public drafters store them (spec §3).
  auto ckpt = Checkpoint::Open(dir);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().ToString();
  std::set<std::string> want_names = {"fc.weight", "hidden_norm.weight", "norm.weight"};
  for (int i = 0; i < 2; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    for (const char* n : {"input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                          "self_attn.v_proj", "self_attn.o_proj", "self_attn.q_norm", "self_attn.k_norm",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      want_names.insert(l + n + ".weight");
    }
  }
  const auto names = ckpt->Names();
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()), want_names);
  EXPECT_EQ(ckpt->Info("layers.1.self_attn.k_proj.weight")->shape,
            (std::vector<std::int64_t>{kKvHeads * kHeadDim, kHidden}));

  // config.json fields as z-lab's DFlashDraftModel configs hold them.
  std::ifstream f(dir / "config.json");
  const auto j = nlohmann::json::parse(f);
  EXPECT_EQ(j.at("architectures"), nlohmann::json::array({"DFlashDraftModel"}));
  EXPECT_EQ(j.at("model_type"), "qwen3");
  EXPECT_EQ(j.at("dflash_config").at("mask_token_id"), kMask);
  EXPECT_EQ(j.at("dflash_config").at("block_size"), 4);
  EXPECT_EQ(j.at("dflash_config").at("target_layer_ids"), nlohmann::json::array({1, 5, 10}));
  EXPECT_EQ(j.at("block_size"), 4);
  EXPECT_EQ(j.at("layer_types"), nlohmann::json::array({"sliding_attention", "full_attention"}));
  EXPECT_EQ(j.at("sliding_window"), kWindow);
  EXPECT_EQ(j.at("use_sliding_window"), true);
  EXPECT_EQ(j.at("num_target_layers"), 12);
  EXPECT_EQ(j.at("head_dim"), kHeadDim);
  EXPECT_EQ(j.at("num_key_value_heads"), kKvHeads);
  EXPECT_EQ(j.at("rope_theta"), 10000.0);
  EXPECT_EQ(j.at("tie_word_embeddings"), false);
  EXPECT_EQ(j.at("dtype"), "float32");
  EXPECT_EQ(j.at("torch_dtype"), "float32");
  EXPECT_EQ(j.at("max_position_embeddings"), 32768);

  auto loaded = Drafter::Load(dir, torch::kCPU);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  const auto& lc = (*loaded)->config();
  EXPECT_EQ(lc.target_layer_ids, drafter->config().target_layer_ids);
  EXPECT_EQ(lc.layer_kinds, drafter->config().layer_kinds);
  EXPECT_EQ(lc.sliding_window, drafter->config().sliding_window);
  EXPECT_EQ(lc.block_size, 4);
  EXPECT_EQ(lc.mask_token_id, kMask);
  const auto pa = drafter->named_parameters(), pb = (*loaded)->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_EQ(pa[i].first, pb[i].first);
    EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << pa[i].first;
    EXPECT_TRUE(pb[i].second.requires_grad()) << pb[i].first;
  }

  // bf16 (the default): every weight comes back as its bf16 rounding.
  const auto dir16 = tmp.path() / "drafter16";
  ASSERT_TRUE(drafter->Save(dir16).ok());
  auto loaded16 = Drafter::Load(dir16, torch::kCPU);
  ASSERT_TRUE(loaded16.ok()) << loaded16.status().ToString();
  const auto p16 = (*loaded16)->named_parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) {
    EXPECT_TRUE(torch::equal(pa[i].second.detach().to(torch::kBFloat16).to(torch::kFloat), p16[i].second))
        << pa[i].first;
  }
}

TEST(Drafter, LoadRefusesMissingOrMisshapedTensors) {
  testing::TempDir tmp;
  auto drafter = Drafter::Create(TinyConfig(4), torch::kCPU, 9);
  ASSERT_TRUE(drafter->Save(tmp.path(), torch::kFloat).ok());
  // A config with one more tapped layer expects a wider fc.weight than the file holds.
  std::ifstream in(tmp.path() / "config.json");
  auto j = nlohmann::json::parse(in);
  in.close();
  j["dflash_config"]["target_layer_ids"] = {1, 5, 8, 10};
  std::ofstream(tmp.path() / "config.json") << j.dump();
  auto r = Drafter::Load(tmp.path(), torch::kCPU);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("fc.weight"), std::string::npos) << r.status().message();
  // Three layers: the third layer's tensors are missing.
  j["dflash_config"]["target_layer_ids"] = {1, 5, 10};
  j["num_hidden_layers"] = 3;
  j["layer_types"] = {"sliding_attention", "full_attention", "full_attention"};
  std::ofstream(tmp.path() / "config.json") << j.dump();
  r = Drafter::Load(tmp.path(), torch::kCPU);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.status().message().find("layers.2."), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace dflash::trainer

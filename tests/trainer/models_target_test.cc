// trainer/models/target_model: the frozen target's features and logits against an independent double-precision
// implementation written here with explicit per-token loops (per-element causal conv, the token-by-token delta rule,
// explicit causal softmax; no nn/layers.h, no Ops), for a tiny Qwen3.5 hybrid and a tiny Qwen3 dense target on fresh
// random weights; packed documents equal separate runs; SaveHf -> Load is bit-exact and writes the config keys
// transformers reads; configs transformers saved load and write back the same; Load names a missing or
// mis-shaped tensor and reads only the tensors it needs; RandomInit is deterministic in its seed.
#include "trainer/models/target_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "checkpoint_test_util.h"
#include "trainer/checkpoint/target_tensors.h"
#include "trainer/models/target_config_json.h"
#include "trainer/nn/tensor_io.h"
#include "trainer/ops/reference_ops.h"

namespace dflash::trainer {
namespace {

using testing::TempDir;
using Mat = std::vector<std::vector<double>>;  // [rows][cols]
using Weights = std::map<std::string, torch::Tensor>;

// ---- configs -------------------------------------------------------------------------------------------------------

// 4 layers (3 gated delta net + 1 gated full attention), 2 key heads of 16, 4 value heads of 32, partial RoPE 1/4;
// stored as a multimodal checkpoint (nested text_config, prefix model.language_model.).
setup::TargetConfig TinyHybrid() {
  const nlohmann::json text = {
      {"model_type", "qwen3_5_text"}, {"hidden_size", 64},           {"intermediate_size", 96},
      {"num_hidden_layers", 4},       {"full_attention_interval", 4}, {"num_attention_heads", 4},
      {"num_key_value_heads", 2},     {"head_dim", 16},               {"linear_num_key_heads", 2},
      {"linear_num_value_heads", 4},  {"linear_key_head_dim", 16},    {"linear_value_head_dim", 32},
      {"linear_conv_kernel_dim", 4},  {"vocab_size", 97},             {"rms_norm_eps", 1e-6},
      {"rope_parameters", {{"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}}};
  auto c = setup::ParseTargetConfig({{"model_type", "qwen3_5"}, {"text_config", text}});
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

// 3 layers, tied embeddings, attention biases (to cover those paths), full RoPE, standard norms.
setup::TargetConfig TinyDense() {
  const nlohmann::json j = {{"model_type", "qwen3"},      {"hidden_size", 64},        {"intermediate_size", 80},
                            {"num_hidden_layers", 3},     {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                            {"head_dim", 16},             {"vocab_size", 97},         {"rms_norm_eps", 1e-6},
                            {"rope_theta", 10000.0},      {"tie_word_embeddings", true},
                            {"attention_bias", true}};
  auto c = setup::ParseTargetConfig(j);
  EXPECT_TRUE(c.ok()) << c.status().ToString();
  return *c;
}

TargetLoadOptions Options(std::vector<std::int64_t> taps, bool full, torch::Dtype dtype = torch::kFloat) {
  TargetLoadOptions o;
  o.dtype = dtype;
  o.full = full;
  o.taps = std::move(taps);
  return o;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// RandomInit's weights with every tensor made non-trivial: norms, biases and dt_bias random too, so a mix-up of any
// two tensors (or of the zero-centred and standard norm) changes the output.
std::unique_ptr<TargetModel> RandomizedModel(const setup::TargetConfig& c, const TargetLoadOptions& o,
                                             std::uint64_t seed) {
  auto base = TargetModel::RandomInit(c, o, seed, 0.15);
  torch::manual_seed(seed);
  Weights w;
  for (const auto& [name, t] : base->weights()) {
    auto v = t.clone();
    if (EndsWith(name, "norm.weight"))
      v = (c.arch == setup::TargetArch::kQwen3Dense || EndsWith(name, "linear_attn.norm.weight")
               ? 1.0 + 0.3 * torch::randn_like(t)
               : 0.3 * torch::randn_like(t));
    if (EndsWith(name, ".bias") || EndsWith(name, ".dt_bias")) v = 0.5 * torch::randn_like(t);
    if (EndsWith(name, "embed_tokens.weight")) v = torch::randn_like(t);
    w[name] = v;
  }
  auto m = TargetModel::FromWeights(c, o, w);
  EXPECT_TRUE(m.ok()) << m.status().ToString();
  return std::move(m).value();
}

// ---- the independent double-precision reference -------------------------------------------------------------------

Mat ToMat(const torch::Tensor& t) {
  const auto d = t.to(torch::kDouble).contiguous().reshape({t.size(0), -1});
  auto a = d.accessor<double, 2>();
  Mat m(d.size(0), std::vector<double>(d.size(1)));
  for (int64_t i = 0; i < d.size(0); ++i)
    for (int64_t j = 0; j < d.size(1); ++j) m[i][j] = a[i][j];
  return m;
}

std::vector<double> ToVec(const torch::Tensor& t) {
  const auto d = t.to(torch::kDouble).contiguous().reshape({-1});
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

double Silu(double x) { return x / (1 + std::exp(-x)); }
double Sigmoid(double x) { return 1 / (1 + std::exp(-x)); }

// x [T][in] times W [out][in] transposed.
Mat MatMulT(const Mat& x, const Mat& w) {
  Mat y(x.size(), std::vector<double>(w.size(), 0.0));
  for (size_t t = 0; t < x.size(); ++t)
    for (size_t o = 0; o < w.size(); ++o) {
      double acc = 0;
      for (size_t i = 0; i < w[o].size(); ++i) acc += x[t][i] * w[o][i];
      y[t][o] = acc;
    }
  return y;
}

// RMS norm of v[offset, offset + n): scale 1 + w (zero-centred) or w.
void NormInPlace(std::vector<double>& v, size_t offset, size_t n, const std::vector<double>& w, double eps,
                 bool zero_centred) {
  double ms = 0;
  for (size_t i = 0; i < n; ++i) ms += v[offset + i] * v[offset + i];
  const double inv = 1 / std::sqrt(ms / static_cast<double>(n) + eps);
  for (size_t i = 0; i < n; ++i) v[offset + i] *= inv * (zero_centred ? 1 + w[i] : w[i]);
}

struct Reference {
  setup::TargetConfig c;
  Weights w;
  bool zc() const { return c.arch == setup::TargetArch::kQwen3_5Hybrid; }
  Mat Mt(const std::string& name) const { return ToMat(w.at(name)); }
  std::vector<double> Vec(const std::string& name) const { return ToVec(w.at(name)); }

  Mat Norm(Mat x, const std::string& name) const {
    const auto g = Vec(name);
    for (auto& row : x) NormInPlace(row, 0, row.size(), g, c.rms_norm_eps, zc());
    return x;
  }

  Mat GatedDeltaNet(const Mat& x, const std::string& a) const {
    const size_t T = x.size(), H = c.linear_num_key_heads, HV = c.linear_num_value_heads;
    const size_t K = c.linear_key_head_dim, V = c.linear_value_head_dim, W = c.linear_conv_kernel_dim;
    const size_t key_dim = H * K, conv_dim = 2 * H * K + HV * V;
    const Mat qkv = MatMulT(x, Mt(a + "in_proj_qkv.weight"));
    const Mat z = MatMulT(x, Mt(a + "in_proj_z.weight"));
    const Mat b = MatMulT(x, Mt(a + "in_proj_b.weight"));
    const Mat ga = MatMulT(x, Mt(a + "in_proj_a.weight"));
    const auto conv_w = ToVec(w.at(a + "conv1d.weight"));  // [C, 1, W]
    const auto a_log = Vec(a + "A_log"), dt_bias = Vec(a + "dt_bias"), norm_w = Vec(a + "norm.weight");
    // Depthwise causal conv, element by element: out[t][c] = silu(sum_j w[c][j] * x[t - (W - 1) + j][c]).
    Mat conv(T, std::vector<double>(conv_dim));
    for (size_t t = 0; t < T; ++t)
      for (size_t ch = 0; ch < conv_dim; ++ch) {
        double acc = 0;
        for (size_t j = 0; j < W; ++j) {
          const long src = static_cast<long>(t) - static_cast<long>(W - 1) + static_cast<long>(j);
          if (src >= 0) acc += conv_w[ch * W + j] * qkv[src][ch];
        }
        conv[t][ch] = Silu(acc);
      }
    Mat out(T, std::vector<double>(HV * V));
    for (size_t j = 0; j < HV; ++j) {
      const size_t kh = j / (HV / H);
      std::vector<double> S(K * V, 0.0);  // S[k][v]
      for (size_t t = 0; t < T; ++t) {
        std::vector<double> q(K), k(K), v(V);
        double qn = 0, kn = 0;
        for (size_t d = 0; d < K; ++d) {
          q[d] = conv[t][kh * K + d];
          k[d] = conv[t][key_dim + kh * K + d];
          qn += q[d] * q[d];
          kn += k[d] * k[d];
        }
        for (size_t d = 0; d < K; ++d) {
          q[d] /= std::sqrt(qn + 1e-6) * std::sqrt(static_cast<double>(K));
          k[d] /= std::sqrt(kn + 1e-6);
        }
        for (size_t d = 0; d < V; ++d) v[d] = conv[t][2 * key_dim + j * V + d];
        const double beta = Sigmoid(b[t][j]);
        const double sp = std::log1p(std::exp(ga[t][j] + dt_bias[j]));
        const double decay = std::exp(-std::exp(a_log[j]) * sp);
        for (auto& s : S) s *= decay;
        for (size_t e = 0; e < V; ++e) {
          double kv = 0;
          for (size_t d = 0; d < K; ++d) kv += S[d * V + e] * k[d];
          const double u = beta * (v[e] - kv);
          for (size_t d = 0; d < K; ++d) S[d * V + e] += k[d] * u;
        }
        for (size_t e = 0; e < V; ++e) {
          double o = 0;
          for (size_t d = 0; d < K; ++d) o += S[d * V + e] * q[d];
          out[t][j * V + e] = o;
        }
      }
    }
    for (size_t t = 0; t < T; ++t) {
      for (size_t j = 0; j < HV; ++j) {
        NormInPlace(out[t], j * V, V, norm_w, c.rms_norm_eps, /*zero_centred=*/false);
        for (size_t e = 0; e < V; ++e) out[t][j * V + e] *= Silu(z[t][j * V + e]);
      }
    }
    return MatMulT(out, Mt(a + "out_proj.weight"));
  }

  void AddBias(Mat& y, const std::string& name) const {
    if (!c.attention_bias) return;
    const auto bias = Vec(name);
    for (auto& row : y)
      for (size_t i = 0; i < row.size(); ++i) row[i] += bias[i];
  }

  void Rope(std::vector<double>& v, size_t offset, double pos) const {
    const size_t R = static_cast<size_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor), half = R / 2;
    for (size_t i = 0; i < half; ++i) {
      const double angle = pos * std::pow(c.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(R));
      const double x1 = v[offset + i], x2 = v[offset + i + half];
      v[offset + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
      v[offset + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
    }
  }

  Mat Attention(const Mat& x, const std::string& a) const {
    const size_t T = x.size(), Hq = c.num_attention_heads, Hkv = c.num_key_value_heads, D = c.head_dim;
    Mat qp = MatMulT(x, Mt(a + "q_proj.weight"));
    AddBias(qp, a + "q_proj.bias");
    Mat k = MatMulT(x, Mt(a + "k_proj.weight"));
    AddBias(k, a + "k_proj.bias");
    Mat v = MatMulT(x, Mt(a + "v_proj.weight"));
    AddBias(v, a + "v_proj.bias");
    const auto qn = Vec(a + "q_norm.weight"), kn = Vec(a + "k_norm.weight");
    Mat q(T, std::vector<double>(Hq * D)), gate(T, std::vector<double>(Hq * D, 0.0));
    for (size_t t = 0; t < T; ++t) {
      for (size_t h = 0; h < Hq; ++h)
        for (size_t d = 0; d < D; ++d) {
          if (c.attn_output_gate) {
            q[t][h * D + d] = qp[t][h * 2 * D + d];
            gate[t][h * D + d] = qp[t][h * 2 * D + D + d];
          } else {
            q[t][h * D + d] = qp[t][h * D + d];
          }
        }
      for (size_t h = 0; h < Hq; ++h) {
        NormInPlace(q[t], h * D, D, qn, c.rms_norm_eps, zc());
        Rope(q[t], h * D, static_cast<double>(t));
      }
      for (size_t h = 0; h < Hkv; ++h) {
        NormInPlace(k[t], h * D, D, kn, c.rms_norm_eps, zc());
        Rope(k[t], h * D, static_cast<double>(t));
      }
    }
    Mat o(T, std::vector<double>(Hq * D, 0.0));
    for (size_t h = 0; h < Hq; ++h) {
      const size_t g = h / (Hq / Hkv);
      for (size_t t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double mx = -1e300, sum = 0;
        for (size_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (size_t d = 0; d < D; ++d) dot += q[t][h * D + d] * k[u][g * D + d];
          s[u] = dot / std::sqrt(static_cast<double>(D));
          mx = std::max(mx, s[u]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t u = 0; u <= t; ++u)
          for (size_t d = 0; d < D; ++d) o[t][h * D + d] += s[u] / sum * v[u][g * D + d];
        if (c.attn_output_gate)
          for (size_t d = 0; d < D; ++d) o[t][h * D + d] *= Sigmoid(gate[t][h * D + d]);
      }
    }
    return MatMulT(o, Mt(a + "o_proj.weight"));
  }

  // One document: the residual stream after every layer up to `last`.
  std::vector<Mat> Layers(const std::vector<std::int64_t>& ids, std::int64_t last) const {
    const Mat emb = Mt(TargetEmbeddingName(c));
    Mat h;
    for (auto id : ids) h.push_back(emb[id]);
    std::vector<Mat> outs;
    for (std::int64_t l = 0; l <= last; ++l) {
      const std::string p = c.weight_prefix + "layers." + std::to_string(l) + ".";
      const Mat x = Norm(h, p + "input_layernorm.weight");
      const Mat mixed = c.layer_kinds[l] == setup::TargetLayerKind::kFullAttention ? Attention(x, p + "self_attn.")
                                                                             : GatedDeltaNet(x, p + "linear_attn.");
      for (size_t t = 0; t < h.size(); ++t)
        for (size_t i = 0; i < h[t].size(); ++i) h[t][i] += mixed[t][i];
      const Mat y = Norm(h, p + "post_attention_layernorm.weight");
      const Mat gate = MatMulT(y, Mt(p + "mlp.gate_proj.weight")), up = MatMulT(y, Mt(p + "mlp.up_proj.weight"));
      Mat act = gate;
      for (size_t t = 0; t < act.size(); ++t)
        for (size_t i = 0; i < act[t].size(); ++i) act[t][i] = Silu(gate[t][i]) * up[t][i];
      const Mat down = MatMulT(act, Mt(p + "mlp.down_proj.weight"));
      for (size_t t = 0; t < h.size(); ++t)
        for (size_t i = 0; i < h[t].size(); ++i) h[t][i] += down[t][i];
      outs.push_back(h);
    }
    return outs;
  }

  // Packed documents: each run on its own, rows concatenated. Features [T][taps * hidden], logits [T][vocab].
  void Run(const std::vector<std::int64_t>& ids, const std::vector<std::int64_t>& doc_lengths,
           const std::vector<std::int64_t>& taps, Mat* features, Mat* logits) const {
    size_t at = 0;
    for (auto n : doc_lengths) {
      const std::vector<std::int64_t> doc(ids.begin() + at, ids.begin() + at + n);
      at += n;
      const auto outs = Layers(doc, c.num_hidden_layers - 1);
      const Mat normed = Norm(outs.back(), c.weight_prefix + "norm.weight");
      const Mat lg = MatMulT(normed, Mt(TargetLmHeadName(c)));
      for (std::int64_t t = 0; t < n; ++t) {
        std::vector<double> row;
        for (auto tap : taps) row.insert(row.end(), outs[tap][t].begin(), outs[tap][t].end());
        features->push_back(row);
        logits->push_back(lg[t]);
      }
    }
  }
};

void ExpectCloseToMat(const torch::Tensor& got, const Mat& want, double rel_tol, const char* what) {
  ASSERT_EQ(got.dim(), 2);
  ASSERT_EQ(got.size(0), static_cast<int64_t>(want.size())) << what;
  ASSERT_EQ(got.size(1), static_cast<int64_t>(want[0].size())) << what;
  const Mat g = ToMat(got);
  double scale = 0, err = 0;
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want[i].size(); ++j) {
      scale = std::max(scale, std::abs(want[i][j]));
      err = std::max(err, std::abs(g[i][j] - want[i][j]));
    }
  EXPECT_GT(scale, 0.1) << what << ": the reference is degenerate";
  EXPECT_LE(err, rel_tol * scale) << what << ": max error " << err << " at scale " << scale;
}

torch::Tensor CuSeqlens(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int32_t> cu{0};
  for (auto n : lengths) cu.push_back(cu.back() + static_cast<std::int32_t>(n));
  return torch::tensor(cu, torch::kInt);
}

void CheckAgainstReference(const setup::TargetConfig& c, const std::vector<std::int64_t>& taps, std::uint64_t seed) {
  auto model = RandomizedModel(c, Options(taps, /*full=*/true), seed);
  auto ops = MakeReferenceOps();
  const std::vector<std::int64_t> lengths{13, 9};
  torch::manual_seed(seed + 1);
  const auto ids = torch::randint(c.vocab_size, {22}, torch::kLong);
  const auto cu = CuSeqlens(lengths);

  Reference ref{c, model->weights()};
  Mat want_features, want_logits;
  const std::vector<std::int64_t> id_vec(ids.data_ptr<std::int64_t>(), ids.data_ptr<std::int64_t>() + ids.numel());
  ref.Run(id_vec, lengths, taps, &want_features, &want_logits);

  const auto features = model->Features(ids, cu, *ops);
  EXPECT_EQ(features.scalar_type(), torch::kFloat);
  ExpectCloseToMat(features, want_features, 2e-5, "features");
  const auto logits = model->Logits(ids, cu, *ops);
  EXPECT_EQ(logits.scalar_type(), torch::kFloat);
  ExpectCloseToMat(logits, want_logits, 2e-5, "logits");

  // The same weights in bf16 stay close (the production dtype: a smoke check of the casts, not of the math).
  auto bf16 = TargetModel::FromWeights(c, Options(taps, true, torch::kBFloat16), model->weights());
  ASSERT_TRUE(bf16.ok()) << bf16.status().ToString();
  // bf16 rounding of the gate inputs is amplified by exp(A_log) (up to 16), so compare in RMS, per tapped layer.
  const auto bf = (*bf16)->Features(ids, cu, *ops).to(torch::kDouble), ff = features.to(torch::kDouble);
  const double rms_err = (bf - ff).pow(2).mean().sqrt().item<double>(), rms = ff.pow(2).mean().sqrt().item<double>();
  EXPECT_LE(rms_err, 0.06 * rms) << "bf16 features: rms error " << rms_err << " at rms " << rms;
}

TEST(TargetModel, HybridFeaturesAndLogitsMatchDoubleReference) { CheckAgainstReference(TinyHybrid(), {0, 2, 3}, 3); }

TEST(TargetModel, DenseFeaturesAndLogitsMatchDoubleReference) { CheckAgainstReference(TinyDense(), {1, 2}, 5); }

void CheckPackedEqualsSeparate(const setup::TargetConfig& c, std::uint64_t seed) {
  auto model = RandomizedModel(c, Options({1, c.num_hidden_layers - 1}, true), seed);
  auto ops = MakeReferenceOps();
  torch::manual_seed(seed);
  const auto a = torch::randint(c.vocab_size, {11}, torch::kLong), b = torch::randint(c.vocab_size, {7}, torch::kLong);
  const auto packed_f = model->Features(torch::cat({a, b}), CuSeqlens({11, 7}), *ops);
  const auto packed_l = model->Logits(torch::cat({a, b}), CuSeqlens({11, 7}), *ops);
  const auto sep_f = torch::cat({model->Features(a, {}, *ops), model->Features(b, {}, *ops)});
  const auto sep_l = torch::cat({model->Logits(a, {}, *ops), model->Logits(b, {}, *ops)});
  EXPECT_TRUE(torch::allclose(packed_f, sep_f, 1e-4, 1e-4)) << (packed_f - sep_f).abs().max();
  EXPECT_TRUE(torch::allclose(packed_l, sep_l, 1e-4, 1e-4)) << (packed_l - sep_l).abs().max();
  // And the second document really differs from running it after the first without a boundary.
  const auto joined = model->Features(torch::cat({a, b}), {}, *ops);
  EXPECT_FALSE(torch::allclose(joined.narrow(0, 11, 7), sep_f.narrow(0, 11, 7), 1e-3, 1e-3));
}

TEST(TargetModel, PackedDocumentsEqualSeparateRunsHybrid) { CheckPackedEqualsSeparate(TinyHybrid(), 7); }
TEST(TargetModel, PackedDocumentsEqualSeparateRunsDense) { CheckPackedEqualsSeparate(TinyDense(), 8); }

void ExpectSameWeights(const TargetModel& a, const TargetModel& b) {
  ASSERT_EQ(a.weights().size(), b.weights().size());
  for (const auto& [name, t] : a.weights()) {
    ASSERT_TRUE(b.weights().count(name)) << name;
    const auto& u = b.weights().at(name);
    EXPECT_EQ(t.scalar_type(), u.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(t, u)) << name;
  }
}

TEST(TargetModel, SaveHfThenLoadIsBitExact) {
  for (const auto& c : {TinyHybrid(), TinyDense()}) {
    TempDir dir;
    const auto opts = Options({1, 2}, /*full=*/true, torch::kBFloat16);
    auto model = RandomizedModel(c, opts, 11);
    ASSERT_TRUE(model->SaveHf(dir.path()).ok());
    ASSERT_TRUE(std::filesystem::exists(dir.path() / "config.json"));
    // What transformers reads: the weights' dtype under both names, max_position_embeddings; no attn_output_gate
    // (transformers' Qwen3.5 ignores it).
    std::ifstream f(dir.path() / "config.json");
    const auto j = nlohmann::json::parse(f);
    const auto& text = j.contains("text_config") ? j.at("text_config") : j;
    EXPECT_EQ(j.at("dtype"), "bfloat16");
    EXPECT_EQ(j.at("torch_dtype"), "bfloat16");
    if (j.contains("text_config")) {
      EXPECT_FALSE(text.contains("dtype"));  // the outer config's only, as transformers saves it
    }
    EXPECT_EQ(text.at("max_position_embeddings"), c.max_position_embeddings);
    EXPECT_FALSE(text.contains("attn_output_gate"));
    auto loaded = TargetModel::Load(dir.path(), opts);
    ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
    const setup::TargetConfig& lc = (*loaded)->config();
    EXPECT_EQ(lc.weight_prefix, c.weight_prefix);
    EXPECT_EQ(lc.model_type, c.model_type);
    EXPECT_EQ(lc.layer_kinds, c.layer_kinds);
    EXPECT_EQ(lc.partial_rotary_factor, c.partial_rotary_factor);
    EXPECT_EQ(lc.tie_word_embeddings, c.tie_word_embeddings);
    EXPECT_EQ(lc.attn_output_gate, c.attn_output_gate);
    EXPECT_EQ(lc.max_position_embeddings, c.max_position_embeddings);
    EXPECT_EQ(lc.linear_value_head_dim, c.linear_value_head_dim);
    ExpectSameWeights(*model, **loaded);
    auto ops = MakeReferenceOps();
    const auto ids = torch::randint(c.vocab_size, {9}, torch::kLong);
    EXPECT_TRUE(torch::equal(model->Features(ids, {}, *ops), (*loaded)->Features(ids, {}, *ops)));
  }
}

// Configs saved by transformers 5.23 itself (tests/interop/make_config_fixtures.py) load, and what we write for the
// loaded config agrees with transformers' file on every key both hold; the keys only we write are a known few
// (transformers accepts them: older readers' names); read back, ours gives the same config.
TEST(TargetModel, ConfigsTransformersSavedLoadAndWriteBackTheSame) {
  const std::filesystem::path dir = DFLASH_TESTDATA_DIR "/transformers-5.23.0";
  const std::set<std::string> only_ours = {"torch_dtype", "full_attention_interval", "rope_theta"};
  for (const char* name : {"qwen3_5_text", "qwen3_5", "qwen3"}) {
    SCOPED_TRACE(name);
    const auto file = dir / (std::string(name) + ".config.json");
    std::ifstream f(file);
    ASSERT_TRUE(f) << file;
    const auto theirs = nlohmann::json::parse(f);
    auto c = setup::ParseTargetConfig(theirs, file.string());
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    const std::string dtype_name = theirs.at("dtype");
    const torch::Dtype dtype = dtype_name == "bfloat16" ? torch::kBFloat16 : torch::kFloat;
    const auto ours = TargetConfigJson(*c, dtype);
    std::function<void(const nlohmann::json&, const nlohmann::json&, const std::string&)> compare =
        [&](const nlohmann::json& a, const nlohmann::json& b, const std::string& at) {
          for (const auto& [key, value] : a.items()) {
            if (!b.contains(key)) {
              EXPECT_TRUE(only_ours.count(key)) << at << key << " is written but transformers does not save it";
              continue;
            }
            if (value.is_object()) {
              compare(value, b.at(key), at + key + ".");
            } else if (value.is_number()) {
              EXPECT_DOUBLE_EQ(value.get<double>(), b.at(key).get<double>()) << at << key;
            } else {
              EXPECT_EQ(value, b.at(key)) << at << key;
            }
          }
        };
    compare(ours, theirs, "");
    auto again = setup::ParseTargetConfig(ours);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(TargetConfigJson(*again, dtype), ours);
    EXPECT_EQ(again->weight_prefix, c->weight_prefix);
    EXPECT_EQ(again->layer_kinds, c->layer_kinds);
  }
  // The 5.23 Qwen3.5 text config, as read: two key heads of two value heads each, partial RoPE 1/4, 4096 positions.
  auto c = setup::LoadTargetConfig(dir / "qwen3_5_text.config.json");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->linear_num_key_heads, 2);
  EXPECT_EQ(c->linear_num_value_heads, 4);
  EXPECT_DOUBLE_EQ(c->partial_rotary_factor, 0.25);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  EXPECT_TRUE(c->attn_output_gate);
}

// Saves `model`, then rewrites its model.safetensors from `edit` of the weights.
void SaveEdited(const TargetModel& model, const std::filesystem::path& dir, const std::function<void(Weights&)>& edit) {
  ASSERT_TRUE(model.SaveHf(dir).ok());
  Weights w = model.weights();
  edit(w);
  ASSERT_TRUE(nn::SaveTensors(dir / "model.safetensors", nn::NamedTensors(w.begin(), w.end())).ok());
}

TEST(TargetModel, LoadNamesAMissingTensor) {
  const auto c = TinyHybrid();
  auto model = TargetModel::RandomInit(c, Options({2}, true), 1);
  TempDir dir;
  const std::string gone = "model.language_model.layers.1.linear_attn.A_log";
  SaveEdited(*model, dir.path(), [&](Weights& w) { ASSERT_EQ(w.erase(gone), 1u); });
  auto loaded = TargetModel::Load(dir.path(), Options({2}, false));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(gone), std::string::npos) << loaded.status().ToString();
  EXPECT_NE(loaded.status().message().find(dir.path().string()), std::string::npos) << loaded.status().ToString();
}

TEST(TargetModel, LoadNamesAMisShapedTensor) {
  const auto c = TinyHybrid();
  auto model = TargetModel::RandomInit(c, Options({2}, true), 1);
  TempDir dir;
  const std::string bad = "model.language_model.layers.0.linear_attn.conv1d.weight";
  SaveEdited(*model, dir.path(), [&](Weights& w) { w[bad] = w[bad].reshape({-1, 4}); });  // [C, W], not [C, 1, W]
  auto loaded = TargetModel::Load(dir.path(), Options({2}, false));
  ASSERT_FALSE(loaded.ok());
  EXPECT_NE(loaded.status().message().find(bad), std::string::npos) << loaded.status().ToString();
}

TEST(TargetModel, LoadReadsOnlyTheTensorsItNeeds) {
  const auto c = TinyHybrid();
  auto full = RandomizedModel(c, Options({1}, true), 2);
  TempDir dir;
  // Drop every weight of layers after the last tap and the final norm: a features-only load must not miss them.
  SaveEdited(*full, dir.path(), [&](Weights& w) {
    for (auto it = w.begin(); it != w.end();) {
      const bool late = it->first.find(".layers.2.") != std::string::npos ||
                        it->first.find(".layers.3.") != std::string::npos ||
                        it->first == "model.language_model.norm.weight";
      it = late ? w.erase(it) : std::next(it);
    }
  });
  auto features_only = TargetModel::Load(dir.path(), Options({1}, false));
  ASSERT_TRUE(features_only.ok()) << features_only.status().ToString();
  EXPECT_FALSE((*features_only)->weights().count("model.language_model.layers.2.mlp.up_proj.weight"));
  auto ops = MakeReferenceOps();
  const auto ids = torch::randint(c.vocab_size, {10}, torch::kLong);
  EXPECT_TRUE(torch::equal((*features_only)->Features(ids, {}, *ops), full->Features(ids, {}, *ops)));
  EXPECT_THROW((*features_only)->Logits(ids, {}, *ops), c10::Error);
  EXPECT_TRUE(torch::equal((*features_only)->lm_head(), full->lm_head()));
  // A full load does need them.
  auto need_all = TargetModel::Load(dir.path(), Options({1}, true));
  ASSERT_FALSE(need_all.ok());
  EXPECT_NE(need_all.status().message().find("model.language_model.layers.2."), std::string::npos);
}

TEST(TargetModel, RandomInitIsDeterministicInSeed) {
  for (const auto& c : {TinyHybrid(), TinyDense()}) {
    auto a = TargetModel::RandomInit(c, Options({1}, true), 42);
    auto b = TargetModel::RandomInit(c, Options({1}, true), 42);
    auto other = TargetModel::RandomInit(c, Options({1}, true), 43);
    ExpectSameWeights(*a, *b);
    EXPECT_FALSE(torch::equal(a->embed_tokens(), other->embed_tokens()));
    // A features-only model of the same seed holds the same values for the tensors it has.
    auto part = TargetModel::RandomInit(c, Options({1}, false), 42);
    EXPECT_LT(part->weights().size(), a->weights().size());
    for (const auto& [name, t] : part->weights()) EXPECT_TRUE(torch::equal(t, a->weights().at(name))) << name;
    // Initial values: neutral norms, A_log = log(U(1, 16)), dt_bias 1, linear weights N(0, 0.02).
    for (const auto& [name, t] : a->weights()) {
      if (EndsWith(name, "linear_attn.norm.weight") ||
          (EndsWith(name, "norm.weight") && c.arch == setup::TargetArch::kQwen3Dense)) {
        EXPECT_TRUE(torch::equal(t, torch::ones_like(t))) << name;
      } else if (EndsWith(name, "norm.weight")) {
        EXPECT_TRUE(torch::equal(t, torch::zeros_like(t))) << name;
      } else if (EndsWith(name, ".A_log")) {
        EXPECT_EQ(t.scalar_type(), torch::kFloat);
        EXPECT_GE(t.min().item<double>(), 0.0);
        EXPECT_LE(t.max().item<double>(), std::log(16.0) + 1e-6);
      } else if (EndsWith(name, ".dt_bias")) {
        EXPECT_TRUE(torch::equal(t, torch::ones_like(t))) << name;
      } else if (EndsWith(name, "mlp.up_proj.weight")) {
        EXPECT_NEAR(t.std().item<double>(), 0.02, 0.002) << name;
        EXPECT_NEAR(t.mean().item<double>(), 0.0, 0.002) << name;
      }
    }
  }
}

TEST(TargetModel, RejectsBadTapsAndFeaturesOnlyLogits) {
  const auto c = TinyDense();
  auto model = TargetModel::RandomInit(c, Options({1}, true), 1);
  EXPECT_EQ(TargetModel::FromWeights(c, Options({2, 1}, true), model->weights()).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(TargetModel::FromWeights(c, Options({3}, true), model->weights()).status().code(),
            ErrorCode::kInvalidArgument);
  EXPECT_EQ(TargetModel::FromWeights(c, Options({}, false), model->weights()).status().code(),
            ErrorCode::kInvalidArgument);
  auto part = TargetModel::FromWeights(c, Options({0}, false), model->weights());
  ASSERT_TRUE(part.ok());
  auto ops = MakeReferenceOps();
  const auto ids = torch::randint(c.vocab_size, {4}, torch::kLong);
  EXPECT_THROW((*part)->Logits(ids, {}, *ops), c10::Error);
  EXPECT_THROW((*part)->Features(ids.to(torch::kInt), {}, *ops), c10::Error);
  EXPECT_EQ((*part)->Features(ids, {}, *ops).sizes(), (std::vector<std::int64_t>{4, 64}));
}

}  // namespace
}  // namespace dflash::trainer

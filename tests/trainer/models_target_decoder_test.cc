// trainer/models/target_decoder and gated_delta_chunk: incremental decoding equals the model's whole-sequence forward
// (ReferenceOps: dense causal attention, the token-by-token delta rule), for the tiny hybrid and a dense target;
// rolling back (snapshot/restore, truncate) continues exactly as a decoder that never went further.
#include "trainer/models/target_decoder.h"

#include <gtest/gtest.h>

#include "decode_test_util.h"
#include "trainer/models/gated_delta_chunk.h"

namespace dflash::trainer {
namespace {

using testing::RandomTarget;
using testing::RandomTokens;

void ExpectClose(const torch::Tensor& got, const torch::Tensor& want, double tol, const char* what) {
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  const double err = (got.to(torch::kDouble) - want.to(torch::kDouble)).abs().max().item<double>();
  const double scale = want.abs().max().item<double>();
  EXPECT_LE(err, tol * std::max(1.0, scale)) << what << ": max error " << err << " (scale " << scale << ")";
}

// Feeds `ids` in pieces of the given sizes (1 = Step) and concatenates the outputs.
DecodeOutput FeedInPieces(TargetDecoder& dec, const torch::Tensor& ids, const std::vector<std::int64_t>& pieces) {
  std::vector<torch::Tensor> logits, features;
  std::int64_t at = 0;
  for (auto n : pieces) {
    if (n == 1) {
      auto out = dec.Step(ids.narrow(0, at, 1));
      logits.push_back(out.logits);
      features.push_back(out.features);
    } else {
      auto out = dec.Extend(ids.narrow(0, at, n));
      logits.push_back(out.logits);
      features.push_back(out.features);
    }
    at += n;
  }
  EXPECT_EQ(at, ids.size(0));
  return {torch::cat(logits), torch::cat(features)};
}

void CheckIncrementalMatchesFullForward(const setup::TargetConfig& config, std::vector<std::int64_t> taps) {
  auto model = RandomTarget(config, taps, 11);
  auto ops = MakeReferenceOps();
  const auto ids = RandomTokens(45, config.vocab_size, 12);
  const auto want_logits = model->Logits(ids, {}, *ops);
  const auto want_features = model->Features(ids, {}, *ops);
  TargetDecoder dec(*model);
  const auto got = FeedInPieces(dec, ids, {17, 1, 1, 9, 1, 16});
  EXPECT_EQ(dec.length(), 45);
  ExpectClose(got.logits, want_logits, 2e-4, "logits");
  ExpectClose(got.features, want_features, 2e-4, "features");
  // Greedy choices agree wherever the reference is not a near tie.
  const auto top = want_logits.topk(2, -1);
  const auto gap = std::get<0>(top).select(1, 0) - std::get<0>(top).select(1, 1);
  const auto agree = got.logits.argmax(-1).eq(std::get<1>(top).select(1, 0)) | gap.lt(1e-3);
  EXPECT_TRUE(agree.all().item<bool>());
}

TEST(TargetDecoder, TinyHybridIncrementalEqualsWholeSequence) {
  CheckIncrementalMatchesFullForward(testing::TinyHybridConfig(), {1, 3, 6});
}

TEST(TargetDecoder, DenseIncrementalEqualsWholeSequence) {
  CheckIncrementalMatchesFullForward(testing::SmallDenseConfig(), {0, 2, 4});
}

TEST(TargetDecoder, BatchRowsDecodeIndependently) {
  const auto config = testing::TinyHybridConfig();
  auto model = RandomTarget(config, {2}, 21);
  auto ops = MakeReferenceOps();
  const auto a = RandomTokens(20, config.vocab_size, 22), b = RandomTokens(20, config.vocab_size, 23);
  TargetDecoder dec(*model, 2);
  const auto first = dec.Extend(torch::stack({a, b}).narrow(1, 0, 12));
  const auto second = dec.Extend(torch::stack({a, b}).narrow(1, 12, 7));
  const auto last = dec.Step(torch::stack({a[19], b[19]}));
  for (int row = 0; row < 2; ++row) {
    const auto ids = row == 0 ? a : b;
    const auto got = torch::cat({first.logits[row], second.logits[row], last.logits[row].unsqueeze(0)});
    ExpectClose(got, model->Logits(ids, {}, *ops), 2e-4, row == 0 ? "row 0" : "row 1");
  }
}

TEST(TargetDecoder, RestoredSnapshotContinuesIdentically) {
  const auto config = testing::TinyHybridConfig();
  auto model = RandomTarget(config, {1, 5}, 31);
  const auto ids = RandomTokens(30, config.vocab_size, 32);
  TargetDecoder dec(*model);
  dec.Extend(ids.narrow(0, 0, 10));
  const auto snap = dec.Save();
  const auto first = dec.Extend(ids.narrow(0, 10, 12));
  dec.Step(ids.narrow(0, 22, 1));
  dec.Restore(snap);
  EXPECT_EQ(dec.length(), 10);
  const auto again = dec.Extend(ids.narrow(0, 10, 12));
  EXPECT_TRUE(torch::equal(first.logits, again.logits));
  EXPECT_TRUE(torch::equal(first.features, again.features));
}

TEST(TargetDecoder, TruncateInsideABlockEqualsDecodingOnlyThePrefix) {
  for (const auto& config : {testing::TinyHybridConfig(), testing::SmallDenseConfig()}) {
    auto model = RandomTarget(config, {1, 3}, 41);
    const auto ids = RandomTokens(40, config.vocab_size, 42);
    for (std::int64_t keep : {0, 1, 7, 16}) {
      TargetDecoder dec(*model);
      dec.Extend(ids.narrow(0, 0, 20));
      dec.Extend(ids.narrow(0, 20, 16), /*keep_rollback=*/true);
      dec.Truncate(20 + keep);
      EXPECT_EQ(dec.length(), 20 + keep);
      const auto got = dec.Extend(ids.narrow(0, 20 + keep, 4));
      TargetDecoder fresh(*model);
      fresh.Extend(ids.narrow(0, 0, 20 + keep));
      const auto want = fresh.Extend(ids.narrow(0, 20 + keep, 4));
      ExpectClose(got.logits, want.logits, 1e-5, "logits after truncate");
      ExpectClose(got.features, want.features, 1e-5, "features after truncate");
    }
  }
}

TEST(TargetDecoder, TruncateOutsideTheRecordIsRefused) {
  const auto config = testing::SmallDenseConfig();
  auto model = RandomTarget(config, {1}, 51);
  const auto ids = RandomTokens(12, config.vocab_size, 52);
  TargetDecoder dec(*model);
  dec.Extend(ids.narrow(0, 0, 6));
  EXPECT_THROW(dec.Truncate(4), c10::Error);  // no record
  dec.Extend(ids.narrow(0, 6, 6), true);
  EXPECT_THROW(dec.Truncate(5), c10::Error);  // before the recorded call
  EXPECT_NO_THROW(dec.Truncate(8));
}

// The chunked rule against ReferenceOps' token loop, with the state carried across calls and chunks.
TEST(GatedDeltaChunk, CarriedStateAndChunksEqualTokenLoop) {
  torch::manual_seed(61);
  const std::int64_t T = 70, H = 2, HV = 4, K = 16, V = 12;
  const auto q = torch::randn({T, H, K}), k = torch::randn({T, H, K}), v = torch::randn({T, HV, V});
  const auto a = torch::randn({T, HV}), b = torch::randn({T, HV});
  const auto A_log = torch::log(torch::rand({HV}) * 15 + 1), dt_bias = torch::randn({HV});
  const auto want = MakeReferenceOps()->GatedDeltaRule(q, k, v, a, b, A_log, dt_bias, {});
  auto batched = [](const torch::Tensor& x, std::int64_t from, std::int64_t n) { return x.narrow(0, from, n).unsqueeze(0); };
  // 45 tokens in chunks of 8, 3 one by one (the decoding path), then 22 more in chunks of 64.
  auto first = GatedDeltaChunked(batched(q, 0, 45), batched(k, 0, 45), batched(v, 0, 45), batched(a, 0, 45),
                                 batched(b, 0, 45), A_log, dt_bias, {}, /*keep_trace=*/true, /*chunk_size=*/8);
  auto second = GatedDeltaChunked(batched(q, 45, 3), batched(k, 45, 3), batched(v, 45, 3), batched(a, 45, 3),
                                  batched(b, 45, 3), A_log, dt_bias, first.state, true, /*chunk_size=*/1);
  auto third = GatedDeltaChunked(batched(q, 48, 22), batched(k, 48, 22), batched(v, 48, 22), batched(a, 48, 22),
                                 batched(b, 48, 22), A_log, dt_bias, second.state, false);
  ExpectClose(torch::cat({first.o[0], second.o[0], third.o[0]}), want, 1e-4, "o");
  auto two = GatedDeltaChunked(batched(q, 45, 2), batched(k, 45, 2), batched(v, 45, 2), batched(a, 45, 2),
                               batched(b, 45, 2), A_log, dt_bias, first.state, false);
  ExpectClose(GatedDeltaStateAfter(second.trace, 2), two.state, 1e-5, "state inside one-token chunks");
  // The state after any prefix of the first call equals a call over only that prefix.
  for (std::int64_t n : {0, 5, 8, 9, 44, 45}) {
    const auto at = GatedDeltaStateAfter(first.trace, n);
    if (n == 0) {
      EXPECT_EQ(at.abs().max().item<float>(), 0.0f);
      continue;
    }
    auto prefix = GatedDeltaChunked(batched(q, 0, n), batched(k, 0, n), batched(v, 0, n), batched(a, 0, n),
                                    batched(b, 0, n), A_log, dt_bias, {}, false);
    ExpectClose(at, prefix.state, 1e-5, "state after prefix");
  }
}

}  // namespace
}  // namespace dflash::trainer

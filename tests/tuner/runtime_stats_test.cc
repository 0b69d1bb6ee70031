// Benchmark statistics and the re-measure policy, on synthetic samples (no GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "tuner/benchmark.h"

namespace dflash::tuner {
namespace {

TEST(Summarize, MedianOfOddCountIsTheMiddleSample) {
  std::vector<float> s{5.0f, 1.0f, 3.0f};
  Result<SampleStats> st = Summarize(s);
  ASSERT_TRUE(st.ok()) << st.status().ToString();
  EXPECT_DOUBLE_EQ(st->median_ms, 3.0);
  EXPECT_DOUBLE_EQ(st->min_ms, 1.0);
}

TEST(Summarize, MedianOfEvenCountIsTheMeanOfTheTwoMiddleSamples) {
  std::vector<float> s{4.0f, 1.0f, 2.0f, 3.0f};
  Result<SampleStats> st = Summarize(s);
  ASSERT_TRUE(st.ok());
  EXPECT_DOUBLE_EQ(st->median_ms, 2.5);
}

TEST(Summarize, PercentilesInterpolateBetweenOrderStatistics) {
  // 1..11 shuffled: rank p·(n−1) = p·10 lands on whole samples: p10 = 2, p50 = 6, p90 = 10.
  std::vector<float> s{7, 3, 11, 1, 9, 5, 2, 10, 4, 8, 6};
  Result<SampleStats> st = Summarize(s);
  ASSERT_TRUE(st.ok());
  EXPECT_DOUBLE_EQ(st->p10_ms, 2.0);
  EXPECT_DOUBLE_EQ(st->median_ms, 6.0);
  EXPECT_DOUBLE_EQ(st->p90_ms, 10.0);
  EXPECT_DOUBLE_EQ(st->spread, (10.0 - 2.0) / 6.0);
  // 1..10: rank 0.9 and 8.1 → p10 = 1.9, p90 = 9.1, median = 5.5.
  std::vector<float> t{1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  st = Summarize(t);
  ASSERT_TRUE(st.ok());
  EXPECT_NEAR(st->p10_ms, 1.9, 1e-12);
  EXPECT_NEAR(st->p90_ms, 9.1, 1e-12);
  EXPECT_DOUBLE_EQ(st->median_ms, 5.5);
  EXPECT_NEAR(st->spread, 7.2 / 5.5, 1e-12);
}

TEST(Summarize, SpreadIgnoresASingleOutlierLaunch) {
  std::vector<float> s(20, 1.0f);
  s[7] = 50.0f;  // one preempted launch
  Result<SampleStats> st = Summarize(s);
  ASSERT_TRUE(st.ok());
  EXPECT_DOUBLE_EQ(st->median_ms, 1.0);
  EXPECT_DOUBLE_EQ(st->spread, 0.0);
}

TEST(Summarize, SpreadIsRelativeToTheMedian) {
  std::vector<float> a{1.0f, 1.1f, 1.2f, 0.9f, 0.8f};
  std::vector<float> b;
  for (float x : a) b.push_back(x * 100.0f);
  Result<SampleStats> sa = Summarize(a), sb = Summarize(b);
  ASSERT_TRUE(sa.ok() && sb.ok());
  EXPECT_NEAR(sa->spread, sb->spread, 1e-6);
  EXPECT_GT(sa->spread, 0.0);
}

TEST(Summarize, SingleSampleHasZeroSpread) {
  std::vector<float> s{0.25f};
  Result<SampleStats> st = Summarize(s);
  ASSERT_TRUE(st.ok());
  EXPECT_DOUBLE_EQ(st->median_ms, 0.25);
  EXPECT_DOUBLE_EQ(st->spread, 0.0);
}

TEST(Summarize, ZeroMedianWithDifferentSamplesHasInfiniteSpread) {
  std::vector<float> s{0.0f, 0.0f, 0.0f, 1.0f, 1.0f};
  Result<SampleStats> st = Summarize(s);
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(std::isinf(st->spread));
}

TEST(Summarize, RejectsNoSamplesAndInvalidSamples) {
  EXPECT_EQ(Summarize({}).status().code(), ErrorCode::kInvalidArgument);
  std::vector<float> neg{1.0f, -1.0f};
  EXPECT_EQ(Summarize(neg).status().code(), ErrorCode::kInvalidArgument);
  std::vector<float> nan{1.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_EQ(Summarize(nan).status().code(), ErrorCode::kInvalidArgument);
  std::vector<float> inf{std::numeric_limits<float>::infinity()};
  EXPECT_EQ(Summarize(inf).status().code(), ErrorCode::kInvalidArgument);
}

TEST(ValidateOptions, DefaultsAreValidAndEachBadFieldIsNamed) {
  EXPECT_TRUE(ValidateOptions(BenchOptions{}).ok());
  auto bad = [](auto mutate, const char* field) {
    BenchOptions o;
    mutate(o);
    Status st = ValidateOptions(o);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  bad([](BenchOptions& o) { o.repetitions = 0; }, "repetitions");
  bad([](BenchOptions& o) { o.warmup_launches = -1; }, "warm-up");
  bad([](BenchOptions& o) { o.max_remeasures = -1; }, "max_remeasures");
  bad([](BenchOptions& o) { o.timeout_ms = 0.0; }, "timeout_ms");
  bad([](BenchOptions& o) { o.max_spread = std::nan(""); }, "max_spread");
}

// A sampler that returns prepared measurements in order and counts its calls.
struct ScriptedSampler {
  std::vector<std::vector<float>> script;
  int calls = 0;
  Result<std::vector<float>> operator()() {
    if (calls >= static_cast<int>(script.size())) return Internal("sampler called too often");
    return script[calls++];
  }
};

const std::vector<float> kTight{1.00f, 1.01f, 0.99f, 1.00f, 1.00f};   // spread 0.012
const std::vector<float> kWide{1.0f, 2.0f, 1.5f, 0.5f, 1.0f};         // spread 1.1
const std::vector<float> kWider{1.0f, 3.0f, 1.0f, 0.2f, 1.0f};        // spread 1.68

TEST(MeasureWithSampler, TightFirstMeasurementIsNotRepeated) {
  ScriptedSampler s{{kTight, kWide}};
  Result<Measurement> m = MeasureWithSampler(std::ref(s), BenchOptions{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(s.calls, 1);
  EXPECT_EQ(m->remeasures, 0);
  EXPECT_EQ(m->repetitions, 5);
  EXPECT_DOUBLE_EQ(m->median_ms, 1.0);
  EXPECT_LE(m->spread, 0.05);
  EXPECT_EQ(m->samples, kTight);
}

TEST(MeasureWithSampler, WideMeasurementIsRepeatedUntilTight) {
  ScriptedSampler s{{kWide, kTight, kWider}};
  Result<Measurement> m = MeasureWithSampler(std::ref(s), BenchOptions{});
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(s.calls, 2);
  EXPECT_EQ(m->remeasures, 1);
  EXPECT_EQ(m->samples, kTight);
}

TEST(MeasureWithSampler, KeepsTheTightestWhenNoneIsTightEnough) {
  ScriptedSampler s{{kWider, kWide, kWider, kTight}};
  BenchOptions o;
  o.max_remeasures = 2;
  Result<Measurement> m = MeasureWithSampler(std::ref(s), o);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(s.calls, 3);  // 1 + max_remeasures, never the fourth
  EXPECT_EQ(m->remeasures, 2);
  EXPECT_EQ(m->samples, kWide);
  EXPECT_GT(m->spread, o.max_spread);  // reported honestly, not hidden
}

TEST(MeasureWithSampler, SamplerErrorsAreReturnedAsTheyAre) {
  int calls = 0;
  auto failing = [&]() -> Result<std::vector<float>> {
    ++calls;
    return Status(ErrorCode::kTimeout, "k did not finish");
  };
  Result<Measurement> m = MeasureWithSampler(failing, BenchOptions{});
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), ErrorCode::kTimeout);
  EXPECT_EQ(calls, 1);
}

TEST(MeasureWithSampler, InvalidOptionsAreRejectedBeforeSampling) {
  ScriptedSampler s{{kTight}};
  BenchOptions o;
  o.repetitions = 0;
  EXPECT_EQ(MeasureWithSampler(std::ref(s), o).status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(s.calls, 0);
}

}  // namespace
}  // namespace dflash::tuner

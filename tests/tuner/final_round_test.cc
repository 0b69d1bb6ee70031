#include "tuner/final_round.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

namespace dflash::tuner {
namespace {

TEST(FinalRound, OptionsAreValidated) {
  EXPECT_TRUE(ValidateFinalRoundOptions({}).ok());
  EXPECT_TRUE(ValidateFinalRoundOptions({0, 0.0, 1}).ok());
  auto bad = [](FinalRoundOptions o, const char* field) {
    Status st = ValidateFinalRoundOptions(o);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
  };
  bad({-1, 0.05, 4}, "rounds");
  bad({3, -0.01, 4}, "margin");
  bad({3, std::nan(""), 4}, "margin");
  bad({3, 0.05, 0}, "max_finalists");
}

TEST(FinalRound, FinalistsAreTheFastestWithinTheMarginCappedInNumber) {
  const std::vector<double> sweep = {3.30, 3.00, 3.12, 3.16, 3.05, 2.99, 3.14};  // best 2.99; +5 % = 3.1395
  EXPECT_EQ(SelectFinalists(sweep, {3, 0.05, 3}), (std::vector<std::size_t>{5, 1, 4}));      // capped at 3
  EXPECT_EQ(SelectFinalists(sweep, {3, 0.05, 10}), (std::vector<std::size_t>{5, 1, 4, 2}));  // 3.14 is out
  EXPECT_EQ(SelectFinalists(sweep, {3, 0.06, 10}), (std::vector<std::size_t>{5, 1, 4, 2, 6, 3}));
  EXPECT_EQ(SelectFinalists(sweep, {3, 0.0, 10}), (std::vector<std::size_t>{5}));
  EXPECT_EQ(SelectFinalists({2.0, 2.0, 2.0}, {3, 0.0, 10}), (std::vector<std::size_t>{0, 1, 2}));  // ties by index
  EXPECT_TRUE(SelectFinalists({}, {}).empty());
}

// The sweep's luckiest variant loses when its repeated times are slower: the lowest median wins, and each round
// starts at the next finalist.
TEST(FinalRound, LowestMedianWinsAndRoundsRotate) {
  const std::map<std::size_t, std::vector<double>> times = {{0, {3.2, 3.1, 3.3}}, {1, {3.0, 3.6, 3.05}},
                                                            {2, {3.4, 3.4, 3.4}}};
  std::map<std::size_t, std::size_t> calls;
  std::vector<std::size_t> order;
  auto r = RunFinalRound(3, 3, [&](std::size_t i) -> Result<double> {
    order.push_back(i);
    return times.at(i).at(calls[i]++);
  });
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(order, (std::vector<std::size_t>{0, 1, 2, 1, 2, 0, 2, 0, 1}));
  EXPECT_EQ(r->winner, 1u);
  EXPECT_DOUBLE_EQ(r->median_ms[0], 3.2);
  EXPECT_DOUBLE_EQ(r->median_ms[1], 3.05);  // one slow round (3.6) does not decide
  EXPECT_DOUBLE_EQ(r->median_ms[2], 3.4);
}

TEST(FinalRound, EvenRoundsTakeTheMeanOfTheMiddleTwoAndTiesGoToTheEarlierFinalist) {
  auto r = RunFinalRound(2, 2, [](std::size_t) -> Result<double> { return 2.5; });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->winner, 0u);
  int n = 0;
  auto s = RunFinalRound(1, 4, [&](std::size_t) -> Result<double> { return 1.0 + n++; });  // 1, 2, 3, 4
  ASSERT_TRUE(s.ok());
  EXPECT_DOUBLE_EQ(s->median_ms[0], 2.5);
}

TEST(FinalRound, TheFirstErrorEndsTheFinal) {
  int calls = 0;
  auto r = RunFinalRound(3, 3, [&](std::size_t i) -> Result<double> {
    ++calls;
    if (i == 2) return Status(ErrorCode::kTimeout, "finalist 2 never ended");
    return 1.0;
  });
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kTimeout);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(RunFinalRound(0, 3, [](std::size_t) -> Result<double> { return 1.0; }).status().code(),
            ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::tuner

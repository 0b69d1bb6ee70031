// GradientSync over gloo with real processes: the bucketed all-reduce overlapped with the last backward of a step
// sums exactly the gradients every rank accumulated over its rows (checked against the sum of per-row gradients
// computed independently in double on fresh leaves), starts the buckets during the backward (the overlap happens),
// keeps every rank's buckets in one order when a rank's last row has no backward or a parameter gets no gradient,
// and works unarmed (no overlap) and over consecutive steps.
#include <gtest/gtest.h>

#include <cmath>

#include "dist_test_util.h"
#include "trainer/dist/communicator.h"
#include "trainer/dist/grad_sync.h"

namespace dflash::trainer::dist {
namespace {

using testing::HaveGloo;
using testing::RunRanks;
using testing::Values;

torch::Tensor Fresh(int rank, int k, std::vector<std::int64_t> shape, torch::Dtype dtype) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return torch::tensor(Values(rank, k, n), torch::kDouble).reshape(shape).to(dtype);
}

// The parameters, in model order: U gets no gradient ever, D is float64 (its own bucket: one dtype per bucket).
struct Model {
  torch::Tensor u, w1, b1, w2, d;
  explicit Model(torch::Dtype f) {
    u = Fresh(99, 0, {4}, f).requires_grad_();
    w1 = Fresh(99, 1, {5, 7}, f).requires_grad_();
    b1 = Fresh(99, 2, {5}, f).requires_grad_();
    w2 = Fresh(99, 3, {3, 5}, f).requires_grad_();
    d = Fresh(99, 4, {6}, torch::kDouble).requires_grad_();
  }
  std::vector<torch::Tensor> params() const { return {u, w1, b1, w2, d}; }
  // The loss of rank r's row j.
  torch::Tensor Loss(int rank, int row) const {
    const auto x = Fresh(rank, 10 + row, {7}, w1.scalar_type());
    const auto h = torch::tanh(torch::matmul(w1, x) + b1);
    const auto y = torch::tanh(torch::matmul(w2, h));
    return (y * y).sum().to(torch::kDouble) * (1.0 + row) + (d * d * d).sum() * (0.5 + rank);
  }
};

// The reference: every rank's every row's gradient in double on fresh leaves, summed.
std::vector<torch::Tensor> ReferenceSum(int world, int rows, const std::vector<std::pair<int, int>>& skipped) {
  Model m(torch::kDouble);
  std::vector<torch::Tensor> sum;
  for (const auto& p : m.params()) sum.push_back(torch::zeros_like(p));
  for (int r = 0; r < world; ++r) {
    for (int j = 0; j < rows; ++j) {
      if (std::find(skipped.begin(), skipped.end(), std::make_pair(r, j)) != skipped.end()) continue;
      const auto g = torch::autograd::grad({m.Loss(r, j)}, m.params(), {}, false, false, /*allow_unused=*/true);
      for (std::size_t k = 0; k < g.size(); ++k) {
        if (g[k].defined()) sum[k] += g[k];
      }
    }
  }
  return sum;
}

bool Matches(const std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& expect) {
  for (std::size_t k = 0; k < params.size(); ++k) {
    if (!params[k].grad().defined()) return false;
    const double diff = (params[k].grad().to(torch::kDouble) - expect[k]).abs().max().item<double>();
    if (!(diff < 1e-5)) {
      std::fprintf(stderr, "param %zu: max |diff| %g\n", k, diff);
      return false;
    }
  }
  return true;
}

TEST(GradientSync, OverlappedSumsEqualTheSumOfEveryRanksRowGradients) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no gloo backend";
  constexpr int kRows = 2;
  for (int world : {2, 3}) {
    auto codes = RunRanks(world, [&](const RankEnv& env) {
      auto comm = Communicator::Create(env, torch::kCPU, std::chrono::seconds(20));
      CHILD_CHECK(comm.ok());
      Model m(torch::kFloat);
      GradientSync sync(**comm, m.params(), /*bucket_bytes=*/64);
      // Reversed: [d] (float64), [w2], [b1], [w1], [u]: five buckets, u's never ready in a backward.
      CHILD_CHECK(sync.num_buckets() == 5);
      for (int step = 0; step < 2; ++step) {
        for (const auto& p : m.params()) p.mutable_grad() = torch::Tensor();
        for (int j = 0; j < kRows; ++j) {
          if (j == kRows - 1) sync.Arm();
          m.Loss(env.rank, j).backward();
        }
        CHILD_CHECK(sync.Finish().ok());
        // Every bucket before u's started inside the backward; u's (no gradient) only in Finish.
        CHILD_CHECK(sync.started_in_backward() == 4);
        CHILD_CHECK(Matches(m.params(), ReferenceSum(world, kRows, {})));
        CHILD_CHECK(m.u.grad().abs().sum().item<double>() == 0.0);
        // Bit for bit what the synchronous bucketed all-reduce gives over the same buckets (the reversed order, 64
        // bytes; d in its own call) for the same rows on a twin without hooks. With 3 ranks the association of a
        // sum depends on the buffer layout.
        Model twin(torch::kFloat);
        for (int j = 0; j < kRows; ++j) twin.Loss(env.rank, j).backward();
        twin.u.mutable_grad() = torch::zeros_like(twin.u);
        std::vector<torch::Tensor> local;
        for (const auto& p : twin.params()) local.push_back(p.grad());
        std::vector<torch::Tensor> floats(local.rbegin() + 1, local.rend());
        CHILD_CHECK((*comm)->AllReduceSumInPlace(floats, 64).ok());
        CHILD_CHECK((*comm)->AllReduceSumInPlace({local.back()}).ok());
        for (std::size_t k = 0; k < local.size(); ++k) CHILD_CHECK(torch::equal(local[k], m.params()[k].grad()));
      }
      return 0;
    });
    for (int r = 0; r < world; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " of " << world;
  }
}

TEST(GradientSync, ARankWithoutALastBackwardKeepsTheBucketOrder) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no gloo backend";
  auto codes = RunRanks(2, [&](const RankEnv& env) {
    auto comm = Communicator::Create(env, torch::kCPU, std::chrono::seconds(20));
    CHILD_CHECK(comm.ok());
    Model m(torch::kFloat);
    GradientSync sync(**comm, m.params(), /*bucket_bytes=*/64);
    // Rank 0's last row has no backward (no weight), rank 1's has: rank 1 starts four buckets during its backward,
    // rank 0 all five in Finish, in the same order.
    m.Loss(env.rank, 0).backward();
    sync.Arm();
    if (env.rank == 1) m.Loss(env.rank, 1).backward();
    CHILD_CHECK(sync.Finish().ok());
    CHILD_CHECK(sync.started_in_backward() == (env.rank == 1 ? 4u : 0u));
    CHILD_CHECK(Matches(m.params(), ReferenceSum(2, 2, {{0, 1}})));
    // The next step unarmed on both (no overlap): still the plain sums.
    for (const auto& p : m.params()) p.mutable_grad() = torch::Tensor();
    m.Loss(env.rank, 1).backward();
    CHILD_CHECK(sync.Finish().ok());
    CHILD_CHECK(sync.started_in_backward() == 0);
    CHILD_CHECK(Matches(m.params(), ReferenceSum(2, 2, {{0, 0}, {1, 0}})));
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 0);
}

}  // namespace
}  // namespace dflash::trainer::dist

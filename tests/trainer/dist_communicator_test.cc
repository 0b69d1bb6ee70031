// The c10d communicator over gloo with real processes (fork: each rank is a child process, the parent only waits):
// sums and broadcasts against values computed independently in double, the string all-gather through the store,
// and the failure behaviour: a dead peer or a missing rank fails within the timeout, never hangs.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <random>

#include "dist_test_util.h"
#include "trainer/dist/communicator.h"
#include "trainer/dist/launcher.h"

namespace dflash::trainer::dist {
namespace {

using Clock = std::chrono::steady_clock;

using testing::HaveGloo;
using testing::RunRanks;
using testing::Values;

TEST(Communicator, SumsAndBroadcastsMatchADoubleReference) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no gloo backend (install libgloo-dev and reconfigure)";
  const std::vector<std::int64_t> sizes = {7, 1000, 3, 4096, 1};
  for (int world : {2, 3}) {
    auto codes = RunRanks(world, [&](const RankEnv& env) {
      auto comm = Communicator::Create(env, torch::kCPU, std::chrono::seconds(20));
      CHILD_CHECK(comm.ok());
      Communicator& c = **comm;
      CHILD_CHECK(c.rank() == env.rank && c.world_size() == world);
      // Scalars.
      auto sums = c.AllReduceSum({double(env.rank), 1.0, 0.25 * env.rank});
      CHILD_CHECK(sums.ok());
      const double ranks = world * (world - 1) / 2.0;
      CHILD_CHECK((*sums)[0] == ranks && (*sums)[1] == world && (*sums)[2] == 0.25 * ranks);
      // Tensors through small buckets (several tensors per bucket, one larger than a bucket, a non-contiguous one).
      std::vector<torch::Tensor> tensors;
      for (std::size_t k = 0; k < sizes.size(); ++k) {
        auto v = Values(env.rank, int(k), sizes[k]);
        tensors.push_back(torch::tensor(v, torch::kDouble).to(torch::kFloat));
      }
      auto base = torch::tensor(Values(env.rank, 99, 12), torch::kDouble).to(torch::kFloat).reshape({3, 4});
      tensors.push_back(base.t());  // non-contiguous view
      CHILD_CHECK(c.AllReduceSumInPlace(tensors, /*bucket_bytes=*/8 * 1024).ok());
      for (std::size_t k = 0; k <= sizes.size(); ++k) {
        const bool view = k == sizes.size();
        const std::int64_t n = view ? 12 : sizes[k];
        std::vector<double> expect(static_cast<std::size_t>(n), 0.0);
        for (int r = 0; r < world; ++r) {
          auto v = Values(r, view ? 99 : int(k), n);
          for (std::int64_t i = 0; i < n; ++i) expect[i] += v[i];
        }
        auto got = (view ? base : tensors[k]).contiguous();
        for (std::int64_t i = 0; i < n; ++i) CHILD_CHECK(std::abs(got.data_ptr<float>()[i] - expect[i]) < 1e-5);
      }
      // Broadcast from the last rank.
      auto b = torch::tensor(Values(env.rank, 7, 33), torch::kDouble);
      CHILD_CHECK(c.Broadcast({b}, world - 1).ok());
      auto from_root = Values(world - 1, 7, 33);
      for (int i = 0; i < 33; ++i) CHILD_CHECK(b.data_ptr<double>()[i] == from_root[i]);
      // Strings: any bytes, any length, two rounds.
      for (int round = 0; round < 2; ++round) {
        std::string mine(static_cast<std::size_t>(env.rank * 1000 + round), char('a' + env.rank));
        mine += std::string("\0\n", 2);
        auto all = c.AllGatherStrings(mine);
        CHILD_CHECK(all.ok() && all->size() == std::size_t(world));
        for (int r = 0; r < world; ++r) {
          std::string expect(static_cast<std::size_t>(r * 1000 + round), char('a' + r));
          expect += std::string("\0\n", 2);
          CHILD_CHECK((*all)[r] == expect);
        }
      }
      return 0;
    });
    for (int r = 0; r < world; ++r) EXPECT_EQ(codes[r], 0) << "rank " << r << " of " << world;
  }
}

TEST(Communicator, ADeadPeerFailsTheCollectiveWithinTheTimeout) {
  if (!HaveGloo()) GTEST_SKIP() << "this build has no gloo backend";
  constexpr int kTimeoutS = 5;
  auto codes = RunRanks(2, [&](const RankEnv& env) {
    auto comm = Communicator::Create(env, torch::kCPU, std::chrono::seconds(kTimeoutS));
    CHILD_CHECK(comm.ok());
    auto warm = (*comm)->AllReduceSum({1.0});
    CHILD_CHECK(warm.ok() && (*warm)[0] == 2.0);
    if (env.rank == 1) {
      kill(getpid(), SIGKILL);  // dies without a word
    }
    usleep(300 * 1000);
    const auto start = Clock::now();
    std::vector<torch::Tensor> grads = {torch::ones({1000})};
    Status s = (*comm)->AllReduceSumInPlace(grads);
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    CHILD_CHECK(!s.ok());
    CHILD_CHECK(s.message().find("rank 0 of 2") != std::string::npos);
    CHILD_CHECK(waited < kTimeoutS + 5);
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
  EXPECT_EQ(codes[1], 128 + SIGKILL);
}

TEST(Communicator, AMissingRankFailsTheRendezvousWithinTheTimeout) {
  auto port = ReserveLocalPort();
  ASSERT_TRUE(port.ok());
  auto codes = RunRanks(1, [&](const RankEnv&) {
    RankEnv env;  // rank 0 of 2; rank 1 never comes
    env.world_size = env.local_world_size = 2;
    env.master_port = port->port();
    const auto start = Clock::now();
    auto comm = Communicator::Create(env, torch::kCPU, std::chrono::seconds(2));
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    CHILD_CHECK(!comm.ok());
    const std::string where = "MASTER_ADDR:MASTER_PORT=127.0.0.1:" + std::to_string(port->port());
    CHILD_CHECK(comm.status().message().find(where) != std::string::npos);
    CHILD_CHECK(waited < 15);
    return 0;
  });
  EXPECT_EQ(codes[0], 0);
}

TEST(Communicator, OneRankNeedsNoRendezvous) {
  auto comm = Communicator::Create(RankEnv{}, torch::kCPU, std::chrono::seconds(1));
  ASSERT_TRUE(comm.ok());
  auto sums = (*comm)->AllReduceSum({1.5, 2.0});
  ASSERT_TRUE(sums.ok());
  EXPECT_EQ(*sums, (std::vector<double>{1.5, 2.0}));
  auto all = (*comm)->AllGatherStrings("x");
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(*all, std::vector<std::string>{"x"});
}

}  // namespace
}  // namespace dflash::trainer::dist

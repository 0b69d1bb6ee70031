// Rank environment parsing (one error per bad variable), the shard rule (every row of a step trained by exactly one
// rank, the same rows as one rank with the whole batch), the launcher's argument handling and the collective
// deadline (fires once for an armed collective that overruns, never for a disarmed one).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <map>
#include <set>

#include <atomic>
#include <thread>

#include "trainer/dist/deadline.h"
#include "trainer/dist/launcher.h"
#include "trainer/dist/rank_env.h"
#include "trainer/dist/shard.h"

namespace dflash::trainer::dist {
namespace {

Result<RankEnv> Read(const std::map<std::string, std::string>& vars) {
  return ReadRankEnv([&](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

TEST(RankEnv, NothingSetIsOneProcess) {
  auto env = Read({});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->rank, 0);
  EXPECT_EQ(env->world_size, 1);
  EXPECT_FALSE(env->distributed());
  EXPECT_TRUE(env->is_main());
}

TEST(RankEnv, TorchrunVariables) {
  auto env = Read({{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "node0"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.ok()) << env.status().ToString();
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "node0");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_TRUE(env->distributed());
  EXPECT_FALSE(env->is_main());
  // LOCAL_RANK defaults to RANK (one host).
  auto one_host = Read({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}});
  ASSERT_TRUE(one_host.ok());
  EXPECT_EQ(one_host->local_rank, 1);
}

TEST(RankEnv, EachBadVariableIsNamed) {
  const std::map<std::string, std::string> good = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  struct Case {
    std::string var, value, expect;  // value "" with var: removed
  };
  const std::vector<Case> cases = {
      {"RANK", "x1", "RANK='x1' is not an integer"},
      {"RANK", "2", "RANK=2 must be below WORLD_SIZE=2"},
      {"RANK", "-1", "RANK=-1 is outside"},
      {"RANK", "", "RANK is not"},
      {"WORLD_SIZE", "0", "WORLD_SIZE=0 is outside"},
      {"WORLD_SIZE", "2.5", "WORLD_SIZE='2.5' is not an integer"},
      {"MASTER_PORT", "70000", "MASTER_PORT=70000 is outside"},
      {"MASTER_PORT", "", "MASTER_PORT is not set"},
      {"MASTER_ADDR", "", "MASTER_ADDR is not set"},
      {"LOCAL_RANK", "4", "LOCAL_RANK=4 must be below LOCAL_WORLD_SIZE=2"},
  };
  for (const auto& c : cases) {
    auto vars = good;
    if (c.value.empty()) vars.erase(c.var); else vars[c.var] = c.value;
    auto env = Read(vars);
    ASSERT_FALSE(env.ok()) << c.var << "=" << c.value;
    EXPECT_EQ(env.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(env.status().message().find(c.expect), std::string::npos) << env.status().message();
    EXPECT_EQ(env.status().message().find('\n'), std::string::npos);
  }
  auto rank_only = Read({{"RANK", "1"}});
  ASSERT_FALSE(rank_only.ok());
  EXPECT_NE(rank_only.status().message().find("WORLD_SIZE is not"), std::string::npos);
}

TEST(StepShard, RanksPartitionTheStepLikeOneRankWithTheWholeBatch) {
  for (int world : {1, 2, 3, 8}) {
    for (std::int64_t per_rank : {1, 2, 5}) {
      // One rank with batch world x per_rank trains rows 0 ... n-1 of the step; the ranks together must train each
      // of them exactly once, per_rank each.
      const std::int64_t n = world * per_rank;
      std::vector<int> owner(static_cast<std::size_t>(n), -1);
      for (int r = 0; r < world; ++r) {
        const StepShard shard{r, world, per_rank};
        ASSERT_EQ(shard.global_rows(), n);
        std::int64_t mine = 0;
        for (std::int64_t i = 0; i < n; ++i) {
          if (!shard.Owns(i)) continue;
          ASSERT_EQ(owner[static_cast<std::size_t>(i)], -1) << "row " << i << " owned twice";
          owner[static_cast<std::size_t>(i)] = r;
          ++mine;
        }
        EXPECT_EQ(mine, per_rank);
      }
      for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(owner[static_cast<std::size_t>(i)], int(i % world));
    }
  }
}

TEST(Launcher, WorkerArgumentsDropOnlyTheLauncherOption) {
  const char* argv[] = {"dflash-train", "--nproc-per-node", "2", "--data", "d.jsonl", "--nproc-per-node=4",
                        "--output", "--nproc-per-node-x"};
  const auto args = WorkerArguments(8, argv);
  EXPECT_EQ(args, (std::vector<std::string>{"--data", "d.jsonl", "--output", "--nproc-per-node-x"}));
}

TEST(Launcher, ExitCodeIsTheFailingWorkersAndTheOthersAreStopped) {
  // Worker 0 fails at once with 3, worker 1 would sleep for a minute: the launcher stops it and returns 3.
  LaunchOptions o;
  o.nproc = 2;
  o.executable = "/bin/sh";
  o.arguments = {"-c", "if [ \"$RANK\" = 0 ]; then exit 3; fi; sleep 60"};
  o.grace = std::chrono::milliseconds(2000);
  const auto start = std::chrono::steady_clock::now();
  auto rc = LaunchWorkers(o);
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_EQ(*rc, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(Launcher, WorkersSeeTheirRankEnvironment) {
  // Each worker checks its own environment; any mismatch is a non-zero exit.
  LaunchOptions o;
  o.nproc = 3;
  o.executable = "/bin/sh";
  o.master_port = 4321;
  o.arguments = {"-c",
                 "[ \"$WORLD_SIZE\" = 3 ] && [ \"$LOCAL_WORLD_SIZE\" = 3 ] && [ \"$LOCAL_RANK\" = \"$RANK\" ] && "
                 "[ \"$MASTER_ADDR\" = 127.0.0.1 ] && [ \"$MASTER_PORT\" = 4321 ] && [ \"$RANK\" -ge 0 ] && "
                 "[ \"$RANK\" -lt 3 ]"};
  auto rc = LaunchWorkers(o);
  ASSERT_TRUE(rc.ok()) << rc.status().ToString();
  EXPECT_EQ(*rc, 0);
  o.arguments = {"-c", "exit $((RANK + 5))"};  // the first to fail decides; all fail here: one of 5, 6, 7
  rc = LaunchWorkers(o);
  ASSERT_TRUE(rc.ok());
  EXPECT_GE(*rc, 5);
  EXPECT_LE(*rc, 7);
  o.nproc = 0;
  EXPECT_FALSE(LaunchWorkers(o).ok());
}

// A reserved port is handed to no one else (a socket without SO_REUSEADDR cannot bind it), yet a rendezvous server
// that sets SO_REUSEADDR (as c10d's TCPStore does) can listen on it while the reservation is held.
TEST(Launcher, AReservedPortIsHeldYetTheRendezvousCanListenOnIt) {
  auto reserved = ReserveLocalPort();
  ASSERT_TRUE(reserved.ok()) << reserved.status().ToString();
  EXPECT_GT(reserved->port(), 0);
  EXPECT_LT(reserved->port(), 65536);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(reserved->port()));
  const int plain = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(plain, 0);
  EXPECT_NE(bind(plain, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << "the port is not held";
  close(plain);
  const int server = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(server, 0);
  const int on = 1;
  ASSERT_EQ(setsockopt(server, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on), 0);
  EXPECT_EQ(bind(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  EXPECT_EQ(listen(server, 4), 0) << std::strerror(errno);
  close(server);
}

TEST(CollectiveDeadline, FiresOnceForAnOverrunAndNeverWhenDisarmedInTime) {
  using namespace std::chrono_literals;
  std::mutex mu;
  std::vector<std::string> fired;
  // The margins are wide (each armed sleep is 400 ms short of the limit): a loaded CI machine can deschedule a
  // thread for tens of milliseconds, and a late Disarm would make a deadline that works look broken.
  constexpr auto kLimit = 600ms;
  CollectiveDeadline d(kLimit, [&](const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    fired.push_back(what);
  });
  // In time, several times over (each Arm restarts the clock: together they last longer than the limit).
  for (int i = 0; i < 4; ++i) {
    d.Arm("quick " + std::to_string(i));
    std::this_thread::sleep_for(200ms);
    d.Disarm();
  }
  std::this_thread::sleep_for(kLimit + 100ms);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(fired.empty()) << fired.front();
  }
  // Overrun: fires once, with the name of what was running.
  const auto start = std::chrono::steady_clock::now();
  d.Arm("gradient all-reduce");
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (!fired.empty()) break;
    }
    ASSERT_LT(std::chrono::steady_clock::now() - start, 5s) << "the deadline never fired";
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, kLimit);
  std::this_thread::sleep_for(2 * kLimit);
  d.Disarm();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(fired, std::vector<std::string>{"gradient all-reduce"});
}

}  // namespace
}  // namespace dflash::trainer::dist

#include "cache/named_lock.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <vector>

#include "cache_test_util.h"

namespace dflash::cache {
namespace {

using namespace std::chrono_literals;

TEST(NamedLock, ThreadsOfOneProcessExcludeEachOther) {
  testing::TempDir dir;
  std::atomic<int> inside{0}, max_inside{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        auto lock = NamedLock::Acquire(dir.path(), "k");
        ASSERT_TRUE(lock.ok()) << lock.status().ToString();
        int now = ++inside;
        max_inside = std::max(max_inside.load(), now);
        std::this_thread::yield();
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(max_inside.load(), 1);
}

TEST(NamedLock, AnotherProcessCannotTakeAHeldLock) {
  testing::TempDir dir;
  auto lock = NamedLock::Acquire(dir.path(), "held");
  ASSERT_TRUE(lock.ok());
  pid_t pid = fork();
  if (pid == 0) {
    auto r = NamedLock::Acquire(dir.path(), "held", 300ms);
    _exit(r.ok() ? 1 : (r.status().code() == ErrorCode::kBusy ? 0 : 2));
  }
  int status = 0;
  waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "child got the lock while the parent held it";
}

TEST(NamedLock, HolderKilledWithSigkillDoesNotBlockAnyone) {
  testing::TempDir dir;
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = fork();
  if (pid == 0) {
    auto lock = NamedLock::Acquire(dir.path(), "victim");
    char c = lock.ok() ? 'y' : 'n';
    (void)!write(pipefd[1], &c, 1);
    pause();  // hold it until killed
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(read(pipefd[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');
  EXPECT_FALSE(NamedLock::Acquire(dir.path(), "victim", 200ms).ok()) << "lock should be held by the child";
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  auto lock = NamedLock::Acquire(dir.path(), "victim", 5s);
  EXPECT_TRUE(lock.ok()) << lock.status().ToString();
  close(pipefd[0]);
  close(pipefd[1]);
}

TEST(NamedLock, TryAcquireReportsAHeldLockWithoutBlocking) {
  testing::TempDir dir;
  auto first = NamedLock::TryAcquire(dir.path(), "t");
  ASSERT_TRUE(first.ok());
  ASSERT_NE(*first, nullptr);
  std::thread other([&] {
    auto second = NamedLock::TryAcquire(dir.path(), "t");
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(*second, nullptr);
  });
  other.join();
}

TEST(NamedLock, RejectsNamesThatCouldEscapeTheDirectory) {
  testing::TempDir dir;
  EXPECT_EQ(NamedLock::Acquire(dir.path(), "../x").status().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(NamedLock::Acquire(dir.path(), "").status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace dflash::cache

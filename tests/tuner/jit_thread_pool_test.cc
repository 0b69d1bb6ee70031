// ThreadPool: N tasks on K threads, results and exceptions through futures, draining on destruction.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "tuner/thread_pool.h"

namespace dflash::tuner {
namespace {

TEST(ThreadPool, RunsNTasksOnExactlyKThreads) {
  constexpr unsigned kThreads = 3;
  constexpr int kTasks = 200;
  ThreadPool pool(kThreads);
  EXPECT_EQ(pool.size(), kThreads);
  std::mutex mu;
  std::set<std::thread::id> ids;
  std::vector<std::future<int>> futures;
  for (int i = 0; i < kTasks; ++i) {
    futures.push_back(pool.Submit([i, &mu, &ids] {
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
      return i * i;
    }));
  }
  for (int i = 0; i < kTasks; ++i) EXPECT_EQ(futures[i].get(), i * i);
  EXPECT_LE(ids.size(), kThreads);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u) << "tasks run on the pool, not the caller";
}

TEST(ThreadPool, KTasksRunConcurrently) {
  constexpr unsigned kThreads = 4;
  ThreadPool pool(kThreads);
  std::mutex mu;
  std::condition_variable cv;
  unsigned arrived = 0;
  std::vector<std::future<bool>> futures;
  for (unsigned i = 0; i < kThreads; ++i) {
    futures.push_back(pool.Submit([&] {
      std::unique_lock<std::mutex> lock(mu);
      ++arrived;
      cv.notify_all();
      // Every task waits for all K to be running at once: only K distinct workers can get there.
      return cv.wait_for(lock, std::chrono::seconds(30), [&] { return arrived == kThreads; });
    }));
  }
  for (auto& f : futures) EXPECT_TRUE(f.get());
}

TEST(ThreadPool, ExceptionsLandInTheFuture) {
  ThreadPool pool(2);
  auto bad = pool.Submit([]() -> int { throw std::runtime_error("boom"); });
  auto good = pool.Submit([] { return 7; });
  EXPECT_THROW(bad.get(), std::runtime_error);
  EXPECT_EQ(good.get(), 7);
}

TEST(ThreadPool, DestructionRunsEveryQueuedTask) {
  std::atomic<int> done{0};
  {
    ThreadPool pool(1);
    for (int i = 0; i < 50; ++i) {
      (void)pool.Submit([&done] {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        done.fetch_add(1);
      });
    }
  }
  EXPECT_EQ(done.load(), 50);
}

TEST(ThreadPool, TasksMaySubmitMoreTasks) {
  ThreadPool pool(2);
  auto outer = pool.Submit([&pool] { return pool.Submit([] { return 41; }); });
  std::future<int> inner = outer.get();
  EXPECT_EQ(inner.get(), 41);
}

TEST(ThreadPool, DefaultSizeIsHardwareConcurrency) {
  ThreadPool pool;
  unsigned hw = std::thread::hardware_concurrency();
  EXPECT_EQ(pool.size(), hw == 0 ? 1u : hw);
  EXPECT_EQ(ThreadPool::DefaultSize(), pool.size());
}

TEST(ThreadPool, ManyPoolsAtOnceShareNothing) {
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int i = 0; i < 4; ++i) pools.push_back(std::make_unique<ThreadPool>(2));
  std::vector<std::future<int>> futures;
  for (int i = 0; i < 40; ++i) futures.push_back(pools[i % 4]->Submit([i] { return i; }));
  for (int i = 0; i < 40; ++i) EXPECT_EQ(futures[i].get(), i);
}

}  // namespace
}  // namespace dflash::tuner

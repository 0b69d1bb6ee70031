// ThreadPool: a small fixed-size pool of worker threads (std::jthread) for parallel NVRTC compiles.
// Owns: its workers and its task queue; nothing global, so any number of pools may exist at once.
// Submit returns a std::future for the task's result (an exception thrown by the task lands in the future).
// Destruction runs every task already queued, then joins the workers.
// Thread-safety: Submit may be called from any thread, including from inside a task; the pool object itself
// must outlive every Submit call.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace dflash::tuner {

class ThreadPool {
 public:
  // `threads` workers; 0 means std::thread::hardware_concurrency() (at least 1).
  explicit ThreadPool(unsigned threads = 0);
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;
  ~ThreadPool();

  unsigned size() const { return static_cast<unsigned>(workers_.size()); }

  template <typename F>
  auto Submit(F&& task) -> std::future<std::invoke_result_t<std::decay_t<F>>> {
    using R = std::invoke_result_t<std::decay_t<F>>;
    auto packaged = std::make_shared<std::packaged_task<R()>>(std::forward<F>(task));
    std::future<R> result = packaged->get_future();
    Enqueue([packaged] { (*packaged)(); });
    return result;
  }

  // The default worker count: std::thread::hardware_concurrency(), or 1 when it is unknown.
  static unsigned DefaultSize();

 private:
  void Enqueue(std::function<void()> job);
  void WorkerLoop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;  // guarded by mu_
  bool stopping_ = false;                    // guarded by mu_
  std::vector<std::jthread> workers_;        // last member: joined first on destruction
};

}  // namespace dflash::tuner

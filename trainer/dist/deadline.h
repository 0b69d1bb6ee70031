// CollectiveDeadline: a bound on every collective of a rank that holds even when the backend never returns (NCCL
// may block in a kernel, or in its own abort, when a peer died). Arm() before a collective, Disarm() after it (the
// device synchronised); when `limit` passes while armed, a background thread calls `on_expiry` with what was
// running. The Communicator's on_expiry prints one line and ends the process with exit code 2: the main thread is
// inside a collective, never writing a checkpoint, so the last checkpoint stays intact.
// Who may call: Communicator and tests. Thread-safety: Arm/Disarm from one thread; the expiry runs on its own.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace dflash::trainer::dist {

class CollectiveDeadline {
 public:
  CollectiveDeadline(std::chrono::milliseconds limit, std::function<void(const std::string& what)> on_expiry);
  ~CollectiveDeadline();
  CollectiveDeadline(const CollectiveDeadline&) = delete;
  CollectiveDeadline& operator=(const CollectiveDeadline&) = delete;

  void Arm(const std::string& what);
  void Disarm();

 private:
  void Watch();

  const std::chrono::milliseconds limit_;
  const std::function<void(const std::string&)> on_expiry_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool quit_ = false;
  std::uint64_t generation_ = 0;  // one per Arm: an expiry belongs to the collective that armed it
  std::chrono::steady_clock::time_point due_;
  std::string what_;
  std::thread thread_;
};

}  // namespace dflash::trainer::dist

#include "trainer/dist/deadline.h"

namespace dflash::trainer::dist {

CollectiveDeadline::CollectiveDeadline(std::chrono::milliseconds limit,
                                       std::function<void(const std::string&)> on_expiry)
    : limit_(limit), on_expiry_(std::move(on_expiry)), thread_([this] { Watch(); }) {}

CollectiveDeadline::~CollectiveDeadline() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void CollectiveDeadline::Arm(const std::string& what) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    ++generation_;
    due_ = std::chrono::steady_clock::now() + limit_;
    what_ = what;
  }
  cv_.notify_all();
}

void CollectiveDeadline::Disarm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = false;
}

void CollectiveDeadline::Watch() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    const std::uint64_t generation = generation_;
    if (cv_.wait_until(lock, due_, [&] { return quit_ || !armed_ || generation_ != generation; })) continue;
    armed_ = false;  // expired: report once
    const std::string what = what_;
    lock.unlock();
    on_expiry_(what);
    lock.lock();
  }
}

}  // namespace dflash::trainer::dist

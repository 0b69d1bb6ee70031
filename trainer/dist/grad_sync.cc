#include "trainer/dist/grad_sync.h"

#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

namespace dflash::trainer::dist {

class GradientSync::Hook final : public torch::autograd::PostAccumulateGradHook {
 public:
  Hook(GradientSync* sync, std::size_t param) : sync_(sync), param_(param) {}
  void operator()(const torch::autograd::Variable& /*param*/) override { sync_->OnGradReady(param_); }

 private:
  GradientSync* sync_;
  std::size_t param_;
};

GradientSync::GradientSync(Communicator& comm, std::vector<torch::Tensor> params, std::int64_t bucket_bytes)
    : comm_(comm), params_(std::move(params)) {
  std::reverse(params_.begin(), params_.end());
  buckets_ = MakeBuckets(params_, bucket_bytes);
  bucket_of_.resize(params_.size());
  grads_.resize(params_.size());
  flats_.resize(buckets_.size());
  works_.resize(buckets_.size());
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (std::size_t i = buckets_[b].begin; i < buckets_[b].end; ++i) bucket_of_[i] = b;
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::autograd::impl::set_post_acc_grad_hooks(params_[i], std::make_unique<Hook>(this, i));
  }
}

GradientSync::~GradientSync() {
  for (const auto& p : params_) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void GradientSync::Arm() {
  std::lock_guard<std::mutex> lock(mu_);
  armed_ = true;
  next_ = 0;
  pending_.clear();
  for (const BucketRange& b : buckets_) pending_.push_back(b.end - b.begin);
  ready_.assign(params_.size(), false);
}

void GradientSync::OnGradReady(std::size_t param) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!armed_ || ready_[param]) return;
  ready_[param] = true;
  --pending_[bucket_of_[param]];
  StartReady(lock);
}

void GradientSync::StartReady(std::unique_lock<std::mutex>& /*held*/) {
  while (next_ < buckets_.size() && pending_[next_] == 0) Start(next_++);
}

void GradientSync::Start(std::size_t bucket) {
  const BucketRange range = buckets_[bucket];
  for (std::size_t i = range.begin; i < range.end; ++i) {
    torch::Tensor& p = params_[i];
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);  // no gradient on this rank this step
    grads_[i] = p.grad();
  }
  flats_[bucket] = Flatten(grads_, range);
  if (!error_.ok()) return;  // an earlier start failed: the step fails in Finish
  auto work = comm_.StartAllReduceSum(flats_[bucket]);
  if (work.ok()) {
    works_[bucket] = std::move(*work);
  } else {
    error_ = work.status();
  }
}

Status GradientSync::Finish() {
  std::unique_lock<std::mutex> lock(mu_);
  started_in_backward_ = armed_ ? next_ : 0;
  armed_ = false;
  // Whatever the backward did not start, in bucket order (ranks whose last row had no backward start them all here).
  for (; next_ < buckets_.size(); ++next_) Start(next_);
  next_ = 0;
  Status status = std::move(error_);
  error_ = Status::Ok();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& w : works_) {
    if (w) works.push_back(w);
  }
  if (status.ok()) status = comm_.Wait(works, "gradient all-reduce");
  if (status.ok()) {
    for (std::size_t b = 0; b < buckets_.size(); ++b) Unflatten(flats_[b], grads_, buckets_[b]);
  }
  std::fill(works_.begin(), works_.end(), c10::intrusive_ptr<c10d::Work>());
  std::fill(flats_.begin(), flats_.end(), torch::Tensor());
  std::fill(grads_.begin(), grads_.end(), torch::Tensor());
  return status;
}

}  // namespace dflash::trainer::dist

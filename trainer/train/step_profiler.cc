#include "trainer/train/step_profiler.h"

#include <torch/csrc/autograd/profiler_kineto.h>

#include <set>

namespace dflash::trainer {
namespace {
namespace prof = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;
}  // namespace

Result<std::unique_ptr<StepProfiler>> StepProfiler::Start(bool cuda) {
  if (torch::profiler::impl::profilerEnabled()) return Internal("--profile-steps: a profiler already runs");
  std::set<ActivityType> activities = {ActivityType::CPU};
  if (cuda) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO, /*report_input_shapes=*/true);
  try {
    prof::prepareProfiler(config, activities);
    prof::enableProfiler(config, activities);
  } catch (const c10::Error& e) {
    return Internal(std::string("--profile-steps: cannot start LibTorch's profiler: ") + e.what_without_backtrace());
  }
  std::unique_ptr<StepProfiler> p(new StepProfiler());
  p->running_ = true;
  return p;
}

StepProfiler::~StepProfiler() {
  if (!running_) return;
  try {
    prof::disableProfiler();
  } catch (const c10::Error&) {
  }
}

Status StepProfiler::StopAndSave(const std::filesystem::path& path) {
  if (!running_) return Internal("StepProfiler::StopAndSave called twice");
  running_ = false;
  try {
    auto result = prof::disableProfiler();
    if (!result) return Internal("--profile-steps: the profiler returned no result");
    result->save(path.string());
  } catch (const c10::Error& e) {
    return IoError("--profile-steps: cannot write " + path.string() + ": " + e.what_without_backtrace());
  }
  if (!std::filesystem::exists(path)) return IoError("--profile-steps: no trace was written to " + path.string());
  return Status::Ok();
}

}  // namespace dflash::trainer

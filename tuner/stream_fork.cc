#include "tuner/stream_fork.h"

#include <algorithm>
#include <memory>
#include <vector>

namespace dflash::gpu {

Result<StreamFork*> StreamFork::ForCurrentThread() {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  CUcontext ctx = nullptr;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->CtxGetCurrent(&ctx), "cuCtxGetCurrent"));
  if (ctx == nullptr) return InvalidArgument("StreamFork: no CUDA context is current on this thread");
  unsigned long long id = 0;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->CtxGetId(ctx, &id), "cuCtxGetId"));
  thread_local std::vector<std::unique_ptr<StreamFork>> forks;
  for (const auto& fork : forks) {
    if (fork->ctx_id_ == id) return fork.get();
  }
  // A fork made under this handle by an earlier (destroyed) context is stale: drop it (its destructor sees the
  // context gone and leaves the handles alone).
  std::erase_if(forks, [ctx](const auto& fork) { return fork->ctx_ == ctx; });
  std::unique_ptr<StreamFork> fork(new StreamFork(ctx, id));
  DFLASH_ASSIGN_OR_RETURN(fork->side_, Stream::CreateNonBlockingHighestPriority());
  DFLASH_ASSIGN_OR_RETURN(fork->event_, Event::CreateForOrdering());
  forks.push_back(std::move(fork));
  return forks.back().get();
}

bool StreamFork::ContextAlive() const {
  Result<const DriverApi*> api = Driver();
  unsigned long long id = 0;
  // A destroyed context answers CUDA_ERROR_CONTEXT_IS_DESTROYED (or another error); a later context under the
  // same handle answers another id.
  return api.ok() && (*api)->CtxGetId(ctx_, &id) == CUDA_SUCCESS && id == ctx_id_;
}

StreamFork::~StreamFork() {
  if (ContextAlive()) return;  // the members destroy the stream and the event
  (void)side_.Release();
  (void)event_.Release();
}

Status StreamFork::Order(CUstream from, CUstream to) {
  DFLASH_RETURN_IF_ERROR(event_.Record(from));
  return event_.MakeWait(to);
}

}  // namespace dflash::gpu

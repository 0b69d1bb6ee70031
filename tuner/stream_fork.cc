#include "tuner/stream_fork.h"

#include <memory>
#include <utility>
#include <vector>

namespace dflash::gpu {

Result<StreamFork*> StreamFork::ForCurrentThread() {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  CUcontext ctx = nullptr;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->CtxGetCurrent(&ctx), "cuCtxGetCurrent"));
  if (ctx == nullptr) return InvalidArgument("StreamFork: no CUDA context is current on this thread");
  thread_local std::vector<std::pair<CUcontext, std::unique_ptr<StreamFork>>> forks;
  for (auto& [c, fork] : forks) {
    if (c == ctx) return fork.get();
  }
  std::unique_ptr<StreamFork> fork(new StreamFork());
  DFLASH_ASSIGN_OR_RETURN(fork->side_, Stream::CreateNonBlockingHighestPriority());
  DFLASH_ASSIGN_OR_RETURN(fork->event_, Event::CreateForOrdering());
  forks.emplace_back(ctx, std::move(fork));
  return forks.back().second.get();
}

Status StreamFork::Order(CUstream from, CUstream to) {
  DFLASH_RETURN_IF_ERROR(event_.Record(from));
  return event_.MakeWait(to);
}

}  // namespace dflash::gpu

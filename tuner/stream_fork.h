// StreamFork: part of one call's GPU work runs on a second stream beside the caller's and is joined back before
// the call returns, so the two parts overlap on the GPU. Ordering goes through events only, so stream capture
// follows it (fork and join become graph edges) and the call stays graph-capturable.
// Owns, per thread and CUDA context, one non-blocking stream at the context's highest priority and one ordering
// event, created on first use and reused by every later call of that thread in that context.
// Context lifetime: a context is told apart by its driver id (cuCtxGetId), not its handle, because a released
// primary context is destroyed together with its streams and events and the next one may get the same handle. A
// fork whose context is gone is never handed out again, and neither it nor the thread's exit destroys its (already
// destroyed) handles.
// Who may call: launch code of kernel families (gdn's prep / state-pass overlap). Thread-safety: the objects
// are thread-local; concurrent callers on different threads never share a stream or an event. Graph capture:
// all of a thread's caller streams share its side stream, so a thread may have at most ONE open capture that
// forks (two open at once, or an eager fork during one, would join the side stream into the wrong capture:
// CUDA_ERROR_STREAM_CAPTURE_ISOLATION or an invalidated capture). The first call on a thread creates the stream
// and the event (allowed during a capture).
#pragma once

#include <cuda.h>

#include "base/status.h"
#include "tuner/gpu_runtime.h"

namespace dflash::gpu {

class StreamFork {
 public:
  // The fork of the calling thread in its current context (InvalidArgument when no context is current).
  static Result<StreamFork*> ForCurrentThread();

  StreamFork(const StreamFork&) = delete;
  StreamFork& operator=(const StreamFork&) = delete;
  // Destroys the stream and the event only while their context still lives.
  ~StreamFork();

  // The second stream: non-blocking, highest priority (its kernels' blocks get free SMs first).
  CUstream side() const { return side_.get(); }
  // `to` waits (on the GPU) for everything enqueued on `from` so far; either direction between a caller's
  // stream and side(). One event serves every call: a wait binds to the record made just before it.
  Status Order(CUstream from, CUstream to);

 private:
  StreamFork(CUcontext ctx, unsigned long long ctx_id) : ctx_(ctx), ctx_id_(ctx_id) {}
  // True while ctx_ is still the context this fork was made in.
  bool ContextAlive() const;

  CUcontext ctx_;
  unsigned long long ctx_id_;
  Stream side_;
  Event event_;
};

}  // namespace dflash::gpu

// The CUDA driver API runtime of the tuner: driver loading, contexts, device memory, modules, streams, events,
// launches. Owns: RAII wrappers (move-only) over driver handles; every CUresult is checked and turned into a
// Status that names the call and the label (kernel, variant) the caller gave.
// libcuda.so.1 is loaded with dlopen on first use, so binaries run (and report "no GPU") on machines without a
// driver, such as CI. Thread-safety: Driver() is safe from any thread; each wrapper object belongs to one thread
// at a time; handles from the primary context may be used from any thread that made it current.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace dflash::gpu {

// The driver entry points we use, resolved from libcuda.so.1.
struct DriverApi {
  decltype(&::cuInit) Init;
  decltype(&::cuDriverGetVersion) DriverGetVersion;
  decltype(&::cuDeviceGetCount) DeviceGetCount;
  decltype(&::cuDeviceGet) DeviceGet;
  decltype(&::cuDeviceGetName) DeviceGetName;
  decltype(&::cuDeviceGetAttribute) DeviceGetAttribute;
  decltype(&::cuDeviceTotalMem) DeviceTotalMem;
  decltype(&::cuDevicePrimaryCtxRetain) DevicePrimaryCtxRetain;
  decltype(&::cuDevicePrimaryCtxRelease) DevicePrimaryCtxRelease;
  decltype(&::cuCtxSetCurrent) CtxSetCurrent;
  decltype(&::cuCtxGetCurrent) CtxGetCurrent;
  decltype(&::cuCtxGetDevice) CtxGetDevice;
  decltype(&::cuCtxGetId) CtxGetId;
  decltype(&::cuCtxSynchronize) CtxSynchronize;
  decltype(&::cuMemAlloc) MemAlloc;
  decltype(&::cuMemFree) MemFree;
  decltype(&::cuMemcpyHtoD) MemcpyHtoD;
  decltype(&::cuMemcpyDtoH) MemcpyDtoH;
  decltype(&::cuMemsetD8Async) MemsetD8Async;
  decltype(&::cuMemGetInfo) MemGetInfo;
  decltype(&::cuModuleLoadData) ModuleLoadData;
  decltype(&::cuModuleUnload) ModuleUnload;
  decltype(&::cuModuleGetFunction) ModuleGetFunction;
  decltype(&::cuFuncSetAttribute) FuncSetAttribute;
  decltype(&::cuFuncGetAttribute) FuncGetAttribute;
  decltype(&::cuLaunchKernel) LaunchKernel;
  decltype(&::cuStreamCreate) StreamCreate;
  decltype(&::cuStreamDestroy) StreamDestroy;
  decltype(&::cuStreamSynchronize) StreamSynchronize;
  decltype(&::cuEventCreate) EventCreate;
  decltype(&::cuEventDestroy) EventDestroy;
  decltype(&::cuEventRecord) EventRecord;
  decltype(&::cuEventSynchronize) EventSynchronize;
  decltype(&::cuEventElapsedTime) EventElapsedTime;
  decltype(&::cuGetErrorName) GetErrorName;
  decltype(&::cuGetErrorString) GetErrorString;
  // Added by the runtime/benchmark half: device identity, async copies, non-blocking completion queries.
  decltype(&::cuDeviceGetPCIBusId) DeviceGetPCIBusId;
  decltype(&::cuDeviceGetUuid) DeviceGetUuid;
  decltype(&::cuCtxPushCurrent) CtxPushCurrent;
  decltype(&::cuCtxPopCurrent) CtxPopCurrent;
  decltype(&::cuMemsetD32Async) MemsetD32Async;
  decltype(&::cuMemcpyHtoDAsync) MemcpyHtoDAsync;
  decltype(&::cuMemcpyDtoHAsync) MemcpyDtoHAsync;
  decltype(&::cuMemcpyDtoDAsync) MemcpyDtoDAsync;
  decltype(&::cuStreamQuery) StreamQuery;
  decltype(&::cuEventQuery) EventQuery;
  // Added by the benchmarks: CUDA graphs made by stream capture (multi-kernel launches timed without host gaps).
  decltype(&::cuStreamBeginCapture) StreamBeginCapture;
  decltype(&::cuStreamEndCapture) StreamEndCapture;
  decltype(&::cuGraphInstantiate) GraphInstantiate;
  decltype(&::cuGraphLaunch) GraphLaunch;
  decltype(&::cuGraphExecDestroy) GraphExecDestroy;
  decltype(&::cuGraphDestroy) GraphDestroy;
  // Added by the gdn family: work of one call forked onto a second stream and joined back (StreamFork).
  decltype(&::cuStreamCreateWithPriority) StreamCreateWithPriority;
  decltype(&::cuCtxGetStreamPriorityRange) CtxGetStreamPriorityRange;
  decltype(&::cuStreamWaitEvent) StreamWaitEvent;
  // Added by the attention family's warp-specialised forward: tensor maps for the bulk tensor copy engine (TMA).
  decltype(&::cuTensorMapEncodeTiled) TensorMapEncodeTiled;
};

// Loads libcuda.so.1 and calls cuInit once. Unsupported("no CUDA driver: ...") when it is absent.
Result<const DriverApi*> Driver();
// Number of CUDA devices; 0 (not an error) when there is no driver or no device.
int DeviceCount();
// The SM count of the current context's device (read once per device, then cached; thread-safe): the grid of a
// persistent kernel (one block per SM). Errors: no driver, no current context.
Result<int> CurrentDeviceSmCount();
// "cuLaunchKernel failed for conv1d/variant X: CUDA_ERROR_INVALID_VALUE (invalid argument)" style Status.
Status CheckCu(CUresult r, std::string_view call, std::string_view label = {});

struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int sm_count = 0;
  std::size_t l2_bytes = 0;
  std::size_t total_memory = 0;
  int max_shared_per_block_optin = 0;
  int driver_version = 0;  // e.g. 13000
  // Identity that does not depend on the ordinal (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER): two processes that
  // see one GPU under different ordinals agree on these. Either may be empty when the driver does not report it.
  std::string pci_bus_id;  // "0000:3B:00.0" (cuDeviceGetPCIBusId)
  std::string uuid;        // "GPU-1a2b3c4d-...": cuDeviceGetUuid (a MIG instance's own) in nvidia-smi -L form
  int cc() const { return cc_major * 10 + cc_minor; }  // 90 for 9.0
  // The arch this device tunes and loads kernels for (tuner::DeviceArch: "sm_90a" on CC 9.0, else "sm_<cc>");
  // cubins of tuner::RunsOn archs (sm_90 too on CC 9.0) run here as well.
  std::string arch() const;
};

// The retained primary context of one device (the one LibTorch uses too), current on the creating thread.
class Context {
 public:
  static Result<Context> Primary(int ordinal);
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();
  const DeviceInfo& info() const { return info_; }
  CUcontext get() const { return ctx_; }
  Status MakeCurrent() const;  // for use from another thread

 private:
  Context() = default;
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
  DeviceInfo info_;
};

class DeviceBuffer {
 public:
  // InvalidArgument for 0 bytes; the label names the buffer in errors ("cuMemAlloc(N bytes) failed for <label>").
  static Result<DeviceBuffer> Alloc(std::size_t bytes, std::string_view label = {});
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&&) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&&) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();
  CUdeviceptr ptr() const { return ptr_; }
  std::size_t size() const { return size_; }
  Status Upload(const void* host, std::size_t bytes);          // synchronous
  Status Download(void* host, std::size_t bytes) const;        // synchronous
  Status Fill(std::uint8_t byte, CUstream stream = nullptr);   // every byte := byte (poisoning, L2 flush)
  // Gives up ownership without freeing; the buffer becomes empty. For the one case where freeing would block
  // forever: cuMemFree waits for pending work, and a kernel that timed out may never finish.
  CUdeviceptr Release();

 private:
  CUdeviceptr ptr_ = 0;
  std::size_t size_ = 0;
};

class Stream {
 public:
  static Result<Stream> Create();
  // A stream that does not synchronise with the legacy default stream, at the current context's highest
  // priority (its blocks are scheduled before those of default-priority streams when both wait for an SM).
  static Result<Stream> CreateNonBlockingHighestPriority();
  Stream() = default;
  Stream(Stream&&) noexcept;
  Stream& operator=(Stream&&) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream();
  CUstream get() const { return s_; }
  // Gives up the handle without destroying it (for a stream its context already destroyed); empty afterwards.
  CUstream Release() { return std::exchange(s_, nullptr); }
  Status Synchronize() const;
  // SynchronizeWithin (below) on this stream.
  Status SynchronizeWithin(std::chrono::duration<double, std::milli> timeout, std::string_view label) const;
  // True when all work queued on the stream has completed; never blocks.
  Result<bool> Query() const;

 private:
  CUstream s_ = nullptr;
};

class Event {
 public:
  static Result<Event> Create();
  // An event for ordering only (no timestamps: cheaper to record and wait on).
  static Result<Event> CreateForOrdering();
  Event() = default;
  Event(Event&&) noexcept;
  Event& operator=(Event&&) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();
  CUevent get() const { return e_; }
  // Gives up the handle without destroying it (for an event its context already destroyed); empty afterwards.
  CUevent Release() { return std::exchange(e_, nullptr); }
  Status Record(CUstream s);
  // Makes `waiter` wait (on the GPU) for the work before the last Record; graph capture records it as an edge.
  Status MakeWait(CUstream waiter) const;
  Status Synchronize() const;
  // True when the work before the last Record has completed; never blocks.
  Result<bool> Query() const;
  // Polls until the event completes; Timeout (naming `label`) when it has not after `timeout`. Unlike
  // Synchronize this cannot hang on a kernel that never ends (the kernel keeps running: see benchmark.h).
  Status WaitFor(std::chrono::duration<double, std::milli> timeout, std::string_view label = {}) const;
  // Milliseconds from start to end (both recorded and completed).
  static Result<float> Elapsed(const Event& start, const Event& end);

 private:
  CUevent e_ = nullptr;
};

// A loaded cubin and the functions resolved from it.
class Module {
 public:
  static Result<Module> Load(std::span<const std::uint8_t> cubin, std::string label);
  Module() = default;
  Module(Module&&) noexcept;
  Module& operator=(Module&&) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();
  // lowered_name: the mangled name NVRTC reported for a name expression.
  Result<CUfunction> Function(const std::string& lowered_name) const;
  const std::string& label() const { return label_; }

 private:
  CUmodule m_ = nullptr;
  std::string label_;
};

// An executable CUDA graph recorded by capturing the work one callback enqueues on a stream; replaying it runs
// that work again on the same buffers with one launch and no host gaps between its kernels.
class GraphExec {
 public:
  // Captures what `enqueue` puts on `stream` and instantiates it. The capture is thread-local: a call on this
  // thread that cannot be captured (a synchronous copy, cuMemAlloc, a synchronize) fails instead of running, so
  // one-time setup (workspace allocation, plan upload) must have happened before. The capture is always ended,
  // also when `enqueue` fails; captured work never runs during Capture. `stream` must be a created stream (the
  // legacy default stream cannot be captured); `label` names the graph in errors.
  static Result<GraphExec> Capture(CUstream stream, const std::function<Status(CUstream)>& enqueue,
                                   std::string_view label = {});
  GraphExec() = default;
  GraphExec(GraphExec&&) noexcept;
  GraphExec& operator=(GraphExec&&) noexcept;
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;
  ~GraphExec();
  CUgraphExec get() const { return g_; }
  // Enqueues one replay of the whole graph on `stream`.
  Status Launch(CUstream stream) const;

 private:
  CUgraphExec g_ = nullptr;
  std::string label_;
};

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// cuStreamSynchronize bounded by `timeout`: Timeout (naming `label`) when the work queued on `stream` so far has not
// finished by then (it may still be running: see Event::WaitFor). For a kernel that may never end (one run first).
Status SynchronizeWithin(CUstream stream, std::chrono::duration<double, std::milli> timeout, std::string_view label);

// cuLaunchKernel with checking; raises the function's dynamic shared memory limit first when shared_bytes > 48 KiB.
Status Launch(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream, void** args,
              std::string_view label);

}  // namespace dflash::gpu

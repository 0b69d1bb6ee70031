#include "tuner/gpu_runtime.h"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <utility>

#include "tuner/arch_limits.h"

namespace dflash::gpu {
namespace {

// cuda.h #defines most entry points to their current versioned symbol (cuMemAlloc -> cuMemAlloc_v2,
// cuMemcpyHtoD -> __CUDA_API_PTDS(cuMemcpyHtoD_v2) -> cuMemcpyHtoD_v2). Stringizing through one extra macro level
// expands those defines first, so dlsym asks for exactly the symbol whose signature decltype(&::cuX) describes.
#define DFLASH_CU_SYMBOL_INNER(x) #x
#define DFLASH_CU_SYMBOL(x) DFLASH_CU_SYMBOL_INNER(x)

struct DriverState {
  DriverApi api{};
  Status status;
};

template <typename Fn>
void Resolve(void* lib, const char* symbol, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(::dlsym(lib, symbol));
  if (*out == nullptr) *missing += (missing->empty() ? "" : ", ") + std::string(symbol);
}

std::string ErrorText(const DriverApi* api, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (api != nullptr && api->GetErrorName != nullptr) (void)api->GetErrorName(r, &name);
  if (api != nullptr && api->GetErrorString != nullptr) (void)api->GetErrorString(r, &text);
  std::string out = name ? name : "CUresult " + std::to_string(static_cast<int>(r));
  if (text) out += std::string(" (") + text + ")";
  return out;
}

ErrorCode CodeFor(CUresult r) {
  switch (r) {
    case CUDA_ERROR_NO_DEVICE:
    case CUDA_ERROR_STUB_LIBRARY:
    case CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER:
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_NOT_SUPPORTED:
      return ErrorCode::kUnsupported;
    default:
      return ErrorCode::kLaunchError;
  }
}

Status Format(const DriverApi* api, CUresult r, std::string_view call, std::string_view label) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  std::string msg(call);
  msg += " failed";
  if (!label.empty()) msg += " for " + std::string(label);
  msg += ": " + ErrorText(api, r);
  return Status(CodeFor(r), std::move(msg));
}

Status LoadDriver(DriverApi* api) {
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* err = ::dlerror();
    return Unsupported(std::string("no CUDA driver: ") + (err ? err : "dlopen(libcuda.so.1) failed"));
  }
  // The library stays loaded for the life of the process (handles from it outlive any scope we could close in).
  std::string missing;
#define DFLASH_RESOLVE(member, fn) Resolve(lib, DFLASH_CU_SYMBOL(fn), &api->member, &missing)
  DFLASH_RESOLVE(Init, cuInit);
  DFLASH_RESOLVE(DriverGetVersion, cuDriverGetVersion);
  DFLASH_RESOLVE(DeviceGetCount, cuDeviceGetCount);
  DFLASH_RESOLVE(DeviceGet, cuDeviceGet);
  DFLASH_RESOLVE(DeviceGetName, cuDeviceGetName);
  DFLASH_RESOLVE(DeviceGetAttribute, cuDeviceGetAttribute);
  DFLASH_RESOLVE(DeviceTotalMem, cuDeviceTotalMem);
  DFLASH_RESOLVE(DevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain);
  DFLASH_RESOLVE(DevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease);
  DFLASH_RESOLVE(CtxSetCurrent, cuCtxSetCurrent);
  DFLASH_RESOLVE(CtxGetCurrent, cuCtxGetCurrent);
  DFLASH_RESOLVE(CtxGetDevice, cuCtxGetDevice);
  DFLASH_RESOLVE(CtxGetId, cuCtxGetId);
  DFLASH_RESOLVE(CtxSynchronize, cuCtxSynchronize);
  DFLASH_RESOLVE(MemAlloc, cuMemAlloc);
  DFLASH_RESOLVE(MemFree, cuMemFree);
  DFLASH_RESOLVE(MemcpyHtoD, cuMemcpyHtoD);
  DFLASH_RESOLVE(MemcpyDtoH, cuMemcpyDtoH);
  DFLASH_RESOLVE(MemsetD8Async, cuMemsetD8Async);
  DFLASH_RESOLVE(MemGetInfo, cuMemGetInfo);
  DFLASH_RESOLVE(ModuleLoadData, cuModuleLoadData);
  DFLASH_RESOLVE(ModuleUnload, cuModuleUnload);
  DFLASH_RESOLVE(ModuleGetFunction, cuModuleGetFunction);
  DFLASH_RESOLVE(FuncSetAttribute, cuFuncSetAttribute);
  DFLASH_RESOLVE(FuncGetAttribute, cuFuncGetAttribute);
  DFLASH_RESOLVE(LaunchKernel, cuLaunchKernel);
  DFLASH_RESOLVE(StreamCreate, cuStreamCreate);
  DFLASH_RESOLVE(StreamDestroy, cuStreamDestroy);
  DFLASH_RESOLVE(StreamSynchronize, cuStreamSynchronize);
  DFLASH_RESOLVE(EventCreate, cuEventCreate);
  DFLASH_RESOLVE(EventDestroy, cuEventDestroy);
  DFLASH_RESOLVE(EventRecord, cuEventRecord);
  DFLASH_RESOLVE(EventSynchronize, cuEventSynchronize);
  DFLASH_RESOLVE(EventElapsedTime, cuEventElapsedTime);
  DFLASH_RESOLVE(GetErrorName, cuGetErrorName);
  DFLASH_RESOLVE(GetErrorString, cuGetErrorString);
  DFLASH_RESOLVE(DeviceGetPCIBusId, cuDeviceGetPCIBusId);
  DFLASH_RESOLVE(DeviceGetUuid, cuDeviceGetUuid);
  DFLASH_RESOLVE(CtxPushCurrent, cuCtxPushCurrent);
  DFLASH_RESOLVE(CtxPopCurrent, cuCtxPopCurrent);
  DFLASH_RESOLVE(MemsetD32Async, cuMemsetD32Async);
  DFLASH_RESOLVE(MemcpyHtoDAsync, cuMemcpyHtoDAsync);
  DFLASH_RESOLVE(MemcpyDtoHAsync, cuMemcpyDtoHAsync);
  DFLASH_RESOLVE(MemcpyDtoDAsync, cuMemcpyDtoDAsync);
  DFLASH_RESOLVE(StreamQuery, cuStreamQuery);
  DFLASH_RESOLVE(EventQuery, cuEventQuery);
  DFLASH_RESOLVE(StreamBeginCapture, cuStreamBeginCapture);
  DFLASH_RESOLVE(StreamEndCapture, cuStreamEndCapture);
  DFLASH_RESOLVE(GraphInstantiate, cuGraphInstantiate);
  DFLASH_RESOLVE(GraphLaunch, cuGraphLaunch);
  DFLASH_RESOLVE(GraphExecDestroy, cuGraphExecDestroy);
  DFLASH_RESOLVE(GraphDestroy, cuGraphDestroy);
  DFLASH_RESOLVE(StreamCreateWithPriority, cuStreamCreateWithPriority);
  DFLASH_RESOLVE(CtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange);
  DFLASH_RESOLVE(StreamWaitEvent, cuStreamWaitEvent);
  DFLASH_RESOLVE(TensorMapEncodeTiled, cuTensorMapEncodeTiled);
#undef DFLASH_RESOLVE
  if (!missing.empty()) {
    return Unsupported("CUDA driver too old for this build (CUDA " + std::to_string(CUDA_VERSION / 1000) +
                       "): libcuda.so.1 lacks " + missing);
  }
  Status init = Format(api, api->Init(0), "cuInit", {});
  if (!init.ok()) return Unsupported("no usable CUDA driver: " + init.message());
  return Status::Ok();
}

const DriverState& State() {
  static DriverState state;
  static std::once_flag once;
  std::call_once(once, [] { state.status = LoadDriver(&state.api); });
  return state;
}

// For handles that exist: the driver is loaded, since creating them needed it.
const DriverApi& Api() { return State().api; }

std::string FormatUuid(const CUuuid& id) {
  const auto* b = reinterpret_cast<const unsigned char*>(id.bytes);
  char buf[64];
  std::snprintf(buf, sizeof buf,
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0], b[1], b[2],
                b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]);
  return buf;
}

Status ReadDeviceInfo(const DriverApi& api, CUdevice dev, int ordinal, DeviceInfo* info) {
  const std::string label = "device " + std::to_string(ordinal);
  info->ordinal = ordinal;
  char name[256] = {};
  DFLASH_RETURN_IF_ERROR(Format(&api, api.DeviceGetName(name, sizeof name - 1, dev), "cuDeviceGetName", label));
  info->name = name;
  auto attr = [&](CUdevice_attribute a, const char* what, int* out) {
    return Format(&api, api.DeviceGetAttribute(out, a, dev), std::string("cuDeviceGetAttribute(") + what + ")",
                  label);
  };
  int l2 = 0;
  DFLASH_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "cc major", &info->cc_major));
  DFLASH_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "cc minor", &info->cc_minor));
  DFLASH_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, "SM count", &info->sm_count));
  DFLASH_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, "L2 size", &l2));
  DFLASH_RETURN_IF_ERROR(attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, "opt-in shared memory",
                              &info->max_shared_per_block_optin));
  info->l2_bytes = static_cast<std::size_t>(l2);
  std::size_t total = 0;
  DFLASH_RETURN_IF_ERROR(Format(&api, api.DeviceTotalMem(&total, dev), "cuDeviceTotalMem", label));
  info->total_memory = total;
  DFLASH_RETURN_IF_ERROR(Format(&api, api.DriverGetVersion(&info->driver_version), "cuDriverGetVersion", label));
  char bus[64] = {};
  DFLASH_RETURN_IF_ERROR(
      Format(&api, api.DeviceGetPCIBusId(bus, sizeof bus - 1, dev), "cuDeviceGetPCIBusId", label));
  info->pci_bus_id = bus;
  CUuuid uuid{};
  DFLASH_RETURN_IF_ERROR(Format(&api, api.DeviceGetUuid(&uuid, dev), "cuDeviceGetUuid", label));
  info->uuid = FormatUuid(uuid);
  return Status::Ok();
}

}  // namespace

std::string DeviceInfo::arch() const { return tuner::DeviceArch(cc()); }

Result<const DriverApi*> Driver() {
  const DriverState& s = State();
  if (!s.status.ok()) return s.status;
  return &s.api;
}

int DeviceCount() {
  auto api = Driver();
  if (!api.ok()) return 0;
  int count = 0;
  if ((*api)->DeviceGetCount(&count) != CUDA_SUCCESS) return 0;
  return count;
}

Result<int> CurrentDeviceSmCount() {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  CUdevice dev = 0;
  DFLASH_RETURN_IF_ERROR(Format(api, api->CtxGetDevice(&dev), "cuCtxGetDevice", "the current context"));
  static std::array<std::atomic<int>, 64> cached{};  // 0: not read yet
  const bool cacheable = dev >= 0 && dev < static_cast<CUdevice>(cached.size());
  if (cacheable) {
    if (const int n = cached[static_cast<std::size_t>(dev)].load(std::memory_order_relaxed); n > 0) return n;
  }
  int n = 0;
  DFLASH_RETURN_IF_ERROR(Format(api, api->DeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev),
                                "cuDeviceGetAttribute(SM count)", "the current device"));
  if (cacheable) cached[static_cast<std::size_t>(dev)].store(n, std::memory_order_relaxed);
  return n;
}

Status CheckCu(CUresult r, std::string_view call, std::string_view label) {
  if (r == CUDA_SUCCESS) return Status::Ok();
  const DriverState& s = State();
  return Format(s.status.ok() ? &s.api : nullptr, r, call, label);
}

// ---- Context ----

Result<Context> Context::Primary(int ordinal) {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  int count = 0;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->DeviceGetCount(&count), "cuDeviceGetCount"));
  if (ordinal < 0 || ordinal >= count) {
    return InvalidArgument("no CUDA device with ordinal " + std::to_string(ordinal) + " (" +
                           std::to_string(count) + " visible)");
  }
  const std::string label = "device " + std::to_string(ordinal);
  Context c;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->DeviceGet(&c.dev_, ordinal), "cuDeviceGet", label));
  CUcontext ctx = nullptr;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->DevicePrimaryCtxRetain(&ctx, c.dev_), "cuDevicePrimaryCtxRetain", label));
  c.ctx_ = ctx;  // from here on, ~Context releases the retain
  DFLASH_RETURN_IF_ERROR(CheckCu(api->CtxSetCurrent(ctx), "cuCtxSetCurrent", label));
  DFLASH_RETURN_IF_ERROR(ReadDeviceInfo(*api, c.dev_, ordinal, &c.info_));
  return c;
}

Context::Context(Context&& o) noexcept
    : dev_(o.dev_), ctx_(std::exchange(o.ctx_, nullptr)), info_(std::move(o.info_)) {}

Context& Context::operator=(Context&& o) noexcept {
  if (this != &o) {
    if (ctx_) (void)Api().DevicePrimaryCtxRelease(dev_);
    dev_ = o.dev_;
    ctx_ = std::exchange(o.ctx_, nullptr);
    info_ = std::move(o.info_);
  }
  return *this;
}

// A destructor cannot report: a failed release only means the driver already tore the context down.
Context::~Context() {
  if (ctx_) (void)Api().DevicePrimaryCtxRelease(dev_);
}

Status Context::MakeCurrent() const {
  if (!ctx_) return InvalidArgument("MakeCurrent on an empty Context");
  return CheckCu(Api().CtxSetCurrent(ctx_), "cuCtxSetCurrent", "device " + std::to_string(info_.ordinal));
}

// ---- DeviceBuffer ----

Result<DeviceBuffer> DeviceBuffer::Alloc(std::size_t bytes, std::string_view label) {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  if (bytes == 0) return InvalidArgument("cannot allocate a 0-byte device buffer for " + std::string(label));
  DeviceBuffer b;
  DFLASH_RETURN_IF_ERROR(
      CheckCu(api->MemAlloc(&b.ptr_, bytes), "cuMemAlloc(" + std::to_string(bytes) + " bytes)", label));
  b.size_ = bytes;
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, 0)), size_(std::exchange(o.size_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) (void)Api().MemFree(ptr_);
    ptr_ = std::exchange(o.ptr_, 0);
    size_ = std::exchange(o.size_, 0);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) (void)Api().MemFree(ptr_);
}

CUdeviceptr DeviceBuffer::Release() {
  size_ = 0;
  return std::exchange(ptr_, 0);
}

Status DeviceBuffer::Upload(const void* host, std::size_t bytes) {
  if (bytes > size_) {
    return InvalidArgument("upload of " + std::to_string(bytes) + " bytes into a " + std::to_string(size_) +
                           "-byte device buffer");
  }
  if (bytes == 0) return Status::Ok();
  return CheckCu(Api().MemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD");
}

Status DeviceBuffer::Download(void* host, std::size_t bytes) const {
  if (bytes > size_) {
    return InvalidArgument("download of " + std::to_string(bytes) + " bytes from a " + std::to_string(size_) +
                           "-byte device buffer");
  }
  if (bytes == 0) return Status::Ok();
  return CheckCu(Api().MemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH");
}

Status DeviceBuffer::Fill(std::uint8_t byte, CUstream stream) {
  if (size_ == 0) return Status::Ok();
  return CheckCu(Api().MemsetD8Async(ptr_, byte, size_, stream), "cuMemsetD8Async");
}

// ---- Stream ----

Result<Stream> Stream::Create() {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  Stream s;
  // CU_STREAM_DEFAULT (not NON_BLOCKING): ordered after the legacy stream, so the synchronous Upload/Download
  // of DeviceBuffer, which run there, are ordered with kernels launched on this stream.
  DFLASH_RETURN_IF_ERROR(CheckCu(api->StreamCreate(&s.s_, CU_STREAM_DEFAULT), "cuStreamCreate"));
  return s;
}

Result<Stream> Stream::CreateNonBlockingHighestPriority() {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  int least = 0, greatest = 0;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->CtxGetStreamPriorityRange(&least, &greatest), "cuCtxGetStreamPriorityRange"));
  Stream s;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->StreamCreateWithPriority(&s.s_, CU_STREAM_NON_BLOCKING, greatest),
                                 "cuStreamCreateWithPriority"));
  return s;
}

Stream::Stream(Stream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (s_) (void)Api().StreamDestroy(s_);
    s_ = std::exchange(o.s_, nullptr);
  }
  return *this;
}

Stream::~Stream() {
  if (s_) (void)Api().StreamDestroy(s_);
}

Status Stream::Synchronize() const {
  if (!s_) return InvalidArgument("Synchronize on an empty Stream");
  return CheckCu(Api().StreamSynchronize(s_), "cuStreamSynchronize");
}

Status Stream::SynchronizeWithin(std::chrono::duration<double, std::milli> timeout, std::string_view label) const {
  if (!s_) return InvalidArgument("SynchronizeWithin on an empty Stream");
  return gpu::SynchronizeWithin(s_, timeout, label);
}

Result<bool> Stream::Query() const {
  if (!s_) return InvalidArgument("Query on an empty Stream");
  CUresult r = Api().StreamQuery(s_);
  if (r == CUDA_ERROR_NOT_READY) return false;
  DFLASH_RETURN_IF_ERROR(CheckCu(r, "cuStreamQuery"));
  return true;
}

// ---- Event ----

Result<Event> Event::Create() {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  Event e;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->EventCreate(&e.e_, CU_EVENT_DEFAULT), "cuEventCreate"));
  return e;
}

Result<Event> Event::CreateForOrdering() {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  Event e;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->EventCreate(&e.e_, CU_EVENT_DISABLE_TIMING), "cuEventCreate"));
  return e;
}

Event::Event(Event&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (e_) (void)Api().EventDestroy(e_);
    e_ = std::exchange(o.e_, nullptr);
  }
  return *this;
}

// cuEventDestroy on an event whose work is still pending is allowed: the driver frees it once it completes.
Event::~Event() {
  if (e_) (void)Api().EventDestroy(e_);
}

Status Event::Record(CUstream s) {
  if (!e_) return InvalidArgument("Record on an empty Event");
  return CheckCu(Api().EventRecord(e_, s), "cuEventRecord");
}

Status Event::MakeWait(CUstream waiter) const {
  if (!e_) return InvalidArgument("MakeWait on an empty Event");
  return CheckCu(Api().StreamWaitEvent(waiter, e_, 0), "cuStreamWaitEvent");
}

Status Event::Synchronize() const {
  if (!e_) return InvalidArgument("Synchronize on an empty Event");
  return CheckCu(Api().EventSynchronize(e_), "cuEventSynchronize");
}

Result<bool> Event::Query() const {
  if (!e_) return InvalidArgument("Query on an empty Event");
  CUresult r = Api().EventQuery(e_);
  if (r == CUDA_ERROR_NOT_READY) return false;
  DFLASH_RETURN_IF_ERROR(CheckCu(r, "cuEventQuery"));
  return true;
}

Status Event::WaitFor(std::chrono::duration<double, std::milli> timeout, std::string_view label) const {
  if (!e_) return InvalidArgument("WaitFor on an empty Event");
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
  // Spin briefly (short kernels finish within microseconds), then sleep with a growing pause, at most 1 ms.
  auto pause = std::chrono::microseconds(10);
  for (int polls = 0;; ++polls) {
    CUresult r = Api().EventQuery(e_);
    if (r == CUDA_SUCCESS) return Status::Ok();
    if (r != CUDA_ERROR_NOT_READY) return CheckCu(r, "cuEventQuery", label);
    if (std::chrono::steady_clock::now() >= deadline) {
      std::string who = label.empty() ? std::string("GPU work") : std::string(label);
      char ms[32];
      std::snprintf(ms, sizeof ms, "%.6g", timeout.count());
      return Status(ErrorCode::kTimeout,
                    who + " did not finish within " + ms + " ms (it may still be running on the GPU)");
    }
    if (polls < 100) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(1));
    }
  }
}

Result<float> Event::Elapsed(const Event& start, const Event& end) {
  if (!start.e_ || !end.e_) return InvalidArgument("Elapsed on an empty Event");
  float ms = 0.0f;
  DFLASH_RETURN_IF_ERROR(CheckCu(Api().EventElapsedTime(&ms, start.e_, end.e_), "cuEventElapsedTime"));
  return ms;
}

// ---- Module ----

Result<Module> Module::Load(std::span<const std::uint8_t> cubin, std::string label) {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  if (cubin.empty()) return InvalidArgument("empty cubin for " + label);
  Module m;
  DFLASH_RETURN_IF_ERROR(CheckCu(api->ModuleLoadData(&m.m_, cubin.data()), "cuModuleLoadData", label));
  m.label_ = std::move(label);
  return m;
}

Module::Module(Module&& o) noexcept : m_(std::exchange(o.m_, nullptr)), label_(std::move(o.label_)) {}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    if (m_) (void)Api().ModuleUnload(m_);
    m_ = std::exchange(o.m_, nullptr);
    label_ = std::move(o.label_);
  }
  return *this;
}

Module::~Module() {
  if (m_) (void)Api().ModuleUnload(m_);
}

Result<CUfunction> Module::Function(const std::string& lowered_name) const {
  if (!m_) return InvalidArgument("Function(" + lowered_name + ") on an empty Module");
  CUfunction f = nullptr;
  DFLASH_RETURN_IF_ERROR(
      CheckCu(Api().ModuleGetFunction(&f, m_, lowered_name.c_str()), "cuModuleGetFunction(" + lowered_name + ")",
              label_));
  return f;
}

// ---- GraphExec ----

Result<GraphExec> GraphExec::Capture(CUstream stream, const std::function<Status(CUstream)>& enqueue,
                                     std::string_view label) {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  const std::string who = label.empty() ? std::string("CUDA graph") : std::string(label);
  if (stream == nullptr) return InvalidArgument("cannot capture " + who + " on the legacy default stream");
  if (!enqueue) return InvalidArgument("nothing to capture for " + who);
  DFLASH_RETURN_IF_ERROR(
      CheckCu(api->StreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), "cuStreamBeginCapture", who));
  const Status enqueued = enqueue(stream);
  CUgraph graph = nullptr;
  const Status ended = CheckCu(api->StreamEndCapture(stream, &graph), "cuStreamEndCapture", who);
  // The captured graph is only needed until it is instantiated; destroyed on every path.
  struct GraphGuard {
    const DriverApi* api;
    CUgraph g;
    ~GraphGuard() {
      if (g) (void)api->GraphDestroy(g);
    }
  } guard{api, graph};
  if (!enqueued.ok()) {
    std::string msg = "capturing " + who + ": " + enqueued.message();
    if (!ended.ok()) msg += " (then " + ended.message() + ")";
    return Status(enqueued.code(), std::move(msg));
  }
  DFLASH_RETURN_IF_ERROR(ended);
  if (graph == nullptr) return Internal("cuStreamEndCapture returned no graph for " + who);
  GraphExec e;
  e.label_ = who;
  // Kernel nodes keep the priority of the stream they were captured on (a StreamFork's side stream is the
  // highest); without this flag a replay would run them all at the launch stream's priority.
  DFLASH_RETURN_IF_ERROR(CheckCu(api->GraphInstantiate(&e.g_, graph, CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY),
                                 "cuGraphInstantiate", who));
  return e;
}

GraphExec::GraphExec(GraphExec&& o) noexcept : g_(std::exchange(o.g_, nullptr)), label_(std::move(o.label_)) {}

GraphExec& GraphExec::operator=(GraphExec&& o) noexcept {
  if (this != &o) {
    if (g_) (void)Api().GraphExecDestroy(g_);
    g_ = std::exchange(o.g_, nullptr);
    label_ = std::move(o.label_);
  }
  return *this;
}

// Destroying an executable graph whose replays are still pending is allowed: the driver waits for them.
GraphExec::~GraphExec() {
  if (g_) (void)Api().GraphExecDestroy(g_);
}

Status GraphExec::Launch(CUstream stream) const {
  if (!g_) return InvalidArgument("Launch of an empty GraphExec");
  return CheckCu(Api().GraphLaunch(g_, stream), "cuGraphLaunch", label_);
}

Status SynchronizeWithin(CUstream stream, std::chrono::duration<double, std::milli> timeout, std::string_view label) {
  DFLASH_ASSIGN_OR_RETURN(Event done, Event::CreateForOrdering());
  DFLASH_RETURN_IF_ERROR(done.Record(stream));
  return done.WaitFor(timeout, label);
}

// ---- Launch ----

Status Launch(CUfunction f, Dim3 grid, Dim3 block, unsigned shared_bytes, CUstream stream, void** args,
              std::string_view label) {
  DFLASH_ASSIGN_OR_RETURN(const DriverApi* api, Driver());
  if (f == nullptr) return InvalidArgument("launch of a null function for " + std::string(label));
  constexpr unsigned kDefaultDynamicSharedLimit = 48 * 1024;
  if (shared_bytes > kDefaultDynamicSharedLimit) {
    // The limit only ever grows, under one lock: two threads launching one function with different sizes must
    // not lower it between the other's check and launch.
    static std::mutex mu;
    std::lock_guard<std::mutex> g(mu);
    int current = 0;
    DFLASH_RETURN_IF_ERROR(CheckCu(
        api->FuncGetAttribute(&current, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
        "cuFuncGetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)", label));
    if (static_cast<unsigned>(current) < shared_bytes) {
      DFLASH_RETURN_IF_ERROR(CheckCu(api->FuncSetAttribute(f, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                           static_cast<int>(shared_bytes)),
                                     "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES=" +
                                         std::to_string(shared_bytes) + ")",
                                     label));
    }
  }
  CUresult r = api->LaunchKernel(f, grid.x, grid.y, grid.z, block.x, block.y, block.z, shared_bytes, stream, args,
                                 nullptr);
  if (r == CUDA_SUCCESS) return Status::Ok();
  auto dims = [](Dim3 d) {
    return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
  };
  return CheckCu(r, "cuLaunchKernel(grid " + dims(grid) + ", block " + dims(block) + ", " +
                        std::to_string(shared_bytes) + " B dynamic shared)",
                 label);
}

}  // namespace dflash::gpu

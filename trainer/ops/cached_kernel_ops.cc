#include "trainer/ops/cached_kernel_ops.h"

#include <chrono>
#include <map>
#include <ostream>
#include <set>
#include <utility>

#ifdef DFLASH_TORCH_CUDA
// Only what libc10_cuda exports: header-inline helpers that call the CUDA runtime (CUDAGuard, synchronize) would
// need libcudart on the link line, so device guards are c10::DeviceGuard and waits go through the driver API.
#include <c10/cuda/CUDAStream.h>
#endif

#include "kernels/attention/attention_api.h"
#include "kernels/conv1d/conv1d_api.h"
#include "kernels/gdn/gdn_api.h"
#include "kernels/rmsnorm/rmsnorm_api.h"
#include "kernels/rmsnorm/rmsnorm_bwd_api.h"
#include "kernels/rope/rope_api.h"
#include "kernels/swiglu/swiglu_api.h"
#include "kernels/xent/xent_api.h"
#include "tuner/thread_pool.h"

namespace dflash::trainer {

struct CachedKernelOps::State {
  State(cache::KernelCache& c, gpu::Context context) : cache(c), ctx(std::move(context)), provider(cache, ctx) {}
  cache::KernelCache& cache;
  gpu::Context ctx;
  tuner::KernelProvider provider;  // refers to cache and ctx above

  // The kernels a launch shape runs (setup::KernelRequestsFor(shape), in its order), resolved on its first launch:
  // later launches of the shape find them here without building a problem, a bucket or a key.
  struct ShapeKernels {
    std::vector<std::string> operations;
    std::vector<const tuner::LoadedVariant*> variants;
  };
  std::map<setup::OpShape::Key, ShapeKernels> by_shape;

  std::optional<tuner::TuneOptions> tune_on_miss;  // SetTuneOnMiss

  // Tunes `request` into the cache (single flight across processes); NotFound when no variant passed.
  Result<tuner::KeyReport> Tune(const setup::KernelRequest& request, const tuner::TuneOptions& options) {
    tuner::ThreadPool pool;
    const tuner::Tuner tuner(cache, &ctx, pool);
    DFLASH_ASSIGN_OR_RETURN(tuner::KeyReport report, tuner.Tune(*request.family, request.problem, options));
    if (report.status == tuner::KeyStatus::kNoValidVariant || report.status == tuner::KeyStatus::kCompiledOnly) {
      return NotFound("tuning " + request.operation + " (" + report.signature + ") gave no winner: " +
                      tuner::KeyStatusName(report.status) + (report.note.empty() ? "" : ", " + report.note));
    }
    return report;
  }

  // The winner of `request`; with tune_on_miss a missing key is tuned first.
  Result<tuner::ResolvedKernel> Resolve(const setup::KernelRequest& request) {
    Result<tuner::ResolvedKernel> r = provider.Get(*request.family, request.problem);
    if (r.ok() || !tune_on_miss || r.status().code() != ErrorCode::kNotFound) return r;
    tuner::TuneOptions options = *tune_on_miss;
    if (options.arch.empty()) options.arch = ctx.info().arch();
    DFLASH_RETURN_IF_ERROR(Tune(request, options).status());
    return provider.Get(*request.family, request.problem);
  }

  // Kernel `index` of `shape` and its operation's name; a missing key or a bad entry is a c10::Error naming the
  // warmup command.
  std::pair<const tuner::LoadedVariant&, const std::string&> Winner(const setup::OpShape& shape,
                                                                    std::size_t index = 0) {
    const setup::OpShape::Key key = shape.key();
    auto it = by_shape.find(key);
    if (it == by_shape.end()) {
      ShapeKernels kernels;
      for (const setup::KernelRequest& request : setup::KernelRequestsFor(shape)) {
        Result<tuner::ResolvedKernel> r = Resolve(request);
        TORCH_CHECK(r.ok(), "CachedKernelOps ", request.operation, ": ", r.status().ToString());
        kernels.operations.push_back(request.operation);
        kernels.variants.push_back(r->variant);
      }
      it = by_shape.emplace(key, std::move(kernels)).first;
    }
    TORCH_CHECK(index < it->second.variants.size(), "CachedKernelOps: shape has no kernel ", index);
    return {*it->second.variants[index], it->second.operations[index]};
  }
};

namespace {

void Check(const Status& s, const std::string& what) {
  TORCH_CHECK(s.ok(), "CachedKernelOps ", what, ": ", s.ToString());
}

CUdeviceptr Ptr(const torch::Tensor& t) { return t.defined() ? reinterpret_cast<CUdeviceptr>(t.data_ptr()) : 0; }

// A [T, H, D] bf16 tensor the kernels can read by (token, head) strides: the last dim contiguous and every row
// 16-byte aligned; else a contiguous copy.
torch::Tensor RowAddressable(const torch::Tensor& t) {
  const bool rows_aligned = t.stride(0) % 8 == 0 && t.stride(1) % 8 == 0;
  const bool base_aligned = reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 == 0;
  return t.dim() == 3 && t.stride(2) == 1 && rows_aligned && base_aligned ? t : t.contiguous();
}

// torch's current CUDA stream on `device`, with the device's primary context current on this thread.
CUstream CurrentStream(CachedKernelOps::State& state, const torch::Device& device) {
  Check(state.ctx.MakeCurrent(), "making the primary context current");
#ifdef DFLASH_TORCH_CUDA
  return reinterpret_cast<CUstream>(c10::cuda::getCurrentCUDAStream(device.index()).stream());
#else
  TORCH_CHECK(false, "CachedKernelOps needs LibTorch's CUDA backend (device ", device, ")");
#endif
}

// Waits for the work queued on torch's current stream unless it is the legacy default stream, which synchronous
// copies (the gdn plan upload) are already ordered after.
void OrderSynchronousCopies(const torch::Device& device) {
#ifdef DFLASH_TORCH_CUDA
  const auto stream = c10::cuda::getCurrentCUDAStream(device.index());
  if (stream == c10::cuda::getDefaultCUDAStream(device.index())) return;
  Result<const gpu::DriverApi*> api = gpu::Driver();
  Check(api.status(), "loading the CUDA driver");
  Check(gpu::CheckCu((*api)->StreamSynchronize(reinterpret_cast<CUstream>(stream.stream())), "cuStreamSynchronize"),
        "waiting for torch's stream before the gdn plan upload");
#else
  (void)device;
#endif
}

void CheckOnDevice(const CachedKernelOps::State& state, const torch::Tensor& t, const char* name,
                   torch::ScalarType dtype) {
  TORCH_CHECK(t.defined() && t.is_cuda() && t.device().index() == state.ctx.info().ordinal,
              "CachedKernelOps: ", name, " must be a tensor on cuda:", state.ctx.info().ordinal);
  TORCH_CHECK(t.scalar_type() == dtype, "CachedKernelOps: ", name, " must be ", dtype, ", got ", t.scalar_type());
}

// Host copy of cu_seqlens (int32 [docs + 1], 0 ... tokens); undefined = one document.
std::vector<std::int32_t> HostCuSeqlens(const torch::Tensor& cu_seqlens, std::int64_t tokens) {
  if (!cu_seqlens.defined()) return {0, static_cast<std::int32_t>(tokens)};
  TORCH_CHECK(cu_seqlens.dim() == 1 && cu_seqlens.size(0) >= 2, "cu_seqlens must be [docs + 1], got ",
              cu_seqlens.sizes());
  const auto c = cu_seqlens.to(torch::kCPU, torch::kInt).contiguous();
  std::vector<std::int32_t> cu(c.data_ptr<std::int32_t>(), c.data_ptr<std::int32_t>() + c.numel());
  TORCH_CHECK(cu.front() == 0 && cu.back() == tokens, "cu_seqlens must run from 0 to the token count ", tokens);
  for (size_t i = 1; i < cu.size(); ++i) TORCH_CHECK(cu[i] >= cu[i - 1], "cu_seqlens must be non-decreasing");
  return cu;
}

// x [..., cols] as rows of one stride (the leading dims collapse: a contiguous tensor, or a view such as the target's
// q, every head of every token 2 * head_dim apart), 16-byte aligned; a contiguous copy otherwise.
struct Rows2d {
  torch::Tensor t;
  std::int64_t rows = 0, stride = 0;
};
Rows2d AsRows(const torch::Tensor& x) {
  auto fits = [](const torch::Tensor& t) {
    if (t.dim() < 1 || t.stride(-1) != 1) return false;
    if (reinterpret_cast<std::uintptr_t>(t.data_ptr()) % 16 != 0) return false;
    const std::int64_t stride = t.dim() >= 2 ? t.stride(-2) : t.size(-1);
    if (stride % 8 != 0 || stride < t.size(-1)) return false;
    for (std::int64_t d = t.dim() - 3; d >= 0; --d) {
      if (t.size(d + 1) != 1 && t.stride(d) != t.stride(d + 1) * t.size(d + 1)) return false;
    }
    return true;
  };
  Rows2d r;
  r.t = fits(x) ? x : x.contiguous();
  r.rows = r.t.numel() / std::max<std::int64_t>(1, r.t.size(-1));
  r.stride = r.t.dim() >= 2 ? r.t.stride(-2) : r.t.size(-1);
  return r;
}

rmsnorm::Kind KindOf(nn::NormKind kind) {
  return kind == nn::NormKind::kZeroCentred ? rmsnorm::Kind::kZeroCentred : rmsnorm::Kind::kStandard;
}

torch::Tensor ToDevice(const std::vector<std::int32_t>& host, const torch::Device& device) {
  return torch::tensor(host, torch::kInt).to(device);
}

attention::TensorRef Rows(const torch::Tensor& t) {  // [rows, heads, dim] contiguous, batch 1
  return attention::TensorRef::Bshd(Ptr(t), t.size(0), t.size(1), t.size(2));
}

// Forward attention of one problem: O [rows, Hq, D] bf16 and LSE fp32 [1, Hq, rows].
// `shape` names the key; the launch runs `problem` (the same, except a packed row's real document count).
std::pair<torch::Tensor, torch::Tensor> AttentionForward(CachedKernelOps::State& state, const setup::OpShape& shape,
                                                         const attention::ProblemSpec& problem,
                                                         const torch::Tensor& q, const torch::Tensor& k,
                                                         const torch::Tensor& v, CUdeviceptr anchors,
                                                         CUdeviceptr valid, CUdeviceptr doc_start,
                                                         CUdeviceptr cu_seqlens, double scale) {
  const auto [winner, operation] = state.Winner(shape);
  auto o = torch::empty_like(q);
  auto lse = torch::empty({1, q.size(1), q.size(0)}, q.options().dtype(torch::kFloat));
  attention::AttentionArgs a;
  a.problem = problem;
  a.q = Rows(q), a.k = Rows(k), a.v = Rows(v), a.o = Rows(o);
  a.lse = Ptr(lse);
  a.anchors = anchors, a.block_valid = valid, a.doc_start = doc_start, a.cu_seqlens = cu_seqlens;
  a.scale = static_cast<float>(scale);
  Check(attention::LaunchForward(winner, a, CurrentStream(state, q.device())), operation);
  return {o, lse};
}

// The device pointer of the optional int32 document starts; 0 (no bound) when empty.
CUdeviceptr DocStartPtr(const torch::Tensor& doc_start) { return doc_start.numel() > 0 ? Ptr(doc_start) : 0; }

void CheckAttentionInputs(const CachedKernelOps::State& state, const torch::Tensor& q, const torch::Tensor& k,
                          const torch::Tensor& v) {
  CheckOnDevice(state, q, "q", torch::kBFloat16);
  CheckOnDevice(state, k, "k", torch::kBFloat16);
  CheckOnDevice(state, v, "v", torch::kBFloat16);
  TORCH_CHECK(q.dim() == 3 && k.dim() == 3 && k.sizes() == v.sizes() && q.size(2) == k.size(2),
              "CachedKernelOps attention: q [rows, Hq, D], k and v [kv, Hkv, D], got ", q.sizes(), ", ", k.sizes(),
              ", ", v.sizes());
}

// The device tensors of a DraftMask the kernels read: int32 anchors, uint8 valid, int32 doc_start (empty: no bound;
// an empty tensor rather than an undefined one, as autograd::Function asks every tensor argument for its device).
struct DeviceMask {
  torch::Tensor anchors, valid, doc_start;
};

DeviceMask CheckedDeviceMask(const CachedKernelOps::State& state, const torch::Tensor& q, const torch::Tensor& k,
                             const torch::Tensor& v, const DraftMask& mask) {
  CheckAttentionInputs(state, q, k, v);
  TORCH_CHECK(mask.anchors.defined() && mask.anchors.dim() == 1 && mask.valid.defined() &&
                  mask.valid.sizes() == mask.anchors.sizes(),
              "CachedKernelOps::DraftAttention: anchors and valid must be [N]");
  TORCH_CHECK(q.size(0) == mask.anchors.size(0) * mask.block_size && k.size(0) == mask.context_len + q.size(0),
              "CachedKernelOps::DraftAttention: q rows ", q.size(0), " / kv rows ", k.size(0), " do not match ",
              mask.anchors.size(0), " blocks of ", mask.block_size, " after ", mask.context_len, " context rows");
  DeviceMask m;
  m.anchors = mask.anchors.to(q.device(), torch::kInt).contiguous();
  m.valid = mask.valid.to(q.device(), torch::kUInt8).contiguous();
  m.doc_start = torch::empty({0}, m.anchors.options());
  if (mask.doc_start.defined()) {
    TORCH_CHECK(mask.doc_start.sizes() == mask.anchors.sizes(),
                "CachedKernelOps::DraftAttention: doc_start must be [N] like anchors, got ", mask.doc_start.sizes());
    m.doc_start = mask.doc_start.to(q.device(), torch::kInt).contiguous();
  }
  return m;
}

setup::OpShape DraftShape(const torch::Tensor& q, const torch::Tensor& k, const DeviceMask& m,
                          std::int64_t context_len, std::int64_t block_size, std::int64_t window) {
  return setup::OpShape::DraftAttention(context_len, m.anchors.size(0), block_size, window, q.size(1), k.size(1),
                                        q.size(2), m.doc_start.numel() > 0);
}

// The drafter attention's forward: the attention_fwd winner -> {o, lse}. q, k, v contiguous.
std::pair<torch::Tensor, torch::Tensor> DraftForward(CachedKernelOps::State& state, const torch::Tensor& q,
                                                     const torch::Tensor& k, const torch::Tensor& v,
                                                     const DeviceMask& m, std::int64_t context_len,
                                                     std::int64_t block_size, std::int64_t window, double scale) {
  const setup::OpShape shape = DraftShape(q, k, m, context_len, block_size, window);
  return AttentionForward(state, shape, shape.attention, q, k, v, Ptr(m.anchors), Ptr(m.valid),
                          DocStartPtr(m.doc_start), 0, scale);
}

// Its backward: the attention_bwd winner on the same problem -> {dq, dk, dv}.
std::array<torch::Tensor, 3> DraftBackward(CachedKernelOps::State& state, const torch::Tensor& dout_in,
                                           const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                           const torch::Tensor& o, const torch::Tensor& lse, const DeviceMask& m,
                                           std::int64_t context_len, std::int64_t block_size, std::int64_t window,
                                           double scale) {
  const setup::OpShape shape = DraftShape(q, k, m, context_len, block_size, window);
  const auto [winner, operation] = state.Winner(shape, /*index=*/1);  // the backward (KernelRequestsFor's order)
  const auto dout = dout_in.to(torch::kBFloat16).contiguous();
  auto dq = torch::empty_like(q), dk = torch::empty_like(k), dv = torch::empty_like(v);
  const std::size_t bytes = attention::BackwardWorkspaceBytes(shape.attention, winner.config);
  auto workspace = torch::empty({static_cast<std::int64_t>(bytes)}, q.options().dtype(torch::kByte));
  attention::AttentionArgs a;
  a.problem = shape.attention;
  a.q = Rows(q), a.k = Rows(k), a.v = Rows(v), a.o = Rows(o), a.dout = Rows(dout);
  a.dq = Rows(dq), a.dk = Rows(dk), a.dv = Rows(dv);
  a.lse = Ptr(lse);
  a.anchors = Ptr(m.anchors), a.block_valid = Ptr(m.valid), a.doc_start = DocStartPtr(m.doc_start);
  a.scale = static_cast<float>(scale);
  Check(attention::LaunchBackward(winner, a, Ptr(workspace), bytes, CurrentStream(state, q.device())), operation);
  return {dq, dk, dv};
}

// The drafter attention as an autograd function: DraftForward (O and LSE saved), DraftBackward.
class DraftAttentionFunction : public torch::autograd::Function<DraftAttentionFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                               const torch::Tensor& v, const torch::Tensor& anchors, const torch::Tensor& valid,
                               const torch::Tensor& doc_start, std::int64_t state_address, std::int64_t context_len,
                               std::int64_t block_size, std::int64_t window, double scale) {
    auto& state = *reinterpret_cast<CachedKernelOps::State*>(state_address);
    auto [o, lse] = DraftForward(state, q, k, v, {anchors, valid, doc_start}, context_len, block_size, window, scale);
    ctx->save_for_backward({q, k, v, o, lse, anchors, valid, doc_start});
    ctx->saved_data["state"] = state_address;
    ctx->saved_data["context_len"] = context_len;
    ctx->saved_data["block_size"] = block_size;
    ctx->saved_data["window"] = window;
    ctx->saved_data["scale"] = scale;
    return o;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto& state = *reinterpret_cast<CachedKernelOps::State*>(ctx->saved_data["state"].toInt());
    auto [dq, dk, dv] = DraftBackward(state, grads[0], saved[0], saved[1], saved[2], saved[3], saved[4],
                                      {saved[5], saved[6], saved[7]}, ctx->saved_data["context_len"].toInt(),
                                      ctx->saved_data["block_size"].toInt(), ctx->saved_data["window"].toInt(),
                                      ctx->saved_data["scale"].toDouble());
    return {dq, dk, dv, {}, {}, {}, {}, {}, {}, {}, {}};
  }
};

}  // namespace

CachedKernelOps::CachedKernelOps(std::unique_ptr<State> state) : state_(std::move(state)) {}
CachedKernelOps::~CachedKernelOps() = default;

Result<std::unique_ptr<CachedKernelOps>> CachedKernelOps::Create(cache::KernelCache& cache, int device) {
#ifndef DFLASH_TORCH_CUDA
  (void)cache;
  (void)device;
  return Unsupported(
      "the cached-kernel ops need LibTorch's CUDA backend, and this build links the CPU LibTorch only: configure "
      "with -DDFLASH_TORCH_CUDA=ON -DDFLASH_TORCH_DIR=<a CUDA torch's site-packages/torch>, or train with the "
      "reference ops");
#else
  if (!torch::cuda::is_available() || device < 0 || device >= static_cast<int>(torch::cuda::device_count())) {
    return Unsupported("the cached-kernel ops need CUDA device " + std::to_string(device) + ", and LibTorch sees " +
                       std::to_string(torch::cuda::device_count()));
  }
  DFLASH_ASSIGN_OR_RETURN(gpu::Context ctx, gpu::Context::Primary(device));
  return std::unique_ptr<CachedKernelOps>(new CachedKernelOps(std::make_unique<State>(cache, std::move(ctx))));
#endif
}

const gpu::DeviceInfo& CachedKernelOps::device_info() const { return state_->ctx.info(); }

Result<std::vector<KernelUse>> CachedKernelOps::Prepare(const std::vector<setup::KernelRequest>& requests) {
  std::vector<KernelUse> uses;
  std::set<std::string> seen, missing_seen;
  std::string missing;
  int missing_count = 0;
  for (const setup::KernelRequest& request : requests) {
    Result<tuner::ResolvedKernel> r = state_->provider.Get(*request.family, request.problem);
    if (!r.ok()) {
      if (r.status().code() != ErrorCode::kNotFound) return r.status().WithContext(request.operation);
      if (missing_seen.insert(r.status().message()).second) {
        missing += "\n  " + request.operation + ": " + r.status().message();
        ++missing_count;
      }
      continue;
    }
    if (!seen.insert(r->key_digest).second) continue;
    uses.push_back({request.operation, std::string(request.family->name()), r->key_digest, r->config, r->tuned_ms,
                    r->cubin_sha256});
  }
  if (missing_count > 0) {
    return NotFound(std::to_string(missing_count) + " tuned kernel(s) missing from the cache " +
                    state_->cache.dir().string() + " (run the commands below, or dflash-train --tune-missing):" +
                    missing);
  }
  return uses;
}

Result<std::vector<KernelUse>> CachedKernelOps::TuneMissing(const std::vector<setup::KernelRequest>& requests,
                                                            tuner::TuneOptions options, std::ostream* log) {
  if (options.arch.empty()) options.arch = state_->ctx.info().arch();
  std::vector<const setup::KernelRequest*> missing;
  std::set<std::string> missing_seen;
  for (const setup::KernelRequest& request : requests) {
    Result<tuner::ResolvedKernel> r = state_->provider.Get(*request.family, request.problem);
    if (r.ok()) continue;
    if (r.status().code() != ErrorCode::kNotFound) return r.status().WithContext(request.operation);
    if (missing_seen.insert(r.status().message()).second) missing.push_back(&request);
  }
  const auto started = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < missing.size(); ++i) {
    const setup::KernelRequest& request = *missing[i];
    if (log) *log << "tuning " << i + 1 << "/" << missing.size() << ": " << request.operation << std::endl;
    DFLASH_ASSIGN_OR_RETURN(tuner::KeyReport report, state_->Tune(request, options));
    if (log) {
      const double total_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      *log << "  " << tuner::KeyStatusName(report.status) << " " << report.family << " " << report.signature << ": "
           << report.winner_ms << " ms " << report.winner_config << " (" << report.counts.compiled << " compiled, "
           << report.counts.benchmarked << " timed, " << report.wall_s << " s; " << total_s << " s so far)"
           << std::endl;
    }
  }
  return Prepare(requests);
}

void CachedKernelOps::SetTuneOnMiss(std::optional<tuner::TuneOptions> options) {
  state_->tune_on_miss = std::move(options);
}

torch::Tensor CachedKernelOps::DraftAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const DraftMask& mask, double scale) {
  const DeviceMask m = CheckedDeviceMask(*state_, q, k, v, mask);
  const c10::DeviceGuard guard(q.device());
  return DraftAttentionFunction::apply(q.contiguous(), k.contiguous(), v.contiguous(), m.anchors, m.valid,
                                       m.doc_start, reinterpret_cast<std::int64_t>(state_.get()), mask.context_len,
                                       std::int64_t{mask.block_size}, mask.window, scale);
}

std::pair<torch::Tensor, torch::Tensor> CachedKernelOps::DraftAttentionForward(const torch::Tensor& q,
                                                                               const torch::Tensor& k,
                                                                               const torch::Tensor& v,
                                                                               const DraftMask& mask, double scale) {
  const DeviceMask m = CheckedDeviceMask(*state_, q, k, v, mask);
  const c10::DeviceGuard guard(q.device());
  const torch::NoGradGuard no_grad;
  return DraftForward(*state_, q.contiguous(), k.contiguous(), v.contiguous(), m, mask.context_len, mask.block_size,
                      mask.window, scale);
}

std::array<torch::Tensor, 3> CachedKernelOps::DraftAttentionBackward(const torch::Tensor& dout, const torch::Tensor& q,
                                                                     const torch::Tensor& k, const torch::Tensor& v,
                                                                     const torch::Tensor& o, const torch::Tensor& lse,
                                                                     const DraftMask& mask, double scale) {
  const DeviceMask m = CheckedDeviceMask(*state_, q, k, v, mask);
  CheckOnDevice(*state_, o, "o", torch::kBFloat16);
  CheckOnDevice(*state_, lse, "lse", torch::kFloat);
  TORCH_CHECK(o.sizes() == q.sizes() && dout.sizes() == q.sizes() &&
                  lse.sizes() == torch::IntArrayRef({1, q.size(1), q.size(0)}),
              "CachedKernelOps::DraftAttentionBackward: dout and o must be shaped like q ", q.sizes(),
              ", lse [1, Hq, rows]");
  const c10::DeviceGuard guard(q.device());
  const torch::NoGradGuard no_grad;
  return DraftBackward(*state_, dout, q.contiguous(), k.contiguous(), v.contiguous(), o.contiguous(),
                       lse.contiguous(), m, mask.context_len, mask.block_size, mask.window, scale);
}

torch::Tensor CachedKernelOps::CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                               const torch::Tensor& cu_seqlens, double scale) {
  CheckAttentionInputs(*state_, q, k, v);
  TORCH_CHECK(q.size(0) == k.size(0), "CachedKernelOps::CausalAttention: q and k must have the same T");
  const c10::DeviceGuard guard(q.device());
  const torch::NoGradGuard no_grad;
  const std::int64_t tokens = q.size(0);
  std::vector<std::int32_t> cu = HostCuSeqlens(cu_seqlens, tokens);
  const std::int64_t docs = static_cast<std::int64_t>(cu.size()) - 1;
  const setup::OpShape shape = setup::OpShape::CausalAttention(tokens, docs, q.size(1), k.size(1), q.size(2));
  attention::ProblemSpec problem = shape.attention;
  torch::Tensor cu_device;
  if (docs > 1) {
    problem.num_docs = std::max(docs, setup::kMinPackedDocs);
    cu.resize(problem.num_docs + 1, static_cast<std::int32_t>(tokens));  // empty documents at the end
    cu_device = ToDevice(cu, q.device());
  }
  return AttentionForward(*state_, shape, problem, q.contiguous(), k.contiguous(), v.contiguous(), 0, 0, 0,
                          cu_device.defined() ? Ptr(cu_device) : 0, scale)
      .first;
}

torch::Tensor CachedKernelOps::CausalConv1dSilu(const torch::Tensor& x_in, const torch::Tensor& weight_in,
                                                const torch::Tensor& cu_seqlens) {
  CheckOnDevice(*state_, x_in, "x", torch::kBFloat16);
  CheckOnDevice(*state_, weight_in, "weight", torch::kBFloat16);
  TORCH_CHECK(x_in.dim() == 2 && weight_in.dim() == 2 && weight_in.size(0) == x_in.size(1) && weight_in.size(1) == 4,
              "CachedKernelOps::CausalConv1dSilu: x [T, C] and weight [C, 4], got ", x_in.sizes(), " and ",
              weight_in.sizes());
  const c10::DeviceGuard guard(x_in.device());
  const torch::NoGradGuard no_grad;
  const auto x = x_in.contiguous(), weight = weight_in.contiguous();
  const std::int64_t tokens = x.size(0), channels = x.size(1);
  const std::vector<std::int32_t> cu = HostCuSeqlens(cu_seqlens, tokens);
  const std::int64_t docs = static_cast<std::int64_t>(cu.size()) - 1;
  const auto [winner, operation] = state_->Winner(setup::OpShape::Conv1d(tokens, channels, docs));
  auto y = torch::empty_like(x);
  auto args = conv1d::Conv1dArgs::Contiguous(conv1d::Layout::kTokenMajor, Ptr(x), Ptr(weight), Ptr(y), tokens,
                                             channels);
  torch::Tensor cu_device;  // one sequence needs none (no upload, no wait for it)
  if (docs > 1) {
    cu_device = ToDevice(cu, x.device());
    args.cu_seqlens = Ptr(cu_device);
    args.num_seqs = docs;
  }
  Check(conv1d::LaunchConv1d(winner, args, CurrentStream(*state_, x.device())), operation);
  return y;
}

torch::Tensor CachedKernelOps::GatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                              const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& A_log,
                                              const torch::Tensor& dt_bias, const torch::Tensor& cu_seqlens) {
  return GatedDeltaRuleWith(q, k, v, GdnGates{a, b, A_log, dt_bias, {}, {}}, cu_seqlens, GdnForm{}).first;
}

std::pair<torch::Tensor, torch::Tensor> CachedKernelOps::GatedDeltaRuleWith(const torch::Tensor& q_in,
                                                                            const torch::Tensor& k_in,
                                                                            const torch::Tensor& v_in,
                                                                            const GdnGates& gates,
                                                                            const torch::Tensor& cu_seqlens,
                                                                            const GdnForm& form) {
  for (auto [t, name] : {std::pair{&q_in, "q"}, {&k_in, "k"}, {&v_in, "v"}}) {
    CheckOnDevice(*state_, *t, name, torch::kBFloat16);
  }
  TORCH_CHECK(q_in.dim() == 3 && q_in.sizes() == k_in.sizes() && q_in.size(2) == gdn::kHeadDim && v_in.dim() == 3 &&
                  v_in.size(0) == q_in.size(0) && v_in.size(2) == gdn::kHeadDim,
              "CachedKernelOps::GatedDeltaRule: q, k [T, H, 128] and v [T, HV, 128], got ", q_in.sizes(), ", ",
              k_in.sizes(), ", ", v_in.sizes());
  const std::int64_t tokens = q_in.size(0), heads = q_in.size(1), value_heads = v_in.size(1);
  const std::vector<std::int64_t> gate_dims{tokens, value_heads};  // owns what the IntArrayRef views
  const torch::IntArrayRef gate_shape(gate_dims);
  const bool raw = gates.a.defined();
  TORCH_CHECK(raw != gates.g.defined(),
              "CachedKernelOps::GatedDeltaRule: give the gates raw (a, b, A_log, dt_bias) or as g, beta, not ",
              raw ? "both" : "neither");
  torch::Tensor a, b, A_log, dt_bias, g, beta;
  if (raw) {
    for (auto [t, name] : {std::pair{&gates.a, "a"}, {&gates.b, "b"}}) {
      CheckOnDevice(*state_, *t, name, torch::kBFloat16);
    }
    for (auto [t, name] : {std::pair{&gates.A_log, "A_log"}, {&gates.dt_bias, "dt_bias"}}) {
      TORCH_CHECK(t->defined(), "CachedKernelOps::GatedDeltaRule: the raw gate form needs ", name);
      CheckOnDevice(*state_, *t, name, torch::kFloat);
    }
    TORCH_CHECK(gates.a.sizes() == gate_shape && gates.b.sizes() == gate_shape && gates.A_log.numel() == value_heads &&
                    gates.dt_bias.numel() == value_heads,
                "CachedKernelOps::GatedDeltaRule: a, b [T, HV] and A_log, dt_bias [HV]");
    a = gates.a.contiguous(), b = gates.b.contiguous(), A_log = gates.A_log.contiguous();
    dt_bias = gates.dt_bias.contiguous();
  } else {
    TORCH_CHECK(gates.beta.defined(), "CachedKernelOps::GatedDeltaRule: the precomputed gate form needs beta");
    for (auto [t, name] : {std::pair{&gates.g, "g"}, {&gates.beta, "beta"}}) {
      TORCH_CHECK(t->device() == q_in.device() && t->is_floating_point() && t->sizes() == gate_shape,
                  "CachedKernelOps::GatedDeltaRule: ", name, " must be a float tensor [T, HV] = ", gate_shape, " on ",
                  q_in.device(), ", got ", t->scalar_type(), " ", t->sizes(), " on ", t->device());
    }
    g = gates.g.to(torch::kFloat).contiguous(), beta = gates.beta.to(torch::kFloat).contiguous();
  }
  const c10::DeviceGuard guard(q_in.device());
  const torch::NoGradGuard no_grad;
  // q, k, v as they come (the target's are views into its conv output: token stride 2K + V) when the kernels can
  // address them: last dim contiguous, 16-byte aligned rows; a copy otherwise.
  const auto q = RowAddressable(q_in), k = RowAddressable(k_in), v = RowAddressable(v_in);
  const std::vector<std::int32_t> cu = HostCuSeqlens(cu_seqlens, tokens);
  const std::int64_t docs = static_cast<std::int64_t>(cu.size()) - 1;
  const std::vector<std::int64_t> state_shape{docs, value_heads, gdn::kHeadDim, gdn::kHeadDim};
  torch::Tensor h0, ht;
  if (form.initial_state.defined()) {
    TORCH_CHECK(form.initial_state.device() == q_in.device() && form.initial_state.is_floating_point() &&
                    form.initial_state.sizes() == torch::IntArrayRef(state_shape),
                "CachedKernelOps::GatedDeltaRule: initial states must be a float tensor [N, HV, 128, 128] = ",
                torch::IntArrayRef(state_shape), " on ", q_in.device(), ", got ", form.initial_state.scalar_type(),
                " ", form.initial_state.sizes(), " on ", form.initial_state.device());
    h0 = form.initial_state.to(torch::kFloat).contiguous();
  }
  if (form.final_state) ht = torch::empty(state_shape, q.options().dtype(torch::kFloat));
  const auto [winner, operation] = state_->Winner(setup::OpShape::GatedDeltaRule(
      tokens, static_cast<int>(heads), static_cast<int>(value_heads), docs));
  auto o = torch::empty({tokens, value_heads, gdn::kHeadDim}, v.options());
  auto args = gdn::GdnArgs::Contiguous(Ptr(q), Ptr(k), Ptr(v), Ptr(a), Ptr(b), Ptr(A_log), Ptr(dt_bias), Ptr(o),
                                       static_cast<int>(heads), static_cast<int>(value_heads), cu);
  args.q_stride_t = q.stride(0), args.q_stride_h = q.stride(1);
  args.k_stride_t = k.stride(0), args.k_stride_h = k.stride(1);
  args.v_stride_t = v.stride(0), args.v_stride_h = v.stride(1);
  args.g = Ptr(g), args.beta = Ptr(beta);
  args.qk_l2norm = form.qk_l2norm;
  args.scale = static_cast<float>(form.scale);
  args.h0 = Ptr(h0), args.ht = Ptr(ht);
  Result<gdn::Geometry> geometry = gdn::GeometryOf(winner.config);
  Check(geometry.status(), operation);
  Result<std::size_t> bytes = gdn::ChunkedWorkspaceBytes(*geometry, args);
  Check(bytes.status(), operation);
  auto workspace = torch::empty({static_cast<std::int64_t>(*bytes)}, q.options().dtype(torch::kByte));
  const CUstream stream = CurrentStream(*state_, q.device());
  OrderSynchronousCopies(q.device());  // the plan is uploaded into the fresh workspace synchronously
  Check(gdn::LaunchChunkedForward(winner, args, Ptr(workspace), *bytes, stream), operation);
  return {o, ht};
}

namespace {

// One rmsnorm launch: out = norm(x [+ residual]) [* silu(gate)] over x's last dim; sum_out (when given) = x + residual.
void LaunchNorm(CachedKernelOps::State& state, const torch::Tensor& x_in, const torch::Tensor* residual_in,
                const torch::Tensor* gate_in, const torch::Tensor& weight_in, double eps, rmsnorm::Kind kind,
                torch::Tensor* sum_out, torch::Tensor& out, bool trained = false) {
  CheckOnDevice(state, x_in, "rms norm input", torch::kBFloat16);
  TORCH_CHECK(weight_in.dim() == 1 && weight_in.size(0) == x_in.size(-1),
              "CachedKernelOps rms norm: weight must be [", x_in.size(-1), "], got ", weight_in.sizes());
  TORCH_CHECK(weight_in.scalar_type() == torch::kBFloat16 || weight_in.scalar_type() == torch::kFloat,
              "CachedKernelOps rms norm: weight must be bf16 or fp32, got ", weight_in.scalar_type());
  const Rows2d x = AsRows(x_in);
  const auto weight = weight_in.contiguous();
  const auto wdtype = weight.scalar_type() == torch::kFloat ? rmsnorm::WeightDtype::kFp32 : rmsnorm::WeightDtype::kBf16;
  auto args = rmsnorm::RmsNormArgs::Contiguous(Ptr(x.t), Ptr(weight), 0, x.rows, x_in.size(-1), kind, wdtype,
                                              static_cast<float>(eps));
  args.x_stride = x.stride;
  Rows2d residual, gate;
  if (residual_in) {
    CheckOnDevice(state, *residual_in, "rms norm residual", torch::kBFloat16);
    TORCH_CHECK(residual_in->sizes() == x_in.sizes(), "CachedKernelOps rms norm: residual must be shaped like x");
    residual = AsRows(*residual_in);
    args.residual = Ptr(residual.t), args.residual_stride = residual.stride;
  }
  if (gate_in) {
    CheckOnDevice(state, *gate_in, "rms norm gate", torch::kBFloat16);
    TORCH_CHECK(gate_in->sizes() == x_in.sizes(), "CachedKernelOps rms norm: gate must be shaped like x");
    gate = AsRows(*gate_in);
    args.gate = Ptr(gate.t), args.gate_stride = gate.stride;
  }
  out = torch::empty(x_in.sizes(), x_in.options());
  args.out = Ptr(out), args.out_stride = x_in.size(-1);
  if (sum_out) {
    *sum_out = torch::empty(x_in.sizes(), x_in.options());
    args.sum_out = Ptr(*sum_out), args.sum_out_stride = x_in.size(-1);
  }
  const auto shape = trained ? setup::OpShape::TrainedRmsNorm(x.rows, x_in.size(-1), kind, wdtype)
                             : setup::OpShape::RmsNorm(x.rows, x_in.size(-1), kind, residual_in != nullptr,
                                                       gate_in != nullptr, wdtype);
  const auto [winner, operation] = state.Winner(shape);
  Check(rmsnorm::LaunchRmsNorm(winner, args, CurrentStream(state, x_in.device())), operation);
}

// The drafter's trained norm as an autograd function: forward = the rmsnorm winner of the trained shape (x and the
// weight saved: the backward recomputes rstd from x), backward = its rmsnorm_bwd winner, dw = the fp32 column sums of
// the kernel's partial rows.
class TrainedRmsNormFunction : public torch::autograd::Function<TrainedRmsNormFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, std::int64_t state_address, double eps) {
    auto& state = *reinterpret_cast<CachedKernelOps::State*>(state_address);
    torch::Tensor out;
    LaunchNorm(state, x, nullptr, nullptr, weight, eps, rmsnorm::Kind::kStandard, nullptr, out, /*trained=*/true);
    ctx->save_for_backward({x, weight});
    ctx->saved_data["state"] = state_address;
    ctx->saved_data["eps"] = eps;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto& x_in = saved[0];
    const auto weight = saved[1].contiguous();
    auto& state = *reinterpret_cast<CachedKernelOps::State*>(ctx->saved_data["state"].toInt());
    const std::int64_t cols = x_in.size(-1);
    const Rows2d x = AsRows(x_in);
    const Rows2d dy = AsRows(grads[0].to(torch::kBFloat16));
    const auto wdtype = weight.scalar_type() == torch::kFloat ? rmsnorm::WeightDtype::kFp32 : rmsnorm::WeightDtype::kBf16;
    const auto shape = setup::OpShape::TrainedRmsNorm(x.rows, cols, rmsnorm::Kind::kStandard, wdtype);
    const auto [winner, operation] = state.Winner(shape, /*index=*/1);  // the backward (KernelRequestsFor's order)
    Result<std::int64_t> partial_rows = rmsnorm::DwPartialRows(winner, x.rows);
    Check(partial_rows.status(), operation);
    auto dx = torch::empty(x_in.sizes(), x_in.options());
    auto partial = torch::empty({std::max<std::int64_t>(1, *partial_rows), cols}, x_in.options().dtype(torch::kFloat));
    rmsnorm::RmsNormBwdArgs a;
    a.x = Ptr(x.t), a.x_stride = x.stride;
    a.dy = Ptr(dy.t), a.dy_stride = dy.stride;
    a.weight = Ptr(weight), a.weight_dtype = wdtype;
    a.dx = Ptr(dx), a.dx_stride = cols;
    a.dw_partial = Ptr(partial);
    a.rows = x.rows, a.cols = cols;
    a.eps = static_cast<float>(ctx->saved_data["eps"].toDouble());
    a.kind = rmsnorm::Kind::kStandard;
    Check(rmsnorm::LaunchRmsNormBackward(winner, a, CurrentStream(state, x_in.device())), operation);
    auto dw = *partial_rows > 0 ? partial.narrow(0, 0, *partial_rows).sum(0) : torch::zeros({cols}, partial.options());
    return {dx, dw.to(weight.scalar_type()), {}, {}};
  }
};

// The rope kernel can serve x and the tables: bf16 x [T, H, D] on the ops' device, fp32 tables [T, R], dims the
// family serves.
bool RopeServes(const CachedKernelOps::State& state, const torch::Tensor& x, const nn::RopeTables& rope) {
  return x.is_cuda() && x.device().index() == state.ctx.info().ordinal && x.scalar_type() == torch::kBFloat16 &&
         x.dim() == 3 && rope.cos.scalar_type() == torch::kFloat && rope.sin.scalar_type() == torch::kFloat &&
         rope.cos.dim() == 2 && rope.cos.size(0) == x.size(0) && rope.cos.size(1) == rope.rotary_dim &&
         rope.sin.sizes() == rope.cos.sizes() && rope::Supported(x.size(2), rope.rotary_dim);
}

// out [T, H, D] = rotate(x, sign * theta): one launch of the rope winner of x's shape.
torch::Tensor LaunchRope(CachedKernelOps::State& state, const torch::Tensor& x_in, const nn::RopeTables& rope,
                         float sign) {
  const auto x = RowAddressable(x_in);
  const auto cos = rope.cos.contiguous(), sin = rope.sin.contiguous();
  auto out = torch::empty(x.sizes(), x.options().memory_format(torch::MemoryFormat::Contiguous));
  rope::RopeArgs a;
  a.x = Ptr(x), a.cos = Ptr(cos), a.sin = Ptr(sin), a.out = Ptr(out);
  a.x_token_stride = x.stride(0), a.x_head_stride = x.stride(1);
  a.tokens = x.size(0), a.heads = x.size(1), a.head_dim = x.size(2), a.rotary_dim = rope.rotary_dim;
  a.sign = sign;
  const auto [winner, operation] = state.Winner(setup::OpShape::Rope(a.tokens, a.heads, a.head_dim, a.rotary_dim));
  Check(rope::LaunchRope(winner, a, CurrentStream(state, x.device())), operation);
  return out;
}

// The drafter's rope as an autograd function: forward rotates x by theta, backward dy by -theta (the rotation's
// transpose), both through the rope winner.
class TrainedRopeFunction : public torch::autograd::Function<TrainedRopeFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& cos,
                               const torch::Tensor& sin, std::int64_t rotary_dim, std::int64_t state_address) {
    auto& state = *reinterpret_cast<CachedKernelOps::State*>(state_address);
    const nn::RopeTables rope{cos, sin, rotary_dim};
    ctx->save_for_backward({cos, sin});
    ctx->saved_data["state"] = state_address;
    ctx->saved_data["rotary_dim"] = rotary_dim;
    return LaunchRope(state, x, rope, 1.0f);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    auto& state = *reinterpret_cast<CachedKernelOps::State*>(ctx->saved_data["state"].toInt());
    const nn::RopeTables rope{saved[0], saved[1], ctx->saved_data["rotary_dim"].toInt()};
    const auto dx = LaunchRope(state, grads[0].to(torch::kBFloat16), rope, -1.0f);
    return {dx, {}, {}, {}, {}};
  }
};

}  // namespace

torch::Tensor CachedKernelOps::TrainedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const bool served = x.is_cuda() && x.scalar_type() == torch::kBFloat16 &&
                      (weight.scalar_type() == torch::kFloat || weight.scalar_type() == torch::kBFloat16) &&
                      x.dim() >= 1 && rmsnorm::BwdServes(x.size(-1));
  if (!served) return DrafterOps::TrainedRmsNorm(x, weight, eps);
  const c10::DeviceGuard guard(x.device());
  return TrainedRmsNormFunction::apply(x, weight, reinterpret_cast<std::int64_t>(state_.get()), eps);
}

torch::Tensor CachedKernelOps::Rope(const torch::Tensor& x, const nn::RopeTables& rope) {
  if (!RopeServes(*state_, x, rope)) return TargetOps::Rope(x, rope);
  const c10::DeviceGuard guard(x.device());
  const torch::NoGradGuard no_grad;
  return LaunchRope(*state_, x, rope, 1.0f);
}

torch::Tensor CachedKernelOps::TrainedRope(const torch::Tensor& x, const nn::RopeTables& rope) {
  if (!RopeServes(*state_, x, rope)) return DrafterOps::TrainedRope(x, rope);
  const c10::DeviceGuard guard(x.device());
  return TrainedRopeFunction::apply(x, rope.cos.detach(), rope.sin.detach(), rope.rotary_dim,
                                    reinterpret_cast<std::int64_t>(state_.get()));
}

torch::Tensor CachedKernelOps::SwiGlu(const torch::Tensor& gate_in, const torch::Tensor& up_in) {
  const bool served = gate_in.is_cuda() && gate_in.device().index() == state_->ctx.info().ordinal &&
                      gate_in.scalar_type() == torch::kBFloat16 && up_in.scalar_type() == torch::kBFloat16 &&
                      gate_in.sizes() == up_in.sizes() && gate_in.dim() >= 1 && swiglu::Supported(gate_in.size(-1));
  if (!served) return TargetOps::SwiGlu(gate_in, up_in);
  const c10::DeviceGuard guard(gate_in.device());
  const torch::NoGradGuard no_grad;
  const Rows2d gate = AsRows(gate_in), up = AsRows(up_in);
  auto out = torch::empty(gate_in.sizes(), gate_in.options().memory_format(torch::MemoryFormat::Contiguous));
  swiglu::SwigluArgs a;
  a.gate = Ptr(gate.t), a.up = Ptr(up.t), a.out = Ptr(out);
  a.gate_stride = gate.stride, a.up_stride = up.stride;
  a.rows = gate.rows, a.cols = gate_in.size(-1);
  const auto [winner, operation] = state_->Winner(setup::OpShape::Swiglu(a.rows, a.cols));
  Check(swiglu::LaunchSwiglu(winner, a, CurrentStream(*state_, gate_in.device())), operation);
  return out;
}

torch::Tensor CachedKernelOps::RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps,
                                       nn::NormKind kind) {
  const c10::DeviceGuard guard(x.device());
  const torch::NoGradGuard no_grad;
  torch::Tensor out;
  LaunchNorm(*state_, x, nullptr, nullptr, weight, eps, KindOf(kind), nullptr, out);
  return out;
}

std::pair<torch::Tensor, torch::Tensor> CachedKernelOps::AddRmsNorm(const torch::Tensor& h,
                                                                    const torch::Tensor& delta,
                                                                    const torch::Tensor& weight, double eps,
                                                                    nn::NormKind kind) {
  const c10::DeviceGuard guard(h.device());
  const torch::NoGradGuard no_grad;
  const auto d = delta.scalar_type() == h.scalar_type() ? delta : delta.to(h.scalar_type());
  torch::Tensor sum, out;
  LaunchNorm(*state_, d, &h, nullptr, weight, eps, KindOf(kind), &sum, out);
  return {sum, out};
}

torch::Tensor CachedKernelOps::GatedRmsNorm(const torch::Tensor& x, const torch::Tensor& weight,
                                            const torch::Tensor& gate, double eps) {
  const c10::DeviceGuard guard(x.device());
  const torch::NoGradGuard no_grad;
  torch::Tensor out;
  LaunchNorm(*state_, x, nullptr, &gate, weight, eps, rmsnorm::Kind::kStandard, nullptr, out);
  return out;
}

CrossEntropyRows CachedKernelOps::CrossEntropy(const torch::Tensor& logits_in, const torch::Tensor& labels_in,
                                               const torch::Tensor& weights_in, double grad_scale, bool with_grad,
                                               torch::Dtype grad_dtype) {
  // The kernel's contract: fp32 logits, a bf16 gradient, rows of whole 16-byte vectors (setup lists no key else).
  if (!with_grad || grad_dtype != torch::kBFloat16 || logits_in.scalar_type() != torch::kFloat ||
      logits_in.dim() != 2 || logits_in.size(1) % 4 != 0) {
    return ReferenceCrossEntropy(logits_in, labels_in, weights_in, grad_scale, with_grad, grad_dtype);
  }
  CheckOnDevice(*state_, logits_in, "logits", torch::kFloat);
  TORCH_CHECK(logits_in.dim() == 2 && labels_in.dim() == 1 && labels_in.size(0) == logits_in.size(0) &&
                  weights_in.sizes() == labels_in.sizes(),
              "CachedKernelOps cross-entropy: logits [c, V], labels and weights [c]");
  const c10::DeviceGuard guard(logits_in.device());
  const torch::NoGradGuard no_grad;
  const auto logits = logits_in.stride(1) == 1 && logits_in.stride(0) % 4 == 0 ? logits_in : logits_in.contiguous();
  const auto labels = labels_in.to(torch::kLong).contiguous(), weights = weights_in.to(torch::kFloat).contiguous();
  const std::int64_t rows = logits.size(0), vocab = logits.size(1);
  CrossEntropyRows r;
  r.loss = torch::empty({rows}, logits.options());
  r.argmax = torch::empty({rows}, logits.options().dtype(torch::kLong));
  r.grad = torch::empty({rows, vocab}, logits.options().dtype(torch::kBFloat16));
  xent::XentArgs a;
  a.logits = Ptr(logits), a.row_stride = logits.stride(0);
  a.labels = Ptr(labels), a.weights = Ptr(weights);
  a.loss = Ptr(r.loss), a.argmax = Ptr(r.argmax);
  a.grad = Ptr(r.grad), a.grad_row_stride = vocab;
  a.rows = rows, a.vocab = vocab, a.grad_scale = static_cast<float>(grad_scale);
  const auto [winner, operation] = state_->Winner(setup::OpShape::CrossEntropy(rows, vocab));
  Check(xent::LaunchXent(winner, a, CurrentStream(*state_, logits.device())), operation);
  return r;
}

}  // namespace dflash::trainer

#include "trainer/dist/communicator.h"

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "trainer/dist/backend.h"
#include "trainer/dist/buckets.h"

namespace dflash::trainer::dist {

Result<std::unique_ptr<Communicator>> Communicator::Create(const RankEnv& env, torch::Device device,
                                                           std::chrono::milliseconds timeout) {
  std::unique_ptr<Communicator> c(new Communicator(env, device));
  if (!env.distributed()) return c;
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = static_cast<std::uint16_t>(env.master_port);
    store_options.isServer = env.rank == 0;
    store_options.numWorkers = static_cast<std::size_t>(env.world_size);
    store_options.waitWorkers = true;
    store_options.timeout = timeout;
    c->store_ = c10::make_intrusive<c10d::TCPStore>(env.master_addr, store_options);
  } catch (const std::exception& e) {
    return IoError("rank " + std::to_string(env.rank) + ": rendezvous with the other " +
                   std::to_string(env.world_size - 1) + " rank(s) at MASTER_ADDR:MASTER_PORT=" + env.master_addr +
                   ":" + std::to_string(env.master_port) + " failed: " + e.what());
  }
  BackendOptions backend_options;
  backend_options.rank = env.rank;
  backend_options.world_size = env.world_size;
  backend_options.device = device;
  // Gloo must listen on an interface the others reach: loopback for a one-host run, else the host's own name.
  const bool local = env.master_addr == "localhost" || env.master_addr.rfind("127.", 0) == 0;
  backend_options.host = local ? "127.0.0.1" : "";
  backend_options.timeout = timeout;
  if (backend_options.host.empty()) {
    char name[256] = {};
    gethostname(name, sizeof name - 1);
    backend_options.host = name;
  }
  DFLASH_ASSIGN_OR_RETURN(c->backend_, MakeBackend(c->store_, backend_options));
  const auto limit = timeout + std::chrono::seconds(5);
  const std::string who = "rank " + std::to_string(env.rank) + " of " + std::to_string(env.world_size);
  c->deadline_ = std::make_unique<CollectiveDeadline>(limit, [who, limit](const std::string& what) {
    std::fprintf(stderr, "dflash-train [%s]: %s did not finish within %lld s (another rank died or hangs); "
                 "exiting\n", who.c_str(), what.c_str(), static_cast<long long>(limit.count() / 1000));
    std::fflush(stderr);
    std::_Exit(2);
  });
  return c;
}

Communicator::~Communicator() {
  if (!backend_) return;
  try {
    backend_->shutdown();
  } catch (const std::exception&) {  // a peer already gone: nothing left to release cleanly
  }
}

Status Communicator::Wrap(const std::string& what, const std::function<void()>& collective, bool sync_device) {
  struct Armed {  // disarmed however the collective ends
    CollectiveDeadline& d;
    ~Armed() { d.Disarm(); }
  };
  deadline_->Arm(what);
  Armed armed{*deadline_};
  try {
    collective();
    // The deadline covers the GPU's part too.
    if (sync_device && device_.is_cuda()) torch::cuda::synchronize(device_.index());
    return Status::Ok();
  } catch (const std::exception& e) {
    std::string message = e.what();
    if (const auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
    return IoError("rank " + std::to_string(rank()) + " of " + std::to_string(world_size()) + ": " + what +
                   " failed (another rank died or timed out?): " + message);
  }
}

Result<std::vector<double>> Communicator::AllReduceSum(std::vector<double> values) {
  if (!env_.distributed() || values.empty()) return values;
  torch::Tensor t = torch::from_blob(values.data(), {static_cast<std::int64_t>(values.size())}, torch::kDouble)
                        .to(device_, /*non_blocking=*/false, /*copy=*/true);
  DFLASH_RETURN_IF_ERROR(AllReduceSumInPlace({t}));
  t = t.cpu();
  std::copy_n(t.data_ptr<double>(), values.size(), values.begin());
  return values;
}

Status Communicator::AllReduceSumInPlace(const std::vector<torch::Tensor>& tensors, std::int64_t bucket_bytes) {
  if (!env_.distributed() || tensors.empty()) return Status::Ok();
  for (const auto& t : tensors) {
    if (!t.defined()) return InvalidArgument("all-reduce of an undefined tensor");
    if (t.device() != device_ || t.scalar_type() != tensors[0].scalar_type()) {
      return InvalidArgument(std::string("all-reduce: tensors must all be ") +
                             torch::toString(tensors[0].scalar_type()) + " on " + device_.str());
    }
  }
  // Buckets of consecutive tensors, flattened into one buffer each, all in flight at once.
  const std::vector<BucketRange> buckets = MakeBuckets(tensors, bucket_bytes);
  std::vector<torch::Tensor> flats;
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (const BucketRange& b : buckets) {
    flats.push_back(Flatten(tensors, b));
    DFLASH_ASSIGN_OR_RETURN(auto work, StartAllReduceSum(flats.back()));
    works.push_back(std::move(work));
  }
  DFLASH_RETURN_IF_ERROR(Wait(works, "all-reduce"));
  for (std::size_t i = 0; i < buckets.size(); ++i) Unflatten(flats[i], tensors, buckets[i]);
  return Status::Ok();
}

Result<c10::intrusive_ptr<c10d::Work>> Communicator::StartAllReduceSum(const torch::Tensor& flat) {
  if (!env_.distributed()) return InvalidArgument("StartAllReduceSum needs several ranks");
  if (flat.device() != device_ || !flat.is_contiguous()) {
    return InvalidArgument("all-reduce: the buffer must be contiguous on " + device_.str());
  }
  c10::intrusive_ptr<c10d::Work> work;
  DFLASH_RETURN_IF_ERROR(Wrap("starting an all-reduce", [&] {
    std::vector<torch::Tensor> io{flat};
    work = backend_->allreduce(io, c10d::AllreduceOptions{});
  }, /*sync_device=*/false));
  return work;
}

Status Communicator::Wait(const std::vector<c10::intrusive_ptr<c10d::Work>>& works, const std::string& what) {
  if (!env_.distributed() || works.empty()) return Status::Ok();
  return Wrap(what, [&] {
    for (const auto& w : works) w->wait();
  });
}

Status Communicator::Broadcast(const std::vector<torch::Tensor>& tensors, int root) {
  if (!env_.distributed()) return Status::Ok();
  return Wrap("broadcast from rank " + std::to_string(root), [&] {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& t : tensors) {
      std::vector<torch::Tensor> io{t.is_contiguous() ? t : t.contiguous()};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      backend_->broadcast(io, options)->wait();
      if (!io[0].is_same(t)) t.copy_(io[0]);
    }
  });
}

Result<std::vector<std::string>> Communicator::AllGatherStrings(const std::string& mine) {
  if (!env_.distributed()) return std::vector<std::string>{mine};
  std::vector<std::string> out(static_cast<std::size_t>(world_size()));
  const std::string prefix = "dflash/allgather/" + std::to_string(gather_round_++) + "/";
  DFLASH_RETURN_IF_ERROR(Wrap("all-gather through the store", [&] {
    store_->set(prefix + std::to_string(rank()), std::vector<std::uint8_t>(mine.begin(), mine.end()));
    for (int r = 0; r < world_size(); ++r) {
      const std::vector<std::uint8_t> bytes = store_->get(prefix + std::to_string(r));
      out[static_cast<std::size_t>(r)].assign(bytes.begin(), bytes.end());
    }
  }));
  return out;
}

}  // namespace dflash::trainer::dist

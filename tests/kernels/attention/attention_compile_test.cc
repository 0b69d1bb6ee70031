// Every config of the attention spaces either is invalid for a stated reason or compiles with NVRTC for sm_90 and
// sm_120 (the drafter's DFlash full-layer bucket, also as packed rows: doc_bound) and then passes the arch's PruneReason
// or is pruned for a stated reason; plus one variant per mask kind and head dim. CPU only: NVRTC needs no GPU.
#include <gtest/gtest.h>

#include <cstdio>
#include <future>
#include <string>
#include <vector>

#include "kernels/attention/attention_family.h"
#include "tuner/arch_limits.h"
#include "tuner/nvrtc_compiler.h"
#include "tuner/thread_pool.h"

namespace dflash::attention {
namespace {

struct Outcome {
  std::string label;
  Status status;
  std::string prune_reason;
};

tuner::Problem Problem(const char* mask, int head_dim, int seq_q, int seq_kv) {
  tuner::Problem p = {{"mask", mask}, {"batch", 1}, {"heads_q", 32}, {"heads_kv", 8}, {"head_dim", head_dim},
                      {"seq_q", seq_q}, {"seq_kv", seq_kv}};
  if (std::string(mask).rfind("dflash", 0) == 0) {
    p["ctx_len"] = seq_kv - seq_q;
    p["block_size"] = 16;
  }
  if (std::string(mask) == "doc_causal") p["num_docs"] = 4;
  return p;
}

Outcome CompileOne(const tuner::KernelFamily& family, const tuner::Config& config, const tuner::Problem& bucket,
                   const std::string& arch) {
  Outcome o;
  o.label = std::string(family.name()) + "[" + tuner::ConfigLabel(config) + "]";
  const auto limits = tuner::LimitsFor(arch);
  if (!limits) {
    o.status = Internal("no limits for " + arch);
    return o;
  }
  const tuner::CompileSpec spec = family.MakeCompileSpec(config, bucket);
  Result<tuner::CompiledVariant> compiled = tuner::CompileVariant(family.sources(), spec, arch, o.label);
  if (!compiled.ok()) {
    o.status = compiled.status();
    return o;
  }
  const auto shape = family.BlockShapeOf(config, bucket);
  for (const std::string& expr : spec.name_expressions) {
    auto lowered = compiled->lowered_names.find(expr);
    if (lowered == compiled->lowered_names.end()) {
      o.status = Internal("no lowered name for " + expr);
      return o;
    }
    auto usage = compiled->resources.find(lowered->second);
    if (usage == compiled->resources.end()) {
      o.status = Internal("no ptxas report for " + lowered->second);
      return o;
    }
    const std::string why = tuner::PruneReason(*limits, usage->second, shape.threads, shape.dynamic_shared_bytes,
                                               /*allow_spills=*/false);
    // The block shape is the variant's largest (threads, dynamic shared memory) over its kernels.
    if (!why.empty() && o.prune_reason.empty()) o.prune_reason = expr + " (with the variant's block shape): " + why;
  }
  return o;
}

// `doc_bound`: the packed-rows problem, whose kernels are the document-bound instantiations.
void CompileWholeSpace(const tuner::KernelFamily& family, const std::string& arch, bool doc_bound = false) {
  tuner::Problem problem = Problem("dflash_full", 128, 8192, 16384);
  if (doc_bound) problem["doc_bound"] = true;
  const tuner::Problem bucket = *family.Bucket(problem);
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  std::size_t invalid = 0;
  for (const tuner::Config& config : tuner::EnumerateSpace(family)) {
    const std::string why = family.InvalidReason(config, bucket);
    if (!why.empty()) {
      std::printf("%s %s[%s] invalid: %s\n", arch.c_str(), std::string(family.name()).c_str(),
                  tuner::ConfigLabel(config).c_str(), why.c_str());
      ++invalid;
      continue;
    }
    futures.push_back(pool.Submit([&family, &bucket, arch, config]() { return CompileOne(family, config, bucket, arch); }));
  }
  std::size_t runnable = 0;
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << arch << " " << o.label << ": " << o.status.ToString();
    if (!o.status.ok()) continue;
    if (o.prune_reason.empty()) {
      ++runnable;
    } else {
      std::printf("%s %s pruned: %s\n", arch.c_str(), o.label.c_str(), o.prune_reason.c_str());
    }
  }
  std::printf("%s %s%s: %zu invalid, %zu compiled, %zu runnable\n", arch.c_str(), std::string(family.name()).c_str(),
              doc_bound ? " (doc_bound)" : "", invalid, futures.size(), runnable);
  EXPECT_GE(runnable, 3u) << "too few runnable variants on " << arch;
}

TEST(AttentionCompile, EveryForwardConfigCompilesForSm90) { CompileWholeSpace(ForwardFamily(), "sm_90"); }
TEST(AttentionCompile, EveryForwardConfigCompilesForSm120) { CompileWholeSpace(ForwardFamily(), "sm_120"); }
TEST(AttentionCompile, EveryBackwardConfigCompilesForSm90) { CompileWholeSpace(BackwardFamily(), "sm_90"); }
TEST(AttentionCompile, EveryBackwardConfigCompilesForSm120) { CompileWholeSpace(BackwardFamily(), "sm_120"); }

// Packed rows (doc_bound) are kernels of their own: the whole space again, for both archs.
TEST(AttentionCompile, EveryPackedRowsForwardConfigCompilesForSm90AndSm120) {
  CompileWholeSpace(ForwardFamily(), "sm_90", true);
  CompileWholeSpace(ForwardFamily(), "sm_120", true);
}
TEST(AttentionCompile, EveryPackedRowsBackwardConfigCompilesForSm90) { CompileWholeSpace(BackwardFamily(), "sm_90", true); }
TEST(AttentionCompile, EveryPackedRowsBackwardConfigCompilesForSm120) {
  CompileWholeSpace(BackwardFamily(), "sm_120", true);
}

TEST(AttentionCompile, EveryMaskKindAndHeadDimCompilesForSm120) {
  struct Item { const tuner::KernelFamily* family; tuner::Problem problem; tuner::Config config; };
  const tuner::Config fwd = {{"block_m", 64}, {"block_n", 64}, {"warps", 4}, {"stages", 2}};
  const tuner::Config fwd256 = {{"block_m", 64}, {"block_n", 32}, {"warps", 4}, {"stages", 2}};
  const tuner::Config bwd = {{"block_m", 64}, {"block_n", 64}, {"stages", 1}, {"dq_mode", 1}};
  std::vector<Item> items;
  for (const char* mask : {"none", "causal", "doc_causal", "dflash_sliding"}) {
    const int q = std::string(mask).rfind("dflash", 0) == 0 ? 4096 : 8192;
    const int kv = std::string(mask).rfind("dflash", 0) == 0 ? 12288 : 8192;
    items.push_back({&ForwardFamily(), Problem(mask, 128, q, kv), fwd});
    items.push_back({&BackwardFamily(), Problem(mask, 64, q, kv), bwd});
  }
  items.push_back({&ForwardFamily(), Problem("causal", 256, 8192, 8192), fwd256});
  items.push_back({&ForwardFamily(), Problem("doc_causal", 256, 8192, 8192), fwd256});
  tuner::ThreadPool pool;
  std::vector<std::future<Outcome>> futures;
  for (const Item& it : items) {
    const tuner::Problem bucket = *it.family->Bucket(it.problem);
    ASSERT_EQ(it.family->InvalidReason(it.config, bucket), "") << bucket.dump();
    futures.push_back(pool.Submit([it, bucket]() { return CompileOne(*it.family, it.config, bucket, "sm_120"); }));
  }
  for (auto& f : futures) {
    const Outcome o = f.get();
    EXPECT_TRUE(o.status.ok()) << o.label << ": " << o.status.ToString();
    EXPECT_EQ(o.prune_reason, "") << o.label;
  }
}

TEST(AttentionCompile, AnInvalidConfigFailsItsStaticAsserts) {
  const tuner::Config bad = {{"block_m", 64}, {"block_n", 64}, {"warps", 8}, {"stages", 2}};  // 64 % (16*8) != 0
  const tuner::Problem bucket = *ForwardFamily().Bucket(Problem("causal", 128, 1024, 1024));
  ASSERT_NE(ForwardFamily().InvalidReason(bad, bucket), "");
  Result<tuner::CompiledVariant> r = tuner::CompileVariant(
      ForwardFamily().sources(), ForwardFamily().MakeCompileSpec(bad, bucket), "sm_90", "attention_fwd[bad]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kCompileError);
  EXPECT_NE(r.status().message().find("m-tiles of 16 rows"), std::string::npos) << r.status().message();
}

}  // namespace
}  // namespace dflash::attention

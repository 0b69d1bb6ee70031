// KernelFamily: the plug-in interface every kernels/<family>/ implements so the tuner can compile, check,
// benchmark and cache its variants. Owns the vocabulary shared by kernels and tuner: Config (one point of the
// parameter space), Problem (a family-specific JSON signature), CompileSpec (how a config becomes an NVRTC
// translation unit), Workload (one problem instance on a GPU with its reference check).
// Thread-safety: families are immutable singletons; every method is const and re-entrant (no per-call state on
// the family object: that is the autotuner race this project exists to end). Workloads belong to one thread.
#pragma once

#include <cuda.h>

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "tuner/embedded_file.h"
#include "tuner/gpu_runtime.h"

namespace dflash::tuner {

// One point of a family's parameter space: parameter name -> value. std::map keeps its JSON canonical.
using Config = std::map<std::string, std::int64_t>;
std::string ConfigToJson(const Config& c);             // {"a":1,"b":2} (sorted keys, no spaces)
Result<Config> ConfigFromJson(std::string_view json);
std::string ConfigLabel(const Config& c);              // a=1,b=2

struct TunableParam {
  std::string name;
  std::vector<std::int64_t> values;
  std::string help;
};

// A problem as JSON: shapes, dtypes, mask kind... Families define and validate the fields.
using Problem = nlohmann::json;

// How a config becomes one NVRTC translation unit.
struct CompileSpec {
  std::string main_file;                                      // name of the embedded file to compile
  std::vector<std::pair<std::string, std::string>> defines;   // -D name=value
  std::vector<std::string> name_expressions;                  // kernels to instantiate, e.g. "conv1d_fwd<128, 4>"
  std::vector<std::string> options;                           // extra NVRTC options (rare)
};

// What the compiled variant's kernels need to be called: the lowered (mangled) name of each name expression.
struct LoadedVariant {
  const gpu::Module* module = nullptr;
  Config config;
  std::map<std::string, CUfunction> functions;  // name expression -> function
  std::string label;                            // "conv1d[block_c=128,...]" for error messages
  Result<CUfunction> Function(const std::string& name_expression) const;
};

// One problem instance on a device: random inputs, outputs, and the family's reference for the check.
class Workload {
 public:
  virtual ~Workload() = default;
  // Overwrites every output byte with a poison pattern (NaN for floats), so unwritten outputs fail the check.
  virtual Status PoisonOutputs(CUstream stream) = 0;
  // One run of the variant on these inputs.
  virtual Status Launch(const LoadedVariant& variant, CUstream stream) = 0;
  // Downloads the outputs and compares them with the reference (computed once per workload, fp64).
  // Ok when within tolerance; ErrorCode::kMismatch with the error figures otherwise.
  virtual Status Check(CUstream stream) = 0;
  // Bytes of inputs + outputs one launch touches (for rotating inputs / L2 flushing decisions, GB/s figures).
  virtual std::size_t BytesTouched() const = 0;
  // Useful floating-point operations of one launch (0 when the family reports bandwidth only).
  virtual double Flops() const { return 0.0; }
};

class KernelFamily {
 public:
  virtual ~KernelFamily() = default;
  virtual std::string_view name() const = 0;     // "conv1d"; also the folder kernels/<name>/
  virtual std::string_view summary() const = 0;  // one line for `dflash-tune families`
  virtual std::span<const EmbeddedFile> sources() const = 0;
  virtual std::vector<TunableParam> params() const = 0;

  // Validates a runtime problem and maps it to its tuning bucket (e.g. lengths rounded up). Every variant that
  // is valid for the bucket must be correct for every problem that maps to it.
  virtual Result<Problem> Bucket(const Problem& problem) const = 0;
  // Arch-independent constraints of a config for a bucket: empty when valid, else the reason it is not.
  virtual std::string InvalidReason(const Config& config, const Problem& bucket) const = 0;
  // Arch-dependent constraints of a config: empty when it can be built for `arch`, else the reason it cannot (a
  // config of a family's Hopper tier needs "sm_90a"). The tuner prunes such configs before compiling them.
  virtual std::string ArchInvalidReason(const Config& config, std::string_view arch) const { return ""; }
  virtual CompileSpec MakeCompileSpec(const Config& config, const Problem& bucket) const = 0;
  // Threads per block and dynamic shared memory of the config's largest kernel, for pruning against the arch
  // limits before anything runs (ptxas reports registers and static shared memory; this adds the rest).
  struct BlockShape {
    unsigned threads = 0;
    std::size_t dynamic_shared_bytes = 0;
  };
  virtual BlockShape BlockShapeOf(const Config& config, const Problem& bucket) const = 0;
  // The launch shape of one kernel of the config (a name expression of its MakeCompileSpec), which pruning checks
  // that kernel's registers and shared memory against; by default BlockShapeOf, the largest. A family whose
  // kernels launch with different thread counts overrides it, so that a kernel is not pruned for another's
  // block (a 128-thread helper beside a 384-thread kernel).
  virtual BlockShape KernelBlockShape(const Config& config, const Problem& bucket,
                                      const std::string& name_expression) const {
    (void)name_expression;
    return BlockShapeOf(config, bucket);
  }
  // Configs that measured best on earlier runs for buckets like this one (the family's NOTES.md says where),
  // best first. The search measures those that are candidates before anything else, so a variant or time budget
  // starts from them instead of missing them by chance; configs that are invalid or pruned here are skipped.
  virtual std::vector<Config> SeedConfigs(const Problem& bucket) const { return {}; }

  // A problem instance for correctness checks and benchmarks: fresh random inputs from `seed`.
  // `problem` may be any problem of the bucket (the tuner benchmarks the bucket's representative).
  virtual Result<std::unique_ptr<Workload>> MakeWorkload(const gpu::Context& ctx, const Problem& problem,
                                                         std::uint64_t seed) const = 0;
};

// Every point of the space (cartesian product of the params' values), in a deterministic order.
std::vector<Config> EnumerateSpace(const KernelFamily& family);

}  // namespace dflash::tuner

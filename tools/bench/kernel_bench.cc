// kernel_bench: times one kernel family's TUNED WINNER (read from the kernel cache, never compiled here) on one
// problem, and prints one JSON line. The benchmark scripts (attention_bench.py, gdn_bench.py) run it per shape
// beside the systems they compare with. Exit codes: 0 timed (or resolved); 1 --check found the outputs wrong;
// 2 could not run (bad input, missing cache or key: the message names the `dflash-tune warmup` command, no GPU).
#include <iostream>

#include "kernel_bench_args.h"
#include "kernel_bench_run.h"

int main(int argc, char** argv) {
  CLI::App app{
      "kernel_bench: time a kernel family's tuned winner from the kernel cache on one problem; prints one JSON line "
      "{family, problem, config, median_ms, spread, reps, graph, peak_extra_bytes, ...}.\n"
      "Example: kernel_bench --family gdn --problem '{\"heads\":16,\"value_heads\":48,\"head_dim\":128,"
      "\"tokens\":8192}' --cache-dir /tmp/cache --graph"};
  dflash::bench::BenchArgs args;
  dflash::bench::AddBenchOptions(app, args);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return 2;
  }
  try {
    dflash::Result<nlohmann::json> r = dflash::bench::RunKernelBench(args);
    if (!r.ok()) {
      std::cerr << "kernel_bench: " << r.status().message() << "\n";
      return r.status().code() == dflash::ErrorCode::kMismatch ? 1 : 2;
    }
    std::cout << r->dump() << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "kernel_bench: internal error: " << e.what() << "\n";
    return 2;
  }
}

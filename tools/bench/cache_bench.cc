// cache_bench: hit latency and write throughput of the kernel cache (issue: cache benchmark).
//   hit latency: Lookup (SELECT + SHA-256 of the 256 KiB cubin + row checksum + ELF check) with N entries in
//                the cache, from one thread, then from P processes at once;
//   writes/s:    P processes publishing distinct entries at once (one transaction each, synchronous=FULL).
// Usage: cache_bench [--dir DIR] [--entries 10000] [--cubin-kib 256] [--lookups 20000] [--procs 16]
//                    [--writes-per-proc 50] [--json]
// The database is built once in DIR and reused by later runs with the same parameters.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cache/kernel_cache.h"

namespace {

using Clock = std::chrono::steady_clock;
using dflash::cache::Entry;
using dflash::cache::TuningKey;

struct Args {
  std::string dir = "/tmp/dflash-cache-bench";
  int entries = 10000;
  int cubin_kib = 256;
  int lookups = 20000;
  int procs = 16;
  int writes_per_proc = 50;
  bool json = false;
};

TuningKey Key(int i, const char* family = "bench") {
  TuningKey k;
  k.family = family;
  k.source_hash = "0123456789abcdef";
  k.compile_options = "-arch=sm_120 -std=c++17";
  k.arch = "sm_120";
  k.nvrtc_version = "13.0";
  k.signature = "{\"i\":" + std::to_string(i) + "}";
  return k;
}

Entry MakeEntry(int i, int cubin_kib, const char* family = "bench") {
  Entry e;
  e.key = Key(i, family);
  e.config = "{\"block\":128,\"warps\":4}";
  e.kernel_names = "{\"k\":\"_Z1kv\"}";
  e.cubin.resize(static_cast<std::size_t>(cubin_kib) * 1024);
  std::mt19937_64 rng(i);
  for (std::size_t j = 0; j < e.cubin.size(); j += 8) {
    const std::uint64_t v = rng();
    std::memcpy(e.cubin.data() + j, &v, std::min<std::size_t>(8, e.cubin.size() - j));
  }
  std::memset(e.cubin.data(), 0, 64);
  std::memcpy(e.cubin.data(), "\x7f" "ELF", 4);
  e.cubin[4] = 2;
  e.cubin[5] = 1;
  e.cubin[8] = 8;
  e.cubin[18] = 190;
  const std::uint32_t flags = 0x06000002u | (120u << 8);
  std::memcpy(e.cubin.data() + 48, &flags, 4);
  e.timing = {0.1, 0.01, 25};
  e.provenance.gpu_name = "bench";
  e.Seal();
  return e;
}

std::unique_ptr<dflash::cache::KernelCache> Open(const std::string& dir) {
  dflash::cache::CacheOptions o;
  o.dir = dir;
  auto c = dflash::cache::KernelCache::Open(o);
  if (!c.ok()) {
    std::fprintf(stderr, "cache_bench: %s\n", c.status().ToString().c_str());
    std::exit(2);
  }
  return std::move(*c);
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * (v.size() - 1))];
}

// Lookups of random present keys; returns per-lookup milliseconds.
std::vector<double> HitLatencies(dflash::cache::KernelCache& c, int n, int entries, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<double> ms;
  ms.reserve(n);
  for (int i = 0; i < n; ++i) {
    const TuningKey k = Key(static_cast<int>(rng() % entries));
    auto t0 = Clock::now();
    auto r = c.Lookup(k);
    auto t1 = Clock::now();
    if (!r.ok() || !r->has_value()) {
      std::fprintf(stderr, "cache_bench: lookup missed or failed\n");
      std::exit(1);
    }
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "cache_bench: %s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--dir") a.dir = next();
    else if (s == "--entries") a.entries = std::stoi(next());
    else if (s == "--cubin-kib") a.cubin_kib = std::stoi(next());
    else if (s == "--lookups") a.lookups = std::stoi(next());
    else if (s == "--procs") a.procs = std::stoi(next());
    else if (s == "--writes-per-proc") a.writes_per_proc = std::stoi(next());
    else if (s == "--json") a.json = true;
    else {
      std::fprintf(stderr, "usage: cache_bench [--dir DIR] [--entries N] [--cubin-kib K] [--lookups N] [--procs P] "
                           "[--writes-per-proc W] [--json]\n");
      return s == "--help" || s == "-h" ? 0 : 2;
    }
  }
  const std::string dir = a.dir + "/e" + std::to_string(a.entries) + "-k" + std::to_string(a.cubin_kib);
  {
    auto c = Open(dir);
    auto st = c->Stats();
    const int have = st.ok() ? static_cast<int>(st->entries) : 0;
    if (have < a.entries) {
      std::fprintf(stderr, "building %d entries of %d KiB in %s ...\n", a.entries, a.cubin_kib, dir.c_str());
      auto t0 = Clock::now();
      for (int i = have; i < a.entries; ++i) {
        if (!c->Publish(MakeEntry(i, a.cubin_kib)).ok()) return 1;
        if (i % 1000 == 999) std::fprintf(stderr, "  %d/%d\n", i + 1, a.entries);
      }
      std::fprintf(stderr, "built in %.1f s\n", std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  // 1. Single-threaded hit latency (after one warm pass over the page cache).
  auto c = Open(dir);
  HitLatencies(*c, std::min(a.lookups, 2000), a.entries, 1);
  auto single = HitLatencies(*c, a.lookups, a.entries, 2);
  c.reset();
  // 2. P processes looking up at once.
  std::vector<double> multi;
  {
    std::vector<int> fds;
    std::vector<pid_t> pids;
    for (int p = 0; p < a.procs; ++p) {
      int fd[2];
      if (pipe(fd) != 0) return 1;
      pid_t pid = fork();
      if (pid == 0) {
        close(fd[0]);
        auto cc = Open(dir);
        auto ms = HitLatencies(*cc, a.lookups / a.procs, a.entries, 100 + p);
        (void)!write(fd[1], ms.data(), ms.size() * sizeof(double));
        _exit(0);
      }
      close(fd[1]);
      fds.push_back(fd[0]);
      pids.push_back(pid);
    }
    for (std::size_t p = 0; p < pids.size(); ++p) {
      std::vector<double> buf(a.lookups / a.procs);
      std::size_t got = 0;
      while (got < buf.size() * sizeof(double)) {
        ssize_t n = read(fds[p], reinterpret_cast<char*>(buf.data()) + got, buf.size() * sizeof(double) - got);
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      buf.resize(got / sizeof(double));
      multi.insert(multi.end(), buf.begin(), buf.end());
      close(fds[p]);
      waitpid(pids[p], nullptr, 0);
    }
  }
  // 3. Writes under contention: P processes publishing distinct new entries.
  const int base = a.entries;
  auto t0 = Clock::now();
  std::vector<pid_t> writers;
  for (int p = 0; p < a.procs; ++p) {
    pid_t pid = fork();
    if (pid == 0) {
      auto cc = Open(dir);
      for (int w = 0; w < a.writes_per_proc; ++w) {
        if (!cc->Publish(MakeEntry(base + p * a.writes_per_proc + w, a.cubin_kib, "bench-writes")).ok()) _exit(1);
      }
      _exit(0);
    }
    writers.push_back(pid);
  }
  int failed = 0;
  for (pid_t pid : writers) {
    int status = 0;
    waitpid(pid, &status, 0);
    failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  const double write_s = std::chrono::duration<double>(Clock::now() - t0).count();
  const double writes_per_s = a.procs * a.writes_per_proc / write_s;
  {
    // Leave the database as it was for the next run.
    auto cc = Open(dir);
    dflash::cache::EvictFilter f;
    f.family = "bench-writes";
    (void)cc->Evict(f);
  }
  if (a.json) {
    std::printf("{\"entries\":%d,\"cubin_kib\":%d,\"single_p50_ms\":%.4f,\"single_p99_ms\":%.4f,"
                "\"procs\":%d,\"multi_p50_ms\":%.4f,\"multi_p99_ms\":%.4f,\"writes_per_s\":%.1f,\"write_failures\":%d}\n",
                a.entries, a.cubin_kib, Percentile(single, 0.5), Percentile(single, 0.99), a.procs,
                Percentile(multi, 0.5), Percentile(multi, 0.99), writes_per_s, failed);
  } else {
    std::printf("cache_bench: %d entries x %d KiB cubins in %s\n", a.entries, a.cubin_kib, dir.c_str());
    std::printf("hit latency, 1 thread      : p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  (%d lookups)\n",
                Percentile(single, 0.5), Percentile(single, 0.9), Percentile(single, 0.99), a.lookups);
    std::printf("hit latency, %2d processes  : p50 %.3f ms  p90 %.3f ms  p99 %.3f ms  (%zu lookups)\n", a.procs,
                Percentile(multi, 0.5), Percentile(multi, 0.9), Percentile(multi, 0.99), multi.size());
    std::printf("writes, %2d processes       : %.1f entries/s (%d x %d publishes, %d failed)\n", a.procs, writes_per_s,
                a.procs, a.writes_per_proc, failed);
  }
  return failed ? 1 : 0;
}

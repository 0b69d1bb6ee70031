#include "trainer/train/metrics.h"

#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#ifdef DFLASH_TORCH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace dflash::trainer {

nlohmann::json StepMetrics::ToJson() const {
  return {{"step", step},
          {"epoch", epoch},
          {"loss", loss},
          {"accuracy", accuracy},
          {"accept_length", accept_length},
          {"position_acceptance", position_acceptance},
          {"lr", lr},
          {"grad_norm", grad_norm},
          {"step_time_s", step_time_s},
          {"tokens", tokens},
          {"tokens_per_s", tokens_per_s},
          {"peak_memory_bytes", peak_memory_bytes},
          {"phases_ms", phases.ToJson()},
          {"target_ms", target_ms}};
}

std::vector<double> PositionAcceptance(const std::vector<int>& accept_lengths, int block_size) {
  std::vector<double> out(block_size > 1 ? block_size - 1 : 0, 0.0);
  if (accept_lengths.empty()) return out;
  for (int len : accept_lengths) {
    for (int k = 1; k < len && k < block_size; ++k) out[k - 1] += 1.0;
  }
  for (double& v : out) v /= double(accept_lengths.size());
  return out;
}

Result<MetricsLog> MetricsLog::Open(const std::filesystem::path& path) {
  MetricsLog log;
  log.path_ = path;
  log.out_.open(path, std::ios::app);
  if (!log.out_) return IoError("cannot open the metrics log " + path.string());
  return log;
}

Status MetricsLog::Write(const nlohmann::json& record) {
  out_ << record.dump() << '\n';
  out_.flush();
  if (!out_) return IoError("cannot write the metrics log " + path_.string());
  return Status::Ok();
}

namespace {
std::string Duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  char buf[32];
  const long t = std::lround(s);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}
}  // namespace

void PrintProgress(std::ostream& out, const StepMetrics& m, bool terminal) {
  constexpr int kWidth = 20;
  const int filled = m.total_steps > 0 ? int(kWidth * m.step / m.total_steps) : 0;
  char line[384];
  const auto& p = m.phases.ms;
  std::snprintf(line, sizeof line,
                "step %lld/%lld [%s%s] loss %.4f acc %.1f%% tau %.2f | %.0f tok/s | ETA %s | ms tgt %.0f dft %.0f "
                "loss %.0f bwd %.0f sync %.0f opt %.0f host %.0f",
                static_cast<long long>(m.step), static_cast<long long>(m.total_steps),
                std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), m.loss,
                100.0 * m.accuracy, m.accept_length, m.tokens_per_s, Duration(m.eta_s).c_str(), p[0], p[1], p[2],
                p[3], p[4], p[5], m.phases.host_ms);
  out << (terminal ? "\r" : "") << line << (terminal ? "" : "\n") << std::flush;
}

double SecondsSinceProcessStart() {
  // /proc/self/stat field 22: start time in clock ticks after boot; /proc/uptime: seconds since boot. The command
  // name (field 2) is parenthesised and may hold spaces, so fields are counted after its closing parenthesis.
  std::ifstream stat("/proc/self/stat"), uptime("/proc/uptime");
  std::string line;
  double up = 0;
  if (!std::getline(stat, line) || !(uptime >> up)) return -1.0;
  const auto close = line.rfind(')');
  if (close == std::string::npos) return -1.0;
  std::istringstream rest(line.substr(close + 2));
  std::string field;
  for (int i = 3; i <= 22 && (rest >> field); ++i) {
    if (i == 22) return up - std::stod(field) / static_cast<double>(sysconf(_SC_CLK_TCK));
  }
  return -1.0;
}

std::int64_t PeakMemoryBytes(int device_index) {
#ifdef DFLASH_TORCH_CUDA
  if (device_index >= 0) {
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device_index);
    return stats.allocated_bytes[static_cast<std::size_t>(c10::CachingAllocator::StatType::AGGREGATE)].peak;
  }
#endif
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<std::int64_t>(usage.ru_maxrss) * 1024;
}

}  // namespace dflash::trainer

#include "trainer/dist/launcher.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <thread>

extern char** environ;

namespace dflash::trainer::dist {
namespace {

volatile sig_atomic_t g_forward_signal = 0;

void RecordSignal(int sig) { g_forward_signal = sig; }

}  // namespace

ReservedPort& ReservedPort::operator=(ReservedPort&& o) noexcept {
  if (this != &o) {
    if (fd_ >= 0) close(fd_);
    fd_ = o.fd_;
    port_ = o.port_;
    o.fd_ = -1;
  }
  return *this;
}

ReservedPort::~ReservedPort() {
  if (fd_ >= 0) close(fd_);
}

Result<ReservedPort> ReserveLocalPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return IoError(std::string("socket: ") + std::strerror(errno));
  const int on = 1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  const bool ok = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on) == 0 &&
                  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  if (!ok) {
    const int err = errno;
    close(fd);
    return IoError(std::string("cannot reserve a free port: ") + std::strerror(err));
  }
  return ReservedPort(fd, static_cast<int>(ntohs(addr.sin_port)));
}

namespace {

int ExitCodeOf(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

}  // namespace

std::vector<std::string> WorkerArguments(int argc, const char* const* argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--nproc-per-node") {
      ++i;  // and its value
      continue;
    }
    if (a.rfind("--nproc-per-node=", 0) == 0) continue;
    out.push_back(a);
  }
  return out;
}

Result<int> LaunchWorkers(const LaunchOptions& o) {
  if (o.nproc < 1) return InvalidArgument("--nproc-per-node must be >= 1, got " + std::to_string(o.nproc));
  int port = o.master_port;
  ReservedPort reserved;  // held until the workers are gone: rank 0 binds it only once it has started up
  if (port == 0) {
    if (const char* p = std::getenv("MASTER_PORT"); p != nullptr && *p != '\0') {
      port = std::atoi(p);
    } else {
      DFLASH_ASSIGN_OR_RETURN(reserved, ReserveLocalPort());
      port = reserved.port();
    }
  }
  // Each worker's argv and environment, built before fork (the child only calls execve).
  std::vector<std::vector<std::string>> envs(o.nproc);
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const std::string key = kv.substr(0, kv.find('='));
    if (key == "RANK" || key == "WORLD_SIZE" || key == "LOCAL_RANK" || key == "LOCAL_WORLD_SIZE" ||
        key == "MASTER_ADDR" || key == "MASTER_PORT") {
      continue;
    }
    for (auto& env : envs) env.push_back(kv);
  }
  for (int r = 0; r < o.nproc; ++r) {
    for (const auto& [k, v] : {std::pair<std::string, int>{"RANK", r}, {"LOCAL_RANK", r}, {"WORLD_SIZE", o.nproc},
                               {"LOCAL_WORLD_SIZE", o.nproc}, {"MASTER_PORT", port}}) {
      envs[r].push_back(k + "=" + std::to_string(v));
    }
    envs[r].push_back("MASTER_ADDR=127.0.0.1");
  }
  std::vector<char*> argv{const_cast<char*>(o.executable.c_str())};
  for (const auto& a : o.arguments) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  struct sigaction sa{}, old_int{}, old_term{};
  sa.sa_handler = RecordSignal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  g_forward_signal = 0;

  std::vector<pid_t> pids;
  Status start_error = Status::Ok();
  for (int r = 0; r < o.nproc; ++r) {
    std::vector<char*> envp;
    for (auto& kv : envs[r]) envp.push_back(kv.data());
    envp.push_back(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);  // its own process group: stopping a worker stops whatever it started
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    if (pid < 0) {
      start_error = IoError(std::string("cannot start worker ") + std::to_string(r) + ": " + std::strerror(errno));
      break;
    }
    setpgid(pid, pid);  // also here: no race with the first kill
    pids.push_back(pid);
  }

  int exit_code = start_error.ok() ? 0 : 1;
  bool stopping = !start_error.ok();
  auto stop_deadline = std::chrono::steady_clock::now() + o.grace;
  auto stop_all = [&](int sig) {
    for (pid_t p : pids) {
      if (p > 0) kill(-p, sig);
    }
  };
  if (stopping) stop_all(SIGTERM);
  std::size_t alive = pids.size();
  while (alive > 0) {
    if (const int sig = g_forward_signal; sig != 0) {
      g_forward_signal = 0;
      stop_all(sig);
    }
    int status = 0;
    const pid_t done = waitpid(-1, &status, WNOHANG);
    if (done > 0) {
      for (pid_t& p : pids) {
        if (p != done) continue;
        p = -1;
        --alive;
        const int code = ExitCodeOf(status);
        if (code != 0 && exit_code == 0) exit_code = code;
        if (code != 0 && !stopping) {
          stopping = true;
          stop_deadline = std::chrono::steady_clock::now() + o.grace;
          stop_all(SIGTERM);
        }
      }
      continue;
    }
    if (done < 0 && errno == ECHILD) break;
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) {
      stop_all(SIGKILL);
      stop_deadline = std::chrono::steady_clock::time_point::max();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  sigaction(SIGINT, &old_int, nullptr);
  sigaction(SIGTERM, &old_term, nullptr);
  if (!start_error.ok()) return start_error;
  return exit_code;
}

}  // namespace dflash::trainer::dist

// AtomicWriteFile (base/atomic_file.h): a writer SIGKILLed at any moment leaves the old file or the new one, never
// a torn one, and at most its own temporary (never under the target's name); concurrent writers in several processes
// and threads each publish a whole file; a failed write leaves the target as it was and no temporary; errors name
// the file and the OS's reason.
#include "base/atomic_file.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tests/temp_dir.h"

namespace dflash {
namespace {

namespace fs = std::filesystem;
using dflash::testing::TempDir;

// Version `v` of the test file: a header line naming it, then `payload_bytes` bytes drawn from v. Every version
// differs from every other in every 8 bytes, so a file that mixes or cuts versions matches none of them.
std::string VersionContent(std::uint64_t v, std::size_t payload_bytes) {
  std::string out = "version " + std::to_string(v) + "\n";
  std::mt19937_64 rng(v);
  const std::size_t header = out.size();
  out.resize(header + payload_bytes);
  for (std::size_t i = header; i < out.size(); i += 8) {
    const std::uint64_t x = rng();
    std::memcpy(out.data() + i, &x, std::min<std::size_t>(8, out.size() - i));
  }
  return out;
}

std::optional<std::string> ReadWhole(const fs::path& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return std::nullopt;
  std::string out(static_cast<std::size_t>(f.tellg()), '\0');
  f.seekg(0);
  f.read(out.data(), static_cast<std::streamsize>(out.size()));
  out.resize(static_cast<std::size_t>(f.gcount()));
  return out;
}

// The version `text` is, when it is exactly one complete version; nullopt for anything else (torn, mixed, empty).
std::optional<std::uint64_t> CompleteVersion(const std::string& text, std::size_t payload_bytes) {
  if (text.rfind("version ", 0) != 0 || text.find('\n') == std::string::npos) return std::nullopt;
  const std::uint64_t v = std::stoull(text.substr(8, text.find('\n') - 8));
  if (text != VersionContent(v, payload_bytes)) return std::nullopt;
  return v;
}

// The version in the first line of `path` (0 when there is none yet): where a new writer continues.
std::uint64_t HeaderVersion(const fs::path& path) {
  std::ifstream f(path);
  std::string word;
  std::uint64_t v = 0;
  f >> word >> v;
  return v;
}

// Publishes version `v` through the sink in `chunk`-byte pieces (many writes, so a kill can land between them).
Status WriteVersion(const fs::path& target, std::uint64_t v, std::size_t payload_bytes, std::size_t chunk) {
  const std::string content = VersionContent(v, payload_bytes);
  return AtomicWriteFile(target, [&](const ByteSink& sink) -> Status {
    for (std::size_t off = 0; off < content.size(); off += chunk) {
      const std::size_t n = std::min(chunk, content.size() - off);
      DFLASH_RETURN_IF_ERROR(sink(std::as_bytes(std::span(content.data() + off, n))));
    }
    return Status::Ok();
  });
}

std::set<std::string> Names(const fs::path& dir) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.insert(e.path().filename().string());
  return out;
}

// A forked child that runs `body` and exits 0, or 3 after printing the error a write returned.
template <typename Body>
pid_t Fork(Body body) {
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const Status st = body();
    if (!st.ok()) {
      const std::string line = st.ToString() + "\n";
      (void)!::write(2, line.data(), line.size());
      _exit(3);
    }
    _exit(0);
  }
  return pid;
}

TEST(AtomicWriteFile, AWriterKilledAtRandomMomentsLeavesTheOldOrTheNewFileNeverATornOne) {
  constexpr std::size_t kPayload = 1 << 20, kChunk = 16 << 10;
  constexpr int kKills = 60;
  TempDir dir;
  const fs::path target = dir.path() / "published.bin";
  const std::string temp_prefix = "." + target.filename().string() + ".tmp.";

  // Kill moments spread over about two whole writes on this machine's filesystem.
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(WriteVersion(target, 1, kPayload, kChunk).ok());
  const auto one_write_us =
      std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<long> delay_us(0, 2 * one_write_us + 2000);

  std::uint64_t last_version = 1;
  int killed_mid_write = 0, advanced = 0;
  for (int i = 0; i < kKills; ++i) {
    const pid_t pid = Fork([&]() -> Status {  // rewrites the target until it is killed
      for (std::uint64_t v = HeaderVersion(target) + 1;; ++v) {
        DFLASH_RETURN_IF_ERROR(WriteVersion(target, v, kPayload, kChunk));
      }
    });
    ASSERT_GT(pid, 0);
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(rng)));
    ::kill(pid, SIGKILL);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL)
        << "the writer ended before it was killed (exit " << (WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : -1) << ")";

    const std::optional<std::string> text = ReadWhole(target);
    ASSERT_TRUE(text.has_value()) << "kill " << i << ": the target vanished";
    const std::optional<std::uint64_t> v = CompleteVersion(*text, kPayload);
    ASSERT_TRUE(v.has_value()) << "kill " << i << ": the target is torn (" << text->size() << " bytes, first line '"
                               << text->substr(0, text->find('\n')) << "')";
    ASSERT_GE(*v, last_version) << "kill " << i << ": the target went back to an older version";
    advanced += *v > last_version;
    last_version = *v;

    // Besides the target, at most the killed writer's one temporary: named after the target, never the target.
    std::set<std::string> names = Names(dir.path());
    ASSERT_EQ(names.erase(target.filename().string()), 1u);
    ASSERT_LE(names.size(), 1u) << "kill " << i << ": more than one temporary left";
    for (const std::string& name : names) {
      ASSERT_EQ(name.rfind(temp_prefix + std::to_string(pid) + ".", 0), 0u) << "unexpected file " << name;
      fs::remove(dir.path() / name);
      ++killed_mid_write;
    }
  }
  // Both outcomes were seen: kills inside a write (a temporary was left) and kills after writes that completed.
  EXPECT_GT(killed_mid_write, 0);
  EXPECT_GT(advanced, 0);

  // A writer that is not killed leaves nothing but the target.
  ASSERT_TRUE(WriteVersion(target, last_version + 1, kPayload, kChunk).ok());
  EXPECT_EQ(CompleteVersion(*ReadWhole(target), kPayload), last_version + 1);
  EXPECT_EQ(Names(dir.path()), std::set<std::string>{target.filename().string()});
}

TEST(AtomicWriteFile, ConcurrentWritersInSeveralProcessesAndThreadsEachPublishAWholeFile) {
  constexpr std::size_t kPayload = 256 << 10, kChunk = 4 << 10;
  constexpr int kProcesses = 2, kThreads = 3, kWritesEach = 15;
  TempDir dir;
  const fs::path target = dir.path() / "shared.bin";

  std::vector<pid_t> writers;
  for (int p = 0; p < kProcesses; ++p) {
    writers.push_back(Fork([&, p]() -> Status {
      std::vector<Status> results(kThreads);
      std::vector<std::thread> threads;
      for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
          for (int i = 0; i < kWritesEach && results[t].ok(); ++i) {
            results[t] = WriteVersion(target, 1000 * (p + 1) + 100 * t + i, kPayload, kChunk);
          }
        });
      }
      for (auto& th : threads) th.join();
      for (const Status& st : results) DFLASH_RETURN_IF_ERROR(st);
      return Status::Ok();
    }));
    ASSERT_GT(writers.back(), 0);
  }
  // Read the target while they write: every read sees one complete version.
  int reads = 0, running = kProcesses;
  while (running > 0) {
    if (std::optional<std::string> text = ReadWhole(target)) {
      ASSERT_TRUE(CompleteVersion(*text, kPayload).has_value()) << "read " << reads << " saw a torn file";
      ++reads;
    }
    for (pid_t& pid : writers) {
      int wstatus = 0;
      if (pid > 0 && ::waitpid(pid, &wstatus, WNOHANG) == pid) {
        EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "a writer failed (stderr above)";
        pid = -1;
        --running;
      }
    }
  }
  EXPECT_GT(reads, 0);
  ASSERT_TRUE(CompleteVersion(*ReadWhole(target), kPayload).has_value());
  EXPECT_EQ(Names(dir.path()), std::set<std::string>{target.filename().string()});
}

TEST(AtomicWriteFile, AFailedOrThrowingProducerLeavesTheTargetAsItWasAndNoTemporary) {
  TempDir dir;
  const fs::path target = dir.path() / "config.json";
  ASSERT_TRUE(AtomicWriteText(target, "{\"old\": true}\n").ok());
  const std::string half = "{\"new\": tr";

  const Status failed = AtomicWriteFile(target, [&](const ByteSink& sink) -> Status {
    DFLASH_RETURN_IF_ERROR(sink(std::as_bytes(std::span(half))));
    return Internal("the producer gave up");
  });
  EXPECT_EQ(failed.code(), ErrorCode::kInternal);
  EXPECT_EQ(failed.message(), "the producer gave up");
  EXPECT_EQ(ReadWhole(target), "{\"old\": true}\n");
  EXPECT_EQ(Names(dir.path()), std::set<std::string>{"config.json"});

  EXPECT_THROW((void)AtomicWriteFile(target,
                                     [&](const ByteSink& sink) -> Status {
                                       (void)sink(std::as_bytes(std::span(half)));
                                       throw std::runtime_error("the producer threw");
                                     }),
               std::runtime_error);
  EXPECT_EQ(ReadWhole(target), "{\"old\": true}\n");
  EXPECT_EQ(Names(dir.path()), std::set<std::string>{"config.json"});
}

TEST(AtomicWriteFile, ErrorsNameTheFileAndTheReason) {
  TempDir dir;
  const fs::path missing = dir.path() / "missing";
  const Status no_folder = AtomicWriteText(missing / "x.json", "{}");
  EXPECT_EQ(no_folder.code(), ErrorCode::kIoError);
  EXPECT_NE(no_folder.message().find(missing.string()), std::string::npos) << no_folder.message();
  EXPECT_NE(no_folder.message().find(std::strerror(ENOENT)), std::string::npos) << no_folder.message();

  // The target is a folder with something in it: the rename fails, the temporary goes.
  fs::create_directories(dir.path() / "occupied" / "child");
  const Status occupied = AtomicWriteText(dir.path() / "occupied", "{}");
  EXPECT_EQ(occupied.code(), ErrorCode::kIoError);
  EXPECT_NE(occupied.message().find((dir.path() / "occupied").string()), std::string::npos) << occupied.message();
  EXPECT_NE(occupied.message().find(std::strerror(EISDIR)), std::string::npos) << occupied.message();
  EXPECT_EQ(Names(dir.path()), std::set<std::string>{"occupied"});

  EXPECT_TRUE(FsyncDirectory(dir.path()).ok());
  const Status no_dir = FsyncDirectory(missing);
  EXPECT_EQ(no_dir.code(), ErrorCode::kIoError);
  EXPECT_NE(no_dir.message().find(missing.string()), std::string::npos) << no_dir.message();
  EXPECT_NE(no_dir.message().find(std::strerror(ENOENT)), std::string::npos) << no_dir.message();
}

}  // namespace
}  // namespace dflash

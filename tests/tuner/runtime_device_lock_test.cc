// The per-GPU benchmark lock: named by the GPU's identity (not its ordinal) and exclusive across processes.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <thread>
#include <utility>

#include "tuner/device_lock.h"

namespace dflash::tuner {
namespace {

using namespace std::chrono_literals;

gpu::DeviceInfo FakeDevice(int ordinal, std::string uuid, std::string pci = "0000:3B:00.0") {
  gpu::DeviceInfo d;
  d.ordinal = ordinal;
  d.name = "Fake GPU";
  d.uuid = std::move(uuid);
  d.pci_bus_id = std::move(pci);
  return d;
}

// Each test gets its own lock directory through $DFLASH_LOCK_DIR (read by cache::MachineLockDir).
class DeviceLockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "dflash-devlock-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
    ::setenv("DFLASH_LOCK_DIR", dir_.c_str(), 1);
    // A UUID no other test run shares, so runs in parallel never meet in the in-process registry.
    std::random_device rd;
    uuid_ = "GPU-" + std::to_string(rd()) + "-" + std::to_string(rd());
  }
  void TearDown() override {
    ::unsetenv("DFLASH_LOCK_DIR");
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path dir_;
  std::string uuid_;
};

TEST(DeviceLockName, IgnoresTheOrdinal) {
  Result<std::string> a = DeviceLockName(FakeDevice(0, "GPU-1a2b3c4d-0000-1111-2222-333344445555"));
  Result<std::string> b = DeviceLockName(FakeDevice(5, "GPU-1a2b3c4d-0000-1111-2222-333344445555"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_EQ(*a, "gpu-bench-gpu-1a2b3c4d-0000-1111-2222-333344445555");
}

TEST(DeviceLockName, DiffersBetweenGpus) {
  Result<std::string> a = DeviceLockName(FakeDevice(0, "GPU-aaaa", "0000:3B:00.0"));
  Result<std::string> b = DeviceLockName(FakeDevice(0, "GPU-bbbb", "0000:3B:00.0"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_NE(*a, *b);
}

TEST(DeviceLockName, IsCaseInsensitiveAndUsesOnlyLockNameCharacters) {
  Result<std::string> upper = DeviceLockName(FakeDevice(0, "GPU-ABCDEF"));
  Result<std::string> lower = DeviceLockName(FakeDevice(0, "gpu-abcdef"));
  ASSERT_TRUE(upper.ok() && lower.ok());
  EXPECT_EQ(*upper, *lower);
  Result<std::string> odd = DeviceLockName(FakeDevice(0, "MIG-x/y:z w"));
  ASSERT_TRUE(odd.ok());
  EXPECT_EQ(*odd, "gpu-bench-mig-x-y-z-w");
}

TEST(DeviceLockName, FallsBackToThePciBusId) {
  Result<std::string> n = DeviceLockName(FakeDevice(2, "", "0000:3B:00.0"));
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_EQ(*n, "gpu-bench-pci-0000-3b-00.0");
}

TEST(DeviceLockName, WithoutAnyIdentityIsInvalidArgument) {
  Result<std::string> n = DeviceLockName(FakeDevice(1, "", ""));
  ASSERT_FALSE(n.ok());
  EXPECT_EQ(n.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(n.status().message().find("GPU 1"), std::string::npos) << n.status().message();
}

TEST_F(DeviceLockTest, CreatesItsLockFileInTheMachineLockDir) {
  Result<cache::NamedLock> lock = LockDeviceForBenchmark(FakeDevice(0, uuid_), 5s);
  ASSERT_TRUE(lock.ok()) << lock.status().ToString();
  Result<std::string> name = DeviceLockName(FakeDevice(0, uuid_));
  ASSERT_TRUE(name.ok());
  EXPECT_TRUE(std::filesystem::exists(dir_ / (*name + ".lock")));
}

TEST_F(DeviceLockTest, AnotherThreadWaitsAndTimesOutWithBusyNamingTheGpu) {
  std::optional<Result<cache::NamedLock>> held(LockDeviceForBenchmark(FakeDevice(0, uuid_), 5s));
  ASSERT_TRUE(held->ok()) << held->status().ToString();
  Status other;
  std::thread t([&] { other = LockDeviceForBenchmark(FakeDevice(1, uuid_), 100ms).status(); });
  t.join();
  EXPECT_EQ(other.code(), ErrorCode::kBusy);
  EXPECT_NE(other.message().find(uuid_), std::string::npos) << other.message();
  held.reset();
  EXPECT_TRUE(LockDeviceForBenchmark(FakeDevice(1, uuid_), 5s).ok());
}

TEST_F(DeviceLockTest, AnotherGpuIsNotBlocked) {
  Result<cache::NamedLock> a = LockDeviceForBenchmark(FakeDevice(0, uuid_), 5s);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  Result<cache::NamedLock> b = LockDeviceForBenchmark(FakeDevice(0, uuid_ + "-other"), 100ms);
  EXPECT_TRUE(b.ok()) << b.status().ToString();
}

// Closes the parent's pipe ends and reaps the child on every exit path, so a failed ASSERT cannot leave the
// child blocked (its reads see end-of-file and it exits).
struct ChildGuard {
  pid_t pid = -1;
  int to_child = -1, from_child = -1;
  int Wait() {
    if (to_child >= 0) ::close(std::exchange(to_child, -1));
    if (from_child >= 0) ::close(std::exchange(from_child, -1));
    int status = 0;
    if (pid > 0 && ::waitpid(std::exchange(pid, -1), &status, 0) < 0) return -1;
    return status;
  }
  ~ChildGuard() { (void)Wait(); }
};

char ReadByte(int fd) {
  char c = 0;
  return ::read(fd, &c, 1) == 1 ? c : '?';
}

TEST_F(DeviceLockTest, ExcludesASecondProcessThatSeesTheGpuUnderAnotherOrdinal) {
  int down[2], up[2];
  ASSERT_EQ(::pipe(down), 0);
  ASSERT_EQ(::pipe(up), 0);
  // Fork before the parent takes the lock: the child's copy of the in-process mutex registry is then free, so
  // only the interprocess file lock can keep it out.
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(down[1]);
    ::close(up[0]);
    auto attempt = [&](std::chrono::milliseconds timeout) {
      Result<cache::NamedLock> l = LockDeviceForBenchmark(FakeDevice(3, uuid_), timeout);
      return l.ok() ? 'L' : l.status().code() == ErrorCode::kBusy ? 'B' : 'E';
    };
    if (ReadByte(down[0]) != 'g') ::_exit(2);  // the parent holds the lock now
    char first = attempt(200ms);
    if (::write(up[1], &first, 1) != 1) ::_exit(3);
    if (ReadByte(down[0]) != 'g') ::_exit(2);  // the parent released it
    char second = attempt(10s);
    if (::write(up[1], &second, 1) != 1) ::_exit(3);
    ::_exit(0);
  }
  ::close(down[0]);
  ::close(up[1]);
  ChildGuard child{pid, down[1], up[0]};

  std::optional<Result<cache::NamedLock>> held(LockDeviceForBenchmark(FakeDevice(0, uuid_), 5s));
  ASSERT_TRUE(held->ok()) << held->status().ToString();
  ASSERT_EQ(::write(child.to_child, "g", 1), 1);
  EXPECT_EQ(ReadByte(child.from_child), 'B') << "the child took the lock while this process held it";
  held.reset();
  ASSERT_EQ(::write(child.to_child, "g", 1), 1);
  EXPECT_EQ(ReadByte(child.from_child), 'L') << "the child could not take the released lock";
  const int status = child.Wait();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
}

}  // namespace
}  // namespace dflash::tuner

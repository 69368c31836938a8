#include "agent/launcher.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <set>

#include "agent/test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::TempDir;
using testing::WaitUntil;

LaunchSpec Shell(const TempDir& dir, const std::string& script) {
  LaunchSpec spec;
  spec.command = {"/bin/sh", "-c", script};
  spec.log_path = dir.path() + "/logs/worker.log";
  spec.progress_path = dir.path() + "/progress/worker.jsonl";
  return spec;
}

TEST(LauncherTest, EnvironmentIsExactlyInheritedPlusAssignmentPlusProgressFile) {
  TempDir dir;
  ::setenv("TESSERA_TEST_SECRET", "must-not-leak", 1);
  ::setenv("PYTHONPATH", "/opt/py", 1);
  LauncherOptions options;
  options.inherited_env = {"PATH", "PYTHONPATH", "HOME"};
  ProcessLauncher launcher(options);
  LaunchSpec spec = Shell(dir, "env");
  spec.command = {"/usr/bin/env"};
  spec.env = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"PYTHONPATH", "/job"}};
  auto process = launcher.Launch(spec);
  ASSERT_TRUE(process.ok()) << process.status().ToString();
  auto exit = (*process)->WaitFor(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 0);

  std::set<std::string> lines;
  std::istringstream log(ReadFile(spec.log_path));
  for (std::string line; std::getline(log, line);) lines.insert(line);
  std::set<std::string> expected = {"RANK=3", "WORLD_SIZE=8", "PYTHONPATH=/job",
                                    "TESSERA_PROGRESS_FILE=" + spec.progress_path,
                                    "PATH=" + std::string(::getenv("PATH"))};
  if (const char* home = ::getenv("HOME")) expected.insert("HOME=" + std::string(home));
  EXPECT_EQ(lines, expected);
  EXPECT_EQ(launcher.WorkerEnvironment(spec).size(), expected.size());
}

TEST(LauncherTest, CapturesStdoutAndStderrAndWorkingDir) {
  TempDir dir;
  ProcessLauncher launcher;
  LaunchSpec spec = Shell(dir, "echo out; echo err >&2; pwd; exit 3");
  spec.working_dir = dir.path();
  auto process = launcher.Launch(spec);
  ASSERT_TRUE(process.ok()) << process.status().ToString();
  auto exit = (*process)->WaitFor(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 3);
  EXPECT_EQ(exit->signal, 0);
  EXPECT_GT(exit->finished_at_ms, 0);
  EXPECT_GE(exit->finished_at_ms, (*process)->started_at_ms());
  EXPECT_EQ(ReadFile(spec.log_path), "out\nerr\n" + dir.path() + "\n");
}

TEST(LauncherTest, StdinIsEmptyAndNoAgentDescriptorLeaks) {
  TempDir dir;
  // A descriptor opened without O_CLOEXEC, as a careless library would.
  int opened = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(opened, 0);
  const int leaky = 117;  // above anything `ls` opens itself
  ASSERT_EQ(::dup2(opened, leaky), leaky);
  ::close(opened);
  ProcessLauncher launcher;
  LaunchSpec spec = Shell(dir, "cat; ls /proc/self/fd");
  auto process = launcher.Launch(spec);
  ASSERT_TRUE(process.ok());
  ASSERT_TRUE((*process)->WaitFor(20s).has_value());
  ::close(leaky);
  // Only 0, 1, 2 of `ls` itself, plus the fd ls opened to read the directory.
  std::istringstream log(ReadFile(spec.log_path));
  std::set<std::string> fds;
  for (std::string line; std::getline(log, line);) fds.insert(line);
  fds.erase("0");
  fds.erase("1");
  fds.erase("2");
  EXPECT_LE(fds.size(), 1u) << ReadFile(spec.log_path);
  EXPECT_EQ(fds.count(std::to_string(leaky)), 0u) << ReadFile(spec.log_path);
}

TEST(LauncherTest, ReportsDeathBySignal) {
  TempDir dir;
  ProcessLauncher launcher;
  auto process = launcher.Launch(Shell(dir, "kill -KILL $$"));
  ASSERT_TRUE(process.ok());
  auto exit = (*process)->WaitFor(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_EQ(exit->exit_code, 128 + SIGKILL);
}

TEST(LauncherTest, UnknownProgramAndBadWorkingDirAreErrorsWithNothingLeftBehind) {
  TempDir dir;
  ProcessLauncher launcher;
  LaunchSpec spec = Shell(dir, "true");
  spec.command = {"no-such-program-tessera"};
  auto missing = launcher.Launch(spec);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no-such-program-tessera"), std::string::npos);

  spec = Shell(dir, "true");
  spec.working_dir = dir.path() + "/does/not/exist";
  auto bad_dir = launcher.Launch(spec);
  ASSERT_FALSE(bad_dir.ok());
  EXPECT_NE(bad_dir.status().message().find("workingDir"), std::string::npos);

  spec.command = {};
  EXPECT_EQ(launcher.Launch(spec).status().code(), StatusCode::kInvalidArgument);
  // Every child was reaped: none is left for this process to wait for.
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
  EXPECT_EQ(errno, ECHILD);
}

TEST(LauncherTest, StopKillsTheWholeProcessGroupIncludingGrandchildren) {
  TempDir dir;
  ProcessLauncher launcher;
  const std::string pid_file = dir.path() + "/grandchild.pid";
  auto process = launcher.Launch(Shell(dir, "sleep 1000 & echo $! > " + pid_file + "; wait"));
  ASSERT_TRUE(process.ok());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(pid_file).find('\n') != std::string::npos; }));
  const pid_t grandchild = std::stoi(ReadFile(pid_file));
  EXPECT_TRUE(ProcessAlive(grandchild));
  EXPECT_TRUE((*process)->Stop(10s).ok());
  auto exit = (*process)->exit_info();
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGTERM);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(grandchild); }));
}

TEST(LauncherTest, GraceEscalatesToSigkill) {
  TempDir dir;
  ProcessLauncher launcher;
  const std::string ready = dir.path() + "/ready";
  auto process = launcher.Launch(
      Shell(dir, "trap '' TERM; touch " + ready + "; while true; do sleep 0.05; done"));
  ASSERT_TRUE(process.ok());
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(ready); }));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE((*process)->Stop(200ms).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, 200ms);
  auto exit = (*process)->exit_info();
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGKILL);
}

TEST(LauncherTest, StopAsyncEscalatesInTheBackground) {
  TempDir dir;
  ProcessLauncher launcher;
  const std::string ready = dir.path() + "/ready";
  std::atomic<int> callbacks{0};
  auto process = launcher.Launch(
      Shell(dir, "trap '' TERM; touch " + ready + "; while true; do sleep 0.05; done"),
      [&](const ExitInfo&) { ++callbacks; });
  ASSERT_TRUE(process.ok());
  ASSERT_TRUE(WaitUntil([&] { return std::filesystem::exists(ready); }));
  (*process)->StopAsync(100ms);
  EXPECT_TRUE((*process)->stopping());
  auto exit = (*process)->WaitFor(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return callbacks == 1; }));
  EXPECT_TRUE((*process)->Stop(1s).ok());  // already exited: OK
  EXPECT_EQ((*process)->Signal(SIGTERM).code(), StatusCode::kFailedPrecondition);
}

TEST(LauncherTest, LeftoverProcessesDieWithTheLeaderAndNoZombiesRemain) {
  TempDir dir;
  ProcessLauncher launcher;
  const std::string pid_file = dir.path() + "/bg.pid";
  std::vector<pid_t> leaders;
  for (int i = 0; i < 5; ++i) {
    auto process = launcher.Launch(
        Shell(dir, "sleep 1000 & echo $! > " + pid_file + "." + std::to_string(i) + "; exit 0"));
    ASSERT_TRUE(process.ok());
    auto exit = (*process)->WaitFor(20s);
    ASSERT_TRUE(exit.has_value());
    EXPECT_EQ(exit->exit_code, 0);
    leaders.push_back((*process)->pid());
    const pid_t bg = std::stoi(ReadFile(pid_file + "." + std::to_string(i)));
    EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(bg); }));
  }
  for (pid_t pid : leaders) EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(pid)));
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
}

TEST(LauncherTest, DestroyingTheLastReferenceKillsARunningWorker) {
  TempDir dir;
  ProcessLauncher launcher;
  pid_t pid;
  {
    auto process = launcher.Launch(Shell(dir, "sleep 1000"));
    ASSERT_TRUE(process.ok());
    pid = (*process)->pid();
    EXPECT_TRUE(ProcessAlive(pid));
  }
  EXPECT_FALSE(ProcessAlive(pid));
  EXPECT_EQ(::waitpid(-1, nullptr, WNOHANG), -1);
}

}  // namespace
}  // namespace tessera::agent

#include "agent/warm_pool.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <nlohmann/json.hpp>

#include "agent/test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using testing::AppendFile;
using testing::ProcessAlive;
using testing::ReadFile;
using testing::SdkDir;
using testing::TempDir;
using testing::WaitUntil;

constexpr char kPython[] = "/usr/bin/python3";

// A bare interpreter (no preload) keeps these tests fast.
WarmPoolOptions Options(const TempDir& dir, int size = 1) {
  WarmPoolOptions o;
  o.python = kPython;
  o.size = size;
  o.sdk_dir = SdkDir();
  o.log_path = dir.path() + "/warm.log";
  o.respawn_backoff_initial = 20ms;
  o.respawn_backoff_max = 200ms;
  return o;
}

// A spec running `source` as a script file in `dir`.
LaunchSpec Script(const TempDir& dir, const std::string& name, const std::string& source) {
  const std::string path = dir.path() + "/" + name + ".py";
  AppendFile(path, source);
  LaunchSpec spec;
  spec.command = {kPython, path};
  spec.log_path = dir.path() + "/logs/" + name + ".log";
  spec.progress_path = dir.path() + "/progress/" + name + ".jsonl";
  return spec;
}

// A started pool with `size` ready processes.
std::unique_ptr<WarmPool> ReadyPool(const TempDir& dir, int size = 1, WarmPoolLog log = {}) {
  auto pool = std::make_unique<WarmPool>(Options(dir, size), LauncherOptions{}, std::move(log));
  EXPECT_TRUE(pool->Start().ok());
  EXPECT_TRUE(WaitUntil([&] { return pool->ready() == size; }))
      << ReadFile(dir.path() + "/warm.log");
  return pool;
}

// Runs `spec` in a warm process (waiting for the pool to have one ready) to its end.
ExitInfo RunToExit(WarmPool& pool, const LaunchSpec& spec) {
  EXPECT_TRUE(WaitUntil([&] { return pool.ready() > 0; }));
  auto process = pool.TryLaunch(spec);
  EXPECT_TRUE(process.ok()) << process.status().ToString();
  EXPECT_NE(*process, nullptr);
  if (!process.ok() || *process == nullptr) return ExitInfo{-1, -1, 0};
  auto exit = (*process)->WaitFor(20s);
  EXPECT_TRUE(exit.has_value());
  return exit.value_or(ExitInfo{-1, -1, 0});
}

TEST(WarmPoolTest, AWarmWorkerHasExactlyTheAssignmentEnvironmentItsOwnGroupAndItsLog) {
  TempDir dir;
  auto pool = ReadyPool(dir);
  const pid_t warm_pid = pool->idle_pids().at(0);
  LaunchSpec spec = Script(dir, "env",
                           "import json, os, sys\n"
                           "print(json.dumps({'env': dict(os.environ), 'pid': os.getpid(),\n"
                           "  'pgid': os.getpgid(0), 'sid': os.getsid(0), 'argv': sys.argv,\n"
                           "  'cwd': os.getcwd(), 'stdin': sys.stdin.read(), 'name': __name__,\n"
                           "  'path0': sys.path[0], 'fds': sorted(os.listdir('/proc/self/fd')),\n"
                           "  'tessera': [m for m in sys.modules if m.startswith('tessera')]}))\n"
                           "print('to stderr', file=sys.stderr)\n");
  spec.command.insert(spec.command.end(), {"--lr", "0.1"});
  spec.env = {{"RANK", "3"}, {"WORLD_SIZE", "8"}, {"PYTHONPATH", dir.path() + "/lib"}};
  spec.working_dir = dir.path();

  auto process = pool->TryLaunch(spec);
  ASSERT_TRUE(process.ok()) << process.status().ToString();
  ASSERT_NE(*process, nullptr);
  EXPECT_EQ((*process)->pid(), warm_pid);  // the warm process became the worker
  auto exit = (*process)->WaitFor(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->exit_code, 0) << ReadFile(spec.log_path);
  EXPECT_EQ(exit->signal, 0);

  // Both streams in the log; stdout is block-buffered to a file, as in a cold interpreter, so
  // the stderr line comes first.
  const std::string log = ReadFile(spec.log_path);
  ASSERT_EQ(log.rfind("to stderr\n{", 0), 0u) << log;
  json seen = json::parse(log.substr(log.find('\n') + 1));
  json expected_env = ProcessLauncher().WorkerEnvironment(spec);
  EXPECT_EQ(seen["env"], expected_env);
  EXPECT_EQ(seen["pid"], warm_pid);
  EXPECT_EQ(seen["pgid"], warm_pid);
  EXPECT_EQ(seen["sid"], warm_pid);
  EXPECT_EQ(seen["argv"], (json{spec.command[1], "--lr", "0.1"}));
  EXPECT_EQ(seen["cwd"], dir.path());
  EXPECT_EQ(seen["stdin"], "");
  EXPECT_EQ(seen["name"], "__main__");
  EXPECT_EQ(seen["path0"], dir.path());
  // 0, 1, 2 and the one listdir opened: nothing of the agent or of the channel.
  EXPECT_EQ(seen["fds"].size(), 4u) << seen["fds"];
  EXPECT_EQ(seen["tessera"], json::array());  // the SDK _warm came from does not shadow the job's

  // The pool starts a replacement.
  ASSERT_TRUE(WaitUntil([&] { return pool->ready() == 1; }));
  EXPECT_NE(pool->idle_pids().at(0), warm_pid);
  EXPECT_EQ(pool->handed_out(), 1);
}

TEST(WarmPoolTest, ExitCodesExceptionsAndSignalsAreThoseOfAColdInterpreter) {
  TempDir dir;
  auto pool = ReadyPool(dir, 2);
  ExitInfo code = RunToExit(*pool, Script(dir, "code", "import sys\nsys.exit(7)\n"));
  EXPECT_EQ(code.exit_code, 7);
  EXPECT_EQ(code.signal, 0);

  LaunchSpec raising = Script(dir, "raise", "def f():\n    raise ValueError('boom')\nf()\n");
  ExitInfo raised = RunToExit(*pool, raising);
  EXPECT_EQ(raised.exit_code, 1);
  const std::string traceback = ReadFile(raising.log_path);
  EXPECT_NE(traceback.find("ValueError: boom"), std::string::npos) << traceback;
  EXPECT_NE(traceback.find("raise.py\", line 2, in f"), std::string::npos) << traceback;
  EXPECT_EQ(traceback.find("_warm.py"), std::string::npos) << traceback;
  EXPECT_EQ(traceback.find("runpy"), std::string::npos) << traceback;

  LaunchSpec message = Script(dir, "message", "import sys\nsys.exit('bad config')\n");
  EXPECT_EQ(RunToExit(*pool, message).exit_code, 1);
  EXPECT_EQ(ReadFile(message.log_path), "bad config\n");

  ExitInfo killed =
      RunToExit(*pool, Script(dir, "kill", "import os, signal\nos.kill(os.getpid(), 9)\n"));
  EXPECT_EQ(killed.signal, SIGKILL);
  EXPECT_EQ(killed.exit_code, 128 + SIGKILL);

  LaunchSpec missing = Script(dir, "unused", "");
  missing.command = {kPython, dir.path() + "/no-such-script.py"};
  EXPECT_EQ(RunToExit(*pool, missing).exit_code, 2);
  EXPECT_NE(ReadFile(missing.log_path).find("can't open file"), std::string::npos);
  EXPECT_EQ(pool->handed_out(), 5);
}

TEST(WarmPoolTest, RunsAModuleWithMinusM) {
  TempDir dir;
  auto pool = ReadyPool(dir);
  std::filesystem::create_directories(dir.path() + "/lib/pkg");
  AppendFile(dir.path() + "/lib/pkg/__init__.py", "");
  AppendFile(dir.path() + "/lib/pkg/job.py",
             "import sys\nprint(__name__, sys.argv[0].endswith('pkg/job.py'), sys.argv[1:])\n");
  LaunchSpec spec = Script(dir, "unused", "");
  spec.command = {kPython, "-m", "pkg.job", "x", "-y"};
  spec.env = {{"PYTHONPATH", dir.path() + "/lib"}};
  ExitInfo exit = RunToExit(*pool, spec);
  EXPECT_EQ(exit.exit_code, 0) << ReadFile(spec.log_path);
  EXPECT_EQ(ReadFile(spec.log_path), "__main__ True ['x', '-y']\n");
}

TEST(WarmPoolTest, PreloadedModulesAreAlreadyImported) {
  TempDir dir;
  WarmPoolOptions o = Options(dir);
  o.preload = {"wave", "colorsys"};  // rarely imported by the interpreter itself
  WarmPool pool(o, LauncherOptions{});
  ASSERT_TRUE(pool.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return pool.ready() == 1; })) << ReadFile(o.log_path);
  LaunchSpec spec =
      Script(dir, "mods", "import sys\nprint('wave' in sys.modules, 'colorsys' in sys.modules)\n");
  EXPECT_EQ(RunToExit(pool, spec).exit_code, 0);
  EXPECT_EQ(ReadFile(spec.log_path), "True True\n");
}

TEST(WarmPoolTest, OtherCommandsAndStartupEnvironmentChangesAreLeftToTheColdLauncher) {
  TempDir dir;
  WarmPoolOptions o = Options(dir);
  o.refill_delay = std::chrono::hours(1);  // no replacement during this test
  auto pool = std::make_unique<WarmPool>(o, LauncherOptions{});
  ASSERT_TRUE(pool->Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return pool->ready() == 1; }));
  LaunchSpec spec = Script(dir, "s", "print('hi')\n");
  EXPECT_EQ(pool->Unsuitable(spec), "");

  LaunchSpec shell = spec;
  shell.command = {"/bin/sh", "-c", "true"};
  LaunchSpec option = spec;
  option.command = {kPython, "-u", spec.command[1]};
  LaunchSpec code = spec;
  code.command = {kPython, "-c", "print(1)"};
  LaunchSpec bare = spec;
  bare.command = {kPython};
  LaunchSpec hashseed = spec;
  hashseed.env = {{"PYTHONHASHSEED", "0"}};
  LaunchSpec preload = spec;
  preload.env = {{"LD_PRELOAD", "libfoo.so"}};
  for (const LaunchSpec* s : {&shell, &option, &code, &bare, &hashseed, &preload}) {
    EXPECT_NE(pool->Unsuitable(*s), "") << s->command[0];
    auto process = pool->TryLaunch(*s);
    ASSERT_TRUE(process.ok());
    EXPECT_EQ(*process, nullptr);
  }
  EXPECT_EQ(pool->ready(), 1);  // nothing was consumed
  EXPECT_EQ(pool->handed_out(), 0);

  // A name found in the worker's PATH that is the same interpreter is warm-able.
  LaunchSpec by_name = spec;
  by_name.command[0] = "python3";
  by_name.env = {{"PATH", "/usr/bin"}};
  EXPECT_EQ(pool->Unsuitable(by_name), "");
  // Runtime-applied variables do not prevent a warm start.
  LaunchSpec unbuffered = spec;
  unbuffered.env = {{"PYTHONUNBUFFERED", "1"}, {"PYTHONPATH", "/x"}};
  EXPECT_EQ(pool->Unsuitable(unbuffered), "");

  // None ready: null, the caller launches cold.
  auto first = pool->TryLaunch(spec);
  ASSERT_TRUE(first.ok());
  ASSERT_NE(*first, nullptr);
  auto second = pool->TryLaunch(spec);
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, nullptr);
  EXPECT_TRUE((*first)->WaitFor(20s).has_value());
}

TEST(WarmPoolTest, ABadWorkingDirectoryIsAnErrorAndTheProcessIsReaped) {
  TempDir dir;
  auto pool = ReadyPool(dir);
  const pid_t warm_pid = pool->idle_pids().at(0);
  LaunchSpec spec = Script(dir, "s", "print('hi')\n");
  spec.working_dir = dir.path() + "/does/not/exist";
  auto process = pool->TryLaunch(spec);
  ASSERT_FALSE(process.ok());
  EXPECT_EQ(process.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(process.status().message().find("workingDir"), std::string::npos)
      << process.status().message();
  EXPECT_FALSE(ProcessAlive(warm_pid));
  EXPECT_NE(::waitpid(warm_pid, nullptr, WNOHANG), 0);  // already reaped: ECHILD
}

TEST(WarmPoolTest, StopSignalsTheWholeGroupOfAWarmWorker) {
  TempDir dir;
  auto pool = ReadyPool(dir);
  const std::string child = dir.path() + "/child.pid";
  LaunchSpec spec = Script(dir, "tree",
                           "import subprocess, time\n"
                           "p = subprocess.Popen(['sleep', '1000'])\n"
                           "open('" +
                               child +
                               "', 'w').write('%d\\n' % p.pid)\n"
                               "time.sleep(1000)\n");
  auto process = pool->TryLaunch(spec);
  ASSERT_TRUE(process.ok());
  ASSERT_NE(*process, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(child).find('\n') != std::string::npos; }));
  const pid_t grandchild = std::stoi(ReadFile(child));
  EXPECT_TRUE(ProcessAlive(grandchild));
  (*process)->StopAsync(0ms);  // grace 0: SIGKILL at once
  auto exit = (*process)->WaitFor(20s);
  ASSERT_TRUE(exit.has_value());
  EXPECT_EQ(exit->signal, SIGKILL);
  EXPECT_TRUE(WaitUntil([&] { return !ProcessAlive(grandchild); }));
}

TEST(WarmPoolTest, AFailingPreloadIsRetriedWithBackoffAndShutdownKillsIdleProcesses) {
  TempDir dir;
  std::atomic<int> exits{0};
  WarmPoolOptions o = Options(dir);
  o.preload = {"no_such_module_for_tessera"};
  WarmPool failing(o, LauncherOptions{}, [&](const std::string& event, const std::string&) {
    if (event == "warm.exited") ++exits;
  });
  ASSERT_TRUE(failing.Start().ok());
  ASSERT_TRUE(WaitUntil([&] { return exits >= 2; }));
  EXPECT_EQ(failing.ready(), 0);
  EXPECT_NE(ReadFile(o.log_path).find("No module named 'no_such_module_for_tessera'"),
            std::string::npos);
  failing.Shutdown();

  auto pool = ReadyPool(dir, 2);
  std::vector<pid_t> idle = pool->idle_pids();
  ASSERT_EQ(idle.size(), 2u);
  pool->Shutdown();
  for (pid_t pid : idle) EXPECT_FALSE(ProcessAlive(pid));
  EXPECT_TRUE(pool->idle_pids().empty());
  EXPECT_EQ(*pool->TryLaunch(Script(dir, "late", "")), nullptr);
}

TEST(WarmPoolTest, AnInterpreterThatIsNotExecutableIsRefused) {
  TempDir dir;
  WarmPoolOptions o = Options(dir);
  o.python = dir.path() + "/no-python";
  EXPECT_EQ(WarmPool(o, LauncherOptions{}).Start().code(), StatusCode::kInvalidArgument);
  o = Options(dir);
  o.sdk_dir = dir.path();
  EXPECT_EQ(WarmPool(o, LauncherOptions{}).Start().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tessera::agent

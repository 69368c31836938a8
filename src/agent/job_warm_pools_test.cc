// JobWarmPools: the pools a job asks for with spec.warmStart (TESSERA_WARM_PRELOAD). The first
// start of a job is cold and creates its pool; the next start finds a process with the modules
// imported in the job's environment; a module that read at import a variable the attempt
// changes makes that start cold instead of stale.
#include "agent/job_warm_pools.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "agent/test_util.h"

namespace tessera::agent {
namespace {

using namespace std::chrono_literals;
using testing::AppendFile;
using testing::ReadFile;
using testing::SdkDir;
using testing::TempDir;
using testing::WaitUntil;

constexpr char kWarmPython[] = "/usr/bin/python3";

JobWarmPoolsOptions PoolOptions(const TempDir& dir) {
  JobWarmPoolsOptions o;
  o.sdk_dir = SdkDir();
  o.log_dir = dir.path() + "/warm";
  return o;
}

// A job's worker running `source`, attempt `attempt`, with the job's env MODE=`mode`; the
// module envmod (in dir) is what the job preloads.
LaunchSpec JobWorker(const TempDir& dir, int attempt, const std::string& mode,
                     const std::string& source) {
  const std::string path = dir.path() + "/job.py";
  if (!std::filesystem::exists(path)) AppendFile(path, source);
  LaunchSpec spec;
  spec.command = {kWarmPython, path};
  spec.env = {{"TESSERA_WARM_PRELOAD", "envmod"},
              {"PYTHONPATH", dir.path()},
              {"MODE", mode},
              {"TESSERA_ATTEMPT", std::to_string(attempt)},
              {"RANK", "1"},
              {"MASTER_PORT", std::to_string(20000 + attempt)}};
  spec.log_path = dir.path() + "/logs/" + std::to_string(attempt) + ".log";
  return spec;
}

std::shared_ptr<WorkerProcess> Launch(JobWarmPools& pools, const LaunchSpec& spec) {
  auto p = pools.TryLaunch(spec, {});
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? *p : nullptr;
}

TEST(JobWarmPoolsTest, TheNextAttemptOfAJobFindsItsModulesImportedInTheJobsEnvironment) {
  TempDir dir;
  AppendFile(dir.path() + "/envmod.py", "import os\nMODE_AT_IMPORT = os.environ.get('MODE')\n");
  const std::string source =
      "import envmod, os, sys\n"
      "print(envmod.MODE_AT_IMPORT, os.environ['TESSERA_ATTEMPT'], os.environ['MASTER_PORT'],"
      " 'envmod' in sys.modules)\n";
  JobWarmPools pools(PoolOptions(dir), LauncherOptions{});
  // Attempt 0: no pool yet, so cold (null), and the pool is created.
  EXPECT_EQ(Launch(pools, JobWorker(dir, 0, "fast", source)), nullptr);
  EXPECT_EQ(pools.size(), 1u);
  // Attempt 1: a ready process (poll: it imports first), with the job's values.
  ASSERT_TRUE(WaitUntil([&] { return pools.ready() == 1; }, 30s))
      << ReadFile(dir.path() + "/warm/0.log");
  std::shared_ptr<WorkerProcess> warm = Launch(pools, JobWorker(dir, 1, "fast", source));
  ASSERT_NE(warm, nullptr);
  ASSERT_TRUE(WaitUntil([&] { return warm->exit_info().has_value(); }, 30s));
  EXPECT_EQ(warm->exit_info()->exit_code, 0);
  EXPECT_EQ(ReadFile(dir.path() + "/logs/1.log"), "fast 1 20001 True\n");
}

TEST(JobWarmPoolsTest, AVariableReadAtImportThatTheAttemptChangesMakesTheStartCold) {
  TempDir dir;
  // MASTER_PORT changes with every attempt: the pool's process starts without it.
  AppendFile(dir.path() + "/envmod.py", "import os\nPORT = os.environ.get('MASTER_PORT')\n");
  std::mutex mu;  // the log is called from the pool's thread and from TryLaunch's
  std::vector<std::string> events;
  JobWarmPools pools(PoolOptions(dir), LauncherOptions{},
                     [&](const std::string& event, const std::string&) {
                       std::lock_guard<std::mutex> lock(mu);
                       events.push_back(event);
                     });
  EXPECT_EQ(Launch(pools, JobWorker(dir, 0, "a", "print(1)\n")), nullptr);
  ASSERT_TRUE(WaitUntil([&] { return pools.ready() == 1; }, 30s));
  // Ready, but it read MASTER_PORT (unset) at import and attempt 1 sets it: refused, cold.
  EXPECT_EQ(Launch(pools, JobWorker(dir, 1, "a", "print(1)\n")), nullptr);
  EXPECT_EQ(pools.ready(), 0);
  pools.Shutdown();
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_NE(std::find(events.begin(), events.end(), "warm.handoff_refused"), events.end());
}

// A Service's groups (spec.warmStart): each process has its own PORT, replica and TLS files,
// so a recreated or scaled-up group differs from the one that created the pool in those only.
TEST(JobWarmPoolsTest, AServiceGroupOnAnotherPortAndReplicaUsesTheSamePool) {
  TempDir dir;
  AppendFile(dir.path() + "/envmod.py", "X = 1\n");
  const std::string source =
      "import os, sys\n"
      "print(os.environ['PORT'], os.environ['TESSERA_REPLICA'], 'envmod' in sys.modules)\n";
  auto group = [&](int replica, int port) {
    LaunchSpec spec = JobWorker(dir, 0, "serve", source);
    spec.env["PORT"] = std::to_string(port);
    spec.env["TESSERA_REPLICA"] = std::to_string(replica);
    spec.env["TESSERA_TLS_CERT"] = dir.path() + "/" + std::to_string(replica) + ".crt";
    spec.log_path = dir.path() + "/logs/replica-" + std::to_string(replica) + ".log";
    return spec;
  };
  JobWarmPools pools(PoolOptions(dir), LauncherOptions{});
  EXPECT_EQ(Launch(pools, group(0, 20100)), nullptr);  // the first group: cold, pool created
  ASSERT_TRUE(WaitUntil([&] { return pools.ready() == 1; }, 30s))
      << ReadFile(dir.path() + "/warm/0.log");
  std::shared_ptr<WorkerProcess> warm = Launch(pools, group(1, 20217));
  ASSERT_NE(warm, nullptr);
  EXPECT_EQ(pools.size(), 1u);
  ASSERT_TRUE(WaitUntil([&] { return warm->exit_info().has_value(); }, 30s));
  EXPECT_EQ(warm->exit_info()->exit_code, 0);
  EXPECT_EQ(ReadFile(dir.path() + "/logs/replica-1.log"), "20217 1 True\n");
}

TEST(JobWarmPoolsTest, AnotherJobEnvironmentIsAnotherPool) {
  TempDir dir;
  AppendFile(dir.path() + "/envmod.py", "X = 1\n");
  JobWarmPools pools(PoolOptions(dir), LauncherOptions{});
  EXPECT_EQ(Launch(pools, JobWorker(dir, 0, "a", "print(1)\n")), nullptr);
  EXPECT_EQ(Launch(pools, JobWorker(dir, 0, "b", "print(1)\n")), nullptr);
  EXPECT_EQ(pools.size(), 2u);
  EXPECT_EQ(Launch(pools, JobWorker(dir, 0, "c", "print(1)\n")), nullptr);
  EXPECT_EQ(pools.size(), 2u);  // at most max_pools: the least recently used one went
}

TEST(JobWarmPoolsTest, OnlyTheJobsOwnVariablesShapeThePool) {
  const auto env = JobWarmPools::JobEnvironment({{"RANK", "3"},
                                                 {"WORLD_SIZE", "4"},
                                                 {"MASTER_PORT", "1"},
                                                 {"MASTER_ADDR", "h"},
                                                 {"LOCAL_RANK", "0"},
                                                 {"TESSERA_ATTEMPT", "2"},
                                                 {"TPU_WORKER_ID", "3"},
                                                 {"MEGASCALE_SLICE_ID", "0"},
                                                 {"JAX_PROCESS_ID", "3"},
                                                 {"PORT", "20417"},
                                                 {"OMP_NUM_THREADS", "1"},
                                                 {"PYTHONPATH", "/p"}});
  EXPECT_EQ(env,
            (std::map<std::string, std::string>{{"OMP_NUM_THREADS", "1"}, {"PYTHONPATH", "/p"}}));
  EXPECT_EQ(*JobWarmPools::ParsePreload("torch,,numpy.linalg"),
            (std::vector<std::string>{"torch", "numpy.linalg"}));
  EXPECT_FALSE(JobWarmPools::ParsePreload("torch;rm").ok());
}

TEST(JobWarmPoolsTest, ASpecWithoutPreloadOrWithoutSdkIsLeftToTheColdLauncher) {
  TempDir dir;
  JobWarmPools pools(PoolOptions(dir), LauncherOptions{});
  LaunchSpec spec;
  spec.command = {kWarmPython, "x.py"};
  spec.log_path = dir.path() + "/x.log";
  EXPECT_EQ(Launch(pools, spec), nullptr);
  EXPECT_EQ(pools.size(), 0u);
  JobWarmPools none(JobWarmPoolsOptions{}, LauncherOptions{});
  spec.env["TESSERA_WARM_PRELOAD"] = "colorsys";
  EXPECT_EQ(Launch(none, spec), nullptr);
  EXPECT_EQ(none.size(), 0u);
}

}  // namespace
}  // namespace tessera::agent

#include "agent/job_warm_pools.h"

#include <cctype>
#include <sstream>

namespace tessera::agent {
namespace {

bool PerAttempt(const std::string& name) {
  static const char* const kPrefixes[] = {"TESSERA_", "TPU_", "MEGASCALE_", "JAX_"};
  for (const char* p : kPrefixes)
    if (name.rfind(p, 0) == 0) return true;
  return name == "RANK" || name == "WORLD_SIZE" || name == "LOCAL_RANK" || name == "MASTER_ADDR" ||
         name == "MASTER_PORT" || name == "PORT";  // PORT: a Service process's own port
}

}  // namespace

JobWarmPools::JobWarmPools(JobWarmPoolsOptions options, LauncherOptions launcher, WarmPoolLog log)
    : options_(std::move(options)), launcher_(std::move(launcher)), log_(std::move(log)) {}

JobWarmPools::~JobWarmPools() { Shutdown(); }

std::map<std::string, std::string> JobWarmPools::JobEnvironment(
    const std::map<std::string, std::string>& env) {
  std::map<std::string, std::string> out;
  for (const auto& [name, value] : env)
    if (!PerAttempt(name)) out[name] = value;
  return out;
}

Result<std::vector<std::string>> JobWarmPools::ParsePreload(const std::string& value) {
  std::vector<std::string> modules;
  std::stringstream in(value);
  for (std::string module; std::getline(in, module, ',');) {
    if (module.empty()) continue;
    for (char c : module)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.')
        return InvalidArgument(std::string(kWarmPreloadVar) + ": '" + module +
                               "' is not a module name");
    modules.push_back(module);
  }
  return modules;
}

Result<std::shared_ptr<WorkerProcess>> JobWarmPools::TryLaunch(
    const LaunchSpec& spec, WorkerProcess::ExitCallback on_exit) {
  auto var = spec.env.find(kWarmPreloadVar);
  if (options_.sdk_dir.empty() || var == spec.env.end() || spec.command.empty())
    return std::shared_ptr<WorkerProcess>();
  auto modules = ParsePreload(var->second);
  if (!modules.ok() || modules->empty()) return std::shared_ptr<WorkerProcess>();
  const std::map<std::string, std::string> job_env = JobEnvironment(spec.env);
  std::string key = spec.command[0] + '\0' + var->second;
  for (const auto& [name, value] : job_env) key += '\0' + name + '=' + value;
  const auto now = std::chrono::steady_clock::now();
  auto it = pools_.find(key);
  if (it == pools_.end()) {
    while (!pools_.empty() && static_cast<int>(pools_.size()) >= options_.max_pools) {
      auto oldest = pools_.begin();
      for (auto p = pools_.begin(); p != pools_.end(); ++p)
        if (p->second.last_used < oldest->second.last_used) oldest = p;
      oldest->second.pool->Shutdown();
      pools_.erase(oldest);
    }
    WarmPoolOptions warm;
    warm.python = spec.command[0];
    warm.preload = *modules;
    warm.size = 1;
    warm.sdk_dir = options_.sdk_dir;
    warm.log_path = options_.log_dir + "/" + std::to_string(created_++) + ".log";
    warm.refill_delay = options_.refill_delay;
    warm.env = job_env;
    Entry entry{std::make_unique<WarmPool>(std::move(warm), launcher_, log_), now};
    if (Status s = entry.pool->Start(); !s.ok()) {
      if (log_) log_("warm.job_pool_failed", "error=\"" + s.message() + "\"");
      return std::shared_ptr<WorkerProcess>();  // not an interpreter, say: start it cold
    }
    if (log_) log_("warm.job_pool_started", "preload=" + var->second);
    pools_.emplace(key, std::move(entry));
    return std::shared_ptr<WorkerProcess>();  // nothing ready yet: this start is cold
  }
  it->second.last_used = now;
  return it->second.pool->TryLaunch(spec, std::move(on_exit));
}

void JobWarmPools::Prune() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = pools_.begin(); it != pools_.end();) {
    if (now - it->second.last_used > options_.idle_timeout) {
      it->second.pool->Shutdown();
      it = pools_.erase(it);
    } else {
      ++it;
    }
  }
}

int JobWarmPools::ready() const {
  int n = 0;
  for (const auto& [key, entry] : pools_) n += entry.pool->ready();
  return n;
}

void JobWarmPools::Shutdown() {
  for (auto& [key, entry] : pools_) entry.pool->Shutdown();
  pools_.clear();
}

}  // namespace tessera::agent

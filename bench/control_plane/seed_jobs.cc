#include "control_plane/seed_jobs.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <utility>
#include <vector>

#include "codec/resource_json.h"
#include "common/clock.h"
#include "controller/controller.h"
#include "protocol/credential.h"
#include "protocol/wire.h"
#include "store/memory_store.h"

namespace tessera::bench {
namespace {

using Json = nlohmann::json;

// Template names: unique tokens, so that every occurrence in a document is the job's name.
constexpr char kDoneTemplate[] = "zzseeddonetemplatezz";
constexpr char kPendingTemplate[] = "zzseedpendtemplatezz";
constexpr char kBlocker[] = "zzseedblockerzz";

Json TemplateJob(const std::string& name, const std::string& topology) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}, {"labels", {{"team", "bench"}}}}},
          {"spec",
           {{"accelerator", "v6e"},
            {"topology", topology},
            {"slices", 1},
            {"template",
             {{"command", {"python3", "train.py", "--steps", "1000"}},
              {"env", {{"MODEL", "llama-8b"}}}}}}}};
}

Status Fail(const std::string& step, const Status& s) {
  return Status(s.code(), "seed templates: " + step + ": " + s.message());
}

// Every string holding `from` (keys too) gets `to` instead; every number under a "uid" key equal
// to `from_uid` becomes `to_uid`.
Json Rename(const Json& j, const std::string& from, const std::string& to, uint64_t from_uid,
            uint64_t to_uid) {
  auto replace = [&](std::string s) {
    for (size_t at = 0; (at = s.find(from, at)) != std::string::npos; at += to.size())
      s.replace(at, from.size(), to);
    return s;
  };
  if (j.is_string()) return replace(j.get<std::string>());
  if (j.is_array()) {
    Json out = Json::array();
    for (const Json& x : j) out.push_back(Rename(x, from, to, from_uid, to_uid));
    return out;
  }
  if (j.is_object()) {
    Json out = Json::object();
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "uid" && it->is_number_unsigned() && it->get<uint64_t>() == from_uid) {
        out[replace(it.key())] = to_uid;
      } else {
        out[replace(it.key())] = Rename(*it, from, to, from_uid, to_uid);
      }
    }
    return out;
  }
  return j;
}

}  // namespace

Result<SeedTemplates> MakeSeedTemplates() {
  // Timestamps of a day ago, so that the seeded jobs look like ones that ran yesterday.
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  FakeClock clock(now_ms - 86'400'000);
  auto memory = store::MemoryStore::Open();
  if (!memory.ok()) return Fail("memory store", memory.status());
  controller::Controller c(**memory, clock, controller::ControllerOptions{});
  TESSERA_RETURN_IF_ERROR(c.Load());
  // One 4x4 v6e slice of 4 hosts, as tessera_loadgen registers them, and one 8x8 slice of 16
  // hosts that a blocker job holds, so that an 8x8 job waits for capacity (Pending): the head
  // refuses at creation a job no slice of the cluster could ever take, not one it loads.
  std::vector<std::string> hosts;
  auto add_host = [&](const std::string& name, const std::string& slice,
                      const std::string& topology, int worker) -> Status {
    hosts.push_back(name);
    const Json reg = {{"name", name},
                      {"generation", "v6e"},
                      {"chips", 4},
                      {"address", "127.0.0.1"},
                      {"agentPort", 9000},
                      {"credential", protocol::Sha256Hex("seed credential " + name)},
                      {"slice", {{"name", slice}, {"topology", topology}, {"worker", worker}}}};
    auto parsed = protocol::ParseRegistration(reg.dump());
    if (!parsed.ok()) return Fail("registration", parsed.status());
    auto registered = c.RegisterHost(*parsed);
    if (!registered.ok()) return Fail("register " + name, registered.status());
    return Status::Ok();
  };
  for (int i = 0; i < 4; ++i)
    TESSERA_RETURN_IF_ERROR(add_host("seedhost-" + std::to_string(i), "seedslice", "4x4", i));
  for (int i = 0; i < 16; ++i)
    TESSERA_RETURN_IF_ERROR(add_host("seedbig-" + std::to_string(i), "seedbig", "8x8", i));
  auto blocker = c.CreateJob(TemplateJob(kBlocker, "8x8"));
  if (!blocker.ok()) return Fail("create blocker", blocker.status());
  TESSERA_RETURN_IF_ERROR(c.Tick());
  auto done = c.CreateJob(TemplateJob(kDoneTemplate, "4x4"));
  if (!done.ok()) return Fail("create", done.status());
  // Every host heartbeats each round, as agents do. The template's workers start, run for a
  // minute and exit 0; the blocker's keep running.
  std::string phase;
  for (int round = 0; round < 20 && phase != "Succeeded"; ++round) {
    clock.AdvanceMs(round == 2 ? 60'000 : 1000);
    for (const std::string& host : hosts) {
      auto a = c.Assignments(host);
      if (!a.ok()) return Fail("assignments", a.status());
      Json workers = Json::array();
      for (const Json& x : (*a)["assignments"]) {
        Json w = {{"job", x["job"]},   {"uid", x["uid"]}, {"attempt", x["attempt"]},
                  {"rank", x["rank"]}, {"pid", 4242},     {"startedAtMs", clock.NowMs()},
                  {"state", "Running"}};
        if (round >= 2 && x["job"] == kDoneTemplate) {
          w["state"] = "Exited";
          w["exitCode"] = 0;
          w["signal"] = 0;
          w["finishedAtMs"] = clock.NowMs();
        }
        workers.push_back(w);
      }
      auto beat = protocol::ParseHeartbeat(
          Json{{"workers", workers}, {"revision", (*a)["revision"]}}.dump());
      if (!beat.ok()) return Fail("heartbeat", beat.status());
      auto answered = c.Heartbeat(host, *beat);
      if (!answered.ok()) return Fail("heartbeat " + host, answered.status());
    }
    TESSERA_RETURN_IF_ERROR(c.Tick());
    auto job = c.GetJob(kDoneTemplate);
    if (!job.ok()) return Fail("get", job.status());
    phase = (*job)["status"].value("phase", "");
  }
  if (phase != "Succeeded")
    return Internal("seed templates: the template job did not succeed (phase " + phase + ")");
  auto pend = c.CreateJob(TemplateJob(kPendingTemplate, "8x8"));
  if (!pend.ok()) return Fail("create pending", pend.status());
  TESSERA_RETURN_IF_ERROR(c.Tick());
  auto pending_job = c.GetJob(kPendingTemplate);
  if (!pending_job.ok()) return Fail("get pending", pending_job.status());
  if (const std::string p = (*pending_job)["status"].value("phase", ""); p != "Pending")
    return Internal("seed templates: the pending template job is " + p + ", not Pending");

  SeedTemplates t;
  auto jobs = (*memory)->List(codec::kTrainJobKind);
  if (!jobs.ok()) return Fail("list", jobs.status());
  for (const auto& obj : *jobs) {
    const Json doc = Json::parse(obj.body, nullptr, false);
    const uint64_t uid = doc.is_object() ? doc["metadata"].value("uid", uint64_t{0}) : 0;
    if (obj.name.find(kDoneTemplate) != std::string::npos) {
      t.succeeded = obj.body, t.succeeded_name = obj.name, t.succeeded_uid = uid;
    } else if (obj.name.find(kPendingTemplate) != std::string::npos) {
      t.pending = obj.body, t.pending_name = obj.name, t.pending_uid = uid;
    }
  }
  if (t.succeeded.empty() || t.pending.empty() || t.succeeded_uid == 0 || t.pending_uid == 0)
    return Internal("seed templates: the two template jobs are not in the store with their uids");
  auto events = (*memory)->List(codec::kEventKind);
  if (!events.ok()) return Fail("events", events.status());
  for (const auto& obj : *events)  // evt-<10 digits>: in order of name is oldest first
    if (obj.body.find(kDoneTemplate) != std::string::npos) t.events.push_back(obj.body);
  return t;
}

Result<SeedReport> SeedJobs(store::Store& target, const SeedOptions& o) {
  if (o.jobs < 1) return InvalidArgument("--jobs: at least 1");
  if (o.pending < 0 || o.pending > o.jobs)
    return InvalidArgument("--pending: between 0 and --jobs (" + std::to_string(o.jobs) + ")");
  auto t = MakeSeedTemplates();
  if (!t.ok()) return t.status();
  const Json done = Json::parse(t->succeeded), pending = Json::parse(t->pending);
  std::vector<Json> events;
  for (const std::string& e : t->events) events.push_back(Json::parse(e));

  SeedReport report;
  // Jobs 1..N get uids 1..N; the pending ones are spread evenly among them (every k-th).
  const int64_t every = o.pending > 0 ? o.jobs / o.pending : 0;
  auto name_of = [&](int64_t i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%08lld", static_cast<long long>(i));
    return o.name_prefix + buf;
  };
  auto is_pending = [&](int64_t i) {
    return every > 0 && i % every == 0 && i / every <= o.pending;
  };
  store::WriteBatch batch;
  size_t bytes = 0;
  int64_t written = 0;
  auto flush = [&]() -> Status {
    if (batch.empty()) return Status::Ok();
    auto committed = target.Commit(batch);
    if (!committed.ok())
      return Status(committed.status().code(), "seed: committing a batch of " +
                                                   std::to_string(batch.size()) +
                                                   " objects after " + std::to_string(written) +
                                                   " jobs: " + committed.status().message());
    ++report.commits;
    batch = store::WriteBatch();
    bytes = 0;
    if (o.on_batch) o.on_batch(report.jobs);
    return Status::Ok();
  };
  auto add = [&](std::string_view kind, const std::string& name, std::string body) -> Status {
    if (!batch.empty() &&
        (bytes + body.size() > o.batch_bytes || batch.size() + 1 > o.batch_objects))
      TESSERA_RETURN_IF_ERROR(flush());
    bytes += body.size();
    batch.Create(kind, name, body);
    return Status::Ok();
  };
  for (int64_t i = 1; i <= o.jobs; ++i) {
    const bool p = is_pending(i);
    const std::string name = name_of(i);
    const Json doc = p ? Rename(pending, kPendingTemplate, name, t->pending_uid, uint64_t(i))
                       : Rename(done, kDoneTemplate, name, t->succeeded_uid, uint64_t(i));
    const std::string key = (p ? Rename(Json(t->pending_name), kPendingTemplate, name, 0, 0)
                               : Rename(Json(t->succeeded_name), kDoneTemplate, name, 0, 0))
                                .get<std::string>();
    std::string body = doc.dump();
    report.body_bytes += static_cast<int64_t>(body.size());
    TESSERA_RETURN_IF_ERROR(add(codec::kTrainJobKind, key, std::move(body)));
    ++report.jobs;
    ++(p ? report.pending : report.succeeded);
    written = report.jobs;
  }
  // The newest finished jobs' events, up to the head's limit, oldest first, named in order.
  const int64_t per_job = static_cast<int64_t>(events.size());
  if (per_job > 0 && o.max_events > 0) {
    std::vector<int64_t> with_events;  // newest first
    for (int64_t i = o.jobs; i >= 1 && static_cast<int64_t>(with_events.size()) * per_job <
                                           static_cast<int64_t>(o.max_events);
         --i)
      if (!is_pending(i)) with_events.push_back(i);
    int64_t skip = static_cast<int64_t>(with_events.size()) * per_job -
                   std::min<int64_t>(static_cast<int64_t>(o.max_events),
                                     static_cast<int64_t>(with_events.size()) * per_job);
    uint64_t n = 1;
    for (auto i = with_events.rbegin(); i != with_events.rend(); ++i) {
      for (const Json& e : events) {
        if (skip > 0) {
          --skip;
          continue;
        }
        Json doc = Rename(e, kDoneTemplate, name_of(*i), 0, 0);
        char evt[32];
        std::snprintf(evt, sizeof evt, "evt-%010llu", static_cast<unsigned long long>(n++));
        doc["metadata"]["name"] = evt;
        TESSERA_RETURN_IF_ERROR(add(codec::kEventKind, evt, doc.dump()));
        ++report.events;
      }
    }
  }
  report.next_uid = static_cast<uint64_t>(o.jobs) + 1;
  TESSERA_RETURN_IF_ERROR(flush());
  store::WriteBatch counter;
  counter.Put(controller::kUidCounterKind, controller::kUidCounterName,
              Json{{"next", report.next_uid}}.dump());
  auto committed = target.Commit(counter);
  if (!committed.ok()) return committed.status();
  ++report.commits;
  report.revision = target.Revision();
  return report;
}

}  // namespace tessera::bench

// Test helpers shared by the controller's tests: job documents, result unwrapping, and a
// fixture with a FakeClock, a MemoryStore (or a CountingStore over one) and two v6e 4x4 slices
// of hosts on demand.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <string>

#include "controller/controller.h"
#include "protocol/credential.h"
#include "store/counting_store.h"
#include "store/memory_store.h"

namespace tessera::controller {

inline Json JobDoc(const std::string& name, int slices, const std::string& topology = "4x4") {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accelerator", "v6e"},
            {"topology", topology},
            {"slices", slices},
            {"template", {{"command", {"python3", "train.py"}}, {"env", {{"STEPS", "5"}}}}}}}};
}

inline Json LocalQueueDoc(const std::string& name, const std::string& cluster_queue) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "LocalQueue"},
          {"metadata", {{"name", name}}},
          {"spec", {{"clusterQueue", cluster_queue}}}};
}

inline Json PriorityClassDoc(const std::string& name, int value) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "PriorityClass"},
          {"metadata", {{"name", name}}},
          {"value", value}};
}

template <typename T>
const T& Ok(const Result<T>& r) {
  if (!r.ok()) {
    ADD_FAILURE() << r.status().ToString();
    static T empty{};
    return empty;
  }
  return *r;
}

// The credential the agent of host `name` registers with in these tests (a fixed one per
// name, as an agent keeps its own across restarts).
inline std::string CredentialOf(std::string name) {
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return protocol::Sha256Hex("test credential of " + name);
}

// The head's path for an agent's messages: the wire decoder (protocol/wire.h), then the
// controller; a message the decoder refuses is its InvalidArgument. A body without a
// "credential" gets CredentialOf its name.
inline Result<Json> Register(Controller& c, Json body) {
  if (body.is_object() && !body.contains("credential") && body.contains("name") &&
      body["name"].is_string())
    body["credential"] = CredentialOf(body["name"].get<std::string>());
  auto r = protocol::ParseRegistration(body.dump());
  if (!r.ok()) return r.status();
  return c.RegisterHost(*r);
}
// The heartbeat's worker reports for every assignment in `assignments` (Controller::
// Assignments' answer), all in `state`.
inline Json WorkerReports(const Json& assignments, const std::string& state, int exit_code = 0,
                          int64_t started_ms = 0) {
  Json workers = Json::array();
  for (const Json& x : assignments["assignments"])
    workers.push_back({{"job", x["job"]},
                       {"uid", x["uid"]},
                       {"attempt", x["attempt"]},
                       {"rank", x["rank"]},
                       {"pid", 100},
                       {"startedAtMs", started_ms},
                       {"state", state},
                       {"exitCode", exit_code},
                       {"signal", 0},
                       {"finishedAtMs", 0}});
  return workers;
}
// A progress line of `type` at `step`, written at `time_ms`, for every assignment in
// `assignments` (Controller::Assignments' answer).
inline Json ProgressReports(const Json& assignments, int64_t step, int64_t time_ms,
                            const std::string& type = "progress") {
  Json progress = Json::array();
  for (const Json& x : assignments["assignments"])
    progress.push_back({{"job", x["job"]},
                        {"uid", x["uid"]},
                        {"attempt", x["attempt"]},
                        {"rank", x["rank"]},
                        {"type", type},
                        {"step", step},
                        {"timeMs", time_ms}});
  return progress;
}
// Like the head: a heartbeat that asks for a pass (the pass listener) gets one after it, not
// inside it, so its reply is the snapshot from before the pass.
inline Result<Json> Beat(Controller& c, const std::string& host, const Json& body) {
  auto b = protocol::ParseHeartbeat(body.dump());
  if (!b.ok()) return b.status();
  bool pass_wanted = false;
  c.SetPassListener([&pass_wanted] { pass_wanted = true; });
  Result<Json> reply = c.Heartbeat(host, *b);
  c.SetPassListener(nullptr);
  if (pass_wanted) {
    const Status pass = c.RunPass();
    EXPECT_TRUE(pass.ok()) << "the pass after a heartbeat of " << host << ": " << pass.ToString();
  }
  return reply;
}

// The refusal of a call that must fail (a failure of the test when it succeeded). Tests check
// its code() and the field it names (StatusField: "spec.topology" of "spec.topology: ...").
template <typename T>
Status Err(const Result<T>& r) {
  EXPECT_FALSE(r.ok()) << "the call succeeded where it must be refused";
  return r.ok() ? Status(StatusCode::kInternal, "the call succeeded") : r.status();
}

// The field a refusal names, as the API reports it in `field` (api/status_http.h): the
// message's prefix before the first ':' when it has no space ("spec.topology: ...").
inline std::string FieldOf(const Status& status) {
  const std::string& m = status.message();
  const size_t colon = m.find(':');
  const std::string field = colon == std::string::npos ? "" : m.substr(0, colon);
  return field.find(' ') == std::string::npos ? field : "";
}

inline std::unique_ptr<store::Store> OpenMemoryStore() {
  auto opened = store::MemoryStore::Open();
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

// The registration of worker `w` of the v6e 4x4 slice "slice-S" (4 hosts of 4 chips), host
// "sS-wW".
inline Json SliceHostDoc(int s, int w) {
  return {{"name", "s" + std::to_string(s) + "-w" + std::to_string(w)},
          {"generation", "v6e"},
          {"chips", 4},
          {"address", "127.0.0.1"},
          {"agentPort", 9000 + s * 4 + w},
          {"slice", {{"name", "slice-" + std::to_string(s)}, {"topology", "4x4"}, {"worker", w}}}};
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store_ = OpenMemoryStore();
    ASSERT_NE(store_, nullptr);
    Start();
  }
  void Start() {
    c_ = std::make_unique<Controller>(*store_, clock_, ControllerOptions{});
    ASSERT_TRUE(c_->Load().ok());
  }
  static std::string HostName(int slice, int w) {
    return "s" + std::to_string(slice) + "-w" + std::to_string(w);
  }
  void RegisterTwoSlices() {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) Ok(Register(*c_, SliceHostDoc(s, w)));
  }
  // Every host heartbeats the given state for each of its assigned workers.
  void HeartbeatAll(const std::string& state, int exit_code = 0,
                    const std::string& only_host = "") {
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        Json a = Ok(c_->Assignments(h));
        const bool chosen = only_host.empty() || only_host == h;
        Json workers = WorkerReports(a, chosen ? state : "Running", chosen ? exit_code : 0);
        Ok(Beat(*c_, h, {{"workers", workers}, {"revision", a["revision"]}}));
      }
  }
  // How many hosts are Lost.
  int LostHosts() const {
    int lost = 0;
    const Json hosts = c_->ListHosts();
    for (const Json& h : hosts["items"]) lost += h["status"]["state"] == "Lost";
    return lost;
  }
  // The clock moves `ms`, every host but `silent` heartbeats its assigned workers Running, and
  // a tick runs (which must succeed).
  void AdvanceBeatAllButAndTick(int64_t ms, const std::string& silent) {
    clock_.AdvanceMs(ms);
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w)
        if (HostName(s, w) != silent)
          Ok(Beat(*c_, HostName(s, w),
                  {{"workers", WorkerReports(Ok(c_->Assignments(HostName(s, w))), "Running")}}));
    ASSERT_TRUE(c_->Tick().ok());
  }
  // The job's metadata.uid (0 when there is no such job).
  uint64_t Uid(const std::string& job) {
    auto r = c_->GetJob(job);
    if (!r.ok()) return 0;
    return (*r)["metadata"]["uid"].get<uint64_t>();
  }
  std::string Phase(const std::string& job) {
    auto r = c_->GetJob(job);
    if (!r.ok()) return "Gone";
    return (*r)["status"]["phase"];
  }

  FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
};

// The fixture over a store::CountingStore (a MemoryStore's commits and writes counted).
class CountingStoreTest : public ControllerTest {
 protected:
  void SetUp() override {
    auto counting = std::make_unique<store::CountingStore>(OpenMemoryStore());
    counting_ = counting.get();
    store_ = std::move(counting);
    Start();
  }

  store::CountingStore* counting_ = nullptr;
};

}  // namespace tessera::controller

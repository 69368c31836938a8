// Test helpers shared by the controller's tests: job documents, result unwrapping, and a
// fixture with a FakeClock, a MemoryStore and two v6e 4x4 slices of hosts on demand.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <memory>
#include <string>

#include "controller/controller.h"
#include "protocol/credential.h"
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
const T& Ok(const ApiResult<T>& r) {
  if (std::holds_alternative<ApiError>(r)) {
    ADD_FAILURE() << std::get<ApiError>(r).message;
    static T empty{};
    return empty;
  }
  return std::get<T>(r);
}

// The credential the agent of host `name` registers with in these tests (a fixed one per
// name, as an agent keeps its own across restarts).
inline std::string CredentialOf(std::string name) {
  for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return protocol::Sha256Hex("test credential of " + name);
}

// The head's path for an agent's messages: the wire decoder (protocol/wire.h), then the
// controller; a message the decoder refuses is the 422 the head answers. A body without a
// "credential" gets CredentialOf its name.
inline ApiResult<Json> Register(Controller& c, Json body) {
  if (body.is_object() && !body.contains("credential") && body.contains("name") &&
      body["name"].is_string())
    body["credential"] = CredentialOf(body["name"].get<std::string>());
  auto r = protocol::ParseRegistration(body.dump());
  if (!r.ok()) return ToApiError(r.status());
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
// Like the head: a heartbeat that asks for a pass (the pass listener) gets one after it, not
// inside it, so its reply is the snapshot from before the pass.
inline ApiResult<Json> Beat(Controller& c, const std::string& host, const Json& body) {
  auto b = protocol::ParseHeartbeat(body.dump());
  if (!b.ok()) return ToApiError(b.status());
  bool pass_wanted = false;
  c.SetPassListener([&pass_wanted] { pass_wanted = true; });
  ApiResult<Json> reply = c.Heartbeat(host, *b);
  c.SetPassListener(nullptr);
  if (pass_wanted) {
    const Status pass = c.RunPass();
    EXPECT_TRUE(pass.ok()) << "the pass after a heartbeat of " << host << ": " << pass.ToString();
  }
  return reply;
}

template <typename T>
ApiError Err(const ApiResult<T>& r) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(r));
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

inline std::unique_ptr<store::Store> OpenMemoryStore() {
  auto opened = store::MemoryStore::Open();
  EXPECT_TRUE(opened.ok()) << opened.status().ToString();
  return opened.ok() ? std::move(opened).value() : nullptr;
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
      for (int w = 0; w < 4; ++w)
        Ok(Register(
            *c_, {{"name", HostName(s, w)},
                  {"generation", "v6e"},
                  {"chips", 4},
                  {"address", "127.0.0.1"},
                  {"agentPort", 9000 + s * 4 + w},
                  {"slice",
                   {{"name", "slice-" + std::to_string(s)}, {"topology", "4x4"}, {"worker", w}}}}));
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
  // The job's metadata.uid (0 when there is no such job).
  uint64_t Uid(const std::string& job) {
    auto r = c_->GetJob(job);
    if (std::holds_alternative<ApiError>(r)) return 0;
    return std::get<Json>(r)["metadata"]["uid"].get<uint64_t>();
  }
  std::string Phase(const std::string& job) {
    auto r = c_->GetJob(job);
    if (std::holds_alternative<ApiError>(r)) return "Gone";
    return std::get<Json>(r)["status"]["phase"];
  }

  FakeClock clock_;
  std::unique_ptr<store::Store> store_;
  std::unique_ptr<Controller> c_;
};

}  // namespace tessera::controller

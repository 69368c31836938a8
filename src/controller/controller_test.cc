#include "controller/controller.h"

#include <gtest/gtest.h>

#include "store/memory_store.h"
#include "store/sqlite_store.h"

namespace tessera::controller {
namespace {

Json JobDoc(const std::string& name, int slices, const std::string& topology = "4x4") {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "TrainJob"},
          {"metadata", {{"name", name}}},
          {"spec",
           {{"accelerator", "v6e"},
            {"topology", topology},
            {"slices", slices},
            {"template", {{"command", {"python3", "train.py"}}, {"env", {{"STEPS", "5"}}}}}}}};
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

template <typename T>
ApiError Err(const ApiResult<T>& r) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(r));
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::MemoryStore::Open();
    ASSERT_TRUE(opened.ok());
    store_ = std::move(opened).value();
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
        Ok(c_->RegisterHost(
            {{"name", HostName(s, w)},
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
        Json workers = Json::array();
        for (const Json& x : a["assignments"])
          workers.push_back({{"job", x["job"]},
                             {"attempt", x["attempt"]},
                             {"rank", x["rank"]},
                             {"pid", 100},
                             {"state", only_host.empty() || only_host == h ? state : "Running"},
                             {"exitCode", only_host.empty() || only_host == h ? exit_code : 0}});
        Ok(c_->Heartbeat(h, {{"workers", workers}, {"revision", a["revision"]}}));
      }
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

TEST_F(ControllerTest, TwoSliceJobGetsOneWorkerPerHostWithTheFullEnvironment) {
  RegisterTwoSlices();
  Json job = Ok(c_->CreateJob(JobDoc("train", 2)));
  EXPECT_EQ(Phase("train"), "Starting");
  std::set<std::string> ranks;
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w) {
      Json a = Ok(c_->Assignments(HostName(s, w)))["assignments"];
      ASSERT_EQ(a.size(), 1u);
      const Json& env = a[0]["env"];
      EXPECT_EQ(env["TPU_WORKER_ID"], std::to_string(w));
      EXPECT_EQ(env["MEGASCALE_SLICE_ID"], std::to_string(s));
      EXPECT_EQ(env["WORLD_SIZE"], "8");
      EXPECT_EQ(env["TPU_NAME"], "slice-" + std::to_string(s));
      EXPECT_EQ(env["TPU_WORKER_HOSTNAMES"], HostName(s, 0) + "," + HostName(s, 1) + "," +
                                                 HostName(s, 2) + "," + HostName(s, 3));
      EXPECT_EQ(env["STEPS"], "5");
      ranks.insert(env["RANK"].get<std::string>());
    }
  EXPECT_EQ(ranks.size(), 8u);
  HeartbeatAll("Running");
  EXPECT_EQ(Phase("train"), "Running");
  HeartbeatAll("Exited", 0);
  EXPECT_EQ(Phase("train"), "Succeeded");
  // Agents confirmed on the same heartbeats; the chips are free again.
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
  EXPECT_TRUE(Ok(c_->Assignments(HostName(0, 0)))["assignments"].empty());
}

TEST_F(ControllerTest, AJobThatDoesNotFitNowWaitsWithTheReason) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("first", 2)));
  Ok(c_->CreateJob(JobDoc("second", 1)));
  Json second = Ok(c_->GetJob("second"));
  EXPECT_EQ(second["status"]["phase"], "Pending");
  EXPECT_EQ(second["status"]["reason"], "NoFreeSlice");
  EXPECT_NE(second["status"]["message"].get<std::string>().find("0 of 2 are free"),
            std::string::npos);
  // A shape the cluster can never hold is refused at once, naming the field.
  ApiError too_big = Err(c_->CreateJob(JobDoc("huge", 3)));
  EXPECT_EQ(too_big.http_status, 422);
  EXPECT_EQ(too_big.field, "spec.topology");
  EXPECT_EQ(Err(c_->CreateJob(JobDoc("first", 1))).http_status, 409);
  EXPECT_EQ(Err(c_->CreateJob(JobDoc("bad", 1, "4x5"))).field, "spec.topology");
}

TEST_F(ControllerTest, AFailedWorkerStopsTheWholeJobAndFreesChipsOnlyOnceConfirmed) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  // Only s1-w2 reports its exit; the others still run.
  HeartbeatAll("Exited", 3, HostName(1, 2));
  Json job = Ok(c_->GetJob("train"));
  EXPECT_EQ(job["status"]["phase"], "Failed");
  EXPECT_EQ(job["status"]["reason"], "WorkerFailed");
  EXPECT_NE(
      job["status"]["message"].get<std::string>().find("rank 6 on host s1-w2 exited with code 3"),
      std::string::npos);
  // No host is told to run the job any more, but the chips stay held until agents confirm.
  EXPECT_TRUE(Ok(c_->Assignments(HostName(0, 0)))["assignments"].empty());
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
  // The next heartbeats carry no running worker of the job: released.
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      Ok(c_->Heartbeat(HostName(s, w), {{"workers", Json::array()}, {"revision", 1000}}));
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
}

TEST_F(ControllerTest, ALostHostFailsItsJobAfterTheLease) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 1)));
  HeartbeatAll("Running");
  clock_.AdvanceMs(3000);
  for (int w = 0; w < 4; ++w)
    if (w != 1) Ok(c_->Heartbeat(HostName(0, w), {{"workers", Json::array()}}));
  for (int w = 0; w < 4; ++w) Ok(c_->Heartbeat(HostName(1, w), {{"workers", Json::array()}}));
  clock_.AdvanceMs(2500);  // s0-w1 is now 5.5 s silent; lease is 5 s
  c_->Tick();
  Json job = Ok(c_->GetJob("train"));
  EXPECT_EQ(job["status"]["reason"], "HostLost");
  Json hosts = c_->ListHosts();
  int lost = 0;
  for (const Json& h : hosts["items"]) lost += h["status"]["state"] == "Lost";
  EXPECT_EQ(lost, 1);
}

TEST_F(ControllerTest, DeleteStopsWorkersThenRemovesAndIsIdempotent) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  EXPECT_EQ(Ok(c_->DeleteJob("train"))["status"], "Terminating");
  EXPECT_EQ(Ok(c_->DeleteJob("train"))["status"], "Terminating");
  EXPECT_TRUE(Ok(c_->Assignments(HostName(1, 3)))["assignments"].empty());
  for (int s = 0; s < 2; ++s)
    for (int w = 0; w < 4; ++w)
      Ok(c_->Heartbeat(HostName(s, w), {{"workers", Json::array()}, {"revision", 1000}}));
  EXPECT_EQ(Phase("train"), "Gone");
  EXPECT_EQ(Err(c_->DeleteJob("train")).http_status, 404);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 0);
}

TEST_F(ControllerTest, ARestartedControllerKeepsJobsAndTheSameAssignments) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("train", 2)));
  HeartbeatAll("Running");
  const Json before = Ok(c_->Assignments(HostName(1, 1)))["assignments"];
  Start();  // a new controller on the same store, as after kill -9 of the head
  EXPECT_EQ(Phase("train"), "Running");
  EXPECT_EQ(Ok(c_->Assignments(HostName(1, 1)))["assignments"], before);
  EXPECT_EQ(c_->InventorySnapshot().owned_chips(), 32);
}

TEST_F(ControllerTest, RegistrationErrorsNameTheField) {
  EXPECT_EQ(Err(c_->RegisterHost({{"name", "Bad_Name"}, {"generation", "v6e"}})).field, "name");
  EXPECT_EQ(Err(c_->RegisterHost({{"name", "h"}, {"generation", "v9"}})).field, "generation");
  EXPECT_EQ(Err(c_->RegisterHost({{"name", "h"},
                                  {"generation", "v6e"},
                                  {"slice", {{"name", "s"}, {"topology", "4x4"}, {"worker", 4}}}}))
                .field,
            "slice.worker");
  RegisterTwoSlices();
  EXPECT_EQ(
      Err(c_->RegisterHost({{"name", "other"},
                            {"generation", "v6e"},
                            {"slice", {{"name", "slice-0"}, {"topology", "4x4"}, {"worker", 1}}}}))
          .http_status,
      409);
}

}  // namespace
}  // namespace tessera::controller

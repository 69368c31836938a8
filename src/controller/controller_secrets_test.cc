// Secrets in the controller (secrets.cc, docs/security.md "Secrets"): a job whose Secret or key
// is missing waits with SecretNotFound and starts once it is applied; the value reaches only the
// assignments of the hosts that run the job's workers (never the job's document, the stored job,
// the Secret's served document, a watch or an event); a Secret of another namespace does not
// count; a Secret that running workers read cannot be deleted or lose that key; Secrets survive
// a restart.
#include <gtest/gtest.h>

#include "codec/manifest.h"
#include "codec/secret_manifest.h"
#include "common/object_key.h"
#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

constexpr const char* kValue = "v4lue-only-for-workers-91c3";

Json SecretDocIn(const std::string& namespace_name, const Json& data) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "Secret"},
          {"metadata", {{"name", "db"}, {"namespace", namespace_name}}},
          {"data", data}};
}

// A one-slice job of team-a whose DB_PASSWORD is the key `key` of Secret db.
Json SecretJobDoc(const std::string& name, const std::string& key = "password") {
  Json doc = JobDoc(name, 1);
  doc["metadata"]["namespace"] = "team-a";
  doc["spec"]["template"]["env"]["DB_PASSWORD"] = {{"valueFrom", {{"secret", "db"}, {"key", key}}}};
  return doc;
}

class ControllerSecretsTest : public ControllerTest {
 protected:
  void SetUp() override {
    ControllerTest::SetUp();
    c_->SetChangeListener(
        [this](const std::string& kind, const std::string& type, const Json& object) {
          seen_ += kind + " " + type + " " + object.dump();
        });
  }
  // Every assignment's DB_PASSWORD, by host ("" where a host's assignment has none).
  std::map<std::string, std::string> PasswordByHost() {
    std::map<std::string, std::string> out;
    for (int s = 0; s < 2; ++s)
      for (int w = 0; w < 4; ++w) {
        const std::string h = HostName(s, w);
        const Json a = Ok(c_->Assignments(h));
        for (const Json& x : a["assignments"])
          if (x["env"].contains("DB_PASSWORD")) out[h] = x["env"]["DB_PASSWORD"];
      }
    return out;
  }
  std::string Reason(const std::string& job) {
    const Json j = Ok(c_->GetJob(job));
    return j["status"].value("reason", "") + ": " + j["status"].value("message", "");
  }
  // Everything but the assignments: served documents, the store's job, watches, events.
  void ExpectNowhereButAssignments(const std::string& job) {
    EXPECT_EQ(Ok(c_->GetJob(job)).dump().find(kValue), std::string::npos);
    EXPECT_EQ(c_->ListJobs().dump().find(kValue), std::string::npos);
    EXPECT_EQ(c_->ListSecrets().dump().find(kValue), std::string::npos);
    EXPECT_EQ(c_->ListEvents().dump().find(kValue), std::string::npos);
    EXPECT_EQ(seen_.find(kValue), std::string::npos);
    auto stored = store_->Get(codec::kTrainJobKind, job);
    ASSERT_TRUE(stored.ok());
    EXPECT_EQ(stored->body.find(kValue), std::string::npos);
    EXPECT_NE(stored->body.find("valueFrom"), std::string::npos) << "the reference is kept";
  }
  std::string seen_;  // every change the watch streams were given
};

TEST_F(ControllerSecretsTest, AJobWaitsForItsSecretThenOnlyItsHostsGetTheValue) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(SecretJobDoc("j")));
  const std::string job = ObjectKey("team-a", "j");
  EXPECT_EQ(Phase(job), "Pending");
  EXPECT_EQ(Reason(job).rfind("SecretNotFound: Secret db does not exist in namespace team-a", 0),
            0u)
      << Reason(job);
  EXPECT_NE(Reason(job).find("apply a Secret named db with metadata.namespace: team-a"),
            std::string::npos);

  // The same name in another namespace is not the job's.
  Ok(c_->Apply(SecretDocIn("team-b", {{"password", kValue}})));
  EXPECT_EQ(Phase(job), "Pending");
  // The job's namespace, without the key: it names the key.
  Ok(c_->Apply(SecretDocIn("team-a", {{"user", "ann"}})));
  EXPECT_EQ(Phase(job), "Pending");
  EXPECT_NE(Reason(job).find("has no key password"), std::string::npos) << Reason(job);

  // With the key it starts, and the value is in the assignments of its four hosts only.
  Ok(c_->Apply(SecretDocIn("team-a", {{"user", "ann"}, {"password", kValue}})));
  EXPECT_EQ(Phase(job), "Starting");
  const auto by_host = PasswordByHost();
  EXPECT_EQ(by_host.size(), 4u);
  for (const auto& [host, value] : by_host) EXPECT_EQ(value, kValue) << host;
  ExpectNowhereButAssignments(job);
  const Json secret = Ok(c_->GetSecret(ObjectKey("team-a", "db")));
  EXPECT_EQ(secret["data"]["password"], codec::RedactedValue(kValue));
  EXPECT_EQ(secret["metadata"]["namespace"], "team-a");
  // Its events are team-a's, named secret/db, with the keys and no value.
  int events = 0;
  const Json all_events = c_->ListEvents();
  for (const Json& e : all_events["items"])
    if (e["object"] == "secret/db" && e["metadata"]["namespace"] == "team-a") ++events;
  EXPECT_EQ(events, 2) << all_events.dump();
}

TEST_F(ControllerSecretsTest, ASecretRunningWorkersReadCannotBeDeletedOrLoseTheKey) {
  RegisterTwoSlices();
  Ok(c_->Apply(SecretDocIn("team-a", {{"password", kValue}})));
  Ok(c_->CreateJob(SecretJobDoc("j")));
  const std::string job = ObjectKey("team-a", "j");
  ASSERT_EQ(Phase(job), "Starting");
  const Status refused = Err(c_->DeleteSecret(ObjectKey("team-a", "db")));
  EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.message().find("trainjob/j (env DB_PASSWORD (key password))"),
            std::string::npos)
      << refused.message();
  const Status dropped = Err(c_->Apply(SecretDocIn("team-a", {{"other", "x"}})));
  EXPECT_EQ(dropped.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(dropped.message().rfind("data: ", 0), 0u) << dropped.message();
  EXPECT_EQ(dropped.message().find(kValue), std::string::npos);

  // A new value is accepted; the next start of the workers reads it (the assignment now).
  Ok(c_->Apply(SecretDocIn("team-a", {{"password", "second"}})));
  for (const auto& [host, value] : PasswordByHost()) EXPECT_EQ(value, "second") << host;

  // Once the job is gone the Secret may go; a job applied then waits again.
  Ok(c_->DeleteJob(job));
  HeartbeatAll("Stopped");
  ASSERT_EQ(Phase(job), "Gone");
  Ok(c_->DeleteSecret(ObjectKey("team-a", "db")));
  EXPECT_EQ(Err(c_->GetSecret(ObjectKey("team-a", "db"))).code(), StatusCode::kNotFound);
  Ok(c_->CreateJob(SecretJobDoc("k")));
  EXPECT_EQ(Phase(ObjectKey("team-a", "k")), "Pending");
}

TEST_F(ControllerSecretsTest, SecretsSurviveARestartAndStayRedacted) {
  Ok(c_->Apply(SecretDocIn("team-a", {{"password", kValue}})));
  const Json applied = Ok(c_->Apply(SecretDocIn("team-a", {{"password", kValue}, {"b", "x"}})));
  EXPECT_EQ(applied["created"], false);
  EXPECT_EQ(applied.dump().find(kValue), std::string::npos);
  Start();  // a new controller over the same store
  const Json list = c_->ListSecrets();
  ASSERT_EQ(list["items"].size(), 1u);
  EXPECT_EQ(list["items"][0]["data"]["password"], codec::RedactedValue(kValue));
  EXPECT_EQ(list.dump().find(kValue), std::string::npos);
  // The restarted head still hands the value to a job's hosts.
  RegisterTwoSlices();
  Ok(c_->CreateJob(SecretJobDoc("j")));
  EXPECT_EQ(Phase(ObjectKey("team-a", "j")), "Starting");
  EXPECT_EQ(PasswordByHost().size(), 4u);
  const auto dry = Ok(c_->DryRunApply(SecretDocIn("team-a", {{"password", "y"}})));
  EXPECT_EQ(dry["created"], false);
}

TEST_F(ControllerSecretsTest, AJobInsideASliceReservationWaitsForItsSecretToo) {
  RegisterTwoSlices();
  Ok(c_->Apply({{"apiVersion", "tessera/v1"},
                {"kind", "SliceReservation"},
                {"metadata", {{"name", "r"}, {"namespace", "team-a"}}},
                {"spec", {{"accelerator", "v6e"}, {"topology", "4x4"}, {"slices", 1}}}}));
  Json doc = SecretJobDoc("inside");
  doc["spec"]["reservation"] = "r";
  Ok(c_->CreateJob(doc));
  const std::string job = ObjectKey("team-a", "inside");
  EXPECT_EQ(Phase(job), "Pending");
  EXPECT_EQ(Reason(job).rfind("SecretNotFound: ", 0), 0u) << Reason(job);
  EXPECT_TRUE(PasswordByHost().empty());
  Ok(c_->Apply(SecretDocIn("team-a", {{"password", kValue}})));
  EXPECT_EQ(Phase(job), "Starting");
  EXPECT_EQ(PasswordByHost().size(), 4u);
}

TEST_F(ControllerSecretsTest, AServiceGroupWaitsForItsSecret) {
  RegisterTwoSlices();
  Json svc = {
      {"apiVersion", "tessera/v1"},
      {"kind", "Service"},
      {"metadata", {{"name", "llm"}, {"namespace", "team-a"}}},
      {"spec",
       {{"accelerator", "v6e"},
        {"topology", "4x4"},
        {"command", {"python3", "server.py"}},
        {"env", {{"DB_PASSWORD", {{"valueFrom", {{"secret", "db"}, {"key", "password"}}}}}}},
        {"replicas", 1}}}};
  Ok(c_->Apply(svc));
  const Json waiting = Ok(c_->GetService(ObjectKey("team-a", "llm")));
  const Json& replica = waiting["status"]["roles"][0]["replicas"][0];
  EXPECT_EQ(replica["reason"], "SecretNotFound") << replica.dump();
  EXPECT_TRUE(PasswordByHost().empty());
  Ok(c_->Apply(SecretDocIn("team-a", {{"password", kValue}})));
  const auto by_host = PasswordByHost();
  EXPECT_EQ(by_host.size(), 4u);
  for (const auto& [host, value] : by_host) EXPECT_EQ(value, kValue) << host;
  const Json running = Ok(c_->GetService(ObjectKey("team-a", "llm")));
  EXPECT_EQ(running.dump().find(kValue), std::string::npos);
  EXPECT_NE(running.dump().find("valueFrom"), std::string::npos);
  EXPECT_EQ(seen_.find(kValue), std::string::npos);
}

}  // namespace
}  // namespace tessera::controller

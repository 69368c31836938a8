// Namespaces in the controller (common/object_key.h, docs/security.md "Namespaces"): the same
// name in two namespaces is two objects under two store keys, the namespace "default" keeps the
// bare name as its key (state stored before namespaces is found where it was), and a LocalQueue
// admits only the workloads of its own namespace.
#include <gtest/gtest.h>

#include "codec/manifest.h"
#include "common/object_key.h"
#include "controller/controller_test_util.h"

namespace tessera::controller {
namespace {

Json InNamespace(Json doc, const std::string& namespace_name) {
  doc["metadata"]["namespace"] = namespace_name;
  return doc;
}

Json QueuedIn(Json doc, const std::string& namespace_name, const std::string& queue) {
  doc = InNamespace(std::move(doc), namespace_name);
  doc["metadata"]["queue"] = queue;
  return doc;
}

Json NamespacesClusterQueueDoc(const std::string& name, int64_t nominal_chips) {
  return {{"apiVersion", "tessera/v1"},
          {"kind", "ClusterQueue"},
          {"metadata", {{"name", name}}},
          {"spec", {{"quotas", {{{"generation", "v6e"}, {"nominalQuota", nominal_chips}}}}}}};
}

TEST(ObjectKeyTest, TheDefaultNamespaceKeepsTheBareNameAndOthersSplitBack) {
  EXPECT_EQ(ObjectKey("default", "a"), "a");
  EXPECT_EQ(ObjectKey("", "a"), "a");
  EXPECT_EQ(ObjectKey("team-x", "a"), "team-x.a");
  for (const char* key : {"a", "team-x.a", "x.a-b-c"}) {
    const NamespacedName parts = SplitObjectKey(key);
    EXPECT_EQ(ObjectKey(parts.namespace_name, parts.name), key);
    // Both parts are names again: the separator can never be part of one.
    EXPECT_TRUE(codec::ValidateName("namespace", parts.namespace_name).ok()) << key;
    EXPECT_TRUE(codec::ValidateName("name", parts.name).ok()) << key;
  }
  EXPECT_EQ(SplitObjectKey("a").namespace_name, "default");
  EXPECT_FALSE(codec::ValidateName("name", "x.a").ok()) << "a name holding the separator";
}

TEST_F(ControllerTest, TheSameNameInTwoNamespacesIsTwoJobsUnderTheirOwnStoreKeys) {
  RegisterTwoSlices();
  Ok(c_->CreateJob(JobDoc("a", 1)));
  Ok(c_->CreateJob(InNamespace(JobDoc("a", 1), "team-x")));
  // A second "a" in team-x is taken; one in another namespace is not.
  EXPECT_EQ(Err(c_->CreateJob(InNamespace(JobDoc("a", 1), "team-x"))).code(),
            StatusCode::kAlreadyExists);

  // The store: default's under the bare name (as before namespaces), team-x's under its key.
  EXPECT_TRUE(store_->Get(codec::kTrainJobKind, "a").ok());
  EXPECT_TRUE(store_->Get(codec::kTrainJobKind, "team-x.a").ok());

  // Documents show name and namespace apart, never the key.
  const Json x = Ok(c_->GetJob(ObjectKey("team-x", "a")));
  EXPECT_EQ(x["metadata"]["name"], "a");
  EXPECT_EQ(x["metadata"]["namespace"], "team-x");
  EXPECT_EQ(Ok(c_->GetJob("a"))["metadata"]["namespace"], "default");
  EXPECT_NE(x["metadata"]["uid"], Ok(c_->GetJob("a"))["metadata"]["uid"]);

  // Both run side by side, one slice each.
  EXPECT_EQ(Phase("a"), "Starting");
  EXPECT_EQ(Phase("team-x.a"), "Starting");

  // Each event names its object without the namespace, and carries the namespace apart.
  int in_x = 0;
  const Json events = c_->ListEvents();
  for (const Json& e : events["items"]) {
    EXPECT_EQ(e["object"].get<std::string>().find('.'), std::string::npos) << e.dump();
    if (e["metadata"]["namespace"] == "team-x") {
      EXPECT_EQ(e["object"], "trainjob/a");
      ++in_x;
    }
  }
  EXPECT_GT(in_x, 0);

  // A new controller on the same store finds both, and the events' objects again.
  Start();
  EXPECT_EQ(Ok(c_->GetJob("team-x.a"))["metadata"]["namespace"], "team-x");
  EXPECT_EQ(Ok(c_->GetJob("a"))["metadata"]["namespace"], "default");
  EXPECT_EQ(c_->ListJobs()["items"].size(), 2u);
  int reloaded_in_x = 0;
  const Json reloaded = c_->ListEvents();
  for (const Json& e : reloaded["items"])
    if (e["metadata"]["namespace"] == "team-x" && e["object"] == "trainjob/a") ++reloaded_in_x;
  EXPECT_EQ(reloaded_in_x, in_x);

  // Deleting one leaves the other.
  Ok(c_->DeleteJob("team-x.a"));
  HeartbeatAll("Running");
  EXPECT_EQ(Phase("a"), "Running");
}

TEST_F(ControllerTest, ALocalQueueAdmitsOnlyTheWorkloadsOfItsOwnNamespace) {
  RegisterTwoSlices();
  Ok(c_->Apply(NamespacesClusterQueueDoc("research", 64)));
  Ok(c_->Apply(InNamespace(LocalQueueDoc("lq", "research"), "team-y")));
  EXPECT_TRUE(store_->Get("LocalQueue", "team-y.lq").ok());

  // team-x names "lq", which exists only in team-y: it waits, and the reason names its own
  // namespace and the fix.
  Ok(c_->CreateJob(QueuedIn(JobDoc("sneaky", 1), "team-x", "lq")));
  const Json st = Ok(c_->GetJob("team-x.sneaky"))["status"];
  EXPECT_EQ(st["phase"], "Pending");
  EXPECT_EQ(st["pendingReason"], "LocalQueueNotFound");
  const std::string message = st["message"];
  EXPECT_NE(message.find("LocalQueue lq does not exist in namespace team-x"), std::string::npos)
      << message;
  EXPECT_NE(message.find("apply a LocalQueue named lq with metadata.namespace: team-x"),
            std::string::npos)
      << message;
  // Nor does default's job of that queue name get in through team-y's.
  Ok(c_->CreateJob(QueuedIn(JobDoc("plain", 1), "default", "lq")));
  EXPECT_EQ(Ok(c_->GetJob("plain"))["status"]["pendingReason"], "LocalQueueNotFound");

  // team-y's own job is admitted through it.
  Ok(c_->CreateJob(QueuedIn(JobDoc("owner", 1), "team-y", "lq")));
  EXPECT_EQ(Phase("team-y.owner"), "Starting");

  // Once team-x has a LocalQueue "lq" of its own, its job is admitted there.
  Ok(c_->Apply(InNamespace(LocalQueueDoc("lq", "research"), "team-x")));
  EXPECT_EQ(Phase("team-x.sneaky"), "Starting");
  EXPECT_EQ(Phase("plain"), "Pending");
}

TEST_F(ControllerTest, ACrossNamespaceNameOrANamespaceOnAClusterWideKindIsRefused) {
  // A name may not smuggle a namespace in.
  EXPECT_EQ(FieldOf(Err(c_->CreateJob(JobDoc("team-x.a", 1)))), "metadata.name");
  EXPECT_EQ(FieldOf(Err(c_->CreateJob(InNamespace(JobDoc("a", 1), "Team X")))),
            "metadata.namespace");
  EXPECT_EQ(FieldOf(Err(c_->Apply(InNamespace(NamespacesClusterQueueDoc("cq", 16), "team-x")))),
            "metadata.namespace");
}

}  // namespace
}  // namespace tessera::controller

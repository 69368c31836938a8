// ParseSliceReservation on a full manifest, the accelerator spellings a TrainJob takes, each kind
// of wrong input (the field each error must name), and the stored document's round trip.
#include "codec/reservation_manifest.h"

#include <gtest/gtest.h>

#include "codec/manifest.h"

namespace tessera::codec {
namespace {

constexpr const char* kManifest = R"(
apiVersion: tessera/v1
kind: SliceReservation
metadata: {name: pool, queue: team-a, labels: {team: a}}
spec:
  accelerator: v6e
  topology: 4x4
  slices: 2
  priority: high
  ttl: 30m
)";

Json Doc(const char* text = kManifest) {
  auto doc = ParseDocument(text);
  EXPECT_TRUE(doc.ok()) << doc.status().ToString();
  return doc.ok() ? *doc : Json();
}

// The error for `doc`: InvalidArgument whose field (the message up to ':') is `field`.
void ExpectRefused(const Json& doc, const std::string& field, const std::string& says = "") {
  auto spec = ParseSliceReservation(doc);
  ASSERT_FALSE(spec.ok()) << doc.dump();
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  const std::string& m = spec.status().message();
  EXPECT_EQ(m.substr(0, m.find(':')), field) << m;
  if (!says.empty()) {
    EXPECT_NE(m.find(says), std::string::npos) << m;
  }
}

TEST(ParseSliceReservation, FullManifest) {
  auto spec = ParseSliceReservation(Doc());
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "pool");
  EXPECT_EQ(spec->queue, "team-a");
  EXPECT_EQ(spec->labels.at("team"), "a");
  EXPECT_EQ(spec->accelerator, Generation::kV6e);
  EXPECT_EQ(spec->topology, Shape::Of(4, 4));
  EXPECT_EQ(spec->num_slices, 2);
  EXPECT_EQ(spec->priority, "high");
  EXPECT_EQ(spec->ttl_ms, 30 * 60'000);
}

TEST(ParseSliceReservation, DefaultsAndOtherSpellings) {
  Json doc = Doc();
  doc["spec"].erase("slices");
  doc["spec"].erase("ttl");
  doc["spec"].erase("priority");
  doc["metadata"].erase("queue");
  doc["spec"]["accelerator"] = "TPU-V6E";  // Ray's accelerator_type
  auto spec = ParseSliceReservation(doc);
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->num_slices, 1);
  EXPECT_EQ(spec->ttl_ms, 0);
  EXPECT_EQ(spec->queue, "");  // the default LocalQueue
  EXPECT_EQ(spec->priority, "");
  EXPECT_EQ(spec->accelerator, Generation::kV6e);

  // A pod type names accelerator and size at once; a size with several shapes needs one.
  Json pod = Doc();
  pod["spec"]["accelerator"] = "v6e-16";
  auto p = ParseSliceReservation(pod);
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->topology, Shape::Of(4, 4));
  pod["spec"].erase("topology");
  ExpectRefused(pod, "spec.topology", "4x4");

  // Super-slices of 3D generations.
  Json big = Doc();
  big["spec"]["accelerator"] = "7x";
  big["spec"]["topology"] = "4x4x8";
  auto b = ParseSliceReservation(big);
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->topology.chips(), 128);
}

TEST(ParseSliceReservation, WrongInputNamesTheField) {
  Json doc = Doc();
  doc["spec"]["ttl"] = "soon";
  ExpectRefused(doc, "spec.ttl", "duration");
  doc["spec"]["ttl"] = "0s";
  ExpectRefused(doc, "spec.ttl", "positive");
  doc = Doc();
  doc["spec"]["ttl"] = true;
  ExpectRefused(doc, "spec.ttl");

  doc = Doc();
  doc["spec"]["slices"] = 0;
  ExpectRefused(doc, "spec.slices");
  doc["spec"]["slices"] = "two";
  ExpectRefused(doc, "spec.slices");
  doc["spec"]["slices"] = Json{{"min", 1}, {"max", 2}};  // a TrainJob's elastic range
  ExpectRefused(doc, "spec.slices");

  doc = Doc();
  doc["spec"]["topology"] = "3x3";
  ExpectRefused(doc, "spec.topology");
  doc = Doc();
  doc["spec"]["accelerator"] = "h100";
  ExpectRefused(doc, "spec.accelerator");
  doc = Doc();
  doc["spec"].erase("accelerator");
  ExpectRefused(doc, "spec.accelerator");

  // One name per concept across kinds: the old name of spec.slices gets a 422 naming the new
  // one, with or without spec.slices beside it.
  doc = Doc();
  doc["spec"].erase("slices");
  doc["spec"]["numSlices"] = 2;
  ExpectRefused(doc, "spec.numSlices", "spec.slices, as in a TrainJob (renamed; write slices: 2)");
  doc = Doc();
  doc["spec"]["numSlices"] = 2;
  ExpectRefused(doc, "spec.numSlices", "spec.slices");
  doc = Doc();
  doc["spec"]["queue"] = "team-a";  // one name per concept across kinds: TrainJob's
  ExpectRefused(doc, "spec.queue", "metadata.queue");
  doc = Doc();
  doc["spec"]["priorityClassName"] = "low";
  ExpectRefused(doc, "spec.priorityClassName", "spec.priority");
  doc = Doc();
  doc["metadata"]["name"] = "Not_A_Name";
  ExpectRefused(doc, "metadata.name");
  doc = Doc();
  doc["kind"] = "TrainJob";
  ExpectRefused(doc, "kind");
  doc = Doc();
  doc.erase("spec");
  ExpectRefused(doc, "spec");
}

TEST(SliceReservationJson, StoredDocumentRoundTrips) {
  auto spec = ParseSliceReservation(Doc());
  ASSERT_TRUE(spec.ok());
  const Json spec_doc = SliceReservationSpecJson(*spec, Doc()["spec"]);
  EXPECT_EQ(spec_doc["accelerator"], "v6e");
  EXPECT_EQ(spec_doc["ttl"], "30m");
  EXPECT_EQ(spec_doc["ttlSeconds"], 1800);
  SliceReservation r = ReservationLifecycle::Create(*spec, spec_doc.dump(), 12, 500);
  ReservationLifecycle::Place(r, {{"slice-0", {"a", "b"}}, {"slice-1", {"c", "d"}}}, 1000);
  r.status.would_help = {{"trainjob/x", "cq", 3, 16, true}};
  r.status.users = {"trainjob/j"};
  const Json doc = SliceReservationJson(r);
  EXPECT_EQ(doc["kind"], "SliceReservation");
  EXPECT_EQ(doc["metadata"]["queue"], "team-a");
  EXPECT_EQ(doc["status"]["phase"], "Ready");
  EXPECT_EQ(doc["status"]["hosts"], Json({"a", "b", "c", "d"}));
  EXPECT_EQ(doc["status"]["chips"], 32);
  EXPECT_EQ(doc["status"]["users"], Json({"trainjob/j"}));
  EXPECT_EQ(doc["status"]["expiresAtMs"], 1000 + 1800 * 1000);

  auto back = SliceReservationFromJson(Json::parse(doc.dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->uid, 12u);
  EXPECT_EQ(back->created_ms, 500);
  EXPECT_EQ(back->spec.queue, "team-a");
  EXPECT_EQ(back->spec.ttl_ms, spec->ttl_ms);
  EXPECT_EQ(back->status.phase, ReservationPhase::kReady);
  EXPECT_EQ(back->status.slices, r.status.slices);
  EXPECT_EQ(back->status.expires_ms, r.status.expires_ms);
  EXPECT_EQ(back->status.would_help, r.status.would_help);
  EXPECT_EQ(back->status.users, r.status.users);

  // Rescheduling after a lost host: one slice held, the lost one listed with its hosts.
  ReservationLifecycle::HostsLost(r, {{"b", "no heartbeat"}}, 2000);
  const Json resched = SliceReservationJson(r);
  EXPECT_EQ(resched["status"]["phase"], "Rescheduling");
  EXPECT_EQ(resched["status"]["chips"], 16);
  EXPECT_EQ(resched["status"]["hosts"], Json({"c", "d"}));
  EXPECT_EQ(resched["status"]["lostSlices"][0]["lostHost"], "b");
  auto again = SliceReservationFromJson(Json::parse(resched.dump()));
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->status.phase, ReservationPhase::kRescheduling);
  EXPECT_EQ(again->status.slices, r.status.slices);
  EXPECT_EQ(again->status.lost_slices, r.status.lost_slices);

  Json broken = doc;
  broken["status"]["phase"] = "Held";
  EXPECT_EQ(SliceReservationFromJson(broken).status().code(), StatusCode::kInternal);
}

// A document as heads before the rename stored it (spec.numSlices): it loads, with the number
// of slices it held, and is served (and stored at its next write) with spec.slices.
TEST(SliceReservationJson, DocumentStoredWithNumSlicesLoads) {
  const Json stored = Json::parse(R"({
    "apiVersion": "tessera/v1", "kind": "SliceReservation",
    "metadata": {"name": "pool", "uid": 7, "resourceVersion": 3, "creationTimestampMs": 500,
                 "queue": "team-a"},
    "spec": {"accelerator": "v6e", "topology": "4x4", "numSlices": 2, "priority": "high",
             "ttl": "30m", "ttlSeconds": 1800},
    "status": {"phase": "Ready", "reason": "Reserved", "message": "",
               "slices": [{"name": "s0", "hosts": ["a", "b"]}, {"name": "s1", "hosts": ["c"]}],
               "hosts": ["a", "b", "c"], "readyTimeMs": 900, "expiresAtMs": 1800900}})");
  auto r = SliceReservationFromJson(stored);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->uid, 7u);
  EXPECT_EQ(r->spec.num_slices, 2);
  EXPECT_EQ(r->spec.ttl_ms, 30 * 60'000);
  EXPECT_EQ(r->status.phase, ReservationPhase::kReady);
  EXPECT_EQ(r->status.slices.size(), 2u);
  const Json served = SliceReservationJson(*r);
  EXPECT_EQ(served["spec"]["slices"], 2);
  EXPECT_FALSE(served["spec"].contains("numSlices")) << served["spec"].dump();
  EXPECT_EQ(served["spec"]["ttlSeconds"], 1800);
  // The served spec equals what applying today's manifest gives, so `apply` of the same
  // reservation with spec.slices is unchanged rather than refused as another spec.
  auto spec = ParseSliceReservation(Doc());
  ASSERT_TRUE(spec.ok());
  EXPECT_EQ(served["spec"], SliceReservationSpecJson(*spec, Doc()["spec"]));

  Json migrated = stored["spec"];
  EXPECT_TRUE(MigrateSliceReservationSpec(migrated));
  EXPECT_EQ(migrated["slices"], 2);
  EXPECT_FALSE(MigrateSliceReservationSpec(migrated));  // once only
}

}  // namespace
}  // namespace tessera::codec

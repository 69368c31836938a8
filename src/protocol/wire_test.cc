#include "protocol/wire.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>

namespace tessera::protocol {
namespace {

using nlohmann::json;

// ----- host names -----

TEST(HostNameTest, UpperCaseAndDomainsAreNormalisedToOneName) {
  EXPECT_EQ(*NormalizeHostName("Node-1.Example.COM"), "node-1.example.com");
  EXPECT_EQ(*NormalizeHostName("host-3"), "host-3");
  EXPECT_EQ(*NormalizeHostName("H0"), "h0");
  EXPECT_EQ(*NormalizeHostName("1.2.3"), "1.2.3");
  EXPECT_EQ(*NormalizeHostName(std::string(63, 'a')), std::string(63, 'a'));
  // 253 characters in all: four labels of 63 and one of 1, joined by dots.
  const std::string longest = std::string(63, 'a') + "." + std::string(63, 'b') + "." +
                              std::string(63, 'c') + "." + std::string(61, 'd');
  ASSERT_EQ(longest.size(), 253u);
  EXPECT_EQ(*NormalizeHostName(longest), longest);
  // The result is a fixed point: normalising twice changes nothing.
  EXPECT_EQ(*NormalizeHostName(*NormalizeHostName("A.B-c")), "a.b-c");
}

TEST(HostNameTest, RefusedNamesSayWhatIsWrongAndHowToFixIt) {
  auto refused = [](std::string_view name, std::string_view why) {
    auto result = NormalizeHostName(name);
    ASSERT_FALSE(result.ok()) << name;
    EXPECT_EQ(result.status().code(), StatusCode::kInvalidArgument);
    const std::string& message = result.status().message();
    EXPECT_EQ(message.rfind("name: ", 0), 0u) << message;
    EXPECT_NE(message.find(why), std::string::npos) << message;
    EXPECT_NE(message.find("--name"), std::string::npos) << message;
  };
  refused("", "required");
  refused("a_b", "contains '_'");
  refused(std::string(64, 'a'), "64 characters, more than 63");
  refused("ok." + std::string(64, 'a'), "64 characters, more than 63");
  refused(std::string(254, 'a'), "254 characters, more than 253");
  refused("a..b", "empty label");
  refused(".a", "empty label");
  refused("a.", "empty label");
  refused("-a", "starts or ends with '-'");
  refused("a.b-", "starts or ends with '-'");
  refused("a b", "contains ' '");
  refused("a/b", "contains '/'");
  refused(std::string("a\0b", 3), "contains '\\x00'");
  refused("h\xc3\xa9", "contains '\\xc3'");
}

// ----- assignment snapshots -----

TEST(SnapshotTest, StopEntriesAreParsedAndMalformedOnesAreReportedNotFatal) {
  auto snapshot = ParseAssignmentSnapshot(R"({"revision": 4, "assignments": [],
      "stop": [{"job": "j", "uid": 4, "attempt": 3, "graceMs": 0},
               {"job": "k", "uid": 5, "attempt": 0, "graceMs": 2500},
               {"job": "../x", "uid": 4, "attempt": 0, "graceMs": 0},
               {"job": "j", "uid": 4, "attempt": -1, "graceMs": 0},
               {"job": "j", "uid": 4, "attempt": 1},
               {"job": "j", "uid": 4, "attempt": 1, "graceMs": "soon"},
               {"job": "j", "attempt": 1, "graceMs": 0},
               {"job": "j", "uid": 0, "attempt": 1, "graceMs": 0},
               {"job": "j", "uid": "4", "attempt": 1, "graceMs": 0},
               7]})");
  ASSERT_TRUE(snapshot.ok()) << snapshot.status().ToString();
  EXPECT_EQ(snapshot->stop, (std::vector<StopRequest>{{"j", 3, 0, 4}, {"k", 0, 2500, 5}}));
  ASSERT_EQ(snapshot->unreadable.size(), 8u);
  EXPECT_EQ(snapshot->unreadable[0].rfind("stop[].job:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[1].rfind("stop[].attempt:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[2].rfind("stop[].graceMs:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[3].rfind("stop[].graceMs:", 0), 0u);
  for (size_t i = 4; i < 7; ++i) EXPECT_EQ(snapshot->unreadable[i].rfind("stop[].uid:", 0), 0u);
  EXPECT_EQ(snapshot->unreadable[7], "stop[]: not an object");

  auto not_a_list = ParseAssignmentSnapshot(R"({"revision": 1, "stop": {"job": "j"}})");
  ASSERT_TRUE(not_a_list.ok());
  EXPECT_TRUE(not_a_list->stop.empty());
  EXPECT_EQ(not_a_list->unreadable, (std::vector<std::string>{"stop: must be a list"}));

  auto absent = ParseAssignmentSnapshot(R"({"revision": 1, "assignments": []})");
  ASSERT_TRUE(absent.ok());
  EXPECT_TRUE(absent->stop.empty());
  EXPECT_TRUE(absent->unreadable.empty());
}

TEST(SnapshotTest, SnapshotJsonRoundTripsStopEntries) {
  std::string text = AssignmentSnapshotJson(9, {}, {{"j", 2, 0, 12}});
  EXPECT_EQ(json::parse(text)["stop"],
            json::parse(R"([{"job":"j","uid":12,"attempt":2,"graceMs":0}])"));
  auto parsed = ParseAssignmentSnapshot(text);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->stop, (std::vector<StopRequest>{{"j", 2, 0, 12}}));
  EXPECT_FALSE(json::parse(AssignmentSnapshotJson(9, {})).contains("stop"));
}

TEST(SnapshotTest, TheHeadsTypedAssignmentsReachTheAgentUnchanged) {
  Assignment a;
  a.key = WorkerKey{"train", 2, 5, kMaxUid};
  a.worker = 1;
  a.command = {"python3", "train.py", "--lr", "0.1"};
  a.env = {{"RANK", "5"}, {"TPU_WORKER_ID", "1"}};
  a.working_dir = "/abs/dir";
  a.grace_ms = 2500;
  Assignment b = a;
  b.key.rank = 6;
  b.working_dir = "";
  auto parsed = ParseAssignmentSnapshot(AssignmentSnapshotJson(12, {a, b}, {{"old", 1, 0, 3}}));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->revision, 12);
  ASSERT_EQ(parsed->assignments.size(), 2u);
  EXPECT_EQ(parsed->assignments[0].assignment, a);
  EXPECT_EQ(parsed->assignments[0].error, "");
  EXPECT_EQ(parsed->assignments[1].assignment, b);
  EXPECT_EQ(parsed->stop, (std::vector<StopRequest>{{"old", 1, 0, 3}}));
  EXPECT_TRUE(parsed->unreadable.empty());
}

TEST(SnapshotTest, AnAssignmentWithoutAValidUidIsUnreadableAndABadGraceIsItsError) {
  Assignment a;
  a.key = WorkerKey{"train", 0, 0, 1};
  a.command = {"true"};
  json doc = json::parse(AssignmentSnapshotJson(3, {a, a, a, a}));
  doc["assignments"][0].erase("uid");
  doc["assignments"][1]["uid"] = 0;
  doc["assignments"][2]["uid"] = kMaxUid + 1;
  doc["assignments"][3]["graceMs"] = 86'400'001;
  auto parsed = ParseAssignmentSnapshot(doc.dump());
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->unreadable.size(), 3u);
  for (const std::string& error : parsed->unreadable) EXPECT_EQ(error.rfind("uid: ", 0), 0u);
  ASSERT_EQ(parsed->assignments.size(), 1u);
  EXPECT_EQ(parsed->assignments[0].error.rfind("graceMs: ", 0), 0u);
}

TEST(SnapshotTest, AStartingGroupsNiceRoundTripsIsOmittedAtZeroAndOutOfRangeIsItsError) {
  Assignment a;
  a.key = WorkerKey{"svc.server.0", 0, 0, 4};
  a.command = {"python3", "server.py"};
  a.nice = 10;
  Assignment normal = a;
  normal.key.rank = 1;
  normal.nice = 0;
  const std::string text = AssignmentSnapshotJson(5, {a, normal});
  EXPECT_EQ(json::parse(text)["assignments"][0]["nice"], 10);
  EXPECT_FALSE(json::parse(text)["assignments"][1].contains("nice"));
  auto parsed = ParseAssignmentSnapshot(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->assignments.size(), 2u);
  EXPECT_EQ(parsed->assignments[0].assignment, a);
  EXPECT_EQ(parsed->assignments[1].assignment, normal);

  for (json bad : {json(20), json(-1), json("low")}) {
    json doc = json::parse(text);
    doc["assignments"][0]["nice"] = bad;
    auto p = ParseAssignmentSnapshot(doc.dump());
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    EXPECT_EQ(p->assignments[0].error, "nice: must be an integer in 0..19") << bad.dump();
  }
}

TEST(SnapshotTest, AReplicaLeadersTlsRoundTripsAndAMalformedOneIsItsError) {
  Assignment a;
  a.key = WorkerKey{"svc.server.0", 0, 0, 4};
  a.command = {"python3", "server.py"};
  a.tls = WorkerTls{"-----CERT-----\n", "-----KEY-----\n", "-----CA-----\n"};
  Assignment follower = a;
  follower.key.rank = 1;
  follower.tls.reset();
  const std::string text = AssignmentSnapshotJson(5, {a, follower});
  auto parsed = ParseAssignmentSnapshot(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  ASSERT_EQ(parsed->assignments.size(), 2u);
  EXPECT_EQ(parsed->assignments[0].assignment, a);
  EXPECT_EQ(parsed->assignments[1].assignment, follower);
  EXPECT_FALSE(json::parse(text)["assignments"][1].contains("tls"));

  json doc = json::parse(text);
  doc["assignments"][0]["tls"].erase("key");
  doc["assignments"][1]["tls"] = "pem";
  auto bad = ParseAssignmentSnapshot(doc.dump());
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  ASSERT_EQ(bad->assignments.size(), 2u);
  EXPECT_EQ(bad->assignments[0].error, "tls.key: must be a non-empty PEM string");
  EXPECT_EQ(bad->assignments[1].error.rfind("tls: must be an object", 0), 0u);
}

// ----- registration -----

Registration SliceHost() {
  Registration r;
  r.name = "host-3";
  r.generation = Generation::kV6e;
  r.chips = 4;
  r.address = "10.0.0.3";
  r.agent_port = 41234;
  r.slice = SliceMembership{"slice-000", "4x4", 1};
  r.labels = {{"pool", "a"}};
  r.devices = {{0, {2, 0, 0}}, {1, {3, 0, 0}}, {2, {2, 1, 0}}, {3, {3, 1, 0}}};
  r.credential = std::string(64, 'c');
  return r;
}

Registration CubeHost() {
  Registration r;
  r.name = "node-7.example.com";
  r.generation = Generation::k7x;
  r.chips = 4;
  r.address = "10.0.1.7";
  r.agent_port = 65535;
  r.cube = CubeMembership{"cube-000", "block-01", {1, 0, 3}};
  r.devices = {{0, {2, 0, 3}}, {1, {3, 0, 3}}, {2, {2, 1, 3}}, {3, {3, 1, 3}}};
  r.credential = std::string(32, '7');
  return r;
}

TEST(RegistrationTest, RoundTripsThroughTheAgentsEncoder) {
  for (const Registration& r : {SliceHost(), CubeHost()}) {
    auto parsed = ParseRegistration(RegistrationJson(r));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, r) << RegistrationJson(r);
  }
}

TEST(RegistrationTest, TheRegisteredNameIsTheNormalisedOne) {
  Registration r = SliceHost();
  r.name = "Node-1.Example.COM";
  auto parsed = ParseRegistration(RegistrationJson(r));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->name, "node-1.example.com");
}

TEST(RegistrationTest, OptionalFieldsTakeTheirDefaults) {
  auto parsed = ParseRegistration(R"({"name": "h", "generation": "v5litepod", "chips": 4,
      "slice": {"name": "s", "topology": "4x4", "worker": 3}, "devices": null,
      "credential": "0123456789abcdef0123456789abcdef"})");
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(parsed->generation, Generation::kV5e);  // aliases are accepted
  EXPECT_EQ(parsed->address, "127.0.0.1");
  EXPECT_EQ(parsed->agent_port, 0);
  EXPECT_TRUE(parsed->labels.empty());
  EXPECT_TRUE(parsed->devices.empty());
  EXPECT_FALSE(parsed->cube.has_value());

  auto cube = ParseRegistration(
      R"({"name": "h", "generation": "v4", "chips": 4, "cube": {"name": "c", "coord": [0, 1, 2]},
          "credential": "0123456789abcdef0123456789abcdef"})");
  ASSERT_TRUE(cube.ok()) << cube.status().ToString();
  EXPECT_EQ(cube->cube->block, "block-00");
  EXPECT_EQ(cube->cube->coord, (Coord{0, 1, 2}));
}

// Applies `edit` to the JSON of a valid registration (slice host unless `cube`), and expects
// ParseRegistration to refuse it with a message starting with `path` + ":".
void ExpectRefused(const std::function<void(json&)>& edit, const std::string& path,
                   bool cube = false) {
  json doc = json::parse(RegistrationJson(cube ? CubeHost() : SliceHost()));
  edit(doc);
  const std::string text = doc.dump();
  auto parsed = ParseRegistration(text);
  ASSERT_FALSE(parsed.ok()) << "accepted: " << text;
  EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message().rfind(path + ": ", 0), 0u)
      << "want " << path << ", got: " << parsed.status().message() << "\n  for " << text;
}

TEST(RegistrationTest, EachMalformedFieldIsNamedInTheError) {
  auto set = [](const std::string& pointer, json value) {
    return [pointer, value](json& doc) { doc[json::json_pointer(pointer)] = value; };
  };
  auto erase = [](const std::string& parent, const std::string& key) {
    return [parent, key](json& doc) { doc[json::json_pointer(parent)].erase(key); };
  };
  ExpectRefused([](json& doc) { doc = json::array(); }, "registration");
  ExpectRefused(erase("", "name"), "name");
  ExpectRefused(set("/name", 5), "name");
  ExpectRefused(set("/name", "a_b"), "name");
  ExpectRefused(set("/name", ""), "name");
  ExpectRefused(erase("", "generation"), "generation");
  ExpectRefused(set("/generation", "v9"), "generation");
  ExpectRefused(set("/generation", 6), "generation");
  // 2D: the slice.
  ExpectRefused(erase("", "slice"), "slice");
  ExpectRefused(set("/slice", "slice-000"), "slice");
  ExpectRefused(set("/cube", json{{"name", "c"}, {"coord", {0, 0, 0}}}), "cube");
  ExpectRefused(erase("/slice", "name"), "slice.name");
  ExpectRefused(set("/slice/name", "../x"), "slice.name");
  ExpectRefused(set("/slice/topology", "3x3"), "slice.topology");
  ExpectRefused(set("/slice/topology", 44), "slice.topology");
  ExpectRefused(erase("/slice", "topology"), "slice.topology");
  ExpectRefused(set("/slice/worker", 4), "slice.worker");  // a 4x4 slice has workers 0..3
  ExpectRefused(set("/slice/worker", -1), "slice.worker");
  ExpectRefused(set("/slice/worker", "1"), "slice.worker");
  ExpectRefused(set("/slice/worker", 1.5), "slice.worker");
  ExpectRefused(erase("/slice", "worker"), "slice.worker");
  // 3D: the cube.
  ExpectRefused(erase("", "cube"), "cube", true);
  ExpectRefused(set("/slice", json{{"name", "s"}, {"topology", "2x2x1"}, {"worker", 0}}), "slice",
                true);
  ExpectRefused(erase("/cube", "name"), "cube.name", true);
  ExpectRefused(set("/cube/block", "a/b"), "cube.block", true);
  ExpectRefused(erase("/cube", "coord"), "cube.coord", true);
  ExpectRefused(set("/cube/coord", json{2, 0, 0}), "cube.coord", true);
  ExpectRefused(set("/cube/coord", json{0, 2, 0}), "cube.coord", true);
  ExpectRefused(set("/cube/coord", json{0, 0, 4}), "cube.coord", true);
  ExpectRefused(set("/cube/coord", json{0, 0, -1}), "cube.coord", true);
  ExpectRefused(set("/cube/coord", json{0, 0}), "cube.coord", true);
  ExpectRefused(set("/cube/coord", json{0.5, 0, 0}), "cube.coord", true);
  ExpectRefused(set("/cube/coord", "0,0,0"), "cube.coord", true);
  // The rest.
  ExpectRefused(erase("", "chips"), "chips");
  ExpectRefused(set("/chips", 0), "chips");
  ExpectRefused(set("/chips", -4), "chips");
  ExpectRefused(set("/chips", "4"), "chips");
  ExpectRefused(set("/chips", 18446744073709551615u), "chips");
  ExpectRefused(set("/address", ""), "address");
  ExpectRefused(set("/address", 7), "address");
  ExpectRefused(set("/agentPort", 65536), "agentPort");
  ExpectRefused(set("/agentPort", 70000), "agentPort");
  ExpectRefused(set("/agentPort", 0), "agentPort");
  ExpectRefused(set("/address", "10.0.0.3 evil"), "address");
  ExpectRefused(set("/address", std::string("10.0.0.3\n")), "address");
  ExpectRefused(set("/address", std::string(254, 'a')), "address");
  ExpectRefused(set("/labels", json{{"", "a"}}), "labels");
  ExpectRefused(set("/labels", json{{std::string("a\0b", 3), "a"}}), "labels");
  ExpectRefused(set("/labels/pool", std::string("a\x01")), "labels.pool");
  ExpectRefused(set("/labels/pool", std::string(1025, 'a')), "labels.pool");
  ExpectRefused(set("/chips", -100), "chips");
  ExpectRefused(set("/chips", 4097), "chips");
  ExpectRefused(set("/agentPort", -1), "agentPort");
  ExpectRefused(set("/agentPort", "80"), "agentPort");
  ExpectRefused(set("/labels", "pool=a"), "labels");
  ExpectRefused(set("/labels/pool", 1), "labels.pool");
  ExpectRefused(set("/devices", "x"), "devices");
  ExpectRefused([](json& doc) { doc["devices"].erase(3); }, "devices");  // 3 entries, 4 chips
  ExpectRefused(set("/devices/0", 7), "devices[0]");
  ExpectRefused(set("/devices/1/index", 4), "devices[1].index");
  ExpectRefused(set("/devices/1/index", 0), "devices[1].index");  // twice
  ExpectRefused(set("/devices/2/coords", json{1, 2}), "devices[2].coords");
  ExpectRefused(set("/devices/2/coords", json{-1, 0, 0}), "devices[2].coords");
  ExpectRefused(erase("", "credential"), "credential");
  ExpectRefused(set("/credential", std::string(31, 'a')), "credential");
  ExpectRefused(set("/credential", std::string(64, 'A')), "credential");
  ExpectRefused(set("/credential", 5), "credential");
}

// What the agent discovered of its host ("discovered"): optional, strict, kept as sent.
Registration DiscoveredHost() {
  Registration r = SliceHost();
  Discovered d;
  d.source = "metadata";
  d.accelerator_type = "v6e-16";
  d.topology = "4x4";
  d.slice_name = "train-v6e-1";
  d.worker_id = 1;
  d.peers = {"10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"};
  d.megascale = {{"MEGASCALE_NUM_SLICES", "2"}, {"MEGASCALE_SLICE_ID", "1"}};
  d.gpus = {{"GPU-1", 189471, GpuFabric{"7f3c", "32766", "Completed", "Success"}},
            {"GPU-2", 81559, std::nullopt}};
  r.discovered = d;
  return r;
}

TEST(RegistrationTest, DiscoveredRoundTripsAndIsOptional) {
  Registration r = DiscoveredHost();
  auto parsed = ParseRegistration(RegistrationJson(r));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, r) << RegistrationJson(r);
  EXPECT_EQ(RegistrationJson(SliceHost()).find("discovered"), std::string::npos);
  Registration minimal = SliceHost();
  minimal.discovered = Discovered{};
  minimal.discovered->source = "devices";
  parsed = ParseRegistration(RegistrationJson(minimal));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, minimal);
}

TEST(RegistrationTest, EachMalformedDiscoveredFieldIsNamed) {
  const std::string good = RegistrationJson(DiscoveredHost());
  auto error = [&](const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json j = nlohmann::json::parse(good);
    j[nlohmann::json::json_pointer(pointer)] = value;
    auto parsed = ParseRegistration(j.dump());
    EXPECT_FALSE(parsed.ok()) << pointer;
    return parsed.ok() ? std::string() : parsed.status().message();
  };
  auto starts = [](const std::string& text, const std::string& prefix) {
    EXPECT_EQ(text.rfind(prefix, 0), 0u) << "want " << prefix << ", got: " << text;
  };
  starts(error("/discovered", "metadata"), "discovered: ");
  starts(error("/discovered/source", "guess"), "discovered.source: 'guess' must be gke");
  starts(error("/discovered/source", nullptr), "discovered.source: required");
  starts(error("/discovered/acceleratorType", 16), "discovered.acceleratorType: ");
  starts(error("/discovered/topology", "4by4"), "discovered.topology: ");
  starts(error("/discovered/sliceName", "a\nb"), "discovered.sliceName: ");
  starts(error("/discovered/workerId", -1), "discovered.workerId: ");
  starts(error("/discovered/peers", "10.0.0.2"), "discovered.peers: ");
  starts(error("/discovered/peers/1", ""), "discovered.peers[1]: ");
  starts(error("/discovered/megascale/OTHER", "x"), "discovered.megascale: key 'OTHER'");
  starts(error("/discovered/megascale/MEGASCALE_PORT", 8080),
         "discovered.megascale.MEGASCALE_PORT: ");
  starts(error("/discovered/gpus/0", "GPU-1"), "discovered.gpus[0]: ");
  starts(error("/discovered/gpus/0/uuid", ""), "discovered.gpus[0].uuid: ");
  starts(error("/discovered/gpus/1/memoryMiB", "80 GiB"), "discovered.gpus[1].memoryMiB: ");
  starts(error("/discovered/gpus/0/fabric", "ok"), "discovered.gpus[0].fabric: ");
  starts(error("/discovered/gpus/0/fabric/state", nullptr), "discovered.gpus[0].fabric.state: ");
}

TEST(RegistrationTest, RegisterReplyRoundTrips) {
  RegisterReply reply{"node-1.example.com", 250, 3000};
  auto parsed = ParseRegisterReply(RegisterReplyJson(reply));
  ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
  EXPECT_EQ(*parsed, reply);
  EXPECT_EQ(ParseRegisterReply(R"({"leaseMs": 0})").status().message().rfind("leaseMs: ", 0), 0u);
}

// ----- heartbeat -----

Heartbeat FullHeartbeat() {
  Heartbeat h;
  h.revision = 7;
  WorkerReport running;
  running.key = WorkerKey{"j", 0, 3, 11};
  running.pid = 123;
  running.started_at_ms = 1'700'000'000'000;
  WorkerReport exited = running;
  exited.key.rank = 4;
  exited.state = WorkerState::kExited;
  exited.exit_code = 137;
  exited.signal = 9;
  exited.finished_at_ms = 1'700'000'005'000;
  WorkerReport failed;
  failed.key = WorkerKey{"k.v-2", 1'000'000'000, 0, kMaxUid};
  failed.state = WorkerState::kExited;
  failed.exit_code = 127;
  failed.error = "workingDir /nope: no such directory";
  h.workers = {running, exited, failed};
  h.progress = {
      {WorkerKey{"j", 0, 3, 11}, ProgressRecord{"progress", 10, 0, 1'700'000'004'000}},
      {WorkerKey{"j", 0, 3, 11}, ProgressRecord{"checkpoint", 10, 0.2, 1'700'000'004'100}},
      {WorkerKey{"j", 0, 4, 11}, ProgressRecord{"restore", 8, 1.25, 1'700'000'004'200}},
      {WorkerKey{"j", 0, 4, 11}, ProgressRecord{"alive", 9, 0, 1'700'000'004'300}}};
  h.usage = Usage{97.53125, 123'456'789};
  return h;
}

TEST(HeartbeatTest, RoundTripsThroughTheAgentsEncoder) {
  for (const Heartbeat& h : {FullHeartbeat(), Heartbeat{}}) {
    auto parsed = ParseHeartbeat(HeartbeatJson(h));
    ASSERT_TRUE(parsed.ok()) << parsed.status().ToString();
    EXPECT_EQ(*parsed, h) << HeartbeatJson(h);
  }
  auto empty = ParseHeartbeat("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, Heartbeat{});
  EXPECT_EQ(empty->revision, -1);
}

TEST(HeartbeatTest, NumbersBeyondDoubleAreRefusedNotInfinite) {
  for (const char* text : {R"({"usage": {"cpuPercent": 1e400}})", R"({"revision": 1e400})",
                           R"({"revision": -1e400})"}) {
    auto parsed = ParseHeartbeat(text);
    ASSERT_FALSE(parsed.ok()) << text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument) << text;
  }
}

TEST(HeartbeatTest, CarriesSecondsForCheckpointAndRestoreRecordsOnly) {
  Heartbeat h;
  h.progress = {{WorkerKey{"j", 1, 0, 1}, ProgressRecord{"restore", 40, 0.5, 1000}},
                {WorkerKey{"j", 1, 0, 1}, ProgressRecord{"progress", 41, 0, 2000}},
                {WorkerKey{"j", 1, 0, 1}, ProgressRecord{"checkpoint", 50, 0.25, 3000}}};
  json j = json::parse(HeartbeatJson(h));
  ASSERT_EQ(j["progress"].size(), 3u);
  EXPECT_EQ(j["progress"][0]["type"], "restore");
  EXPECT_EQ(j["progress"][0]["step"], 40);
  EXPECT_DOUBLE_EQ(j["progress"][0]["seconds"].get<double>(), 0.5);
  EXPECT_FALSE(j["progress"][1].contains("seconds"));
  EXPECT_DOUBLE_EQ(j["progress"][2]["seconds"].get<double>(), 0.25);
}

TEST(HeartbeatTest, EachMalformedFieldIsNamedInTheError) {
  auto refused = [](const std::function<void(json&)>& edit, const std::string& path) {
    json doc = json::parse(HeartbeatJson(FullHeartbeat()));
    edit(doc);
    const std::string text = doc.dump();
    auto parsed = ParseHeartbeat(text);
    ASSERT_FALSE(parsed.ok()) << "accepted: " << text;
    EXPECT_EQ(parsed.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(parsed.status().message().rfind(path + ": ", 0), 0u)
        << "want " << path << ", got: " << parsed.status().message();
  };
  auto set = [](const std::string& pointer, json value) {
    return [pointer, value](json& doc) { doc[json::json_pointer(pointer)] = value; };
  };
  auto erase = [](const std::string& parent, const std::string& key) {
    return [parent, key](json& doc) { doc[json::json_pointer(parent)].erase(key); };
  };
  refused([](json& doc) { doc = "beat"; }, "heartbeat");
  refused(set("/revision", -2), "revision");
  refused(set("/revision", "7"), "revision");
  refused(set("/revision", 7.5), "revision");
  refused(set("/workers", json::object()), "workers");
  refused(set("/workers/1", 5), "workers[1]");
  refused(set("/workers/0/job", "../x"), "workers[0].job");
  refused(erase("/workers/0", "job"), "workers[0].job");
  refused(set("/workers/0/attempt", -1), "workers[0].attempt");
  refused(set("/workers/0/attempt", "x"), "workers[0].attempt");
  refused(set("/workers/0/attempt", 1.0), "workers[0].attempt");
  refused(erase("/workers/0", "uid"), "workers[0].uid");
  refused(set("/workers/0/uid", 0), "workers[0].uid");
  refused(set("/workers/0/uid", "1"), "workers[0].uid");
  refused(set("/workers/0/uid", kMaxUid + 1), "workers[0].uid");
  // The same worker twice (a Running and an Exited report of one key) is refused whole.
  refused([](json& doc) { doc["workers"][1]["rank"] = 3; }, "workers[1]");
  refused(erase("/workers/0", "rank"), "workers[0].rank");
  refused(set("/workers/0/rank", 1e3), "workers[0].rank");
  refused(set("/workers/0/pid", -1), "workers[0].pid");
  refused(set("/workers/0/state", "Dead"), "workers[0].state");
  refused(set("/workers/0/state", "running"), "workers[0].state");
  refused(erase("/workers/0", "state"), "workers[0].state");
  refused(set("/workers/0/startedAtMs", "now"), "workers[0].startedAtMs");
  refused(erase("/workers/1", "exitCode"), "workers[1].exitCode");
  refused(set("/workers/1/exitCode", 256), "workers[1].exitCode");
  refused(set("/workers/1/signal", 128), "workers[1].signal");
  refused(erase("/workers/1", "finishedAtMs"), "workers[1].finishedAtMs");
  refused(set("/workers/2/error", 5), "workers[2].error");
  refused(set("/progress", "x"), "progress");
  refused(set("/progress/0", json::array()), "progress[0]");
  refused(erase("/progress/0", "job"), "progress[0].job");
  refused(set("/progress/2/attempt", "0"), "progress[2].attempt");
  refused(erase("/progress/2", "uid"), "progress[2].uid");
  refused(set("/progress/1/type", "bogus"), "progress[1].type");
  refused(set("/progress/1/step", -1), "progress[1].step");
  refused(erase("/progress/1", "timeMs"), "progress[1].timeMs");
  refused(set("/progress/1/seconds", -0.5), "progress[1].seconds");
  refused(set("/progress/1/seconds", "fast"), "progress[1].seconds");
  refused(set("/progress/1/seconds", 1e300), "progress[1].seconds");
  refused(set("/usage", json::array()), "usage");
  refused(set("/usage/cpuPercent", -1), "usage.cpuPercent");
  refused(set("/usage/cpuPercent", 1e7), "usage.cpuPercent");
  refused(set("/usage/cpuPercent", "97"), "usage.cpuPercent");
  refused(set("/usage/memoryBytes", 1.5), "usage.memoryBytes");
}

// ----- fuzz -----

// Values that stress the decoders' type and range checks.
json WeirdValue(std::mt19937_64& rng) {
  static const std::vector<json> kValues = [] {
    std::vector<json> v = {nullptr, true, false, 1.5, -0.0, 1e308, -1e308};
    for (int64_t n : {0, 1, -1, 3, 4, 63, 64, 255, 256, 65535, 65536}) v.push_back(n);
    v.push_back(std::numeric_limits<int64_t>::min());
    v.push_back(std::numeric_limits<int64_t>::max());
    v.push_back(std::numeric_limits<uint64_t>::max());
    for (const char* text : {"", "x", "Running", "Exited", "A_b", "Node-1.Example.COM",
                             "checkpoint", "v6e", "7x", "4x4", "2x2x1", "\xff\xfe"}) {
      v.push_back(text);
    }
    v.push_back(std::string(300, 'a'));
    for (json j : {json::array(), json{0, 0, 0}, json{1, 1, 3}, json{2, 0, 0}, json::object(),
                   json{{"a", "b"}}, json{{"name", "n"}, {"coord", {0, 0, 0}}},
                   json::array({json::array({json::array()})})}) {
      v.push_back(std::move(j));
    }
    return v;
  }();
  return kValues[rng() % kValues.size()];
}

// Replaces, removes or adds one value somewhere in `doc`.
void Mutate(json& doc, std::mt19937_64& rng) {
  static const std::vector<std::string> kKeys = {
      "name",  "generation", "chips",       "address",      "agentPort", "slice",     "cube",
      "coord", "worker",     "topology",    "block",        "devices",   "labels",    "index",
      "state", "exitCode",   "signal",      "workers",      "progress",  "type",      "seconds",
      "usage", "revision",   "assignments", "graceMs",      "stop",      "job",       "attempt",
      "rank",  "pid",        "startedAtMs", "finishedAtMs", "uid",       "credential"};
  json* node = &doc;
  while ((node->is_object() || node->is_array()) && !node->empty() && rng() % 3 != 0) {
    auto it = std::next(node->begin(), static_cast<std::ptrdiff_t>(rng() % node->size()));
    if (!it->is_object() && !it->is_array()) break;
    node = &*it;
  }
  if (node->is_object()) {
    const std::string& key = kKeys[rng() % kKeys.size()];
    if (rng() % 4 == 0) {
      node->erase(key);
    } else {
      (*node)[key] = WeirdValue(rng);
    }
  } else if (node->is_array() && !node->empty()) {
    const size_t i = rng() % node->size();
    if (rng() % 4 == 0) {
      node->erase(i);
    } else {
      (*node)[i] = WeirdValue(rng);
    }
  } else {
    *node = WeirdValue(rng);
  }
}

std::string RandomBytes(std::mt19937_64& rng, std::string_view alphabet) {
  std::string out(rng() % 80, ' ');
  for (char& c : out) {
    c = alphabet.empty() ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()];
  }
  return out;
}

// How many inputs each decoder accepted (so a fuzz run shows it reached past the first check).
struct Accepted {
  int registrations = 0;
  int heartbeats = 0;
  int snapshots = 0;
};

// Every decoder on `text`: none may crash or throw; an error is an InvalidArgument that names
// a field; anything accepted re-encodes to what decodes to the same value.
void DecodeEverything(const std::string& text, Accepted& accepted) {
  SCOPED_TRACE(text);
  auto expect_field_error = [](const Status& s) {
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find(": "), std::string::npos) << s.message();
  };
  auto registration = ParseRegistration(text);
  if (registration.ok()) {
    ++accepted.registrations;
    auto again = ParseRegistration(RegistrationJson(*registration));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, *registration);
  } else {
    expect_field_error(registration.status());
  }
  auto heartbeat = ParseHeartbeat(text);
  if (heartbeat.ok()) {
    ++accepted.heartbeats;
    auto again = ParseHeartbeat(HeartbeatJson(*heartbeat));
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, *heartbeat);
  } else {
    expect_field_error(heartbeat.status());
  }
  auto snapshot = ParseAssignmentSnapshot(text);
  if (snapshot.ok()) {
    ++accepted.snapshots;
  } else {
    expect_field_error(snapshot.status());
  }
  auto reply = ParseRegisterReply(text);
  if (reply.ok()) {
    auto again = ParseRegisterReply(RegisterReplyJson(*reply));
    ASSERT_TRUE(again.ok());
    EXPECT_EQ(*again, *reply);
  } else {
    expect_field_error(reply.status());
  }
  auto name = NormalizeHostName(text);
  if (name.ok()) {
    EXPECT_EQ(*NormalizeHostName(*name), *name);
  } else {
    expect_field_error(name.status());
  }
}

TEST(WireFuzzTest, GarbageNeverCrashesAndWhatIsAcceptedRoundTrips) {
  // Fixed so every run is the same; TESSERA_FUZZ_SEED=N tries another stream.
  uint64_t seed = 20261130;
  if (const char* env = std::getenv("TESSERA_FUZZ_SEED")) seed = std::strtoull(env, nullptr, 10);
  std::cout << "wire fuzz seed: " << seed << " (rerun with TESSERA_FUZZ_SEED=" << seed << ")\n";
  std::mt19937_64 rng(seed);
  const std::vector<std::string> corpus = {
      RegistrationJson(SliceHost()), RegistrationJson(CubeHost()), HeartbeatJson(FullHeartbeat()),
      AssignmentSnapshotJson(3, {Assignment{{"j", 0, 1}, 1, {"sh", "-c", "true"}, {}, "", 0}},
                             {{"k", 1, 0}}),
      RegisterReplyJson({"h", 1000, 5000})};
  constexpr int kRounds = 4000;
  Accepted accepted;
  for (int round = 0; round < kRounds; ++round) {
    std::string text;
    switch (rng() % 4) {
      case 0:  // raw bytes
        text = RandomBytes(rng, "");
        break;
      case 1:  // JSON-shaped tokens
        text = RandomBytes(rng, "{}[]\":,.-+eE0123456789 abcxyzRuningExtd\\");
        break;
      case 2: {  // a valid message with a few values replaced, removed or added
        json doc = json::parse(corpus[rng() % corpus.size()]);
        for (int edits = 1 + static_cast<int>(rng() % 3); edits > 0; --edits) Mutate(doc, rng);
        text = doc.dump(-1, ' ', false, json::error_handler_t::replace);
        break;
      }
      default: {  // a valid message with bytes flipped, cut or repeated
        text = corpus[rng() % corpus.size()];
        for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0 && !text.empty(); --edits) {
          const size_t at = rng() % text.size();
          switch (rng() % 3) {
            case 0:
              text[at] = static_cast<char>(rng() % 256);
              break;
            case 1:
              text.erase(at, 1 + rng() % 8);
              break;
            default:
              text.insert(at, text.substr(at, 1 + rng() % 8));
          }
        }
      }
    }
    DecodeEverything(text, accepted);
    if (::testing::Test::HasFatalFailure()) {
      FAIL() << "round " << round << " of seed " << seed;
    }
  }
  std::cout << "accepted of " << kRounds << ": " << accepted.registrations << " registrations, "
            << accepted.heartbeats << " heartbeats, " << accepted.snapshots << " snapshots\n";
  EXPECT_GT(accepted.registrations, 0);
  EXPECT_GT(accepted.heartbeats, 0);
}

// Issue 17: 100,000 nested arrays in a registration's labels or a heartbeat's usage crashed the
// head when it later dumped them; the decoders refuse them, naming the limit.
TEST(WireLimitsTest, DeepNestingAndRepeatedKeysAreRefused) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  auto registration = ParseRegistration(R"({"name": "h", "labels": {"a": )" + deep + "}}");
  ASSERT_FALSE(registration.ok());
  EXPECT_NE(registration.status().message().find("registration: labels.a[0]"), std::string::npos)
      << registration.status().message();
  EXPECT_NE(registration.status().message().find("deeper than 64"), std::string::npos);
  auto heartbeat = ParseHeartbeat(R"({"revision": 1, "usage": )" + deep + "}");
  ASSERT_FALSE(heartbeat.ok());
  EXPECT_NE(heartbeat.status().message().find("heartbeat: usage"), std::string::npos);
  EXPECT_FALSE(ParseAssignmentSnapshot(R"({"revision": 1, "assignments": )" + deep + "}").ok());
  EXPECT_FALSE(ParseRegisterReply(R"({"host": )" + deep + "}").ok());
  auto twice = ParseHeartbeat(R"({"revision": 1, "revision": 2})");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("heartbeat: revision: key appears twice"),
            std::string::npos)
      << twice.status().message();
}

}  // namespace
}  // namespace tessera::protocol

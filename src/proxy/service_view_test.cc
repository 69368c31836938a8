#include "proxy/service_view.h"

#include <gtest/gtest.h>

namespace tessera::proxy {
namespace {

constexpr const char* kService = R"({
  "apiVersion": "tessera/v1", "kind": "Service", "metadata": {"name": "llm"},
  "spec": {"roles": [{"name": "decode", "maxOngoingRequests": 3, "port": 8000},
                     {"name": "prefill", "port": 8001}]},
  "status": {"phase": "Ready", "endpoints": [
    {"role": "decode", "replica": 1, "generation": 2, "address": "127.0.0.1", "port": 8011, "ready": true},
    {"role": "decode", "replica": 0, "generation": 1, "address": "127.0.0.1", "port": 8010, "ready": true},
    {"role": "decode", "replica": 2, "generation": 1, "address": "127.0.0.1", "port": 8012, "ready": false},
    {"role": "prefill", "replica": 0, "generation": 1, "address": "127.0.0.1", "port": 8020, "ready": true}
  ]}})";

TEST(ServiceViewTest, ReadyEndpointsOfTheFirstRoleInReplicaOrder) {
  auto view = ParseServiceDocument(kService);
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->name, "llm");
  EXPECT_EQ(view->role, "decode");
  EXPECT_EQ(view->max_ongoing_requests, 3);
  ASSERT_EQ(view->endpoints.size(), 2u);
  EXPECT_EQ(view->endpoints[0], (Endpoint{0, 1, "127.0.0.1", 8010, ""}));
  EXPECT_EQ(view->endpoints[1], (Endpoint{1, 2, "127.0.0.1", 8011, ""}));
  EXPECT_EQ(view->endpoints[1].Key(), "127.0.0.1:8011");
}

TEST(ServiceViewTest, StartingGroupsOfTheFrontRoleAreCounted) {
  auto view = ParseServiceDocument(R"({
    "metadata": {"name": "llm"}, "spec": {"roles": [{"name": "server"}]},
    "status": {"roles": [{"name": "server", "replicas": [
        {"replica": 0, "phase": "Ready"}, {"replica": 1, "phase": "Terminating"},
        {"replica": 2, "phase": "Starting"}, {"replica": 3, "phase": "Recreating"},
        {"replica": 4, "phase": "Pending"}, {"replica": 5, "phase": "Unready"}]},
      {"name": "other", "replicas": [{"replica": 0, "phase": "Starting"}]}]}})");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->starting, 2);
  auto ready = ParseServiceDocument(kService);
  ASSERT_TRUE(ready.ok());
  EXPECT_EQ(ready->starting, 0);
}

TEST(ServiceViewTest, TheImplicitRoleIsServerWithTheDefaultLimit) {
  auto view = ParseServiceDocument(
      R"({"metadata": {"name": "echo"}, "spec": {"topology": "4x4", "port": 8000}})");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  EXPECT_EQ(view->role, "server");
  EXPECT_EQ(view->max_ongoing_requests, kDefaultMaxOngoingRequests);
  EXPECT_TRUE(view->endpoints.empty());
}

TEST(ServiceViewTest, AServiceOfAnotherNamespaceIsKeyedByItsNamespace) {
  auto other = ParseServiceDocument(R"({"metadata": {"name": "echo", "namespace": "team-x"}})");
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  EXPECT_EQ(other->name, "team-x.echo");
  auto plain = ParseServiceDocument(R"({"metadata": {"name": "echo", "namespace": "default"}})");
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  EXPECT_EQ(plain->name, "echo");
  auto bad = ParseServiceDocument(R"({"metadata": {"name": "echo", "namespace": 3}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("metadata.namespace"), std::string::npos);
}

TEST(ServiceViewTest, WrongDocumentsNameTheField) {
  auto no_name = ParseServiceDocument(R"({"metadata": {}})");
  ASSERT_FALSE(no_name.ok());
  EXPECT_NE(no_name.status().message().find("metadata.name"), std::string::npos);

  auto bad_limit = ParseServiceDocument(
      R"({"metadata": {"name": "a"}, "spec": {"roles": [{"name": "s", "maxOngoingRequests": 0}]}})");
  ASSERT_FALSE(bad_limit.ok());
  EXPECT_NE(bad_limit.status().message().find("spec.roles[0].maxOngoingRequests"),
            std::string::npos)
      << bad_limit.status().message();

  auto bad_port = ParseServiceDocument(
      R"({"metadata": {"name": "a"}, "status": {"endpoints": [
          {"role": "server", "address": "h", "port": 70000, "ready": true}]}})");
  ASSERT_FALSE(bad_port.ok());
  EXPECT_NE(bad_port.status().message().find("status.endpoints[0].port"), std::string::npos)
      << bad_port.status().message();

  EXPECT_FALSE(ParseServiceDocument("not json").ok());
}

TEST(ServiceViewTest, WatchEventsAndLists) {
  auto event =
      ParseServiceEvent(std::string(R"({"type": "MODIFIED", "object": )") + kService + "}");
  ASSERT_TRUE(event.ok()) << event.status().ToString();
  EXPECT_EQ(event->type, ServiceEvent::Type::kModified);
  EXPECT_EQ(event->service.endpoints.size(), 2u);

  auto deleted = ParseServiceEvent(R"({"type": "DELETED", "object": {"metadata": {"name": "x"}}})");
  ASSERT_TRUE(deleted.ok());
  EXPECT_EQ(deleted->type, ServiceEvent::Type::kDeleted);
  EXPECT_EQ(deleted->service.name, "x");

  auto bad_type = ParseServiceEvent(R"({"type": "BOOKMARK", "object": {}})");
  ASSERT_FALSE(bad_type.ok());
  EXPECT_NE(bad_type.status().message().find("type"), std::string::npos);

  auto list = ParseServiceList(std::string(R"({"items": [)") + kService + "]}");
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 1u);
  EXPECT_EQ((*list)[0].name, "llm");
}

TEST(ServiceViewTest, StaticEndpointsFile) {
  auto services = ParseStaticEndpoints(R"({"services": [
      {"name": "echo", "maxOngoingRequests": 2,
       "endpoints": [{"address": "127.0.0.1", "port": 9001}, {"address": "127.0.0.1", "port": 9000}]},
      {"name": "other", "endpoints": []}]})");
  ASSERT_TRUE(services.ok()) << services.status().ToString();
  ASSERT_EQ(services->size(), 2u);
  EXPECT_EQ((*services)[0].max_ongoing_requests, 2);
  ASSERT_EQ((*services)[0].endpoints.size(), 2u);
  EXPECT_EQ((*services)[0].endpoints[0].replica, 0);
  EXPECT_EQ((*services)[0].endpoints[0].port, 9001);
  EXPECT_EQ((*services)[1].max_ongoing_requests, kDefaultMaxOngoingRequests);

  struct Case {
    const char* text;
    const char* names;
  };
  for (const Case& c : {
           Case{R"({"service": []})", "unknown field 'service'"},
           Case{R"({"services": [{"endpoints": []}]})", "services[0].name"},
           Case{R"({"services": [{"name": "a"}]})", "services[0].endpoints"},
           Case{R"({"services": [{"name": "a", "endpoints": [{"port": 1}]}]})",
                "services[0].endpoints[0].address"},
           Case{R"({"services": [{"name": "a", "endpoints": [{"address": "h", "port": "80"}]}]})",
                "services[0].endpoints[0].port"},
           Case{R"({"services": [{"name": "a", "endpoints": []}, {"name": "a", "endpoints": []}]})",
                "listed twice"},
           Case{R"({"services": [{"name": "a", "endpoints": [], "weight": 2}]})",
                "unknown field 'weight'"},
           Case{R"({"services": [{"name": "a", "endpoints": [{"address": "h", "port": 80,
                                                            "scheme": "tls"}]}]})",
                "services[0].endpoints[0].scheme: must be \"http\" or \"https\""},
       }) {
    auto r = ParseStaticEndpoints(c.text);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.names), std::string::npos)
        << c.text << " -> " << r.status().message();
  }
}

TEST(ServiceViewTest, AnEndpointsSchemeSaysWhetherTheReplicaServesTls) {
  auto view = ParseServiceDocument(R"({"metadata": {"name": "chat"}, "spec": {"port": 8000},
      "status": {"endpoints": [
        {"role": "server", "replica": 0, "scheme": "https", "address": "10.0.0.3", "port": 8000,
         "ready": true},
        {"role": "server", "replica": 1, "scheme": "http", "address": "10.0.0.4", "port": 8000,
         "ready": true},
        {"role": "server", "replica": 2, "address": "10.0.0.5", "port": 8000, "ready": true}]}})");
  ASSERT_TRUE(view.ok()) << view.status().ToString();
  ASSERT_EQ(view->endpoints.size(), 3u);
  EXPECT_TRUE(view->endpoints[0].tls);
  EXPECT_FALSE(view->endpoints[1].tls);
  EXPECT_FALSE(view->endpoints[2].tls);  // a head from before TLS to replicas says nothing
  EXPECT_EQ(view->endpoints[0].Key(), "10.0.0.3:8000");

  auto bad = ParseServiceDocument(R"({"metadata": {"name": "chat"}, "spec": {"port": 8000},
      "status": {"endpoints": [{"role": "server", "replica": 0, "scheme": 443,
                                "address": "10.0.0.3", "port": 8000, "ready": true}]}})");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("status.endpoints[0].scheme: must be a string"),
            std::string::npos)
      << bad.status().message();
}

}  // namespace
}  // namespace tessera::proxy

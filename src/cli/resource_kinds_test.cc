#include "cli/resource_kinds.h"

#include <gtest/gtest.h>

#include "cli/commands.h"

namespace tessera::cli {
namespace {

using Json = nlohmann::json;

// `get --help` and the unknown-kind error list every kind the head serves, with its aliases.
TEST(ResourceKinds, HelpNamesEveryKindAndEveryKindResolves) {
  const std::string help = KindHelp();
  for (const char* path : {"jobs", "services", "hosts", "events", "clusterqueues", "localqueues",
                           "priorityclasses", "slicereservations"}) {
    EXPECT_NE(help.find(path), std::string::npos) << path;
    EXPECT_EQ(KindPath(path), path);
  }
  EXPECT_NE(help.find("sr"), std::string::npos);
  EXPECT_EQ(KindPath("SR"), "slicereservations");
  EXPECT_EQ(KindPath("job"), "jobs");
  EXPECT_EQ(KindPath("svc"), "services");
  EXPECT_EQ(KindPath("queue"), "clusterqueues");
  EXPECT_EQ(KindObjectPrefix("jobs"), "trainjob");
  try {
    KindPath("pods");
    ADD_FAILURE() << "pods resolved";
  } catch (const CommandError& e) {
    EXPECT_EQ(e.code, 2);
    EXPECT_NE(std::string(e.what()).find("'pods' is unknown; valid: jobs"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("slicereservations"), std::string::npos);
  }
}

TEST(ResourceKinds, OnlyJobsServicesAndReservationsHaveAGetRoute) {
  EXPECT_TRUE(KindHasGetRoute("jobs"));
  EXPECT_TRUE(KindHasGetRoute("services"));
  EXPECT_TRUE(KindHasGetRoute("slicereservations"));
  EXPECT_FALSE(KindHasGetRoute("hosts"));
  EXPECT_FALSE(KindHasGetRoute("clusterqueues"));
  EXPECT_FALSE(KindHasGetRoute("events"));
}

// `tessera get hosts a c x`: a and c in the order asked, x reported as kubectl does.
TEST(ResourceKinds, SelectNamedKeepsTheOrderAskedAndNamesTheMissing) {
  const Json items = Json::parse(R"([
    {"metadata": {"name": "a"}, "status": {"state": "Ready"}},
    {"metadata": {"name": "b"}},
    {"metadata": {"name": "c"}},
    {"no": "metadata"}])");
  NamedItems picked = SelectNamed(items, {"c", "x", "a"});
  ASSERT_EQ(picked.found.size(), 2u);
  EXPECT_EQ(picked.found[0]["metadata"]["name"], "c");
  EXPECT_EQ(picked.found[1]["metadata"]["name"], "a");
  EXPECT_EQ(picked.found[1]["status"]["state"], "Ready");
  EXPECT_EQ(picked.missing, std::vector<std::string>{"x"});
  EXPECT_EQ(NotFoundMessage("hosts", picked.missing), "host \"x\" not found");
  EXPECT_EQ(NotFoundMessage("jobs", {"p", "q"}),
            "trainjob \"p\" not found; trainjob \"q\" not found");
  EXPECT_TRUE(SelectNamed(Json(), {"a"}).found.empty());
  EXPECT_EQ(SelectNamed(Json(), {"a"}).missing, std::vector<std::string>{"a"});
}

}  // namespace
}  // namespace tessera::cli

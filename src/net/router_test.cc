#include "net/router.h"

#include <gtest/gtest.h>

namespace tessera::net {
namespace {

Handler Named(std::string name) {
  return [name](const Request&) { return Response::Text(200, name); };
}

std::string HandlerName(const Router::Match& m) {
  return m.handler ? (*m.handler)(Request()).body : "";
}

TEST(Router, BindsPathParamsAndPrefersLiterals) {
  Router router;
  ASSERT_TRUE(router.Add(Method::kGet, "/api/v1/jobs/{name}", Named("get-job")).ok());
  ASSERT_TRUE(router.Add(Method::kGet, "/api/v1/jobs/search", Named("search")).ok());
  ASSERT_TRUE(router.Add(Method::kGet, "/ui/{path...}", Named("ui")).ok());

  Router::Match m = router.Find(Method::kGet, "/api/v1/jobs/a%20b/");
  ASSERT_EQ(m.outcome, Router::Outcome::kFound);
  EXPECT_EQ(HandlerName(m), "get-job");
  EXPECT_EQ(m.params.at("name"), "a b");

  m = router.Find(Method::kGet, "/api/v1/jobs/search");
  EXPECT_EQ(HandlerName(m), "search");
  EXPECT_TRUE(m.params.empty());

  m = router.Find(Method::kGet, "/api/v1/jobs/x%2Fy");
  EXPECT_EQ(m.params.at("name"), "x/y");  // an escaped slash does not split a segment

  m = router.Find(Method::kGet, "/ui/css/site.css");
  EXPECT_EQ(HandlerName(m), "ui");
  EXPECT_EQ(m.params.at("path"), "css/site.css");
  EXPECT_EQ(router.Find(Method::kGet, "/ui").params.at("path"), "");
}

TEST(Router, DistinguishesNoRouteFromWrongMethod) {
  Router router;
  ASSERT_TRUE(router.Add(Method::kGet, "/jobs/{name}", Named("get")).ok());
  ASSERT_TRUE(router.Add(Method::kDelete, "/jobs/{name}", Named("delete")).ok());
  EXPECT_EQ(router.Find(Method::kGet, "/hosts").outcome, Router::Outcome::kNoRoute);
  EXPECT_EQ(router.Find(Method::kGet, "/jobs").outcome, Router::Outcome::kNoRoute);
  EXPECT_EQ(router.Find(Method::kGet, "/jobs/a/b").outcome, Router::Outcome::kNoRoute);
  Router::Match m = router.Find(Method::kPost, "/jobs/a");
  EXPECT_EQ(m.outcome, Router::Outcome::kWrongMethod);
  EXPECT_EQ(m.allow, "GET, DELETE");
  EXPECT_EQ(router.Find(Method::kGet, "/jobs/%zz").outcome, Router::Outcome::kNoRoute);
}

TEST(Router, RejectsBadPatterns) {
  Router router;
  EXPECT_EQ(router.Add(Method::kGet, "jobs", Named("x")).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(router.Add(Method::kGet, "/a/{rest...}/b", Named("x")).ok());
  EXPECT_FALSE(router.Add(Method::kGet, "/a/{}", Named("x")).ok());
  EXPECT_FALSE(router.Add(Method::kGet, "/a/x{y}", Named("x")).ok());
  EXPECT_FALSE(router.Add(Method::kGet, "/a/{x}/{x}", Named("x")).ok());
  ASSERT_TRUE(router.Add(Method::kGet, "/a/{x}", Named("x")).ok());
  Status dup = router.Add(Method::kGet, "/a/{y}", Named("y"));
  EXPECT_EQ(dup.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(dup.message().find("clashes"), std::string::npos);
  EXPECT_TRUE(router.Add(Method::kPut, "/a/{y}", Named("y")).ok());
}

TEST(Url, DecodesEscapesAndQueries) {
  EXPECT_EQ(*PercentDecode("a%20b+c", false), "a b+c");
  EXPECT_EQ(*PercentDecode("a%20b+c", true), "a b c");
  EXPECT_FALSE(PercentDecode("%2", false).ok());
  EXPECT_FALSE(PercentDecode("%g0", false).ok());
  auto q = ParseQuery("watch=1&label=a%3Db&flag&&x=1&x=2");
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->at("watch"), "1");
  EXPECT_EQ(q->at("label"), "a=b");
  EXPECT_EQ(q->at("flag"), "");
  EXPECT_EQ(q->at("x"), "2");
  EXPECT_EQ(q->size(), 4u);
}

}  // namespace
}  // namespace tessera::net

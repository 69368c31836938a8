#include "common/json_limits.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>

namespace tessera {
namespace {

std::string Nested(int depth, const std::string& inner = "1") {
  return std::string(static_cast<size_t>(depth), '[') + inner +
         std::string(static_cast<size_t>(depth), ']');
}

TEST(JsonLimits, ParsesOrdinaryDocuments) {
  auto j = ParseJson(R"({"a": [1, 2.5, "x", null, true, {"b": {}}], "c": -3})", "body");
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["a"][1].get<double>(), 2.5);
  EXPECT_EQ((*j)["a"][5]["b"], nlohmann::json::object());
  EXPECT_EQ((*j)["c"].get<int>(), -3);
  EXPECT_TRUE(ParseJson("  7 ", "body").ok());
}

TEST(JsonLimits, SixtyFourLevelsPassAndSixtyFiveAreRefused) {
  EXPECT_TRUE(ParseJson(Nested(64), "body").ok());
  auto deep = ParseJson(Nested(65), "body");
  ASSERT_FALSE(deep.ok());
  EXPECT_EQ(deep.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(deep.status().message().find("body: "), std::string::npos);
  EXPECT_NE(deep.status().message().find("nested deeper than 64 levels"), std::string::npos)
      << deep.status().message();
}

TEST(JsonLimits, AHundredThousandLevelsAreRefusedQuicklyWithoutCrashing) {
  const std::string arrays = Nested(100'000);
  const std::string objects = [] {
    std::string s;
    for (int i = 0; i < 100'000; ++i) s += R"({"a":)";
    s += "1";
    s += std::string(100'000, '}');
    return s;
  }();
  for (const std::string& text : {arrays, objects, R"({"metadata": {"labels": )" + arrays + "}}"}) {
    auto j = ParseJson(text, "registration");
    ASSERT_FALSE(j.ok());
    EXPECT_EQ(j.status().message().rfind("registration: ", 0), 0u) << j.status().message();
    EXPECT_NE(j.status().message().find("deeper than 64"), std::string::npos);
  }
  auto j = ParseJson(R"({"metadata": {"labels": )" + arrays + "}}", "body");
  EXPECT_NE(j.status().message().find("body: metadata.labels[0][0]"), std::string::npos)
      << j.status().message();
  // Unterminated: the limit is found before the missing brackets are.
  EXPECT_NE(ParseJson(std::string(100'000, '['), "body").status().message().find("deeper"),
            std::string::npos);
}

TEST(JsonLimits, DuplicateKeysAreRefusedNamingTheKey) {
  auto j = ParseJson(R"({"metadata": {"name": "a", "name": "b"}})", "body");
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("body: metadata.name: key appears twice"), std::string::npos)
      << j.status().message();
  // The same key in two different objects is fine.
  EXPECT_TRUE(ParseJson(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})", "b").ok());
  auto in_list = ParseJson(R"({"a": [{"x": 1}, {"x": 2, "x": 3}]})", "heartbeat");
  EXPECT_NE(in_list.status().message().find("heartbeat: a[1].x: key appears twice"),
            std::string::npos)
      << in_list.status().message();
}

TEST(JsonLimits, ValueCountIsBoundedWhenAsked) {
  JsonLimits limits;
  limits.max_values = 10;
  EXPECT_TRUE(ParseJson("[1,2,3,4,5,6,7,8,9]", "body", limits).ok());
  auto j = ParseJson("[1,2,3,4,5,6,7,8,9,10]", "body", limits);
  ASSERT_FALSE(j.ok());
  EXPECT_NE(j.status().message().find("more than 10 values"), std::string::npos);
}

TEST(JsonLimits, MalformedTextNamesThePosition) {
  for (const char* text : {"", "{", R"({"a": })", "[1,]", "{} {}", "nul"}) {
    auto j = ParseJson(text, "body");
    ASSERT_FALSE(j.ok()) << text;
    EXPECT_NE(j.status().message().find("body: malformed JSON"), std::string::npos)
        << j.status().message();
  }
  EXPECT_NE(ParseJson("[1,]", "body").status().message().find("column 4"), std::string::npos);
  // A number out of double's range is malformed, and the message names its field.
  auto overflow = ParseJson(R"({"spec": {"slices": 1e400}})", "body");
  EXPECT_NE(overflow.status().message().find("body: malformed JSON at spec.slices: "),
            std::string::npos)
      << overflow.status().message();
  EXPECT_NE(overflow.status().message().find("1e400"), std::string::npos);
}

TEST(JsonLimits, ManySmallObjectsParseInLinearTime) {
  // nlohmann's callback parser rescans the parent after each object: quadratic here.
  std::string text = "[";
  for (int i = 0; i < 200'000; ++i) text += i ? ",{}" : "{}";
  text += "]";
  const auto start = std::chrono::steady_clock::now();
  auto j = ParseJson(text, "body");
  ASSERT_TRUE(j.ok());
  EXPECT_EQ(j->size(), 200'000u);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(JsonLimits, ShownTextEscapesWhatCannotBePrinted) {
  EXPECT_EQ(ShownText("abc"), "'abc'");
  EXPECT_EQ(ShownText(std::string("a\0b", 3)), "'a\\x00b'");
  EXPECT_EQ(ShownText("a'\n"), "'a\\x27\\x0a'");
  EXPECT_EQ(ShownText("abcdef", 3), "'abc...'");
}

TEST(JsonLimits, FirstInvalidUtf8FindsTheFirstBadByte) {
  constexpr size_t kNone = std::string_view::npos;
  EXPECT_EQ(FirstInvalidUtf8(""), kNone);
  EXPECT_EQ(FirstInvalidUtf8("plain ascii"), kNone);
  EXPECT_EQ(FirstInvalidUtf8("\xc3\xa9t\xc3\xa9 \xe2\x82\xac \xf0\x9f\x99\x82"), kNone);
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x8f\xbf\xbf"), kNone);  // U+10FFFF, the last code point
  EXPECT_EQ(FirstInvalidUtf8("ab\xff"), 2u);               // never in UTF-8
  EXPECT_EQ(FirstInvalidUtf8("a\xc3"), 1u);                // truncated
  EXPECT_EQ(FirstInvalidUtf8("\xc3\x28"), 0u);             // bad continuation
  EXPECT_EQ(FirstInvalidUtf8("\xc0\xaf"), 0u);             // overlong '/'
  EXPECT_EQ(FirstInvalidUtf8("\xe0\x80\xaf"), 0u);         // overlong, three bytes
  EXPECT_EQ(FirstInvalidUtf8("x\xed\xa0\x80"), 1u);        // a surrogate
  EXPECT_EQ(FirstInvalidUtf8("\xf4\x90\x80\x80"), 0u);     // above U+10FFFF
  EXPECT_EQ(FirstInvalidUtf8("\xe2\x82\xac\x80"), 3u);     // a lone continuation byte
}

}  // namespace
}  // namespace tessera

// SseTokenCounter: token events counted from a stream cut at every byte boundary, [DONE] and the
// usage chunk not counted, CRLF lines, overlong lines; TimePerOutputToken's definition.
#include "proxy/token_counter.h"

#include <gtest/gtest.h>

#include <string>

namespace tessera::proxy {
namespace {

// The example server's stream of three tokens with include_usage (examples/serve/completions.py).
const std::string kStream =
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"a\",\"index\":0}]}\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\":[{\"text\":\"b\",\"index\":0}]}\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\": [{\"text\":\"\\n\",\"index\":0,"
    "\"finish_reason\":\"length\"}]}\n\n"
    "data: {\"id\":\"cmpl-1\",\"choices\": [], \"usage\": {\"completion_tokens\": 3}}\n\n"
    "data: [DONE]\n\n";

TEST(SseTokenCounterTest, CountsTokenEventsButNotDoneOrTheUsageChunk) {
  SseTokenCounter c;
  c.Feed(kStream);
  EXPECT_EQ(c.tokens(), 3u);
}

TEST(SseTokenCounterTest, TheSameCountWhereverTheStreamIsCut) {
  for (size_t cut = 0; cut <= kStream.size(); ++cut) {
    SseTokenCounter c;
    c.Feed(std::string_view(kStream).substr(0, cut));
    c.Feed(std::string_view(kStream).substr(cut));
    EXPECT_EQ(c.tokens(), 3u) << "cut at " << cut;
  }
  SseTokenCounter bytewise;
  for (char ch : kStream) bytewise.Feed(std::string_view(&ch, 1));
  EXPECT_EQ(bytewise.tokens(), 3u);
}

TEST(SseTokenCounterTest, CrlfLinesCommentsOtherFieldsAndAnUnfinishedLine) {
  SseTokenCounter c;
  c.Feed(": a comment\r\nevent: message\r\ndata:{\"choices\":[{}]}\r\n\r\n");
  EXPECT_EQ(c.tokens(), 1u);
  c.Feed("data:[DONE]\r\n\r\ndata: {\"choices\":[]}\n");
  EXPECT_EQ(c.tokens(), 1u);
  c.Feed("data: {\"choices\":[{}]}");  // its line has not ended yet
  EXPECT_EQ(c.tokens(), 1u);
  c.Feed("\n");
  EXPECT_EQ(c.tokens(), 2u);
  c.Feed("data:\n");  // an empty data line carries nothing
  EXPECT_EQ(c.tokens(), 2u);
  c.Reset();
  EXPECT_EQ(c.tokens(), 0u);
}

TEST(SseTokenCounterTest, AnEventLongerThanTheLineCapStillCountsOnce) {
  SseTokenCounter c;
  c.Feed("data: {\"choices\":[{\"text\":\"" + std::string(5000, 'x') + "\"}]}\n\n");
  EXPECT_EQ(c.tokens(), 1u);
  c.Feed("data: {\"choices\":[{\"text\":\"y\"}]}\n\n");  // the cap did not stick
  EXPECT_EQ(c.tokens(), 2u);
}

TEST(TimePerOutputTokenTest, TheTimeAfterTheFirstTokenOverTheTokensAfterIt) {
  EXPECT_DOUBLE_EQ(TimePerOutputToken(0.5, 1.5, 11), 0.1);
  EXPECT_DOUBLE_EQ(TimePerOutputToken(0.5, 0.5, 2), 0.0);
  EXPECT_EQ(TimePerOutputToken(0.5, 1.5, 1), -1);
  EXPECT_EQ(TimePerOutputToken(0.5, 1.5, 0), -1);
  EXPECT_EQ(TimePerOutputToken(1.5, 0.5, 3), -1);
}

}  // namespace
}  // namespace tessera::proxy

#include "agent/progress.h"

#include <gtest/gtest.h>

#include "agent/test_util.h"

namespace tessera::agent {
namespace {

using testing::AppendFile;
using testing::TempDir;

std::string Line(int step) {
  return R"({"type":"progress","step":)" + std::to_string(step) +
         R"(,"rank":0,"attempt":0,"time":1700000000.25})" + "\n";
}

TEST(ProgressTest, ParsesTheSdkLineFormats) {
  ProgressRecord r;
  ASSERT_TRUE(ParseProgressLine(
      R"({"type":"checkpoint","step":40,"seconds":1.5,"rank":2,"attempt":1,"time":1700000000.5})",
      r));
  EXPECT_EQ(r.type, "checkpoint");
  EXPECT_EQ(r.step, 40);
  EXPECT_DOUBLE_EQ(r.seconds, 1.5);
  EXPECT_EQ(r.time_ms, 1700000000500);
  ASSERT_TRUE(ParseProgressLine(
      R"({"type":"restore","step":30,"seconds":0.75,"rank":0,"attempt":2,"time":1700000001})", r));
  EXPECT_EQ(r.type, "restore");
  EXPECT_EQ(r.step, 30);
  EXPECT_DOUBLE_EQ(r.seconds, 0.75);
  EXPECT_EQ(r.time_ms, 1700000001000);
  EXPECT_FALSE(ParseProgressLine(R"({"type":"restore","step":3,"seconds":-1})", r));
  ASSERT_TRUE(ParseProgressLine(R"({"type":"alive","step":30,"rank":1,"time":1700000002})", r));
  EXPECT_EQ(r.type, "alive");
  EXPECT_EQ(r.step, 30);
  EXPECT_FALSE(ParseProgressLine(R"({"type":"other","step":1})", r));
  EXPECT_FALSE(ParseProgressLine(R"({"type":"progress","step":-1})", r));
  EXPECT_FALSE(ParseProgressLine(R"({"type":"progress"})", r));
  EXPECT_FALSE(ParseProgressLine("not json", r));
  EXPECT_FALSE(ParseProgressLine(R"({"type":"checkpoint","step":1,"seconds":-2})", r));
}

TEST(ProgressTest, MissingFileYieldsNothing) {
  TempDir dir;
  ProgressTailer tailer(dir.path() + "/none.jsonl");
  std::vector<ProgressRecord> out;
  EXPECT_EQ(tailer.Read(10, out), 0u);
  EXPECT_EQ(tailer.offset(), 0u);
}

TEST(ProgressTest, PartialLastLineWaitsForItsNewline) {
  TempDir dir;
  const std::string path = dir.path() + "/p.jsonl";
  ProgressTailer tailer(path);
  std::vector<ProgressRecord> out;
  const std::string second = Line(2);
  AppendFile(path, Line(1) + second.substr(0, 10));
  EXPECT_EQ(tailer.Read(100, out), 1u);
  EXPECT_EQ(tailer.offset(), Line(1).size());
  EXPECT_EQ(tailer.Read(100, out), 0u);  // still partial
  AppendFile(path, second.substr(10));
  EXPECT_EQ(tailer.Read(100, out), 1u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].step, 1);
  EXPECT_EQ(out[1].step, 2);
  EXPECT_EQ(out[1].time_ms, 1700000000250);
  EXPECT_EQ(tailer.malformed_lines(), 0u);
}

TEST(ProgressTest, BatchesAreCappedAndResumeWhereTheyStopped) {
  TempDir dir;
  const std::string path = dir.path() + "/p.jsonl";
  std::string text;
  for (int i = 0; i < 2500; ++i) text += Line(i);
  AppendFile(path, text);
  ProgressTailer tailer(path);
  std::vector<ProgressRecord> out;
  EXPECT_EQ(tailer.Read(1000, out), 1000u);
  EXPECT_EQ(tailer.Read(1000, out), 1000u);
  EXPECT_EQ(tailer.Read(1000, out), 500u);
  EXPECT_EQ(tailer.Read(1000, out), 0u);
  ASSERT_EQ(out.size(), 2500u);
  for (int i = 0; i < 2500; ++i) ASSERT_EQ(out[i].step, i);
  // A tailer started from a saved offset continues from there.
  uint64_t offset = 0;
  for (int i = 0; i < 2400; ++i) offset += Line(i).size();
  ProgressTailer resumed(path, offset);
  std::vector<ProgressRecord> rest;
  EXPECT_EQ(resumed.Read(1000, rest), 100u);
  EXPECT_EQ(rest.front().step, 2400);
}

TEST(ProgressTest, MalformedAndOverlongLinesAreSkippedAndCounted) {
  TempDir dir;
  const std::string path = dir.path() + "/p.jsonl";
  AppendFile(path, Line(1) + "garbage\n\n" + std::string(ProgressTailer::kMaxLineBytes * 5, 'x') +
                       "\n" + Line(2));
  ProgressTailer tailer(path);
  std::vector<ProgressRecord> out;
  EXPECT_EQ(tailer.Read(100, out), 2u);
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].step, 2);
  EXPECT_GE(tailer.malformed_lines(), 2u);
}

}  // namespace
}  // namespace tessera::agent

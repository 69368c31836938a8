// ResponseReader on its own, and a duplex stream (Response::on_client_line) between HttpServer
// and DuplexClient over a real socket on 127.0.0.1, port 0.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "net/duplex_client.h"
#include "net/http_server.h"
#include "net/response_reader.h"

namespace tessera::net {
namespace {

struct ReaderLog {
  std::vector<int> statuses;
  std::string body;
  int ends = 0;
};

ResponseReader LoggingReader(ReaderLog& log) {
  ResponseReader r;
  r.on_header = [&log](int s) { log.statuses.push_back(s); };
  r.on_data = [&log](std::string_view d) { log.body.append(d); };
  r.on_end = [&log] { ++log.ends; };
  return r;
}

TEST(ResponseReader, ReadsLengthAndChunkedBodiesByteByByte) {
  const std::string wire =
      "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
      "HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"
      "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab\n\r\na;x=1\r\n0123456789\r\n"
      "0\r\n\r\n";
  ReaderLog log;
  ResponseReader reader = LoggingReader(log);
  for (char c : wire) ASSERT_TRUE(reader.Feed(std::string_view(&c, 1)));
  EXPECT_EQ(log.statuses, (std::vector<int>{200, 404, 200}));
  EXPECT_EQ(log.body, "helloab\n0123456789");
  EXPECT_EQ(log.ends, 3);
}

TEST(ResponseReader, RefusesWhatIsNotHttp) {
  ReaderLog log;
  ResponseReader reader = LoggingReader(log);
  EXPECT_FALSE(reader.Feed("SSH-2.0-OpenSSH\r\n\r\n"));
  EXPECT_FALSE(reader.Feed("HTTP/1.1 200 OK\r\n\r\n"));  // spent
  ResponseReader bad_chunk = LoggingReader(log);
  EXPECT_FALSE(bad_chunk.Feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"));
}

// An echo channel: each client line comes back as "echo:<line>"; "bye" ends the stream.
class DuplexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.auth.tokens = {"tok"};
    server_ = std::make_unique<HttpServer>(o);
    ASSERT_TRUE(server_
                    ->Handle(Method::kGet, "/echo",
                             [](const Request&) {
                               auto writer = std::make_shared<std::shared_ptr<StreamWriter>>();
                               Response out =
                                   Response::Stream([writer](std::shared_ptr<StreamWriter> w) {
                                     w->Write("hello\n");
                                     *writer = std::move(w);
                                   });
                               out.on_client_line = [writer](std::string_view line) {
                                 if (line == "bye") return (*writer)->Close();
                                 (*writer)->Write("echo:" + std::string(line) + "\n");
                               };
                               return out;
                             })
                    .ok());
    ASSERT_TRUE(server_->Start().ok());
  }
  void TearDown() override { server_->Stop(); }
  ClientOptions Client() const {
    ClientOptions c;
    c.port = server_->port();
    c.bearer_token = "tok";
    return c;
  }
  std::unique_ptr<HttpServer> server_;
};

TEST_F(DuplexTest, LinesGoBothWaysInOrderOnOneConnection) {
  DuplexClient client(Client());
  std::vector<std::string> lines;
  const Status done = client.Run(
      Method::kGet, "/echo", {},
      [&] {
        // Sent as one write, split by the server into lines, in order.
        EXPECT_TRUE(client.Send("a"));
        EXPECT_TRUE(client.Send("b\r"));
      },
      [&](std::string_view line) {
        lines.emplace_back(line);
        if (lines.size() == 3) {
          EXPECT_TRUE(client.Send("bye"));
        }
        return true;
      });
  EXPECT_TRUE(done.ok()) << done.ToString();
  EXPECT_EQ(lines, (std::vector<std::string>{"hello", "echo:a", "echo:b"}));
  // The server ended the stream ("bye") and closes the connection.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (server_->connection_count() != 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a poll, not a wait for an event
  EXPECT_EQ(server_->connection_count(), 0u);
  EXPECT_FALSE(client.Send("late"));  // no stream open
}

TEST_F(DuplexTest, AnotherThreadSendsWhileTheReaderWaits) {
  DuplexClient client(Client());
  std::promise<void> opened;
  std::vector<std::string> lines;
  std::thread sender([&] {
    opened.get_future().wait();
    for (int i = 0; i < 100; ++i) ASSERT_TRUE(client.Send("n" + std::to_string(i)));
  });
  const Status done = client.Run(
      Method::kGet, "/echo", {}, [&] { opened.set_value(); },
      [&](std::string_view line) {
        lines.emplace_back(line);
        return lines.size() < 101;  // hello + 100 echoes
      });
  sender.join();
  EXPECT_TRUE(done.ok()) << done.ToString();
  ASSERT_EQ(lines.size(), 101u);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(lines[i + 1], "echo:n" + std::to_string(i));
}

TEST_F(DuplexTest, RefusalsAndCancel) {
  ClientOptions wrong = Client();
  wrong.bearer_token = "nope";
  DuplexClient refused(wrong);
  const Status auth =
      refused.Run(Method::kGet, "/echo", {}, {}, [](std::string_view) { return true; });
  EXPECT_EQ(auth.code(), StatusCode::kFailedPrecondition) << auth.ToString();
  DuplexClient missing(Client());
  EXPECT_EQ(
      missing.Run(Method::kGet, "/nothing", {}, {}, [](std::string_view) { return true; }).code(),
      StatusCode::kNotFound);
  DuplexClient cancelled(Client());
  std::thread canceller;
  const Status ended = cancelled.Run(
      Method::kGet, "/echo", {}, [&] { canceller = std::thread([&] { cancelled.Cancel(); }); },
      [](std::string_view) { return true; });
  canceller.join();
  EXPECT_EQ(ended.code(), StatusCode::kUnavailable);
  EXPECT_NE(ended.message().find("cancelled"), std::string::npos) << ended.ToString();
}

}  // namespace
}  // namespace tessera::net

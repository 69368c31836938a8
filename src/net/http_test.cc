// HttpServer and HttpClient against each other over real sockets on 127.0.0.1, port 0.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "net/http_client.h"
#include "net/http_server.h"

namespace tessera::net {
namespace {

using namespace std::chrono_literals;
using json = nlohmann::json;

constexpr char kToken[] = "s3cret";

// Polls `cond` until it holds or `limit` passes; returns the last result.
bool WaitFor(const std::function<bool()>& cond, std::chrono::milliseconds limit = 10s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > deadline) return cond();
    std::this_thread::yield();
    std::this_thread::sleep_for(1ms);  // a poll interval, not a wait for an event
  }
  return true;
}

// A raw TCP connection, for clients that misbehave or that must be held open by the hundred.
class RawConn {
 public:
  // `receive_buffer_bytes` > 0 shrinks the socket's receive buffer (for slow-reader tests).
  explicit RawConn(uint16_t port, int receive_buffer_bytes = 0)
      : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (receive_buffer_bytes > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer_bytes, sizeof receive_buffer_bytes);
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
    timeval tv{10, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawConn() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  bool ok() const { return ok_; }
  bool Send(std::string_view data) {
    while (!data.empty()) {
      ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      data.remove_prefix(static_cast<size_t>(n));
    }
    return true;
  }
  // Reads until `needle` has been seen, the peer closes, or the receive timeout hits.
  std::string ReadUntil(std::string_view needle) {
    while (received_.find(needle) == std::string::npos) {
      char buf[4096];
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) break;
      received_.append(buf, static_cast<size_t>(n));
    }
    return received_;
  }
  // True when the peer has closed the connection (recv returns 0 or an error).
  bool ReadToEnd() {
    char buf[4096];
    while (true) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n == 0) return true;
      if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;
      received_.append(buf, static_cast<size_t>(n));
    }
  }
  const std::string& received() const { return received_; }

 private:
  int fd_;
  bool ok_ = false;
  std::string received_;
};

class HttpTest : public ::testing::Test {
 protected:
  void SetUp() override { StartServer(ServerOptions()); }

  void StartServer(ServerOptions options) {
    options.auth.tokens = {kToken};
    options.auth.exempt_paths = {"/healthz", "/ui/*"};
    server_ = std::make_unique<HttpServer>(std::move(options));
    ASSERT_TRUE(server_
                    ->Handle(Method::kGet, "/healthz",
                             [](const Request&) { return Response::Text(200, "ok"); })
                    .ok());
    ASSERT_TRUE(server_
                    ->Handle(Method::kGet, "/api/v1/jobs/{name}",
                             [this](const Request& r) {
                               ++calls_;
                               json j = {{"name", r.params.at("name")},
                                         {"query", r.query},
                                         {"peer", r.peer},
                                         {"path", r.path},
                                         {"agent", r.Header("user-agent")}};
                               return Response::Json(200, j.dump());
                             })
                    .ok());
    ASSERT_TRUE(server_
                    ->Handle(Method::kPost, "/api/v1/jobs/{name}",
                             [this](const Request& r) {
                               ++calls_;
                               return Response::Json(201, json{{"bytes", r.body.size()}}.dump());
                             })
                    .ok());
    ASSERT_TRUE(server_
                    ->Handle(Method::kGet, "/boom",
                             [](const Request&) -> Response { throw std::runtime_error("kaboom"); })
                    .ok());
    ASSERT_TRUE(server_
                    ->Handle(Method::kGet, "/watch",
                             [this](const Request&) {
                               return Response::Stream([this](std::shared_ptr<StreamWriter> w) {
                                 std::lock_guard<std::mutex> lock(mu_);
                                 writers_.push_back(std::move(w));
                                 cv_.notify_all();
                               });
                             })
                    .ok());
    ASSERT_TRUE(server_->Start().ok());
    ASSERT_NE(server_->port(), 0);
  }

  ClientOptions Options(std::string token = kToken) {
    ClientOptions o;
    o.port = server_->port();
    o.bearer_token = std::move(token);
    return o;
  }

  size_t WriterCount() {
    std::lock_guard<std::mutex> lock(mu_);
    return writers_.size();
  }
  std::shared_ptr<StreamWriter> WaitForWriter(size_t index) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, 10s, [&] { return writers_.size() > index; });
    return writers_.size() > index ? writers_[index] : nullptr;
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> calls_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<StreamWriter>> writers_;
};

TEST_F(HttpTest, RoutesPathParamsAndQuery) {
  HttpClient client(Options());
  auto res = client.Request(Method::kGet, "/api/v1/jobs/llama%208b?queue=research&x=a+b");
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->content_type, "application/json");
  json j = json::parse(res->body);
  EXPECT_EQ(j["name"], "llama 8b");
  EXPECT_EQ(j["path"], "/api/v1/jobs/llama 8b");
  EXPECT_EQ(j["query"]["queue"], "research");
  EXPECT_EQ(j["query"]["x"], "a b");
  EXPECT_EQ(j["agent"], "tessera");
  EXPECT_EQ(j["peer"].get<std::string>().rfind("127.0.0.1:", 0), 0u);

  auto posted = client.Request(Method::kPost, "/api/v1/jobs/a", R"({"spec":{}})");
  ASSERT_TRUE(posted.ok());
  EXPECT_EQ(posted->status, 201);
  EXPECT_EQ(json::parse(posted->body)["bytes"], 11);
}

TEST_F(HttpTest, UnknownRouteIs404WrongMethodIs405HandlerErrorIs500) {
  HttpClient client(Options());
  auto missing = client.Request(Method::kGet, "/api/v1/nothing");
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body).contains("error"));

  auto wrong = client.Request(Method::kDelete, "/api/v1/jobs/a");
  ASSERT_TRUE(wrong.ok());
  EXPECT_EQ(wrong->status, 405);
  EXPECT_EQ(wrong->headers["Allow"], "GET, POST");
  EXPECT_EQ(json::parse(wrong->body)["field"], "method");

  auto boom = client.Request(Method::kGet, "/boom");
  ASSERT_TRUE(boom.ok());
  EXPECT_EQ(boom->status, 500);

  auto dots = client.Request(Method::kGet, "/ui/../api/v1/jobs/a");
  ASSERT_TRUE(dots.ok());
  EXPECT_EQ(dots->status, 400);
  EXPECT_EQ(calls_, 0);
}

TEST_F(HttpTest, AuthRejectsMissingOrWrongTokenBeforeTheHandlerRuns) {
  for (std::string token : {"", "wrong"}) {
    HttpClient client(Options(token));
    auto res = client.Request(Method::kPost, "/api/v1/jobs/a", "{}");
    ASSERT_TRUE(res.ok());
    EXPECT_EQ(res->status, 401) << token;
    EXPECT_EQ(res->headers["WWW-Authenticate"].rfind("Bearer", 0), 0u);
    json j = json::parse(res->body);
    EXPECT_TRUE(j.contains("error"));
    EXPECT_EQ(j["field"], "Authorization");
    // Streams are guarded too.
    Status s = client.Stream(Method::kGet, "/watch", [](std::string_view) { return true; });
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
  }
  EXPECT_EQ(calls_, 0);
  EXPECT_EQ(WriterCount(), 0u);

  HttpClient anonymous(Options(""));
  auto health = anonymous.Request(Method::kGet, "/healthz");
  ASSERT_TRUE(health.ok());
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok");

  HttpClient good(Options());
  auto res = good.Request(Method::kPost, "/api/v1/jobs/a", "{}");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(res->status, 201);
  EXPECT_EQ(calls_, 1);
}

TEST(HasBearerToken, SchemeInAnyCaseExactTokenOnly) {
  auto with = [](std::string header) {
    Request r;
    if (!header.empty()) r.headers["authorization"] = std::move(header);
    return r;
  };
  for (const char* ok : {"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR  s3cret"}) {
    EXPECT_TRUE(HasBearerToken(with(ok), "s3cret")) << ok;
  }
  for (const char* bad : {"", "Bearer", "Bearer ", "Bearers3cret", "Basic s3cret", "Bearer s3cre",
                          "Bearer s3cret2", "Bearer S3CRET", "s3cret"}) {
    EXPECT_FALSE(HasBearerToken(with(bad), "s3cret")) << bad;
  }
  EXPECT_FALSE(HasBearerToken(with("Bearer "), ""));  // an empty token never matches
}

// The server's auth and a handler's own role check (as the head's admin/agent checks do) agree
// on a lower-case scheme: it passes both, where it used to pass auth and fail the role check.
TEST(HttpAuth, LowerCaseBearerPassesAuthAndTheHandlersRoleCheck) {
  ServerOptions options;
  options.auth.tokens = {"admin-token", "agent-token"};
  HttpServer server(options);
  ASSERT_TRUE(server
                  .Handle(Method::kGet, "/admin",
                          [](const Request& r) {
                            if (!HasBearerToken(r, "admin-token")) {
                              return Response::Error(403, "this endpoint needs the admin token");
                            }
                            return Response::Text(200, "admin");
                          })
                  .ok());
  ASSERT_TRUE(server.Start().ok());
  for (const std::string scheme : {"Bearer", "bearer", "BEARER"}) {
    RawConn raw(server.port());
    ASSERT_TRUE(raw.ok());
    raw.Send("GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\nauthorization: " + scheme +
             " admin-token\r\n\r\n");
    ASSERT_TRUE(raw.ReadToEnd());
    EXPECT_EQ(raw.received().rfind("HTTP/1.1 200", 0), 0u) << scheme << ": " << raw.received();
  }
  // The other token passes auth but not the role check.
  RawConn agent(server.port());
  agent.Send(
      "GET /admin HTTP/1.1\r\nHost: x\r\nConnection: close\r\nauthorization: bearer "
      "agent-token\r\n\r\n");
  ASSERT_TRUE(agent.ReadToEnd());
  EXPECT_EQ(agent.received().rfind("HTTP/1.1 403", 0), 0u) << agent.received();
}

// An exempt prefix must not reach a protected route through an encoded '/'. With
// exempt "/public/*" and a protected "/{name}", "/public%2Fx" decodes to "/public/x" (exempt)
// but routes as the one segment "public/x" to "/{name}": before the fix, its handler ran
// without a token.
TEST(HttpAuth, EncodedSlashIsRefusedSoExemptionAndRoutingAgree) {
  ServerOptions options;
  options.auth.tokens = {kToken};
  options.auth.exempt_paths = {"/public/*"};
  HttpServer server(options);
  std::atomic<int> protected_calls{0};
  std::atomic<int> public_calls{0};
  ASSERT_TRUE(server
                  .Handle(Method::kGet, "/{name}",
                          [&](const Request&) {
                            ++protected_calls;
                            return Response::Text(200, "secret");
                          })
                  .ok());
  ASSERT_TRUE(server
                  .Handle(Method::kGet, "/public/{path...}",
                          [&](const Request& r) {
                            ++public_calls;
                            return Response::Text(200, "public " + r.params.at("path"));
                          })
                  .ok());
  ASSERT_TRUE(server.Start().ok());
  ClientOptions anonymous;
  anonymous.port = server.port();
  HttpClient client(anonymous);
  for (const char* path : {"/public%2Fx", "/public%2fx", "/public/a%2Fb", "/x%2F..%2Fpublic"}) {
    auto res = client.Request(Method::kGet, path);
    ASSERT_TRUE(res.ok()) << path << ": " << res.status().ToString();
    EXPECT_EQ(res->status, 400) << path << ": " << res->body;
    json j = json::parse(res->body);
    EXPECT_EQ(j["field"], "path") << path;
    EXPECT_NE(j["error"].get<std::string>().find("%2F"), std::string::npos) << j.dump();
  }
  EXPECT_EQ(protected_calls, 0);
  EXPECT_EQ(public_calls, 0);

  // Unencoded, the same paths are what they look like: exempt and public, or protected.
  auto pub = client.Request(Method::kGet, "/public/x");
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(pub->status, 200);
  EXPECT_EQ(pub->body, "public x");
  auto secret = client.Request(Method::kGet, "/secret");
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ(secret->status, 401);
  EXPECT_EQ(protected_calls, 0);
  EXPECT_EQ(public_calls, 1);
}

TEST_F(HttpTest, OversizedBodyGets413AndTheServerKeepsServing) {
  HttpClient client(Options());
  auto res = client.Request(Method::kPost, "/api/v1/jobs/big", std::string(10 << 20, 'x'));
  ASSERT_TRUE(res.ok()) << res.status().ToString();
  EXPECT_EQ(res->status, 413);
  json j = json::parse(res->body);
  EXPECT_EQ(j["field"], "body");
  EXPECT_NE(j["error"].get<std::string>().find("1048576"), std::string::npos);
  EXPECT_EQ(calls_, 0);

  auto next = client.Request(Method::kPost, "/api/v1/jobs/small", std::string(1000, 'x'));
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(next->status, 201);
  EXPECT_EQ(calls_, 1);

  // A chunked body has no declared size: the limit is enforced while reading.
  RawConn raw(server_->port());
  ASSERT_TRUE(raw.ok());
  std::string chunk(64 * 1024, 'y');
  std::string head = std::string("POST /api/v1/jobs/c HTTP/1.1\r\nHost: x\r\n") +
                     "Authorization: Bearer " + kToken + "\r\nTransfer-Encoding: chunked\r\n\r\n";
  raw.Send(head);
  for (int i = 0; i < 20; ++i) {
    if (!raw.Send("10000\r\n" + chunk + "\r\n")) break;
  }
  EXPECT_NE(raw.ReadUntil("\r\n\r\n").find("413"), std::string::npos);
  EXPECT_EQ(calls_, 1);
}

TEST_F(HttpTest, KeepAliveReusesOneConnection) {
  HttpClient client(Options());
  std::set<std::string> peers;
  for (int i = 0; i < 5; ++i) {
    auto res = client.Request(Method::kGet, "/api/v1/jobs/x");
    ASSERT_TRUE(res.ok());
    peers.insert(json::parse(res->body)["peer"].get<std::string>());
  }
  EXPECT_EQ(peers.size(), 1u);
  EXPECT_EQ(server_->connection_count(), 1u);

  // After the client drops the connection it reconnects transparently.
  client.Disconnect();
  auto res = client.Request(Method::kGet, "/api/v1/jobs/x");
  ASSERT_TRUE(res.ok());
  EXPECT_EQ(peers.count(json::parse(res->body)["peer"].get<std::string>()), 0u);
}

TEST_F(HttpTest, StreamDeliversLinesInOrderFromAnotherThread) {
  constexpr int kLines = 2000;
  HttpClient client(Options());
  std::vector<std::string> lines;
  auto done = std::async(std::launch::async, [&] {
    return client.Stream(Method::kGet, "/watch", [&](std::string_view line) {
      lines.emplace_back(line);
      return true;
    });
  });
  std::shared_ptr<StreamWriter> w = WaitForWriter(0);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->peer().rfind("127.0.0.1:", 0), 0u);
  std::thread pusher([w] {
    for (int i = 0; i < kLines; ++i) {
      ASSERT_TRUE(w->Write(json{{"seq", i}}.dump() + "\n"));
    }
    w->Write("{\"last\":");  // a line split across chunks
    w->Write("true}\n");
    w->Close();
  });
  pusher.join();
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
  Status s = done.get();
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_EQ(lines.size(), kLines + 1u);
  for (int i = 0; i < kLines; ++i) ASSERT_EQ(json::parse(lines[i])["seq"], i);
  EXPECT_EQ(lines.back(), R"({"last":true})");
  EXPECT_FALSE(w->Write("late\n"));
  EXPECT_FALSE(w->IsOpen());
}

TEST_F(HttpTest, ServerNoticesWhenTheStreamingClientLeaves) {
  HttpClient client(Options());
  auto done = std::async(std::launch::async, [&] {
    return client.Stream(Method::kGet, "/watch", [](std::string_view) { return false; });
  });
  std::shared_ptr<StreamWriter> w = WaitForWriter(0);
  ASSERT_NE(w, nullptr);
  std::promise<void> closed;
  w->OnClose([&closed] { closed.set_value(); });
  ASSERT_TRUE(w->Write("hello\n"));
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(done.get().ok());
  // The client closed its socket after the first line; without writing, the server sees it.
  EXPECT_EQ(closed.get_future().wait_for(10s), std::future_status::ready);
  EXPECT_FALSE(w->Write("anyone?\n"));
  EXPECT_FALSE(w->IsOpen());
  bool ran = false;
  w->OnClose([&ran] { ran = true; });  // already closed: runs at once
  EXPECT_TRUE(ran);
}

TEST_F(HttpTest, FiveHundredKeepAliveConnectionsHeldOpenThenAllServed) {
  constexpr int kClients = 500;
  std::vector<std::unique_ptr<HttpClient>> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.push_back(std::make_unique<HttpClient>(Options()));
    auto res = clients.back()->Request(Method::kGet, "/healthz");
    ASSERT_TRUE(res.ok()) << i << ": " << res.status().ToString();
  }
  EXPECT_TRUE(WaitFor([&] { return server_->connection_count() == kClients; }));
  for (int i = 0; i < kClients; ++i) {
    auto res = clients[i]->Request(Method::kGet, "/api/v1/jobs/j" + std::to_string(i));
    ASSERT_TRUE(res.ok()) << i;
    ASSERT_EQ(json::parse(res->body)["name"], "j" + std::to_string(i));
  }
  EXPECT_EQ(server_->connection_count(), static_cast<size_t>(kClients));  // all reused
  EXPECT_EQ(calls_, kClients);
}

TEST_F(HttpTest, FiveHundredOpenStreamsAllReceiveTheirEvents) {
  constexpr int kStreams = 500;
  std::vector<std::unique_ptr<RawConn>> conns;
  std::string request =
      std::string("GET /watch HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ") + kToken + "\r\n\r\n";
  for (int i = 0; i < kStreams; ++i) {
    conns.push_back(std::make_unique<RawConn>(server_->port()));
    ASSERT_TRUE(conns.back()->ok());
    ASSERT_TRUE(conns.back()->Send(request));
  }
  ASSERT_TRUE(WaitFor([&] { return WriterCount() == kStreams; }));
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : writers_) ASSERT_TRUE(w->Write("{\"event\":\"ADDED\"}\n"));
  }
  for (auto& c : conns) {
    std::string got = c->ReadUntil("ADDED");
    ASSERT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos);
    ASSERT_NE(got.find("{\"event\":\"ADDED\"}"), std::string::npos);
  }
}

TEST_F(HttpTest, StopWithOpenStreamsReturnsPromptly) {
  std::vector<std::unique_ptr<HttpClient>> clients;
  std::vector<std::future<Status>> streams;
  for (int i = 0; i < 3; ++i) {
    clients.push_back(std::make_unique<HttpClient>(Options()));
    HttpClient* c = clients.back().get();
    streams.push_back(std::async(std::launch::async, [c] {
      return c->Stream(Method::kGet, "/watch", [](std::string_view) { return true; });
    }));
  }
  std::vector<std::unique_ptr<RawConn>> idle;
  for (int i = 0; i < 3; ++i) idle.push_back(std::make_unique<RawConn>(server_->port()));
  ASSERT_NE(WaitForWriter(2), nullptr);
  std::atomic<int> closed{0};
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& w : writers_) w->OnClose([&closed] { ++closed; });
  }

  auto start = std::chrono::steady_clock::now();
  server_->Stop();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  EXPECT_EQ(closed, 3);
  for (auto& f : streams) {
    ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
    EXPECT_TRUE(f.get().ok());  // the server ended each stream properly
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& w : writers_) EXPECT_FALSE(w->Write("x\n"));
  for (auto& c : idle) EXPECT_TRUE(c->ReadToEnd());
  server_->Stop();  // idempotent
}

TEST_F(HttpTest, OversizedHeaderGets431AndExpectContinueIsHonoured) {
  RawConn big(server_->port());
  ASSERT_TRUE(big.Send("GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + std::string(32 * 1024, 'h') +
                       "\r\n\r\n"));
  EXPECT_NE(big.ReadUntil("\r\n\r\n").find(" 431 "), std::string::npos);

  RawConn expect(server_->port());
  ASSERT_TRUE(expect.Send(std::string("POST /api/v1/jobs/e HTTP/1.1\r\nHost: x\r\n") +
                          "Authorization: Bearer " + kToken +
                          "\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"));
  EXPECT_NE(expect.ReadUntil("\r\n\r\n").find(" 100 "), std::string::npos);
  ASSERT_TRUE(expect.Send("{}"));
  EXPECT_NE(expect.ReadUntil("{\"bytes\":2}").find(" 201 "), std::string::npos);
  EXPECT_EQ(calls_, 1);
}

TEST(HttpTimeouts, SlowlorisAndIdleClientsAreDisconnected) {
  ServerOptions options;
  options.header_timeout = 200ms;
  options.idle_timeout = 300ms;
  HttpServer server(options);
  ASSERT_TRUE(server.Start().ok());

  RawConn slow(server.port());
  ASSERT_TRUE(slow.Send("GET /healthz HTTP/1.1\r\nHost: x\r\n"));  // and never finishes
  RawConn idle(server.port());
  auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(slow.ReadToEnd());
  EXPECT_TRUE(idle.ReadToEnd());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  EXPECT_TRUE(WaitFor([&] { return server.connection_count() == 0; }));
}

TEST(HttpDeferred, TheAnswerComesFromAnotherThreadAndTheIoThreadServesMeanwhile) {
  ServerOptions options;
  options.io_threads = 1;  // the one thread must be free while the deferred request waits
  HttpServer server(options);
  std::promise<std::function<void(Response)>> waiting;
  ASSERT_TRUE(server
                  .Handle(Method::kPost, "/later",
                          [&](const Request& r) {
                            return Response::Deferred(
                                [&waiting, body = r.body](std::function<void(Response)> answer) {
                                  waiting.set_value([answer, body](Response) {
                                    answer(Response::Json(202, json{{"got", body}}.dump()));
                                  });
                                });
                          })
                  .ok());
  ASSERT_TRUE(server
                  .Handle(Method::kGet, "/healthz",
                          [](const Request&) { return Response::Text(200, "ok"); })
                  .ok());
  ASSERT_TRUE(server.Start().ok());
  ClientOptions o;
  o.port = server.port();
  auto later = std::async(std::launch::async, [&] {
    HttpClient client(o);
    auto first = client.Request(Method::kPost, "/later", "abc");
    auto second = client.Request(Method::kGet, "/healthz");  // the same connection, kept alive
    return std::make_pair(first, second);
  });
  auto answer_fn = waiting.get_future();
  ASSERT_EQ(answer_fn.wait_for(10s), std::future_status::ready);
  HttpClient other(o);
  auto meanwhile = other.Request(Method::kGet, "/healthz");
  ASSERT_TRUE(meanwhile.ok()) << meanwhile.status().ToString();
  EXPECT_EQ(meanwhile->status, 200);
  std::thread([f = answer_fn.get()] { f(Response{}); }).join();
  auto [first, second] = later.get();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_EQ(first->status, 202);
  EXPECT_EQ(json::parse(first->body)["got"], "abc");
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(second->status, 200);
}

TEST(HttpStreams, SlowConsumerIsDroppedWhenItsQueueOverflows) {
  ServerOptions options;
  options.max_stream_queue_bytes = 64 * 1024;
  HttpServer server(options);
  std::promise<std::shared_ptr<StreamWriter>> got;
  ASSERT_TRUE(server
                  .Handle(Method::kGet, "/watch",
                          [&](const Request&) {
                            return Response::Stream(
                                [&](std::shared_ptr<StreamWriter> w) { got.set_value(w); });
                          })
                  .ok());
  ASSERT_TRUE(server.Start().ok());
  RawConn reader_that_never_reads(server.port(), 4096);
  ASSERT_TRUE(reader_that_never_reads.Send("GET /watch HTTP/1.1\r\nHost: x\r\n\r\n"));
  auto future = got.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  std::shared_ptr<StreamWriter> w = future.get();
  std::string line(1000, 'z');
  line.push_back('\n');
  // Write as fast as possible: the socket buffers fill, then the queue, then the stream drops.
  auto deadline = std::chrono::steady_clock::now() + 10s;
  bool dropped = false;
  while (!dropped && std::chrono::steady_clock::now() < deadline) dropped = !w->Write(line);
  EXPECT_TRUE(dropped);
  EXPECT_FALSE(w->IsOpen());
}

TEST(HttpClientErrors, TransportFailuresAreUnavailableAndNameTheServer) {
  uint16_t port;
  {
    HttpServer server{ServerOptions()};
    ASSERT_TRUE(server.Start().ok());
    port = server.port();
  }  // now nothing listens there
  ClientOptions o;
  o.port = port;
  o.connect_timeout = 2s;
  HttpClient client(o);
  auto res = client.Request(Method::kGet, "/healthz");
  ASSERT_FALSE(res.ok());
  EXPECT_EQ(res.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(res.status().message().find("127.0.0.1:" + std::to_string(port)), std::string::npos)
      << res.status().message();
  Status s = client.Stream(Method::kGet, "/watch", [](std::string_view) { return true; });
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_EQ(client.Request(Method::kGet, "no-slash").status().code(), StatusCode::kInvalidArgument);
}

TEST(HttpClientErrors, CancelUnblocksAStream) {
  HttpServer server{ServerOptions()};
  std::promise<void> opened;
  ASSERT_TRUE(server
                  .Handle(Method::kGet, "/watch",
                          [&](const Request&) {
                            return Response::Stream(
                                [&](std::shared_ptr<StreamWriter>) { opened.set_value(); });
                          })
                  .ok());
  ASSERT_TRUE(server.Start().ok());
  ClientOptions o;
  o.port = server.port();
  HttpClient client(o);
  auto done = std::async(std::launch::async, [&] {
    return client.Stream(Method::kGet, "/watch", [](std::string_view) { return true; });
  });
  ASSERT_EQ(opened.get_future().wait_for(10s), std::future_status::ready);
  client.Cancel();
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(done.get().code(), StatusCode::kUnavailable);
  EXPECT_EQ(client.Request(Method::kGet, "/watch").status().code(), StatusCode::kUnavailable);
}

TEST(HttpServerStart, PortInUseIsUnavailable) {
  HttpServer first{ServerOptions()};
  ASSERT_TRUE(first.Start().ok());
  ServerOptions o;
  o.port = first.port();
  HttpServer second(o);
  Status s = second.Start();
  EXPECT_EQ(s.code(), StatusCode::kUnavailable);
  EXPECT_NE(s.message().find(std::to_string(first.port())), std::string::npos);
  EXPECT_EQ(first.Start().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(first.Handle(Method::kGet, "/x", [](const Request&) { return Response(); }).code(),
            StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace tessera::net

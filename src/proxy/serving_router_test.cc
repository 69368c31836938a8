// ServingRouter's HTTP handling against a scripted backend on loopback (ports from 0): what
// the replica receives (target, end-to-end headers, X-Forwarded-For, bodies however the client
// framed them) and what the client gets back (bodies across several reads, responses without a
// length re-framed as chunks, HEAD, HTTP/1.0, pipelined requests, kept-alive connections).
// Every wait is bounded by socket timeouts; nothing sleeps.
#include "proxy/serving_router.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tessera::proxy {
namespace {

void SetTimeouts(int fd) {
  timeval tv{30, 0};  // a generous bound: a bug fails the test instead of hanging it
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

bool SendAll(int fd, const std::string& data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n = ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Reads from `fd` into `buf` until it holds `n` bytes; false on close or timeout.
bool ReadAtLeast(int fd, std::string& buf, size_t n) {
  char chunk[65536];
  while (buf.size() < n) {
    const ssize_t got = ::recv(fd, chunk, sizeof chunk, 0);
    if (got <= 0) return false;
    buf.append(chunk, static_cast<size_t>(got));
  }
  return true;
}

// Reads until `buf` contains `what`; returns its position or npos.
size_t ReadUntil(int fd, std::string& buf, const std::string& what) {
  for (;;) {
    if (size_t at = buf.find(what); at != std::string::npos) return at;
    if (!ReadAtLeast(fd, buf, buf.size() + 1)) return std::string::npos;
  }
}

// One HTTP message as read off a socket: the start line, headers (lower-case names, in
// order) and the body with its framing removed.
struct Message {
  std::string start_line;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool chunked = false;

  std::string Header(const std::string& name) const {
    for (const auto& [n, v] : headers) {
      if (n == name) return v;
    }
    return {};
  }
  int Count(const std::string& name) const {
    int count = 0;
    for (const auto& h : headers) count += h.first == name;
    return count;
  }
};

// Reads one message from `fd` (leftover bytes stay in `buf`). Bodies: Content-Length, chunked,
// or (`to_eof`) up to the connection's end. `no_body`: a response to HEAD.
bool ReadMessage(int fd, std::string& buf, Message* m, bool to_eof = false, bool no_body = false) {
  const size_t end = ReadUntil(fd, buf, "\r\n\r\n");
  if (end == std::string::npos) return false;
  std::string head = buf.substr(0, end + 2);
  buf.erase(0, end + 4);
  size_t line_end = head.find("\r\n");
  m->start_line = head.substr(0, line_end);
  for (size_t at = line_end + 2; at < head.size();) {
    const size_t next = head.find("\r\n", at);
    const std::string line = head.substr(at, next - at);
    const size_t colon = line.find(':');
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    m->headers.emplace_back(Lower(line.substr(0, colon)), value);
    at = next + 2;
  }
  if (no_body) return true;
  if (std::string length = m->Header("content-length"); !length.empty()) {
    const size_t n = std::stoul(length);
    if (!ReadAtLeast(fd, buf, n)) return false;
    m->body = buf.substr(0, n);
    buf.erase(0, n);
    return true;
  }
  if (Lower(m->Header("transfer-encoding")) == "chunked") {
    m->chunked = true;
    for (;;) {
      const size_t eol = ReadUntil(fd, buf, "\r\n");
      if (eol == std::string::npos) return false;
      const size_t size = std::stoul(buf.substr(0, eol), nullptr, 16);
      buf.erase(0, eol + 2);
      if (!ReadAtLeast(fd, buf, size + 2)) return false;
      m->body += buf.substr(0, size);
      buf.erase(0, size + 2);
      if (size == 0) return true;  // no trailers in these tests
    }
  }
  if (to_eof) {
    while (ReadAtLeast(fd, buf, buf.size() + 1)) {
    }
    m->body = buf;
    buf.clear();
  }
  return true;
}

// A replica that answers each request with what `respond` returns (raw bytes), and records
// every request it received. One connection at a time, in order; `close` after a response
// ends that connection.
class ScriptedBackend {
 public:
  struct Reply {
    std::string bytes;
    bool close = false;
  };
  using Respond = std::function<Reply(const Message& request)>;

  explicit ScriptedBackend(Respond respond) : respond_(std::move(respond)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(listen_fd_, 16), 0);
    socklen_t len = sizeof addr;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ScriptedBackend() {
    stopping_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (conn_fd_ >= 0) ::shutdown(conn_fd_, SHUT_RDWR);
    }
    thread_.join();
    ::close(listen_fd_);
  }

  uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }
  std::vector<Message> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }

 private:
  void Serve() {
    while (!stopping_) {
      const int fd = ::accept(listen_fd_, nullptr, nullptr);
      if (fd < 0) return;
      ++accepted_;
      SetTimeouts(fd);
      {
        std::lock_guard<std::mutex> lock(mu_);
        conn_fd_ = fd;
      }
      std::string buf;
      for (;;) {
        Message request;
        if (!ReadMessage(fd, buf, &request)) break;
        {
          std::lock_guard<std::mutex> lock(mu_);
          requests_.push_back(request);
        }
        Reply reply = respond_(request);
        if (!SendAll(fd, reply.bytes) || reply.close) break;
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        conn_fd_ = -1;
      }
      ::close(fd);
    }
  }

  Respond respond_;
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int> accepted_{0};
  std::mutex mu_;
  int conn_fd_ = -1;
  std::vector<Message> requests_;
};

int Connect(uint16_t port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  SetTimeouts(fd);
  return fd;
}

std::string Repeat(const std::string& piece, size_t bytes) {
  std::string out;
  while (out.size() < bytes) out += piece;
  out.resize(bytes);
  return out;
}

// The backend's answer by request target.
ScriptedBackend::Reply Scripted(const Message& request) {
  const std::string target = request.start_line.substr(request.start_line.find(' ') + 1);
  if (target.starts_with("/big")) {
    const std::string body = Repeat("0123456789abcdef", 40'000);
    const bool head = request.start_line.starts_with("HEAD ");
    return {"HTTP/1.1 200 OK\r\nContent-Length: " + std::to_string(body.size()) +
            "\r\nContent-Type: text/plain\r\nConnection: X-Private\r\nX-Private: secret\r\n"
            "X-Kept: yes\r\n\r\n" +
            (head ? "" : body)};
  }
  if (target.starts_with("/until-close")) {
    return {
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\nno length here",
        /*close=*/true};
  }
  if (target.starts_with("/chunks")) {
    return {
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"};
  }
  if (target.starts_with("/nobody")) return {"HTTP/1.1 204 No Content\r\n\r\n"};
  // Echo: the body back, and the request line in a header.
  return {"HTTP/1.1 201 Created\r\nContent-Length: " + std::to_string(request.body.size()) +
          "\r\nX-Request-Line: " + request.start_line + "\r\n\r\n" + request.body};
}

class ServingRouterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_ = std::make_unique<ScriptedBackend>(Scripted);
    RouterOptions options;
    options.port = 0;
    router_ = std::make_unique<ServingRouter>(options);
    ASSERT_TRUE(router_->Start().ok());
    router_->UpsertService(ServiceView{
        "svc", "server", 5, {Endpoint{0, 1, "127.0.0.1", backend_->port(), ""}}, "", {}});
    // Loads() runs on the io thread after the upsert posted before it.
    ASSERT_EQ(router_->Loads().size(), 1u);
  }
  void TearDown() override {
    router_->Stop();
    backend_.reset();
  }

  // Sends `raw` on a new connection and reads one response.
  Message Exchange(const std::string& raw, bool to_eof = false, bool no_body = false) {
    const int fd = Connect(router_->port());
    EXPECT_TRUE(SendAll(fd, raw));
    std::string buf;
    Message m;
    EXPECT_TRUE(ReadMessage(fd, buf, &m, to_eof, no_body)) << "no response to " << raw;
    ::close(fd);
    return m;
  }

  std::unique_ptr<ScriptedBackend> backend_;
  std::unique_ptr<ServingRouter> router_;
};

TEST_F(ServingRouterTest, ForwardsTheTargetEndToEndHeadersAndALargeBody) {
  const std::string body = Repeat("request-body ", 50'000);  // several reads on both sides
  Message m = Exchange("POST /services/svc/echo?q=1 HTTP/1.1\r\nHost: h\r\nContent-Length: " +
                       std::to_string(body.size()) +
                       "\r\nConnection: keep-alive, X-Hop\r\nX-Hop: dropped\r\nKeep-Alive: 5\r\n"
                       "TE: trailers\r\nX-Forwarded-For: 10.0.0.1\r\nX-End: kept\r\n\r\n" +
                       body);
  EXPECT_EQ(m.start_line, "HTTP/1.1 201 Created");
  EXPECT_EQ(m.Header("x-request-line"), "POST /echo?q=1 HTTP/1.1");
  EXPECT_EQ(m.body, body);
  auto requests = backend_->requests();
  ASSERT_EQ(requests.size(), 1u);
  const Message& r = requests[0];
  EXPECT_EQ(r.Header("host"), "h");
  EXPECT_EQ(r.Header("x-end"), "kept");
  EXPECT_EQ(r.Header("content-length"), std::to_string(body.size()));
  EXPECT_EQ(r.Header("x-forwarded-for"), "10.0.0.1, 127.0.0.1");
  EXPECT_EQ(r.Count("x-forwarded-for"), 1);
  for (const char* hop : {"connection", "x-hop", "keep-alive", "te"}) {
    EXPECT_EQ(r.Count(hop), 0) << hop;
  }
}

TEST_F(ServingRouterTest, AServiceOfAnotherNamespaceIsRoutedByItsNamespacedPathOnly) {
  // "svc" of team-x (key team-x.svc, common/object_key.h) beside "svc" of default.
  auto other = std::make_unique<ScriptedBackend>(Scripted);
  router_->UpsertService(ServiceView{
      "team-x.svc", "server", 5, {Endpoint{0, 1, "127.0.0.1", other->port(), ""}}, "", {}});
  ASSERT_EQ(router_->Loads().size(), 2u);
  Message m = Exchange("GET /namespaces/team-x/services/svc/echo?q=2 HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(m.start_line, "HTTP/1.1 201 Created");
  EXPECT_EQ(m.Header("x-request-line"), "GET /echo?q=2 HTTP/1.1");
  EXPECT_EQ(other->requests().size(), 1u);
  m = Exchange("GET /services/svc/echo HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(m.start_line, "HTTP/1.1 201 Created");
  EXPECT_EQ(backend_->requests().size(), 1u);
  EXPECT_EQ(other->requests().size(), 1u);
  // A key is not a name: /services/team-x.svc/ reaches nothing, and the 404 lists the paths.
  m = Exchange("GET /services/team-x.svc/echo HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(m.start_line, "HTTP/1.1 404 Not Found");
  EXPECT_NE(m.body.find("/namespaces/team-x/services/svc/"), std::string::npos) << m.body;
  m = Exchange("GET /namespaces/team-y/services/svc/echo HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(m.start_line, "HTTP/1.1 404 Not Found");
  EXPECT_NE(m.body.find("/namespaces/team-y/services/svc/"), std::string::npos) << m.body;
  m = Exchange("GET /namespaces/team-x/svc/echo HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(m.start_line, "HTTP/1.1 404 Not Found");
  EXPECT_EQ(backend_->requests().size(), 1u);
  EXPECT_EQ(other->requests().size(), 1u);
  router_->RemoveService("team-x.svc");
}

TEST_F(ServingRouterTest, AnHttpsReplicaWithoutACaToVerifyItIsA502NamingTheFlag) {
  router_->UpsertService(ServiceView{
      "secure", "server", 5, {Endpoint{0, 1, "127.0.0.1", backend_->port(), "", true}}, "", {}});
  ASSERT_EQ(router_->Loads().size(), 2u);
  Message m = Exchange("GET /services/secure/x HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(m.start_line, "HTTP/1.1 502 Bad Gateway");
  EXPECT_NE(m.body.find("--replicas-ca-file"), std::string::npos) << m.body;
  EXPECT_TRUE(backend_->requests().empty()) << "nothing went to the replica in plain";
}

TEST_F(ServingRouterTest, AChunkedRequestBodyReachesTheReplicaWithALength) {
  Message m = Exchange(
      "POST /services/svc/echo HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
      "5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n");
  EXPECT_EQ(m.body, "hello world");
  auto requests = backend_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].Header("content-length"), "11");
  EXPECT_EQ(requests[0].Count("transfer-encoding"), 0);
}

TEST_F(ServingRouterTest, ExpectContinueIsAnsweredBeforeTheBodyIsSent) {
  const int fd = Connect(router_->port());
  ASSERT_TRUE(SendAll(fd,
                      "PUT /services/svc/echo HTTP/1.1\r\nHost: h\r\nContent-Length: 4\r\n"
                      "Expect: 100-continue\r\n\r\n"));
  std::string buf;
  Message cont;
  ASSERT_TRUE(ReadMessage(fd, buf, &cont, false, /*no_body=*/true));
  EXPECT_EQ(cont.start_line, "HTTP/1.1 100 Continue");
  ASSERT_TRUE(SendAll(fd, "data"));
  Message m;
  ASSERT_TRUE(ReadMessage(fd, buf, &m));
  EXPECT_EQ(m.start_line, "HTTP/1.1 201 Created");
  EXPECT_EQ(m.body, "data");
  ::close(fd);
  auto requests = backend_->requests();
  ASSERT_EQ(requests.size(), 1u);
  EXPECT_EQ(requests[0].Count("expect"), 0);
}

TEST_F(ServingRouterTest, ALargeResponseArrivesWholeWithoutTheHeadersItsConnectionNamed) {
  Message m = Exchange("GET /services/svc/big HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(m.start_line, "HTTP/1.1 200 OK");
  EXPECT_EQ(m.body, Repeat("0123456789abcdef", 40'000));
  EXPECT_EQ(m.Header("content-length"), "40000");
  EXPECT_EQ(m.Header("x-kept"), "yes");
  EXPECT_EQ(m.Count("x-private"), 0);
  EXPECT_EQ(m.Count("connection"), 0);  // HTTP/1.1 keep-alive needs none
}

TEST_F(ServingRouterTest, AResponseWithoutALengthIsRechunkedForHttp11AndCutForHttp10) {
  Message m = Exchange("GET /services/svc/until-close HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_TRUE(m.chunked);
  EXPECT_EQ(m.body, "no length here");
  Message old = Exchange("GET /services/svc/until-close HTTP/1.0\r\n\r\n", /*to_eof=*/true);
  EXPECT_EQ(old.start_line, "HTTP/1.0 200 OK");
  EXPECT_FALSE(old.chunked);
  EXPECT_EQ(old.body, "no length here");
  // A chunked response goes out chunked, and a 204 with nothing.
  Message chunks = Exchange("GET /services/svc/chunks HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_TRUE(chunks.chunked);
  EXPECT_EQ(chunks.body, "abcde");
  Message none = Exchange("GET /services/svc/nobody HTTP/1.1\r\nHost: h\r\n\r\n");
  EXPECT_EQ(none.start_line, "HTTP/1.1 204 No Content");
  EXPECT_EQ(none.Count("content-length") + none.Count("transfer-encoding"), 0);
}

TEST_F(ServingRouterTest, HeadKeepsTheLengthAndSendsNoBody) {
  const int fd = Connect(router_->port());
  ASSERT_TRUE(SendAll(fd,
                      "HEAD /services/svc/big HTTP/1.1\r\nHost: h\r\n\r\n"
                      "GET /services/svc/chunks HTTP/1.1\r\nHost: h\r\n\r\n"));
  std::string buf;
  Message head;
  ASSERT_TRUE(ReadMessage(fd, buf, &head, false, /*no_body=*/true));
  EXPECT_EQ(head.Header("content-length"), "40000");
  // The next response follows at once: nothing of a body came in between.
  Message next;
  ASSERT_TRUE(ReadMessage(fd, buf, &next));
  EXPECT_EQ(next.body, "abcde");
  ::close(fd);
}

TEST_F(ServingRouterTest, PipelinedRequestsOnOneConnectionReuseOneReplicaConnection) {
  const int fd = Connect(router_->port());
  std::string raw;
  for (int i = 0; i < 5; ++i) {
    raw += "POST /services/svc/echo/" + std::to_string(i) +
           " HTTP/1.1\r\nHost: h\r\nContent-Length: 1\r\n\r\n" + std::to_string(i);
  }
  ASSERT_TRUE(SendAll(fd, raw));  // all at once: the router reads them one after the other
  std::string buf;
  for (int i = 0; i < 5; ++i) {
    Message m;
    ASSERT_TRUE(ReadMessage(fd, buf, &m)) << i;
    EXPECT_EQ(m.Header("x-request-line"), "POST /echo/" + std::to_string(i) + " HTTP/1.1");
    EXPECT_EQ(m.body, std::to_string(i));
  }
  ::close(fd);
  EXPECT_EQ(backend_->accepted(), 1);
  EXPECT_EQ(backend_->requests().size(), 5u);
}

}  // namespace
}  // namespace tessera::proxy

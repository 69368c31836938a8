// libFuzzer target: the HTTP request path of net::HttpServer (what the head puts its API on).
//
// One real server (Boost.Beast's parser, auth, the router, percent-decoding, body limits)
// listens on 127.0.0.1 port 0 with routes shaped like the head's; each input is sent as raw
// bytes on a fresh connection, the write side is then closed and the reply read to the end.
// Nothing may crash or hang; whatever comes back starts with an HTTP/1.1 status line; a
// handler behind auth never runs for a request that does not carry the token. The same bytes
// also go through the router's pure helpers (PercentDecode, ParseQuery, Router::Find).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>

#include "net/http_server.h"
#include "net/router.h"

namespace {

using namespace tessera;
using namespace tessera::net;

constexpr char kToken[] = "fuzz-token-4f1c";

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "http_fuzz: %s\n", what.c_str());
  std::abort();
}

// A handler behind auth: the request must carry the token somewhere in Authorization.
Handler Protected(int status) {
  return [status](const Request& r) {
    if (r.Header("Authorization").find(kToken) == std::string::npos)
      Fail("a protected handler ran without the token: " + r.target);
    return Response::Json(status, "{\"bytes\":" + std::to_string(r.body.size()) + "}");
  };
}

void Check(const Status& s) {
  if (!s.ok()) Fail(s.ToString());
}

uint16_t ServerPort() {
  static HttpServer* server = [] {
    ServerOptions options;
    options.io_threads = 1;
    options.max_body_bytes = 64 * 1024;
    options.auth.tokens = {kToken};
    options.auth.exempt_paths = {"/healthz", "/", "/web/*"};
    auto* s = new HttpServer(options);  // lives for the whole run
    Check(s->Handle(Method::kGet, "/healthz",
                    [](const Request&) { return Response::Json(200, R"({"status":"ok"})"); }));
    Check(s->Handle(Method::kGet, "/", [](const Request&) { return Response::Text(200, "i"); }));
    Check(s->Handle(Method::kGet, "/web/{path...}",
                    [](const Request& r) { return Response::Text(200, r.params.at("path")); }));
    for (Method m : {Method::kGet, Method::kPost})
      Check(s->Handle(m, "/api/v1/jobs", Protected(200)));
    for (Method m : {Method::kGet, Method::kPut, Method::kPatch, Method::kDelete})
      Check(s->Handle(m, "/api/v1/jobs/{name}", Protected(200)));
    Check(s->Handle(Method::kGet, "/api/v1/jobs/{name}/logs", Protected(200)));
    Check(s->Handle(Method::kPost, "/api/v1/agents/heartbeat", Protected(200)));
    // Handlers should not throw; when one does the server answers 500 and carries on.
    Check(s->Handle(Method::kPost, "/api/v1/throw", [](const Request& r) -> Response {
      if (r.Header("Authorization").find(kToken) == std::string::npos) Fail("throw without auth");
      throw std::runtime_error("handler threw");
    }));
    Check(s->Start());
    return s;
  }();
  return server->port();
}

// The router's pure helpers on the same bytes.
void FuzzRouterHelpers(std::string_view text) {
  auto decoded = PercentDecode(text, /*plus_is_space=*/true);
  if (decoded.ok() && decoded->size() > text.size()) Fail("decoding grew the text");
  auto query = ParseQuery(text);
  if (query.ok() && query->size() > text.size() + 1) Fail("more parameters than bytes");
  static const Router* router = [] {
    auto* r = new Router();
    Handler h = [](const Request&) { return Response::Text(200, ""); };
    Check(r->Add(Method::kGet, "/api/v1/jobs/{name}", h));
    Check(r->Add(Method::kGet, "/api/v1/jobs/{name}/logs", h));
    Check(r->Add(Method::kGet, "/web/{path...}", h));
    Check(r->Add(Method::kPost, "/api/v1/jobs", h));
    return r;
  }();
  Router::Match match = router->Find(Method::kGet, text);
  if (match.outcome == Router::Outcome::kFound && match.handler == nullptr) Fail("no handler");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  FuzzRouterHelpers(input);

  const uint16_t port = ServerPort();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) Fail("socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) Fail("connect");
  size_t sent = 0;
  while (sent < size) {
    // The server may answer and close early (401, 413, 431): then the rest is not needed.
    const ssize_t n = ::send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  ::shutdown(fd, SHUT_WR);
  std::string reply;
  char buffer[16 * 1024];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    // The server sees the end of the request at once and answers in milliseconds; a reply
    // that never ends is left to libFuzzer's -timeout (a stall of seconds on a loaded machine
    // is not a bug).
    // libFuzzer's -timeout is a SIGALRM every few seconds: a poll it interrupts (EINTR) is
    // polled again, not a failure.
    int ready;
    do ready = ::poll(&p, 1, 60'000);
    while (ready < 0 && errno == EINTR);
    if (ready < 0) Fail(std::string("poll: ") + std::strerror(errno));
    if (ready == 0) Fail("no end of the reply within 60 s");
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    if (reply.size() < 64) reply.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  if (!reply.empty()) {
    if (reply.size() < 12 || reply.compare(0, 9, "HTTP/1.1 ") != 0 || reply[9] < '1' ||
        reply[9] > '5')
      Fail("reply does not start with a status line: " + reply.substr(0, 40));
  }
  return 0;
}

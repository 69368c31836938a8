#include "ha/standby_proxy.h"

#include <cctype>
#include <nlohmann/json.hpp>

#include "ha/head_list.h"
#include "net/http_client.h"

namespace tessera::ha {

namespace {

bool Truthy(const std::optional<std::string>& v) { return v && (*v == "true" || *v == "1"); }

// The leader's answer, told apart from a forwarded one by X-Tessera-Proxied-By.
net::Response LeaderGone(const std::string& leader, const std::string& self,
                         const std::string& error) {
  net::Response r = net::Response::Json(
      503, nlohmann::json{{"error", "this head (" + self +
                                        ") is a standby and forwarded the "
                                        "request, but the leader at " +
                                        leader + " did not answer (" + error + "); retry shortly"},
                          {"leader", leader}}
               .dump());
  r.headers.emplace(std::string(kLeaderHeader), leader);
  return r;
}

Result<net::ClientOptions> LeaderClientOptions(const std::string& leader,
                                               const std::optional<net::ClientTlsOptions>& tls) {
  const size_t colon = leader.rfind(':');
  if (colon == std::string::npos) return InvalidArgument("leader address " + leader);
  net::ClientOptions o;
  o.host = leader.substr(0, colon);
  try {
    o.port = static_cast<uint16_t>(std::stoi(leader.substr(colon + 1)));
  } catch (...) {
    return InvalidArgument("leader address " + leader);
  }
  if (o.host == "0.0.0.0") o.host = "127.0.0.1";
  o.tls = tls;
  o.connect_timeout = std::chrono::milliseconds(2'000);
  o.read_timeout = std::chrono::milliseconds(30'000);
  return o;
}

// The request's headers minus the hop-by-hop ones the client sets itself.
net::Headers ForwardedHeaders(const net::Request& request, const std::string& self) {
  net::Headers out;
  for (const auto& [name, value] : request.headers) {
    static const char* kSkip[] = {"host",   "connection",        "content-length",
                                  "expect", "transfer-encoding", "keep-alive"};
    std::string lower = name;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    bool skip = false;
    for (const char* s : kSkip) skip = skip || lower == s;
    if (!skip) out.emplace(name, value);
  }
  out[std::string(kProxiedByHeader)] = self;
  return out;
}

}  // namespace

StandbyProxy::~StandbyProxy() { Close(); }

bool StandbyProxy::Forwarded(const net::Request& request) {
  return request.path.rfind("/api/v1/agents/", 0) != 0 && request.path != "/api/v1/agents";
}

net::Response StandbyProxy::Forward(const net::Request& request, const std::string& leader) {
  auto options = LeaderClientOptions(leader, leader_tls_);
  if (!options.ok()) return LeaderGone(leader, self_, options.status().message());
  const net::Headers headers = ForwardedHeaders(request, self_);
  if (request.method == net::Method::kGet &&
      (Truthy(request.Query("watch")) || Truthy(request.Query("follow")))) {
    auto client = std::make_shared<net::HttpClient>(*options);
    {
      std::lock_guard lock(mu_);
      if (closed_) return LeaderGone(leader, self_, "this standby is stopping");
      streams_.push_back(client);
    }
    return net::Response::Stream(
        [this, client, request, headers, leader](std::shared_ptr<net::StreamWriter> writer) {
          writer->OnClose([client] { client->Cancel(); });
          std::lock_guard lock(mu_);
          if (closed_) {
            writer->Close();
            return;
          }
          threads_.emplace_back([client, request, headers, leader, writer] {
            Status s = client->Stream(
                request.method, request.target,
                [&](std::string_view line) { return writer->Write(std::string(line) + "\n"); },
                request.body, headers);
            if (!s.ok() && writer->IsOpen()) {
              writer->Write(nlohmann::json{{"type", "ERROR"},
                                           {"error", "the stream from the leader at " + leader +
                                                         " ended: " + s.message()}}
                                .dump() +
                            "\n");
            }
            writer->Close();
          });
        });
  }
  // Registered while in flight, so that Close() can cancel it: a leader that is frozen would
  // otherwise hold this server thread, and with it the standby's Stop() when it is elected,
  // for the whole read timeout.
  auto client = std::make_shared<net::HttpClient>(*options);
  {
    std::lock_guard lock(mu_);
    if (closed_) return LeaderGone(leader, self_, "this standby is stopping");
    in_flight_.emplace(client, leader);
  }
  auto answer = client->Request(request.method, request.target, request.body, headers);
  {
    std::lock_guard lock(mu_);
    in_flight_.erase(client);
  }
  if (!answer.ok()) return LeaderGone(leader, self_, answer.status().message());
  net::Response out;
  out.status = answer->status;
  out.body = std::move(answer->body);
  if (!answer->content_type.empty()) out.content_type = answer->content_type;
  out.headers.emplace(std::string(kProxiedByHeader), self_);
  return out;
}

void StandbyProxy::LeaderChanged(const std::string& leader) {
  std::lock_guard lock(mu_);
  for (const auto& [client, to] : in_flight_)
    if (to != leader) client->Cancel();
}

size_t StandbyProxy::in_flight() const {
  std::lock_guard lock(mu_);
  return in_flight_.size();
}

void StandbyProxy::Close() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    closed_ = true;
    for (auto& c : streams_) c->Cancel();
    for (auto& [c, to] : in_flight_) c->Cancel();
    threads.swap(threads_);
  }
  for (auto& t : threads) t.join();
}

}  // namespace tessera::ha

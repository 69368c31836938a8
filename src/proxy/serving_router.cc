// ServingRouter (serving_router.h) and the core of its RouterImpl: routing a target to a
// Service, the Service table and the dispatch of freed slots to queued requests, the pool of
// kept-alive replica connections, and start, accept, the deadline sweep and stop. The sessions
// are in router_session.cc and router_relay.cc, the metrics in router_metrics.cc.
#include "proxy/serving_router.h"

#include <sys/socket.h>

#include <boost/asio/post.hpp>
#include <cerrno>
#include <set>

#include "common/object_key.h"
#include "net/tcp_listen.h"
#include "net/tls_stream.h"
#include "proxy/router_internal.h"
#include "proxy/router_session.h"

namespace tessera::proxy {

namespace {

// The path prefix that routes to the Service of `key` (object_key.h): /services/NAME in the
// namespace "default", /namespaces/NS/services/NAME in any other.
std::string RoutePrefix(const std::string& key) {
  const NamespacedName n = SplitObjectKey(key);
  if (n.namespace_name == kDefaultNamespace) return "/services/" + n.name;
  return "/namespaces/" + n.namespace_name + "/services/" + n.name;
}

// --default-service: NAME, or NS/NAME for a Service of another namespace.
std::string DefaultServiceKey(const std::string& flag) {
  const size_t slash = flag.find('/');
  if (slash == std::string::npos) return flag;
  return ObjectKey(flag.substr(0, slash), flag.substr(slash + 1));
}

}  // namespace

std::string RouterImpl::KnownServices() const {
  std::string known;
  for (const auto& [key, state] : services_)
    known += (known.empty() ? "" : ", ") + RoutePrefix(key) + "/";
  return known.empty() ? "no services are known yet" : "services: " + known;
}

std::optional<Route> RouterImpl::Resolve(std::string_view target, std::string* error) const {
  constexpr std::string_view kServices = "/services/";
  constexpr std::string_view kNamespaces = "/namespaces/";
  Route route;
  std::string_view rest;  // after /services/, or "" for a path outside every Service's
  std::string namespace_name(kDefaultNamespace);
  if (target.starts_with(kNamespaces)) {
    std::string_view after = target.substr(kNamespaces.size());
    const size_t slash = after.find('/');
    namespace_name = std::string(after.substr(0, slash));
    after = slash == std::string_view::npos ? "" : after.substr(slash);
    if (namespace_name.empty() || !after.starts_with(kServices)) {
      *error = "path " + std::string(target.substr(0, target.find('?'))) +
               ": a Service of a namespace is at /namespaces/<namespace>/services/<name>/... (" +
               KnownServices() + ")";
      return std::nullopt;
    }
    rest = after.substr(kServices.size());
  } else if (target.starts_with(kServices)) {
    rest = target.substr(kServices.size());
  }
  if (rest.data() != nullptr) {
    const size_t end = rest.find_first_of("/?");
    const std::string_view name = rest.substr(0, end);
    // A name never holds '.', so /services/NS.NAME/ cannot stand for a key of another namespace.
    if (name.find(kObjectKeySeparator) != std::string_view::npos) {
      *error = "no service named '" + std::string(name) + "' (a Service name holds no '.'; " +
               KnownServices() + ")";
      return std::nullopt;
    }
    route.service = ObjectKey(namespace_name, name);
    std::string_view tail = end == std::string_view::npos ? "" : rest.substr(end);
    route.target = tail.empty() || tail[0] == '?' ? "/" + std::string(tail) : std::string(tail);
    route.explicit_service = true;
  } else if (!options_.default_service.empty()) {
    route.service = DefaultServiceKey(options_.default_service);
    route.target = std::string(target);
  } else if (services_.size() == 1) {
    route.service = services_.begin()->first;
    route.target = std::string(target);
  } else {
    *error = "no service for path " + std::string(target.substr(0, target.find('?'))) +
             ": use /services/<name>/..., /namespaces/<namespace>/services/<name>/... or start "
             "the router with --default-service (" +
             KnownServices() + ")";
    return std::nullopt;
  }
  if (!services_.count(route.service)) {
    *error = "no service at " + RoutePrefix(route.service) + "/ (" + KnownServices() + ")";
    return std::nullopt;
  }
  return route;
}

void RouterImpl::Upsert(ServiceView view) {
  auto it = services_.find(view.name);
  if (it == services_.end()) {
    it = services_.emplace(view.name, std::make_unique<ServiceState>(view, options_.max_queued))
             .first;
  }
  ServiceState& state = *it->second;
  state.pairing.SetEndpoints(view.prefill_endpoints);
  const int limit = view.max_ongoing_requests;
  std::vector<Endpoint> endpoints = view.endpoints;
  state.dispatcher.SetStarting(view.starting);
  state.view = std::move(view);
  Dispatch(state, state.dispatcher.SetEndpoints(std::move(endpoints), limit, rng_));
}

void RouterImpl::Remove(const std::string& name) {
  auto it = services_.find(name);
  if (it == services_.end()) return;
  std::vector<std::shared_ptr<Session>> queued;
  for (auto w = waiting_.begin(); w != waiting_.end();) {
    if (w->second.service == name) {
      queued.push_back(std::move(w->second.session));
      w = waiting_.erase(w);
    } else {
      ++w;
    }
  }
  services_.erase(it);
  for (auto& s : queued) s->OnServiceRemoved();
}

void RouterImpl::Release(const std::string& service, const std::string& key) {
  ServiceState* state = Find(service);
  if (!state) return;  // the Service left; its dispatcher went with it
  Dispatch(*state, state->dispatcher.Release(key, rng_));
}

void RouterImpl::Dispatch(ServiceState& state, std::vector<Grant> grants) {
  if (grants.empty()) return;  // the usual case: nobody was waiting
  std::deque<Grant> work(grants.begin(), grants.end());
  while (!work.empty()) {
    Grant g = std::move(work.front());
    work.pop_front();
    auto it = waiting_.find(g.request);
    if (it == waiting_.end()) {
      // Nobody waits for it any more: hand the slot on.
      for (Grant& more : state.dispatcher.Release(g.endpoint.Key(), rng_)) {
        work.push_back(std::move(more));
      }
      continue;
    }
    std::shared_ptr<Session> session = std::move(it->second.session);
    waiting_.erase(it);
    // Posted: the session continues on its own turn, not inside the releaser's.
    asio::post(ioc_, [session, endpoint = g.endpoint] { session->OnGranted(endpoint); });
  }
}

std::unique_ptr<Upstream> RouterImpl::TakeIdle(const std::string& key) {
  auto it = pool_.find(key);
  if (it == pool_.end()) return nullptr;
  auto& idle = it->second;
  while (!idle.empty()) {
    std::unique_ptr<Upstream> up = std::move(idle.back());
    idle.pop_back();
    const auto idle_for = SteadyClock::now() - up->idle_since;
    if (idle_for > options_.pool_idle_timeout) continue;
    up->reused = true;
    // Just back in the pool: trust it (if the replica closed it meanwhile, the request is
    // redialled on a fresh connection, see UpstreamFailed) and save the syscall.
    if (idle_for < std::chrono::seconds(1)) return up;
    // Closed by the replica while idle? A non-blocking peek says so without consuming.
    char byte;
    const ssize_t n =
        ::recv(up->stream.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return up;
  }
  return nullptr;
}

void RouterImpl::PutIdle(std::unique_ptr<Upstream> up) {
  auto& idle = pool_[up->key];
  if (idle.size() >= options_.max_idle_per_endpoint) idle.pop_front();  // the oldest
  up->idle_since = SteadyClock::now();
  idle.push_back(std::move(up));
}

Status RouterImpl::Start() {
  if (started_.exchange(true)) return FailedPrecondition("ServingRouter already started");
  if (options_.tls) {
    net::ServerTlsOptions tls;
    tls.cert_chain_file = options_.tls->cert_file;
    tls.key_file = options_.tls->key_file;
    auto context = net::MakeServerTlsContext(tls);
    if (!context.ok()) {
      started_ = false;
      return context.status();
    }
    tls_context_ = *context;
  }
  if (!options_.replicas_ca_file.empty() && !options_.replicas_plain_http) {
    auto context =
        net::MakeClientTlsContext(net::ClientTlsOptions{options_.replicas_ca_file, "", "", ""});
    if (!context.ok()) {
      started_ = false;
      return InvalidArgument("replicas CA: " + context.status().message());
    }
    replica_tls_context_ = *context;
  }
  Result<tcp::endpoint> endpoint =
      net::ParseBindEndpoint(options_.bind_address, options_.port, "bind address");
  if (!endpoint.ok()) return endpoint.status();
  Result<uint16_t> port = net::Listen(acceptor_, *endpoint,
                                      options_.bind_address + ":" + std::to_string(options_.port));
  if (!port.ok()) {
    started_ = false;
    return port.status();
  }
  port_ = *port;
  DoAccept();
  Sweep();
  thread_ = std::thread([this] { ioc_.run(); });
  return Status::Ok();
}

void RouterImpl::DoAccept() {
  acceptor_.async_accept([this](error_code ec, tcp::socket socket) {
    if (stopped_ || !acceptor_.is_open()) return;
    if (!ec) {
      if (sessions_ >= options_.max_connections) {
        error_code ignored;
        socket.close(ignored);  // over the limit: refuse by closing
      } else {
        std::make_shared<Session>(*this, std::move(socket))->Start();
      }
    }
    DoAccept();
  });
}

// Every 100 ms: sessions whose operation outlived its deadline are cut.
void RouterImpl::Sweep() {
  sweep_.expires_after(std::chrono::milliseconds(100));
  sweep_.async_wait([this](error_code ec) {
    if (ec || stopped_) return;
    const SteadyClock::time_point now = SteadyClock::now();
    std::vector<std::shared_ptr<Session>> late;
    for (Session* s : live_) {
      if (s->deadline() > now) continue;
      if (auto alive = s->weak_from_this().lock()) late.push_back(std::move(alive));
    }
    for (auto& s : late) s->OnDeadline();
    Sweep();
  });
}

void RouterImpl::Stop() {
  if (!started_ || stopped_.exchange(true)) return;
  asio::post(ioc_, [this] {
    error_code ec;
    acceptor_.close(ec);
  });
  ioc_.stop();
  if (thread_.joinable()) thread_.join();
  // Sockets must go before the io_context: the queued sessions and the pool.
  waiting_.clear();
  pool_.clear();
}

// ---- ServingRouter ----

ServingRouter::ServingRouter(RouterOptions options)
    : impl_(std::make_unique<RouterImpl>(std::move(options))) {}

ServingRouter::~ServingRouter() { impl_->Stop(); }

Status ServingRouter::Start() { return impl_->Start(); }

uint16_t ServingRouter::port() const { return impl_->port_; }

void ServingRouter::Stop() { impl_->Stop(); }

void ServingRouter::ReplaceServices(std::vector<ServiceView> services) {
  asio::post(impl_->ioc_, [impl = impl_.get(), services = std::move(services)]() mutable {
    std::set<std::string> keep;
    for (const ServiceView& s : services) keep.insert(s.name);
    std::vector<std::string> gone;
    for (const auto& [name, state] : impl->services_) {
      if (!keep.count(name)) gone.push_back(name);
    }
    for (const std::string& name : gone) impl->Remove(name);
    for (ServiceView& s : services) impl->Upsert(std::move(s));
  });
}

void ServingRouter::UpsertService(ServiceView service) {
  asio::post(impl_->ioc_, [impl = impl_.get(), service = std::move(service)]() mutable {
    impl->Upsert(std::move(service));
  });
}

void ServingRouter::RemoveService(std::string name) {
  asio::post(impl_->ioc_, [impl = impl_.get(), name = std::move(name)] { impl->Remove(name); });
}

void ServingRouter::SetHeadConnected(bool connected) { impl_->head_connected_ = connected ? 1 : 0; }

}  // namespace tessera::proxy

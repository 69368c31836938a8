// HttpServer (http_server.h) and ServerImpl, the part of its pimpl that owns the listener and
// the event loops: Start binds and starts accepting, each accepted socket becomes a Session
// (http_session.cc) on the next loop in turn, and Stop winds the sessions down within
// stop_grace. The internal types are declared in http_server_internal.h.
#include <algorithm>
#include <boost/asio/post.hpp>
#include <utility>

#include "net/http_server_internal.h"
#include "net/tcp_listen.h"

namespace tessera::net {
namespace {

std::vector<std::unique_ptr<asio::io_context>> MakeLoops(int io_threads) {
  std::vector<std::unique_ptr<asio::io_context>> loops;
  for (int i = 0; i < std::max(1, io_threads); ++i) {
    // Run by one thread: the scheduler then wakes no other thread when work arrives.
    loops.push_back(std::make_unique<asio::io_context>(1));
  }
  return loops;
}

}  // namespace

ServerImpl::ServerImpl(ServerOptions options)
    : options_(std::move(options)), loops_(MakeLoops(options_.io_threads)) {}

Status ServerImpl::Start() {
  if (started_.exchange(true)) return FailedPrecondition("HttpServer already started");
  Result<tcp::endpoint> endpoint =
      ParseBindEndpoint(options_.bind_address, options_.port, "bind_address");
  if (!endpoint.ok()) return endpoint.status();
  if (options_.tls) {
    Result<std::shared_ptr<ssl::context>> context = MakeServerTlsContext(*options_.tls);
    if (!context.ok()) {
      started_ = false;
      return context.status();
    }
    tls_context_ = std::move(*context);
  }
  Result<uint16_t> port =
      Listen(acceptor_, *endpoint, options_.bind_address + ":" + std::to_string(options_.port));
  if (!port.ok()) {
    started_ = false;
    return port.status();
  }
  port_ = *port;
  for (auto& loop : loops_) work_.push_back(asio::make_work_guard(*loop));
  asio::post(accept_strand_, [this] { DoAccept(); });
  for (auto& loop : loops_) threads_.emplace_back([l = loop.get()] { l->run(); });
  return Status::Ok();
}

void ServerImpl::DoAccept() {
  asio::io_context& loop = *loops_[next_loop_];
  next_loop_ = (next_loop_ + 1) % loops_.size();
  acceptor_.async_accept(asio::make_strand(loop), [this](error_code ec, tcp::socket socket) {
    if (stopping_ || !acceptor_.is_open()) return;
    if (ec) {
      // Out of descriptors or a transient error: back off briefly instead of spinning.
      accept_retry_.expires_after(std::chrono::milliseconds(50));
      accept_retry_.async_wait([this](error_code wec) {
        if (!wec && !stopping_) DoAccept();
      });
      return;
    }
    std::make_shared<Session>(*this, std::move(socket))->Start();
    DoAccept();
  });
}

void ServerImpl::Stop() {
  if (!started_ || stopped_.exchange(true)) return;
  stopping_ = true;
  asio::post(accept_strand_, [this] {
    error_code ec;
    acceptor_.close(ec);
    accept_retry_.cancel();
  });

  auto for_each_session = [this](auto fn) {
    std::vector<std::shared_ptr<Session>> live;
    {
      std::lock_guard<std::mutex> lock(sessions_mu_);
      for (auto& [ptr, weak] : sessions_) {
        if (auto s = weak.lock()) live.push_back(std::move(s));
      }
    }
    for (auto& s : live) fn(s);
  };
  auto wait_until_empty = [this](std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(sessions_mu_);
    sessions_cv_.wait_for(lock, limit, [this] { return sessions_.empty(); });
  };

  for_each_session([](const std::shared_ptr<Session>& s) {
    asio::post(s->executor(), [s] { s->BeginShutdown(); });
  });
  wait_until_empty(options_.stop_grace);
  for_each_session([](const std::shared_ptr<Session>& s) {
    asio::post(s->executor(), [s] { s->ForceClose(); });
  });
  wait_until_empty(std::chrono::milliseconds(1000));

  work_.clear();
  for (auto& loop : loops_) loop->stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  for_each_session([](const std::shared_ptr<Session>& s) { s->EndStreamAfterStop(); });
}

HttpServer::HttpServer(ServerOptions options)
    : impl_(std::make_unique<ServerImpl>(std::move(options))) {}

HttpServer::~HttpServer() { impl_->Stop(); }

Status HttpServer::Handle(Method method, std::string_view pattern, Handler handler) {
  if (impl_->started_) return FailedPrecondition("HttpServer::Handle after Start()");
  return impl_->router_.Add(method, pattern, std::move(handler));
}

Status HttpServer::Start() { return impl_->Start(); }

uint16_t HttpServer::port() const { return impl_->port_; }

Status HttpServer::ReloadTls() {
  if (!impl_->started_ || !impl_->options_.tls)
    return FailedPrecondition("HttpServer::ReloadTls: the server is not serving TLS");
  Result<std::shared_ptr<ssl::context>> context = MakeServerTlsContext(*impl_->options_.tls);
  if (!context.ok()) return context.status();
  std::lock_guard<std::mutex> lock(impl_->tls_mu_);
  impl_->retired_tls_contexts_.push_back(std::move(impl_->tls_context_));
  impl_->tls_context_ = std::move(*context);
  return Status::Ok();
}

void HttpServer::Stop() { impl_->Stop(); }

size_t HttpServer::connection_count() const {
  std::lock_guard<std::mutex> lock(impl_->sessions_mu_);
  return impl_->sessions_.size();
}

}  // namespace tessera::net
// Session: one client connection of the serving router, from its first byte to its close,
// and the replica exchange of each request it carries. Internal to the router (see
// router_internal.h for the files that implement it): router_session.cc holds the client side,
// router_relay.cc the replica side.
//
// At most one request is in progress per connection (HTTP/1.1 without pipelining). Every member
// is touched on the io thread only. The hot path avoids trips through the event loop: bytes
// already buffered are parsed at once (basic_parser::put) instead of through an asynchronous
// read that would complete by a post, and writes go straight to the non-blocking socket (Send),
// falling back to an asynchronous write only for what the kernel did not take. A proxied
// request then costs one epoll wait per direction, a read and a write on each side.
#pragma once

#include <algorithm>
#include <array>
#include <boost/asio/write.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proxy/client_stream.h"
#include "proxy/router_internal.h"
#include "proxy/token_counter.h"

namespace tessera::proxy {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(RouterImpl& router, tcp::socket socket);
  ~Session();

  void Start() { client_.has_tls() ? Handshake() : DoIdleWait(); }

  // When the operation in progress must have finished (the router's sweep checks it).
  SteadyClock::time_point deadline() const { return deadline_; }

  // The sweep found the deadline passed: cut the side being waited on. Its handler then sees
  // the error as a timeout (Timed()) and answers as the phase requires (504, retry, close).
  void OnDeadline();

  // The dispatcher gave this queued request a replica.
  void OnGranted(const Endpoint& endpoint);

  // The Service went away while this request waited.
  void OnServiceRemoved();

 private:
  enum class Phase { kIdle, kHeader, kBody, kQueued, kUpstream, kRelaying, kWriting, kDone };

  // Up to four pieces written in one go (header, chunk size line, data, chunk end).
  using Pieces = std::array<asio::const_buffer, 4>;

  // ---- writing ----

  // Writes `pieces` to the client: through Send's fast path over plain TCP; over TLS always
  // asynchronously (a TLS record cannot be half written by a non-blocking write and resumed).
  template <class Then>
  void SendClient(Pieces pieces, Then then) {
    if (!client_.has_tls()) return Send(client_.socket(), pieces, false, std::move(then));
    ArmClient(router_.options_.write_timeout);
    asio::async_write(client_, pieces,
                      [self = shared_from_this(), then = std::move(then)](
                          error_code wec, size_t) mutable { then(self->Timed(wec)); });
  }

  // Writes `pieces` to `socket`: at once when the kernel takes them all (the usual case: no
  // trip through the event loop), else the rest asynchronously under the write timeout. Then
  // calls `then(ec)`, inline in the first case.
  template <class Then>
  void Send(tcp::socket& socket, Pieces pieces, bool upstream, Then then) {
    error_code ec;
    size_t total = 0;
    for (const auto& p : pieces) total += p.size();
    const size_t sent = asio::write(socket, pieces, ec);
    if (sent == total) return then(error_code{});
    if (ec != asio::error::would_block && ec != asio::error::try_again) return then(ec);
    size_t skip = sent;
    for (auto& p : pieces) {
      const size_t n = std::min(skip, p.size());
      p += n;
      skip -= n;
    }
    if (upstream) {
      ArmUpstream(router_.options_.write_timeout);
    } else {
      ArmClient(router_.options_.write_timeout);
    }
    asio::async_write(socket, pieces,
                      [self = shared_from_this(), then = std::move(then)](
                          error_code wec, size_t) mutable { then(self->Timed(wec)); });
  }

  // Writes `pieces` to the replica: Send's fast path over plain TCP; over TLS asynchronously,
  // as SendClient.
  template <class Then>
  void SendUpstream(Pieces pieces, Then then) {
    if (!upstream_->stream.has_tls())
      return Send(upstream_->stream.socket(), pieces, true, std::move(then));
    ArmUpstream(router_.options_.write_timeout);
    asio::async_write(upstream_->stream, pieces,
                      [self = shared_from_this(), then = std::move(then)](
                          error_code wec, size_t) mutable { then(self->Timed(wec)); });
  }

  // ---- the client's request (router_session.cc) ----

  // The TLS handshake of a client of an HTTPS router, under the header timeout. Its first bytes
  // are read in plain first: a plain-HTTP request gets a plain 400 (RefusePlainHttp).
  void Handshake();
  void OnFirstBytes();
  void RefusePlainHttp();
  void DoIdleWait();

  // One read from the client; what it means depends on the phase.
  void ReadClient();
  void OnClientBytes(error_code ec);
  void StartHeader();

  // Parses what the client sent so far; reads on until the header is whole.
  void ParseHeader();
  void OnHeader(error_code ec);
  void StartBody();

  // Parses the body bytes buffered; reads on until the body is whole.
  void ParseBody();

  // The whole request is here: build what the replica gets, then find it a replica.
  void OnRequest();

  // Asks the dispatcher for a replica, avoiding `avoid_key` (a retry).
  void Admit(const std::string& avoid_key);
  void Wait();

  // ---- the replica (router_relay.cc) ----

  void Forward();
  void Connect();
  void ConnectTo(const tcp::endpoint& where);
  // A replica that serves HTTPS: the handshake, verifying its certificate against the cluster
  // CA and the endpoint's address, under the connect timeout.
  void HandshakeUpstream();
  void WriteUpstream();
  // The pool's key of the connection this request needs: TLS and plain connections to one
  // address:port are never taken for one another.
  std::string PoolKey() const { return upstream_tls_ ? endpoint_key_ + "/tls" : endpoint_key_; }

  // One read from the replica; what it means depends on the phase.
  void ReadUpstream();
  void OnUpstreamBytes(error_code ec);
  void ReadUpstreamHeader();
  void ParseUpstreamHeader();

  // The replica failed before sending any byte of its response: retry where that is safe.
  void UpstreamFailed(error_code ec, const char* stage);
  void OnUpstreamHeader(error_code ec);

  // The header while it waits to go out with the first body bytes; empty once sent.
  asio::const_buffer PendingHeader() {
    if (!header_pending_) return {};
    header_pending_ = false;
    return asio::buffer(header_text_);
  }

  // Relays the body piece by piece: what the replica sent so far is written to the client
  // before the next read.
  void PumpBody();

  // Bytes already went to the client: all that is left is to cut the connection.
  void UpstreamCut(error_code ec);

  // Writes `n` body bytes (with the header when it is still pending, and the last chunk when
  // the replica is done), then reads on.
  void WriteBody(size_t n);

  // The replica is done with nothing left to relay: send what is still owed, then complete.
  void FinishBody();
  void NoteFirstByte();

  // A stream's output tokens and time per output token, by the role that decoded it.
  void NoteTokens();

  // The response is through: account, give the slot and the connection back, next request.
  void Complete();

  // A disaggregated Service: names the prefill replica paired with the chosen decode replica
  // in the request's header (disagg_pairing.h). Again on a retry, for the new decode replica.
  void NamePrefill();

  // The paired prefill is over (decode answered, failed, or the request ended).
  void PrefillDone();

  // Timeouts: one deadline per session (its operations are sequential), checked by the
  // router's sweep, instead of a timer per socket operation (each re-arm cost a syscall).
  void ArmClient(std::chrono::milliseconds timeout) {
    deadline_ = SteadyClock::now() + timeout;
    timed_out_ = false;
    upstream_op_ = false;
  }
  void ArmUpstream(std::chrono::milliseconds timeout) {
    deadline_ = SteadyClock::now() + timeout;
    timed_out_ = false;
    upstream_op_ = true;
  }
  // `ec` as the handler should see it: a timeout when the sweep cut the operation.
  error_code Timed(error_code ec) {
    if (!timed_out_) return ec;
    timed_out_ = false;
    return ec ? error_code(beast::error::timeout) : ec;
  }

  // ---- endings (router_session.cc) ----

  void ReleaseSlot();
  void ResetRequest();

  // The client went away mid-response.
  void ClientGone();
  void Abort();

  // 503 with Retry-After: the client should come back.
  void ReplyBusy(const std::string& message, const char* reason);

  // An error the router answers itself for a routed request (the caller counts the reason in
  // errors_).
  void ReplyError(int status, const std::string& message, bool close = false);
  void ReplyLocal(int status, const std::string& message, const char* field, bool close);
  void ReplyLocalText(int status, std::string body, const char* content_type);

  void WriteLocal(int status, std::string body, const char* content_type,
                  std::vector<std::pair<std::string, std::string>> headers, bool close);
  void CloseGracefully();
  void Close();

  static constexpr std::string_view kChunkEnd = "\r\n";
  static constexpr std::string_view kChunkEndLast = "\r\n0\r\n\r\n";
  static constexpr std::string_view kLastChunk = "0\r\n\r\n";

  RouterImpl& router_;
  ClientStream client_;
  beast::flat_buffer client_buffer_;
  asio::steady_timer queue_timer_;
  SteadyClock::time_point deadline_ = SteadyClock::time_point::max();
  bool upstream_op_ = false;
  bool timed_out_ = false;
  std::string peer_address_;
  Phase phase_ = Phase::kIdle;

  std::optional<http::request_parser<http::string_body>> parser_;
  unsigned client_version_ = 11;
  bool client_keep_alive_ = false;
  bool head_request_ = false;
  SteadyClock::time_point start_;
  Route route_;
  RequestId request_id_ = 0;
  bool has_slot_ = false;
  Endpoint endpoint_;
  std::string endpoint_key_;   // endpoint_.Key()
  bool upstream_tls_ = false;  // the replica is dialled over TLS (Endpoint::tls)
  bool retried_ = false;
  bool fresh_reconnect_used_ = false;
  bool first_body_byte_noted_ = false;
  double first_byte_s_ = 0;    // since start_, when the first body byte went out
  bool event_stream_ = false;  // the response is text/event-stream: its tokens are counted
  SseTokenCounter tokens_;     // ... here
  std::string prefill_role_;   // the prefill role when decode handed the prompt off, else ""

  std::string upstream_head_;    // the request line and headers the replica gets
  size_t head_base_size_ = 0;    // its size without the X-Tessera-Prefill header
  uint64_t prefill_ticket_ = 0;  // the paired prefill replica's charge (PrefillPairing)
  std::string request_body_;
  std::unique_ptr<Upstream> upstream_;
  std::optional<http::response_parser<http::buffer_body>> upstream_parser_;
  std::string header_text_;  // the response header the client gets
  bool header_pending_ = false;
  unsigned status_code_ = 0;
  bool streaming_ = false;
  bool chunked_out_ = false;
  char chunk_size_[24] = {};
  std::vector<char> body_buffer_;
};

}  // namespace tessera::proxy

// Session, the replica side (router_session.h): connecting (or a pooled connection),
// writing the request, the response header (retry before the first byte, 502/504), relaying
// the body as it arrives (re-chunked when it has no length), completion and its metrics, and
// the prefill replica named to a disaggregated Service's decode replica.
#include <openssl/bio.h>
#include <openssl/ssl.h>

#include <boost/asio/ssl/error.hpp>
#include <cstdio>
#include <limits>

#include "net/tls_stream.h"
#include "proxy/header_fields.h"
#include "proxy/router_session.h"

namespace tessera::proxy {
namespace {

// Whether TLS bytes already received wait to be decrypted: a record OpenSSL holds, or bytes
// asio fed it that it has not read yet (a read of them completes without waiting).
bool TlsRecordsBuffered(SSL* ssl) {
  return SSL_pending(ssl) > 0 || BIO_pending(SSL_get_rbio(ssl)) > 0;
}

}  // namespace

void Session::Forward() {
  phase_ = Phase::kUpstream;
  endpoint_key_ = endpoint_.Key();
  NamePrefill();
  upstream_tls_ = endpoint_.tls && !router_.options_.replicas_plain_http;
  if (upstream_tls_ && !router_.replica_tls_context_) {
    router_.errors_.Add({route_.service, "replica_tls_unverifiable"});
    return ReplyError(502, "replica " + std::to_string(endpoint_.replica) + " (" + endpoint_key_ +
                               ") serves HTTPS, and the router has no CA to verify it with: give "
                               "--replicas-ca-file (the cluster CA), or run head and router with "
                               "--replicas-plain-http");
  }
  upstream_ = router_.TakeIdle(PoolKey());
  if (upstream_) return WriteUpstream();
  Connect();
}

void Session::Connect() {
  upstream_ = std::make_unique<Upstream>(
      router_.ioc_, PoolKey(), upstream_tls_ ? router_.replica_tls_context_.get() : nullptr);
  error_code ec;
  asio::ip::address address = asio::ip::make_address(endpoint_.address, ec);
  if (ec) {
    // A host name: resolve it (rare; the head reports addresses).
    auto resolver = std::make_shared<tcp::resolver>(router_.ioc_);
    resolver->async_resolve(
        endpoint_.address, std::to_string(endpoint_.port),
        [self = shared_from_this(), resolver](error_code rec, tcp::resolver::results_type r) {
          if (rec || r.empty()) return self->UpstreamFailed(rec, "resolve");
          self->ConnectTo(r.begin()->endpoint());
        });
    return;
  }
  ConnectTo(tcp::endpoint(address, endpoint_.port));
}

void Session::ConnectTo(const tcp::endpoint& where) {
  ArmUpstream(router_.options_.connect_timeout);
  upstream_->stream.socket().async_connect(where, [self = shared_from_this()](error_code ec) {
    if (ec) return self->UpstreamFailed(self->Timed(ec), "connect");
    error_code ignored;
    self->upstream_->stream.socket().set_option(tcp::no_delay(true), ignored);
    self->upstream_->stream.socket().non_blocking(true, ignored);
    if (!self->upstream_->stream.has_tls()) return self->WriteUpstream();
    self->HandshakeUpstream();
  });
}

void Session::HandshakeUpstream() {
  // The replica's certificate must name the address its endpoint gives (an IP SAN for an IP).
  const Status named =
      net::ExpectServerName(upstream_->stream.tls().native_handle(), endpoint_.address);
  if (!named.ok()) {
    upstream_.reset();
    router_.errors_.Add({route_.service, "replica_tls_unverifiable"});
    return ReplyError(502, "replica " + std::to_string(endpoint_.replica) + " (" + endpoint_key_ +
                               "): " + named.message());
  }
  ArmUpstream(router_.options_.connect_timeout);
  upstream_->stream.tls().async_handshake(
      asio::ssl::stream_base::client, [self = shared_from_this()](error_code ec) {
        if (ec) return self->UpstreamFailed(self->Timed(ec), "TLS handshake");
        self->WriteUpstream();
      });
}

void Session::WriteUpstream() {
  SendUpstream({asio::buffer(upstream_head_), asio::buffer(request_body_)}, [this](error_code ec) {
    if (ec) return UpstreamFailed(ec, "write");
    ReadUpstreamHeader();
  });
}

void Session::ReadUpstream() {
  upstream_->stream.async_read_some(
      upstream_->buffer.prepare(kReadBytes), [self = shared_from_this()](error_code ec, size_t n) {
        self->upstream_->buffer.commit(n);
        // A replica that closes TLS without close_notify ends
        // the connection as a plain one does; the HTTP framing
        // says whether the message was whole.
        if (ec == asio::ssl::error::stream_truncated) ec = asio::error::eof;
        // OpenSSL hands back one record per read: once the first token is out (never
        // delayed), drain the records already here, so that a burst of tokens goes to the
        // client in one write, as over plain TCP.
        if (!ec && self->first_body_byte_noted_ && self->upstream_->stream.has_tls() &&
            self->upstream_->buffer.size() < kBodyPieceBytes &&
            TlsRecordsBuffered(self->upstream_->stream.tls().native_handle()))
          return self->ReadUpstream();
        self->OnUpstreamBytes(self->Timed(ec));
      });
}

void Session::OnUpstreamBytes(error_code ec) {
  if (phase_ == Phase::kUpstream) {
    if (!ec) return ParseUpstreamHeader();
    if (ec == beast::error::timeout) return OnUpstreamHeader(ec);
    // Nothing received at all: the replica failed (a retry is safe).
    if (!upstream_parser_->got_some() && upstream_->buffer.size() == 0) {
      return UpstreamFailed(ec, "response");
    }
    if (ec == asio::error::eof) {
      ec = {};
      upstream_parser_->put_eof(ec);  // a header cut short: partial message
    }
    return OnUpstreamHeader(ec ? ec : error_code(http::error::partial_message));
  }
  if (ec == asio::error::eof) {
    // The end of a body delimited by the connection's end is the end of the message.
    ec = {};
    upstream_parser_->put_eof(ec);
  }
  if (ec) return UpstreamCut(ec);
  PumpBody();
}

void Session::ReadUpstreamHeader() {
  upstream_parser_.emplace();
  upstream_parser_->header_limit(router_.options_.max_header_bytes);
  upstream_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());  // relayed, not kept
  if (head_request_) upstream_parser_->skip(true);
  ArmUpstream(router_.options_.response_timeout);
  ParseUpstreamHeader();
}

void Session::ParseUpstreamHeader() {
  error_code ec = http::error::need_more;
  beast::flat_buffer& in = upstream_->buffer;
  if (in.size() > 0) in.consume(upstream_parser_->put(in.data(), ec));
  if (ec == http::error::need_more) return ReadUpstream();
  OnUpstreamHeader(ec);
}

void Session::UpstreamFailed(error_code ec, const char* stage) {
  const bool was_reused = upstream_ && upstream_->reused;
  upstream_.reset();
  // A pooled connection the replica closed while idle: that is not the replica failing.
  if (was_reused && !fresh_reconnect_used_) {
    fresh_reconnect_used_ = true;
    return Connect();
  }
  const std::string failed = "replica " + std::to_string(endpoint_.replica) + " (" + endpoint_key_ +
                             ") failed before responding (" + stage + ": " + ec.message() + ")";
  if (!retried_) {
    retried_ = true;
    router_.retries_.Add(router_.ServiceLabels(route_.service));
    const std::string avoid = endpoint_key_;
    ReleaseSlot();
    fresh_reconnect_used_ = false;
    return Admit(avoid);
  }
  router_.errors_.Add({route_.service, "upstream_failed"});
  ReplyError(502, failed + ", after one retry");
}

void Session::OnUpstreamHeader(error_code ec) {
  if (ec == beast::error::timeout) {
    // The replica may still be working on it: not safe to send it elsewhere.
    router_.errors_.Add({route_.service, "response_timeout"});
    return ReplyError(504, "replica " + std::to_string(endpoint_.replica) + " (" + endpoint_key_ +
                               ") did not start its response within " +
                               std::to_string(router_.options_.response_timeout.count()) + " ms");
  }
  if (ec) {
    router_.errors_.Add({route_.service, "bad_response"});
    return ReplyError(502, "replica " + std::to_string(endpoint_.replica) + " (" + endpoint_key_ +
                               ") sent a bad response: " + ec.message());
  }
  // The first byte is in: from here on the request is never retried.
  auto& up = upstream_parser_->get();
  status_code_ = up.result_int();
  if (ServiceState* state = router_.Find(route_.service);
      state != nullptr && !state->view.prefill_role.empty()) {
    const beast::string_view prefilled =
        up[beast::string_view(kPrefilledHeader.data(), kPrefilledHeader.size())];
    state->pairing.Outcome({prefilled.data(), prefilled.size()});
    PrefillDone();  // decode's first byte comes after its prefill, wherever it ran
    if (prefilled == "remote") prefill_role_ = state->view.prefill_role;
  }
  event_stream_ = beast::iequals(up[http::field::content_type].substr(0, 17), "text/event-stream");
  streaming_ = up.chunked() || event_stream_;
  chunked_out_ = false;
  const bool has_length = up.has_content_length();
  if (!has_length && !upstream_parser_->is_done() && !head_request_) {
    if (client_version_ == 10) {
      client_keep_alive_ = false;  // the end of the body is the end of the connection
    } else {
      chunked_out_ = true;
    }
  }
  // The header as the client gets it, written as text: the status line, the end-to-end
  // headers, the framing, the client's keep-alive.
  std::string& out = header_text_;
  out.clear();
  out += client_version_ == 10 ? "HTTP/1.0 " : "HTTP/1.1 ";
  out += std::to_string(status_code_);
  out += ' ';
  beast::string_view reason = up.reason();
  if (reason.empty()) reason = http::obsolete_reason(static_cast<http::status>(status_code_));
  out.append(reason.data(), reason.size());
  out += "\r\n";
  const beast::string_view connection = up[http::field::connection];
  for (const auto& field : up) {
    const beast::string_view name = field.name_string();
    if (IsHopByHop(name) || field.name() == http::field::content_length ||
        NamedIn(connection, name)) {
      continue;
    }
    AppendField(out, name, field.value());
  }
  if (has_length) {
    out += "Content-Length: ";
    out += std::to_string(upstream_parser_->content_length().value_or(0));
    out += "\r\n";
  } else if (chunked_out_) {
    out += "Transfer-Encoding: chunked\r\n";
  }
  const bool keep_alive = client_keep_alive_ && !router_.stopped_;
  if (client_version_ == 10 && keep_alive) out += "Connection: keep-alive\r\n";
  if (client_version_ != 10 && !keep_alive) out += "Connection: close\r\n";
  out += "\r\n";
  phase_ = Phase::kRelaying;
  header_pending_ = true;
  // Body bytes that came with the header go out with it, in one write.
  if (upstream_->buffer.size() > 0 || upstream_parser_->is_done()) return PumpBody();
  // Nothing of the body yet (a stream that prefills first): the header goes now.
  SendClient({PendingHeader()}, [this](error_code wec) {
    if (wec) return ClientGone();
    PumpBody();
  });
}

void Session::PumpBody() {
  if (upstream_parser_->is_done()) return FinishBody();
  auto& body = upstream_parser_->get().body();
  body.data = body_buffer_.data();
  body.size = body_buffer_.size();
  beast::flat_buffer& in = upstream_->buffer;
  if (in.size() > 0) {
    upstream_parser_->eager(true);  // as many body bytes as fit in body_buffer_
    error_code ec;
    in.consume(upstream_parser_->put(in.data(), ec));
    if (ec == http::error::need_buffer || ec == http::error::need_more) ec = {};
    if (ec) return UpstreamCut(ec);
  }
  const size_t got = body_buffer_.size() - body.size;
  if (got > 0) return WriteBody(got);
  if (upstream_parser_->is_done()) return FinishBody();
  ArmUpstream(router_.options_.stream_idle_timeout);
  ReadUpstream();
}

void Session::UpstreamCut(error_code ec) {
  router_.errors_.Add(
      {route_.service, ec == beast::error::timeout ? "stream_timeout" : "upstream_cut"});
  upstream_.reset();
  Abort();
}

void Session::WriteBody(size_t n) {
  const bool last = upstream_parser_->is_done();
  Pieces pieces{PendingHeader(), {}, asio::buffer(body_buffer_.data(), n), {}};
  if (event_stream_) tokens_.Feed({body_buffer_.data(), n});
  if (chunked_out_) {
    const int len = std::snprintf(chunk_size_, sizeof chunk_size_, "%zx\r\n", n);
    pieces[1] = asio::buffer(chunk_size_, static_cast<size_t>(len));
    pieces[3] = last ? asio::buffer(kChunkEndLast.data(), kChunkEndLast.size())
                     : asio::buffer(kChunkEnd.data(), kChunkEnd.size());
  }
  SendClient(pieces, [this, last](error_code ec) {
    if (ec) return ClientGone();
    NoteFirstByte();
    if (last) return Complete();
    PumpBody();
  });
}

void Session::FinishBody() {
  if (!header_pending_ && !chunked_out_) return Complete();
  Pieces pieces{PendingHeader(), {}, {}, {}};
  if (chunked_out_) pieces[1] = asio::buffer(kLastChunk.data(), kLastChunk.size());
  SendClient(pieces, [this](error_code ec) {
    if (ec) return ClientGone();
    Complete();
  });
}

void Session::NoteFirstByte() {
  if (first_body_byte_noted_) return;
  first_body_byte_noted_ = true;
  first_byte_s_ = SecondsSince(start_);
  router_.first_byte_.Observe(router_.FirstByteLabels(route_.service, streaming_), first_byte_s_);
  if (!streaming_) return;
  if (ServiceState* state = router_.Find(route_.service)) {
    router_.role_ttft_.Observe(
        {route_.service, prefill_role_.empty() ? state->view.role : prefill_role_}, first_byte_s_);
  }
}

void Session::NoteTokens() {
  if (!event_stream_ || tokens_.tokens() == 0) return;
  ServiceState* state = router_.Find(route_.service);
  if (state == nullptr) return;
  const std::vector<std::string> labels{route_.service, state->view.role};
  router_.output_tokens_.Add(labels, static_cast<double>(tokens_.tokens()));
  const double tpot = TimePerOutputToken(first_byte_s_, SecondsSince(start_), tokens_.tokens());
  if (tpot >= 0) router_.role_tpot_.Observe(labels, tpot);
}

void Session::Complete() {
  NoteFirstByte();
  NoteTokens();
  router_.requests_.Add(router_.CodeLabels(route_.service, status_code_));
  router_.latency_.Observe(router_.ServiceLabels(route_.service), SecondsSince(start_));
  const bool reusable = upstream_parser_->keep_alive() && upstream_parser_->is_done() &&
                        upstream_->buffer.size() == 0;
  if (reusable) {
    router_.PutIdle(std::move(upstream_));
  } else {
    upstream_.reset();
  }
  ReleaseSlot();
  ResetRequest();
  if (client_keep_alive_ && !router_.stopped_) return DoIdleWait();
  CloseGracefully();
}

void Session::NamePrefill() {
  PrefillDone();
  upstream_head_.resize(head_base_size_);
  ServiceState* state = router_.Find(route_.service);
  if (state == nullptr || state->view.prefill_role.empty()) return;
  std::optional<PrefillPairing::Pick> pick =
      state->pairing.Choose(endpoint_, static_cast<int64_t>(request_body_.size()));
  if (!pick) return;
  prefill_ticket_ = pick->ticket;
  upstream_head_.resize(head_base_size_ - 2);  // before the blank line
  upstream_head_ += kPrefillHeader;
  upstream_head_ += ": ";
  const bool v6 = pick->endpoint.address.find(':') != std::string::npos;
  upstream_head_ += v6 ? "[" + pick->endpoint.address + "]" : pick->endpoint.address;
  upstream_head_ += ":" + std::to_string(pick->endpoint.port) + "\r\n\r\n";
}

void Session::PrefillDone() {
  if (prefill_ticket_ == 0) return;
  if (ServiceState* state = router_.Find(route_.service)) state->pairing.Done(prefill_ticket_);
  prefill_ticket_ = 0;
}

}  // namespace tessera::proxy

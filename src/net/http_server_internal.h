// The pieces behind HttpServer's pimpl, shared by the files that implement them:
//   ServerImpl   the listener, the io threads and the registry of live sessions
//                (http_server.cc);
//   Session      one connection's state machine: read, check, route, handle, write
//                (http_session.cc; its streaming half in http_stream.cc);
//   StreamState  the StreamWriter a streaming handler pushes chunks through (http_stream.cc).
// Internal to src/net: it names Boost.Asio/Beast types.
//
// Thread-safety: a Session's members are touched only on its strand; StreamState guards its
// own state with mu_; ServerImpl's session registry is guarded by sessions_mu_.
#pragma once

#include <array>
#include <atomic>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "net/asio_names.h"
#include "net/http_server.h"
#include "net/router.h"
#include "net/tls_stream.h"

namespace tessera::net {

class Session;

// The state shared between the application (through StreamWriter) and the session that owns
// the connection. Guarded by mu_; the socket itself is only touched on the session's strand.
class StreamState final : public StreamWriter {
 public:
  StreamState(std::weak_ptr<Session> session, std::string peer, size_t max_queue_bytes)
      : session_(std::move(session)), peer_(std::move(peer)), max_queue_bytes_(max_queue_bytes) {}

  bool Write(std::string chunk) override;
  void Close() override;
  bool IsOpen() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return open_ && !close_requested_;
  }
  void OnClose(std::function<void()> fn) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (open_) {
      on_close_.push_back(std::move(fn));
      return;
    }
    lock.unlock();
    fn();
  }
  const std::string& peer() const override { return peer_; }

  // Marks the stream ended and runs the OnClose callbacks (once).
  void MarkEnded();

  // What the session should write next.
  enum class Next { kNothing, kData, kLastChunk };
  Next TakeNext(std::string& out);

 private:
  void SchedulePump();

  std::weak_ptr<Session> session_;
  const std::string peer_;
  const size_t max_queue_bytes_;

  mutable std::mutex mu_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  bool open_ = true;
  bool close_requested_ = false;
  bool last_chunk_taken_ = false;
  bool pump_scheduled_ = false;  // a pump is posted or a write is in flight
  std::vector<std::function<void()>> on_close_;

  friend class Session;
};

class ServerImpl {
 public:
  explicit ServerImpl(ServerOptions options);
  ~ServerImpl() { Stop(); }

  Status Start();
  void Stop();
  void DoAccept();

  ServerOptions options_;
  Router router_;
  // Set by Start() when options_.tls is set, replaced by ReloadTls (under tls_mu_); contexts
  // replaced stay alive here, as sessions hold references to them.
  std::shared_ptr<ssl::context> tls_context_;
  std::vector<std::shared_ptr<ssl::context>> retired_tls_contexts_;
  std::mutex tls_mu_;
  ssl::context* CurrentTlsContext() {
    std::lock_guard<std::mutex> lock(tls_mu_);
    return tls_context_.get();
  }
  std::atomic<bool> started_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<uint16_t> port_{0};

  std::mutex sessions_mu_;
  std::condition_variable sessions_cv_;
  std::unordered_map<Session*, std::weak_ptr<Session>> sessions_;

  // The event loops, one thread each (options_.io_threads, at least one). Declared after the
  // registry: destroying an io_context destroys queued handlers, whose sessions unregister
  // themselves.
  std::vector<std::unique_ptr<asio::io_context>> loops_;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work_;
  // The listener lives on the first loop; next_loop_ (touched on accept_strand_ only) is the
  // loop the next connection goes to.
  asio::strand<asio::io_context::executor_type> accept_strand_ = asio::make_strand(*loops_[0]);
  tcp::acceptor acceptor_{accept_strand_};
  asio::steady_timer accept_retry_{accept_strand_};
  size_t next_loop_ = 0;
  std::vector<std::thread> threads_;
};

// One connection. All members are touched only on the connection's strand (the executor of
// stream_), except through StreamState, which has its own lock.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(ServerImpl& server, tcp::socket socket);
  ~Session();

  // Registers with the server and starts waiting for the first request.
  void Start();

  // The connection's strand; safe to call from any thread (it never changes).
  const asio::any_io_executor& executor() const { return executor_; }

  // Server Stop(): end the connection as soon as it is not in the middle of a request.
  void BeginShutdown();

  void ForceClose() { Finish(); }
  // After the io threads have stopped: make the application's writer report closed.
  void EndStreamAfterStop() {
    if (writer_) writer_->MarkEnded();
  }

  void PumpStream();
  void AbortStream() { Finish(); }

 private:
  enum class Phase {
    kHandshake,
    kIdle,
    kHeader,
    kBody,
    kHandling,
    kWriting,
    kStreaming,
    kLinger,
    kDone
  };

  // TLS (http_session.cc): peek at the first bytes, refuse plain HTTP, else handshake.
  void DoTlsHandshake();
  void OnFirstBytes();

  // Reading and answering a request (http_session.cc).
  void DoIdleWait();
  void DoReadHeader();
  void OnHeader(error_code ec);
  void DoReadBody();
  void OnRequest();
  // An error response before the handler runs. With the body unread, the connection cannot be
  // reused: answer, then drain what the client still sends, then close.
  void Reject(Response response, bool close) { WriteResponse(std::move(response), close, close); }
  void RejectTooLarge();
  void WriteResponse(Response response, bool close, bool linger);
  void DoLinger();
  void DrainSome();
  void CloseGracefully();
  void Finish();

  // A streaming response (http_stream.cc).
  void StartStream(Response response);
  void WatchForDisconnect();
  // Passes the complete lines of `data` (and of what came before) to client_line_; false when a
  // line exceeds the body limit.
  bool TakeClientBytes(std::string_view data);

  template <class Message>
  void SetCommonFields(Message& res, const Response& response, bool keep_alive) {
    res.result(static_cast<unsigned>(response.status));
    std::string_view reason = StatusReason(response.status);
    if (!reason.empty()) res.reason(beast::string_view(reason.data(), reason.size()));
    res.set(http::field::server, "tessera");
    for (const auto& [name, value] : response.headers) res.set(name, value);
    res.set(http::field::content_type, response.content_type);
    res.keep_alive(keep_alive);
  }

  ServerImpl& server_;
  const asio::any_io_executor executor_;
  TlsStream stream_;
  beast::flat_buffer buffer_;
  std::string peer_;
  std::string peer_identity_;  // the verified client certificate's CN (TLS), else ""
  Phase phase_ = Phase::kIdle;
  bool shutting_down_ = false;
  bool keep_alive_ = false;

  std::optional<http::request_parser<http::string_body>> parser_;
  std::optional<http::response<http::empty_body>> continue_response_;
  Request request_;
  std::string raw_path_;
  const Handler* handler_ = nullptr;

  std::array<char, 4096> drain_{};
  size_t drained_ = 0;

  std::shared_ptr<StreamState> writer_;
  // A duplex stream's reader of the client's lines (Response::on_client_line) and the
  // unterminated line so far.
  std::function<void(std::string_view)> client_line_;
  std::string client_partial_;
  std::optional<http::response<http::empty_body>> stream_header_;
  std::optional<http::response_serializer<http::empty_body>> stream_serializer_;
  bool header_sent_ = false;
  bool writing_ = false;
  std::string chunk_;
};

}  // namespace tessera::net

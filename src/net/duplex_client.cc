#include "net/duplex_client.h"

#include <array>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <deque>
#include <optional>

#include "net/asio_names.h"
#include "net/response_reader.h"
#include "net/tls_stream.h"

namespace tessera::net {
namespace {

// What HttpClient::Stream returns for the same answer.
Status DuplexStatusFromHttp(int status, const std::string& body) {
  std::string message = "HTTP " + std::to_string(status) + ": " + body;
  if (status == 401 || status == 403) return FailedPrecondition(std::move(message));
  if (status == 404) return NotFound(std::move(message));
  if (status == 409) return Conflict(std::move(message));
  if (status >= 400 && status < 500) return InvalidArgument(std::move(message));
  return Unavailable(std::move(message));
}

}  // namespace

class DuplexImpl {
 public:
  explicit DuplexImpl(ClientOptions options)
      : options_(std::move(options)), where_(options_.host + ":" + std::to_string(options_.port)) {}

  Status Run(Method method, std::string_view target, const Headers& headers,
             const std::function<void()>& on_open,
             const std::function<bool(std::string_view)>& on_line);
  bool Send(std::string line) {
    std::lock_guard lock(mu_);
    if (!open_) return false;
    asio::post(ioc_, [this, run = run_, line = std::move(line)]() mutable {
      if (done_ || run != run_) return;  // queued for a Run that has ended
      out_.push_back(std::move(line) + "\n");
      if (!writing_) Pump();
    });
    return true;
  }
  void Cancel() {
    cancelled_ = true;
    asio::post(ioc_, [this] { Finish(Unavailable(where_ + ": cancelled")); });
  }

 private:
  void Pump() {
    if (out_.empty() || done_) return;
    writing_ = true;
    current_ = std::move(out_.front());
    out_.pop_front();
    asio::async_write(*stream_, asio::buffer(current_), [this](error_code ec, size_t) {
      writing_ = false;
      if (ec) return Finish(Unavailable(where_ + ": write: " + ec.message()));
      Pump();
    });
  }
  void Read() {
    stream_->async_read_some(asio::buffer(in_), [this](error_code ec, size_t n) {
      if (ec) {
        if (ec == asio::error::eof && got_header_ && status_ == 200) return Finish(Status::Ok());
        const std::string why = ec == beast::error::timeout ? "timed out" : ec.message();
        return Finish(Unavailable(where_ + ": read: " + why));
      }
      if (!reader_.Feed(std::string_view(in_.data(), n)))
        return Finish(Unavailable(where_ + ": the answer is not HTTP"));
      if (done_) return;
      if (got_header_ && status_ == 200) {
        if (options_.stream_idle_timeout.count() > 0) {
          stream_->expires_after(options_.stream_idle_timeout);
        } else {
          stream_->expires_never();
        }
      }
      Read();
    });
  }
  void Finish(Status status) {
    if (done_) return;
    done_ = true;
    result_ = std::move(status);
    {
      std::lock_guard lock(mu_);
      open_ = false;
    }
    if (stream_) stream_->close();
  }

  ClientOptions options_;
  const std::string where_;
  asio::io_context ioc_;
  std::shared_ptr<ssl::context> tls_context_;
  std::optional<TlsStream> stream_;
  ResponseReader reader_;
  std::array<char, 16384> in_{};
  std::deque<std::string> out_;
  std::string current_;
  bool writing_ = false;
  bool done_ = false;
  bool got_header_ = false;
  int status_ = 0;
  std::string error_body_;
  std::string partial_;
  Status result_;
  std::mutex mu_;
  bool open_ = false;  // guarded by mu_: Send may queue
  uint64_t run_ = 0;   // which Run; written under mu_, read on the io thread
  std::atomic<bool> cancelled_{false};
};

Status DuplexImpl::Run(Method method, std::string_view target, const Headers& headers,
                       const std::function<void()>& on_open,
                       const std::function<bool(std::string_view)>& on_line) {
  if (cancelled_) return Unavailable(where_ + ": cancelled");
  if (options_.tls && !tls_context_) {
    auto context = MakeClientTlsContext(*options_.tls);
    if (!context.ok()) return context.status();
    tls_context_ = *context;
  }
  ioc_.restart();
  {
    std::lock_guard lock(mu_);
    ++run_;
  }
  stream_.reset();
  if (tls_context_) {
    stream_.emplace(ioc_.get_executor(), *tls_context_);
  } else {
    stream_.emplace(ioc_.get_executor());
  }
  done_ = writing_ = got_header_ = false;
  status_ = 0;
  out_.clear();
  error_body_.clear();
  partial_.clear();
  reader_ = ResponseReader{};
  result_ = Status::Ok();

  std::string request = std::string(MethodName(method)) + " " + std::string(target) +
                        " HTTP/1.1\r\nHost: " + where_ + "\r\n";
  if (!options_.bearer_token.empty())
    request += "Authorization: Bearer " + options_.bearer_token + "\r\n";
  for (const auto& [name, value] : headers) request += name + ": " + value + "\r\n";
  request += "\r\n";

  reader_.on_header = [&](int status) {
    got_header_ = true;
    status_ = status;
    if (status != 200) return;
    {
      std::lock_guard lock(mu_);
      open_ = true;
    }
    if (on_open) on_open();
  };
  reader_.on_data = [&](std::string_view data) {
    if (done_) return;
    if (status_ != 200) {
      if (error_body_.size() < 4096) error_body_.append(data.substr(0, 4096));
      return;
    }
    partial_.append(data);
    size_t start = 0;
    for (size_t nl; (nl = partial_.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view line(partial_.data() + start, nl - start);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (!on_line(line)) {
        Finish(Status::Ok());
        return;
      }
    }
    partial_.erase(0, start);
  };
  reader_.on_end = [&] {
    if (status_ == 200) {
      if (!partial_.empty()) on_line(partial_);
      return Finish(Status::Ok());
    }
    Finish(DuplexStatusFromHttp(status_, error_body_));
  };

  stream_->expires_after(options_.connect_timeout);
  tcp::resolver resolver(ioc_);
  resolver.async_resolve(
      options_.host, std::to_string(options_.port),
      [&](error_code ec, const tcp::resolver::results_type& endpoints) {
        if (ec || done_) return Finish(Unavailable(where_ + ": resolve: " + ec.message()));
        stream_->tcp_layer().async_connect(endpoints, [&](error_code ec2, const tcp::endpoint&) {
          if (ec2 || done_) return Finish(Unavailable(where_ + ": connect: " + ec2.message()));
          auto send = [&] {
            out_.push_back(request);
            Pump();
            Read();
          };
          if (!stream_->has_tls()) return send();
          const std::string name =
              options_.tls->server_name.empty() ? options_.host : options_.tls->server_name;
          if (Status expect = ExpectServerName(stream_->tls(), name); !expect.ok())
            return Finish(expect);
          stream_->tls().async_handshake(ssl::stream_base::client, [&, send](error_code ec3) {
            if (ec3 || done_)
              return Finish(Unavailable(where_ + ": tls handshake: " + ec3.message()));
            stream_->Activate();
            send();
          });
        });
      });
  ioc_.run();
  {
    std::lock_guard lock(mu_);
    open_ = false;
  }
  if (cancelled_) return Unavailable(where_ + ": cancelled");
  return result_;
}

DuplexClient::DuplexClient(ClientOptions options)
    : impl_(std::make_unique<DuplexImpl>(std::move(options))) {}
DuplexClient::~DuplexClient() = default;
Status DuplexClient::Run(Method method, std::string_view target, const Headers& headers,
                         const std::function<void()>& on_open,
                         const std::function<bool(std::string_view)>& on_line) {
  return impl_->Run(method, target, headers, on_open, on_line);
}
bool DuplexClient::Send(std::string line) { return impl_->Send(std::move(line)); }
void DuplexClient::Cancel() { impl_->Cancel(); }

}  // namespace tessera::net

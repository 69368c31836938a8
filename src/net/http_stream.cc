// Streaming responses: the Session side (StartStream sends the chunked header and hands the
// application its writer, WatchForDisconnect notices the client leaving, PumpStream writes
// what was queued) and StreamState, the StreamWriter the application pushes chunks through
// from any thread. See http_server_internal.h for who owns what.
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <utility>

#include "net/http_server_internal.h"

namespace tessera::net {

void Session::StartStream(Response response) {
  phase_ = Phase::kStreaming;
  writer_ = std::make_shared<StreamState>(weak_from_this(), peer_,
                                          server_.options_.max_stream_queue_bytes);
  stream_header_.emplace();
  stream_header_->version(11);
  SetCommonFields(*stream_header_, response, /*keep_alive=*/false);
  stream_header_->set(http::field::cache_control, "no-cache");
  stream_header_->chunked(true);
  stream_serializer_.emplace(*stream_header_);

  // Watch for the client going away: nothing more is expected from it, so any read
  // completion is either ignored data or the end. Reads never time out while streaming.
  stream_.expires_never();
  WatchForDisconnect();

  stream_.expires_after(server_.options_.write_timeout);
  {
    std::lock_guard<std::mutex> lock(writer_->mu_);
    writer_->pump_scheduled_ = true;  // the header write is in flight
  }
  writing_ = true;
  http::async_write_header(stream_, *stream_serializer_,
                           [self = shared_from_this()](error_code ec, size_t) {
                             self->writing_ = false;
                             if (ec) return self->Finish();
                             self->header_sent_ = true;
                             self->PumpStream();
                           });
  client_line_ = std::move(response.on_client_line);
  try {
    response.on_stream(writer_);
  } catch (...) {
    writer_->Close();
  }
  // Lines a duplex client sent right behind its request are already in the request buffer.
  if (client_line_ && buffer_.size() > 0) {
    const auto data = buffer_.data();
    const std::string_view early(static_cast<const char*>(data.data()), data.size());
    const bool fits = TakeClientBytes(early);
    buffer_.consume(buffer_.size());
    if (!fits) return Finish();
  }
}

void Session::WatchForDisconnect() {
  stream_.async_read_some(
      asio::buffer(drain_), [self = shared_from_this()](error_code ec, size_t n) {
        if (ec) return self->Finish();
        if (self->client_line_ && !self->TakeClientBytes(std::string_view(self->drain_.data(), n)))
          return self->Finish();
        self->WatchForDisconnect();
      });
}

bool Session::TakeClientBytes(std::string_view data) {
  size_t start = 0;
  for (size_t nl; (nl = data.find('\n', start)) != std::string_view::npos; start = nl + 1) {
    std::string_view line = data.substr(start, nl - start);
    if (!client_partial_.empty()) {
      client_partial_.append(line);
      line = client_partial_;
    }
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    try {
      client_line_(line);
    } catch (...) {
      writer_->Close();
    }
    client_partial_.clear();
  }
  client_partial_.append(data.substr(start));
  return client_partial_.size() <= server_.options_.max_body_bytes;
}

void Session::PumpStream() {
  if (phase_ != Phase::kStreaming || writing_ || !header_sent_) return;
  StreamState::Next next = writer_->TakeNext(chunk_);
  if (next == StreamState::Next::kNothing) return;
  writing_ = true;
  stream_.expires_after(server_.options_.write_timeout);
  auto on_written = [self = shared_from_this(), next](error_code ec, size_t) {
    self->writing_ = false;
    if (ec) return self->Finish();
    if (next == StreamState::Next::kLastChunk) return self->CloseGracefully();
    self->PumpStream();
  };
  if (next == StreamState::Next::kData) {
    asio::async_write(stream_, http::make_chunk(asio::buffer(chunk_)), std::move(on_written));
  } else {
    asio::async_write(stream_, http::make_chunk_last(), std::move(on_written));
  }
}

bool StreamState::Write(std::string chunk) {
  bool overflow = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_ || close_requested_) return false;
    if (chunk.empty()) return true;
    if (queued_bytes_ + chunk.size() > max_queue_bytes_) {
      overflow = true;
    } else {
      queued_bytes_ += chunk.size();
      queue_.push_back(std::move(chunk));
    }
  }
  if (overflow) {
    // The client cannot keep up: drop it rather than buffer without bound.
    if (auto s = session_.lock()) {
      asio::post(s->executor(), [s] { s->AbortStream(); });
    }
    MarkEnded();
    return false;
  }
  SchedulePump();
  return true;
}

void StreamState::Close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_ || close_requested_) return;
    close_requested_ = true;
  }
  SchedulePump();
}

void StreamState::SchedulePump() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (pump_scheduled_) return;
    pump_scheduled_ = true;
  }
  if (auto s = session_.lock()) {
    asio::post(s->executor(), [s] { s->PumpStream(); });
  } else {
    MarkEnded();
  }
}

StreamState::Next StreamState::TakeNext(std::string& out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_) {
    pump_scheduled_ = false;
    return Next::kNothing;
  }
  if (!queue_.empty()) {
    out.clear();
    out.reserve(queued_bytes_);
    for (std::string& s : queue_) out += s;
    queue_.clear();
    queued_bytes_ = 0;
    return Next::kData;
  }
  if (close_requested_ && !last_chunk_taken_) {
    last_chunk_taken_ = true;
    return Next::kLastChunk;
  }
  pump_scheduled_ = false;
  return Next::kNothing;
}

void StreamState::MarkEnded() {
  std::vector<std::function<void()>> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!open_) return;
    open_ = false;
    queue_.clear();
    queued_bytes_ = 0;
    callbacks.swap(on_close_);
  }
  for (auto& fn : callbacks) fn();
}
}  // namespace tessera::net

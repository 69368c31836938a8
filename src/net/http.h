// HTTP message types shared by tessera's HttpServer and HttpClient.
//
// These are plain values: no Boost header is included here, so code that only builds requests
// and responses (the api routes, the CLI) compiles fast. A Response is normally a complete
// message; a streaming Response instead carries an `on_stream` callback that receives a
// StreamWriter, through which the application pushes chunks for as long as the client listens.
//
// Thread-safety: Request, Response and Headers are values (copy them between threads freely).
// StreamWriter is thread-safe: any thread may call any of its methods.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera::net {

enum class Method { kGet, kHead, kPost, kPut, kPatch, kDelete, kOptions };

// "GET", "POST", ...
const char* MethodName(Method method);
// Parses an upper-case method name; InvalidArgument for anything else.
Result<Method> ParseMethod(std::string_view name);

// Orders header names case-insensitively, so headers.find("content-type") finds
// "Content-Type".
struct CaseInsensitiveLess {
  using is_transparent = void;
  bool operator()(std::string_view a, std::string_view b) const;
};

// Header name -> value. Repeated headers are joined with ", ".
using Headers = std::map<std::string, std::string, CaseInsensitiveLess>;

struct Request {
  Method method = Method::kGet;
  std::string target;  // as sent: "/api/v1/jobs/a%20b?watch=1"
  std::string path;    // percent-decoded, without the query: "/api/v1/jobs/a b"
  std::map<std::string, std::string> params;  // from the route pattern: {"name": "a b"}
  std::map<std::string, std::string> query;   // decoded; for a repeated key the last one wins
  Headers headers;
  std::string body;
  std::string peer;  // remote address and port, "127.0.0.1:53412" or "[::1]:53412"
  // With TLS and a client certificate that verified against the server's client CA: its
  // subject CN ("host:node-3", "user:alice"). Empty otherwise; authorise by it, not by peer.
  std::string peer_identity;

  // The value of header `name`, or "" when absent.
  std::string Header(std::string_view name) const;
  // The value of query parameter `key`, or nullopt when absent.
  std::optional<std::string> Query(std::string_view key) const;
};

// True when `request` carries "Authorization: Bearer <token>" for exactly `token`. The scheme
// is case-insensitive (RFC 7235: "bearer", "Bearer" and "BEARER" are one scheme) and may be
// followed by several spaces; the token is compared in constant time. HttpServer's auth and
// the application's role checks both ask this, so they cannot disagree about a header. False
// for an empty `token`.
bool HasBearerToken(const Request& request, std::string_view token);

// A push channel to one streaming client. Obtained from Response::on_stream.
//
// Chunks are queued and written asynchronously in order; Write never blocks on the network.
// The stream ends when the application calls Close(), the client disconnects, the client is
// too slow (its queue exceeds ServerOptions::max_stream_queue_bytes) or the server stops.
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;

  // Queues `chunk` (e.g. one JSON line ending in '\n'). Returns true if it was queued, false
  // once the stream has ended (the chunk is dropped). An empty chunk is a no-op returning
  // whether the stream is still open.
  virtual bool Write(std::string chunk) = 0;
  // Ends the stream after the queued chunks are sent. Idempotent.
  virtual void Close() = 0;
  // False once the stream has ended for any reason.
  virtual bool IsOpen() const = 0;
  // Runs `fn` exactly once when the stream ends, on a server thread; runs it immediately on
  // the calling thread if the stream has already ended. `fn` must not block.
  virtual void OnClose(std::function<void()> fn) = 0;
  // "127.0.0.1:53412": who is listening.
  virtual const std::string& peer() const = 0;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  Headers headers;  // extra headers; Content-Type and Content-Length are set by the server

  // When set, this is a streaming response: the server sends the status line and headers
  // with chunked transfer encoding (body is ignored), then calls on_stream once, on an io
  // thread, with the writer. Keep the writer to push chunks later from any thread.
  std::function<void(std::shared_ptr<StreamWriter>)> on_stream;
  // Optional, with on_stream: a duplex stream. The client may go on sending after its request
  // (it should wait for the response header); each line it sends is passed here without its
  // "\n" (and "\r"), in order, on the connection's io thread, after on_stream has run. A line
  // longer than ServerOptions::max_body_bytes ends the stream. Without it, whatever the client
  // sends while the stream is open is ignored.
  std::function<void(std::string_view line)> on_client_line;
  // When set (and on_stream is not), the response comes later: the server calls on_deferred
  // once, on the io thread, with `answer`, and frees that thread. Call `answer` exactly once,
  // from any thread, with the response (not a streaming or deferred one). A connection closed
  // meanwhile drops it.
  std::function<void(std::function<void(Response)> answer)> on_deferred;

  // A response with `body` as JSON text.
  static Response Json(int status, std::string body);
  // A plain-text response.
  static Response Text(int status, std::string body);
  // {"error": message, "field": field} (field is null when empty), as JSON.
  static Response Error(int status, std::string_view message, std::string_view field = {});
  // A streaming response of newline-delimited JSON ("application/x-ndjson").
  static Response Stream(std::function<void(std::shared_ptr<StreamWriter>)> on_stream);
  // A response answered later (on_deferred above).
  static Response Deferred(std::function<void(std::function<void(Response)>)> on_deferred);
};

// Handles one request. Runs on a server io thread; may block briefly (it holds that thread).
// Exceptions are caught and turned into a 500 response, but handlers should not throw.
using Handler = std::function<Response(const Request&)>;

// The standard reason phrase for `status` ("Not Found"), or "" when unknown.
std::string_view StatusReason(int status);

}  // namespace tessera::net

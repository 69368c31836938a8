// DuplexClient: one HTTP/1.1 connection that sends a request, reads its streaming (chunked)
// response line by line, and meanwhile lets other threads send lines up the same connection
// (the server hands them to Response::on_client_line). The agent's channel to the head
// (docs/agent-protocol.md "Channel") is one: heartbeats up, snapshots and acknowledgements down.
//
// Ownership: the caller owns the client. Thread-safety: Run() on one thread at a time; Send()
// and Cancel() from any thread.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "common/status.h"
#include "net/http.h"
#include "net/http_client.h"

namespace tessera::net {

class DuplexImpl;  // duplex_client.cc

class DuplexClient {
 public:
  // Uses host, port, tls, bearer_token, connect_timeout (connect, handshake and the response
  // header together) and stream_idle_timeout (0: wait as long as the server keeps it open).
  explicit DuplexClient(ClientOptions options);
  ~DuplexClient();
  DuplexClient(const DuplexClient&) = delete;
  DuplexClient& operator=(const DuplexClient&) = delete;

  // Connects, sends the request and, once a 200 header arrived, calls `on_open` and then
  // `on_line` for each line of the response body (without its "\n"), all on the calling
  // thread, until the server ends the response (OK), `on_line` returns false (OK), Cancel()
  // or a transport failure (Unavailable naming host:port). A non-200 answer returns the error
  // HttpClient::Stream would (404 NotFound, 401/403 FailedPrecondition, ...) with its body.
  Status Run(Method method, std::string_view target, const Headers& headers,
             const std::function<void()>& on_open,
             const std::function<bool(std::string_view line)>& on_line);

  // Queues `line` and a "\n" to be sent up the connection. False when no response is open
  // (before on_open, after Run returned): nothing is sent then.
  bool Send(std::string line);

  // Ends the Run in progress (it returns Unavailable "cancelled") and every later one.
  void Cancel();

 private:
  std::unique_ptr<DuplexImpl> impl_;
};

}  // namespace tessera::net

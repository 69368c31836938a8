// EtcdClient: the few calls of etcd 3.4's HTTP/JSON gateway that the etcd store and the leader
// election need (/v3/kv/range, /v3/kv/txn, /v3/lease/grant|keepalive|revoke), over tessera's
// own HTTP client. Keys and values are bytes here; the client base64-encodes them on the wire
// and decodes the answers.
//
// Endpoints: one or more host:port of one etcd cluster. A call goes to the endpoint that
// answered last; on a transport failure it tries each other endpoint once, in order, before it
// gives up with kUnavailable naming every endpoint it tried. An etcd error answer (an HTTP
// status other than 200, e.g. "etcdserver: leader changed") is kUnavailable with etcd's
// message: the caller decides whether to retry.
//
// Ownership: the caller owns the client. Thread-safety: every method may be called from any
// thread; each call borrows a connection from a small pool, so calls run in parallel.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::store {

struct EtcdEndpoint {
  std::string host;
  uint16_t port = 0;
  std::string ToString() const { return host + ":" + std::to_string(port); }
  bool operator==(const EtcdEndpoint&) const = default;
};

// Parses "etcd://host:port[,host:port...]" or "etcds://..." (TLS; the scheme is optional).
// kInvalidArgument naming `field` and showing the expected form for anything else (an empty
// list, a missing port, a port outside 1-65535, a duplicate endpoint).
Result<std::vector<EtcdEndpoint>> ParseEtcdEndpoints(std::string_view text,
                                                     std::string_view field = "--store");

// True for an "etcds://" URL: the members serve TLS and ask for a client certificate.
bool EtcdUrlUsesTls(std::string_view text);

std::string Base64Encode(std::string_view bytes);
// nullopt for text that is not base64.
std::optional<std::string> Base64Decode(std::string_view text);

// The end of the key range that holds every key starting with `prefix` (etcd's "prefix end":
// the prefix with its last byte incremented).
std::string PrefixEnd(std::string_view prefix);

// TLS to etcd (etcds://): every member must present a certificate signed by the CA in
// `ca_file` that names the endpoint's host; the client presents `cert_file` and `key_file`
// (PEM), as members run with --client-cert-auth ask. A file that does not load fails every
// call with InvalidArgument naming it.
struct EtcdTls {
  std::string ca_file;
  std::string cert_file;
  std::string key_file;
};

struct EtcdOptions {
  std::vector<EtcdEndpoint> endpoints;
  // Per call: connect and read deadlines. Default 2 s and 5 s.
  std::chrono::milliseconds connect_timeout{2'000};
  std::chrono::milliseconds request_timeout{5'000};
  // The largest answer a call reads; a larger one fails the call. Readers that may meet more
  // (a list, the change log) page their reads to stay well under it. Default 64 MiB.
  uint64_t max_response_bytes = uint64_t{64} << 20;
  // nullopt = plain HTTP (etcd://).
  std::optional<EtcdTls> tls;
};

// One key as etcd returns it.
struct EtcdKv {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

struct EtcdRange {
  std::vector<EtcdKv> kvs;
  bool more = false;     // a limit cut the answer short
  int64_t revision = 0;  // etcd's revision the answer was read at
};

class EtcdClient {
 public:
  explicit EtcdClient(EtcdOptions options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // POSTs `body` to `path` ("/v3/kv/txn") and returns the decoded answer. The txn builders
  // below fill the base64 fields; Call sends what it is given.
  Result<nlohmann::json> Call(std::string_view path, const nlohmann::json& body);

  // The keys in [key, range_end) (just `key` when range_end is empty), sorted by key, at most
  // `limit` of them (0: no limit).
  // The keys in [key, range_end) (just `key` when range_end is empty), at most `limit` of them
  // (0: all), read at etcd revision `revision` (0: the latest).
  Result<EtcdRange> Range(std::string_view key, std::string_view range_end = {}, int64_t limit = 0,
                          int64_t revision = 0);

  // A lease of `ttl_seconds`; returns its id.
  Result<int64_t> LeaseGrant(int64_t ttl_seconds);
  // Renews the lease; returns the TTL etcd granted again, or kNotFound when the lease has
  // expired or was revoked.
  Result<int64_t> LeaseKeepAlive(int64_t lease_id);
  Status LeaseRevoke(int64_t lease_id);

  const std::vector<EtcdEndpoint>& endpoints() const { return options_.endpoints; }
  std::string EndpointList() const;

 private:
  struct Pool;
  EtcdOptions options_;
  std::unique_ptr<Pool> pool_;
};

// Txn building blocks in the gateway's JSON (keys and values base64-encoded here).
namespace etcd {
nlohmann::json CompareModRevision(std::string_view key, int64_t mod_revision);
nlohmann::json CompareCreateRevision(std::string_view key, int64_t create_revision);
nlohmann::json CompareValue(std::string_view key, std::string_view value);
nlohmann::json Put(std::string_view key, std::string_view value, int64_t lease = 0);
nlohmann::json DeleteRange(std::string_view key, std::string_view range_end = {});
nlohmann::json GetRange(std::string_view key, std::string_view range_end = {}, int64_t limit = 0,
                        int64_t revision = 0);
// The kvs of a response_range inside a txn answer.
Result<EtcdRange> DecodeRange(const nlohmann::json& range_response);
// A gateway int64 (sent as a JSON string, absent when zero).
int64_t Int(const nlohmann::json& object, const char* field);
}  // namespace etcd

}  // namespace tessera::store

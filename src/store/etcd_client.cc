#include "store/etcd_client.h"

#include <charconv>
#include <utility>

#include "common/text.h"
#include "net/http_client.h"

namespace tessera::store {

using nlohmann::json;

namespace {

constexpr const char* kForm =
    "etcd://host:port[,host:port...] or etcds:// for TLS (e.g. etcds://127.0.0.1:2379)";

}  // namespace

Result<std::vector<EtcdEndpoint>> ParseEtcdEndpoints(std::string_view text,
                                                     std::string_view field) {
  const std::string f(field);
  std::string_view rest = text;
  if (rest.starts_with("etcd://")) rest.remove_prefix(7);
  if (rest.starts_with("etcds://")) rest.remove_prefix(8);
  if (rest.empty()) return InvalidArgument(f + ": no etcd endpoint given; expected " + kForm);
  std::vector<EtcdEndpoint> out;
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t colon = item.rfind(':');
    if (item.empty() || colon == std::string_view::npos || colon == 0) {
      return InvalidArgument(f + ": '" + std::string(item) + "' is not host:port; expected " +
                             kForm);
    }
    const auto port = ParseInt(item.substr(colon + 1));
    if (!port || *port < 1 || *port > 65535) {
      return InvalidArgument(f + ": port of '" + std::string(item) +
                             "' must be a number from 1 to 65535; expected " + kForm);
    }
    EtcdEndpoint endpoint{std::string(item.substr(0, colon)), static_cast<uint16_t>(*port)};
    for (const EtcdEndpoint& seen : out) {
      if (seen == endpoint) {
        return InvalidArgument(f + ": endpoint " + endpoint.ToString() + " is listed twice");
      }
    }
    out.push_back(std::move(endpoint));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return out;
}

bool EtcdUrlUsesTls(std::string_view text) { return text.starts_with("etcds://"); }

std::string Base64Encode(std::string_view bytes) {
  static const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v =
        (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8) | uint8_t(bytes[i + 2]);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = uint8_t(bytes[i]) << 16;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (uint8_t(bytes[i]) << 16) | (uint8_t(bytes[i + 1]) << 8);
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(text.size() / 4 * 3);
  for (size_t i = 0; i < text.size(); i += 4) {
    int v[4];
    int pad = 0;
    for (int j = 0; j < 4; ++j) {
      const char c = text[i + j];
      if (c == '=' && i + 4 == text.size() && j >= 2) {
        v[j] = 0;
        ++pad;
        continue;
      }
      if (pad > 0) return std::nullopt;  // data after padding
      v[j] = value(c);
      if (v[j] < 0) return std::nullopt;
    }
    const uint32_t n = (v[0] << 18) | (v[1] << 12) | (v[2] << 6) | v[3];
    out += static_cast<char>(n >> 16);
    if (pad < 2) out += static_cast<char>((n >> 8) & 255);
    if (pad < 1) out += static_cast<char>(n & 255);
  }
  return out;
}

std::string PrefixEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    if (static_cast<uint8_t>(end.back()) < 0xff) {
      end.back() = static_cast<char>(static_cast<uint8_t>(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

namespace etcd {

int64_t Int(const json& object, const char* field) {
  auto it = object.find(field);
  if (it == object.end() || it->is_null()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) return ParseInt(it->get<std::string>()).value_or(0);
  return 0;
}

json CompareModRevision(std::string_view key, int64_t mod_revision) {
  return {{"key", Base64Encode(key)},
          {"result", "EQUAL"},
          {"target", "MOD"},
          {"mod_revision", std::to_string(mod_revision)}};
}

json CompareCreateRevision(std::string_view key, int64_t create_revision) {
  return {{"key", Base64Encode(key)},
          {"result", "EQUAL"},
          {"target", "CREATE"},
          {"create_revision", std::to_string(create_revision)}};
}

json CompareValue(std::string_view key, std::string_view value) {
  return {{"key", Base64Encode(key)},
          {"result", "EQUAL"},
          {"target", "VALUE"},
          {"value", Base64Encode(value)}};
}

json Put(std::string_view key, std::string_view value, int64_t lease) {
  json put = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) put["lease"] = std::to_string(lease);
  return {{"request_put", put}};
}

json DeleteRange(std::string_view key, std::string_view range_end) {
  json del = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) del["range_end"] = Base64Encode(range_end);
  return {{"request_delete_range", del}};
}

json GetRange(std::string_view key, std::string_view range_end, int64_t limit, int64_t revision) {
  json range = {{"key", Base64Encode(key)}};
  if (!range_end.empty()) range["range_end"] = Base64Encode(range_end);
  if (limit > 0) range["limit"] = std::to_string(limit);
  if (revision > 0) range["revision"] = std::to_string(revision);
  return {{"request_range", range}};
}

Result<EtcdRange> DecodeRange(const json& response) {
  EtcdRange out;
  if (auto header = response.find("header"); header != response.end() && header->is_object()) {
    out.revision = Int(*header, "revision");
  }
  out.more = response.value("more", false);
  auto kvs = response.find("kvs");
  if (kvs == response.end()) return out;
  if (!kvs->is_array()) return Internal("etcd range answer: kvs is not an array");
  for (const json& kv : *kvs) {
    EtcdKv item;
    auto key = Base64Decode(kv.value("key", ""));
    auto value = Base64Decode(kv.value("value", ""));
    if (!key || !value) return Internal("etcd range answer: a key or value is not base64");
    item.key = std::move(*key);
    item.value = std::move(*value);
    item.create_revision = Int(kv, "create_revision");
    item.mod_revision = Int(kv, "mod_revision");
    item.version = Int(kv, "version");
    item.lease = Int(kv, "lease");
    out.kvs.push_back(std::move(item));
  }
  return out;
}

}  // namespace etcd

// Idle connections per endpoint, and the endpoint that answered last.
struct EtcdClient::Pool {
  std::mutex mu;
  size_t current = 0;
  std::vector<std::vector<std::unique_ptr<net::HttpClient>>> idle;
};

EtcdClient::EtcdClient(EtcdOptions options)
    : options_(std::move(options)), pool_(std::make_unique<Pool>()) {
  pool_->idle.resize(options_.endpoints.size());
}

EtcdClient::~EtcdClient() = default;

std::string EtcdClient::EndpointList() const {
  std::string out;
  for (const EtcdEndpoint& e : options_.endpoints) out += (out.empty() ? "" : ",") + e.ToString();
  return out;
}

Result<json> EtcdClient::Call(std::string_view path, const json& body) {
  const size_t n = options_.endpoints.size();
  if (n == 0) return InvalidArgument("etcd: no endpoints configured");
  size_t start;
  {
    std::lock_guard lock(pool_->mu);
    start = pool_->current;
  }
  std::string failures;
  const std::string text = body.dump();
  for (size_t k = 0; k < n; ++k) {
    const size_t i = (start + k) % n;
    const EtcdEndpoint& endpoint = options_.endpoints[i];
    std::unique_ptr<net::HttpClient> client;
    {
      std::lock_guard lock(pool_->mu);
      if (!pool_->idle[i].empty()) {
        client = std::move(pool_->idle[i].back());
        pool_->idle[i].pop_back();
      }
    }
    if (!client) {
      net::ClientOptions co;
      co.host = endpoint.host;
      co.port = endpoint.port;
      co.connect_timeout = options_.connect_timeout;
      co.read_timeout = options_.request_timeout;
      co.max_response_bytes = options_.max_response_bytes;
      if (options_.tls) {
        co.tls = net::ClientTlsOptions{options_.tls->ca_file, options_.tls->cert_file,
                                       options_.tls->key_file, ""};
      }
      client = std::make_unique<net::HttpClient>(co);
    }
    auto response = client->Request(net::Method::kPost, path, text);
    if (!response.ok()) {
      // A TLS file that does not load fails at every endpoint alike: no retry mends it.
      if (response.status().code() == StatusCode::kInvalidArgument) return response.status();
      failures += (failures.empty() ? "" : "; ") + response.status().message();
      continue;  // a broken connection is dropped with `client`
    }
    {
      std::lock_guard lock(pool_->mu);
      pool_->current = i;
      if (pool_->idle[i].size() < 8) pool_->idle[i].push_back(std::move(client));
    }
    auto parsed = json::parse(response->body, nullptr, /*allow_exceptions=*/false);
    if (parsed.is_discarded() || !parsed.is_object()) {
      return Unavailable("etcd " + endpoint.ToString() + std::string(path) +
                         ": answer is not a JSON object (HTTP " + std::to_string(response->status) +
                         ")");
    }
    if (response->status != 200) {
      std::string message = parsed.value("message", parsed.value("error", std::string()));
      return Unavailable("etcd " + endpoint.ToString() + std::string(path) + ": " +
                         (message.empty() ? "HTTP " + std::to_string(response->status) : message));
    }
    return parsed;
  }
  return Unavailable("etcd: no endpoint of " + EndpointList() + " answered " + std::string(path) +
                     " (" + failures + ")");
}

Result<EtcdRange> EtcdClient::Range(std::string_view key, std::string_view range_end, int64_t limit,
                                    int64_t revision) {
  json body = etcd::GetRange(key, range_end, limit, revision)["request_range"];
  auto answer = Call("/v3/kv/range", body);
  if (!answer.ok()) return answer.status();
  return etcd::DecodeRange(*answer);
}

Result<int64_t> EtcdClient::LeaseGrant(int64_t ttl_seconds) {
  auto answer = Call("/v3/lease/grant", {{"TTL", std::to_string(ttl_seconds)}});
  if (!answer.ok()) return answer.status();
  const int64_t id = etcd::Int(*answer, "ID");
  if (id == 0) return Unavailable("etcd lease grant: " + answer->value("error", "no lease id"));
  return id;
}

Result<int64_t> EtcdClient::LeaseKeepAlive(int64_t lease_id) {
  auto answer = Call("/v3/lease/keepalive", {{"ID", std::to_string(lease_id)}});
  if (!answer.ok()) return answer.status();
  // A stream of one result; a lease that is gone comes back without a TTL.
  const json& result = answer->contains("result") ? (*answer)["result"] : *answer;
  const int64_t ttl = etcd::Int(result, "TTL");
  if (ttl <= 0) return NotFound("etcd lease " + std::to_string(lease_id) + " has expired");
  return ttl;
}

Status EtcdClient::LeaseRevoke(int64_t lease_id) {
  auto answer = Call("/v3/lease/revoke", {{"ID", std::to_string(lease_id)}});
  if (!answer.ok()) return answer.status();
  return Status::Ok();
}

}  // namespace tessera::store

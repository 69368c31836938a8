// ServiceView: what the router knows of one Service, and the codecs that build it from the
// head's Service documents, its watch stream lines and a static endpoints file.
//
// The router routes only to the endpoints of a Service's first role that the head reports
// ready (the serving contract, docs/serving-router.md), or of its decode role when the Service
// has a prefill and a decode role (then the prefill role's ready endpoints are kept too, with
// each replica's slice for pairing); everything else in a document is ignored here. These functions
// are pure (text in, values or a Status naming the field out) and thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace tessera::proxy {

// One replica's HTTP endpoint (its leader process).
struct Endpoint {
  int replica = 0;
  int64_t generation = 0;
  std::string address;  // "127.0.0.1"
  uint16_t port = 0;
  std::string slice;  // the replica's slice (status.roles[].replicas[].slice); "" unknown
  // "scheme": "https" = the replica serves TLS with a certificate from the cluster CA naming
  // `address` (docs/serving.md "TLS to replicas"); "http" (the default) = plain.
  bool tls = false;

  // "address:port": identifies the process; keys the router's slots and connection pools.
  std::string Key() const;
  bool operator==(const Endpoint&) const = default;
};

constexpr int kDefaultMaxOngoingRequests = 5;

struct ServiceView {
  // The Service's key (common/object_key.h): its name in the namespace "default", NS.NAME in
  // any other. The router routes /services/NAME/ and /namespaces/NS/services/NAME/ by it.
  std::string name;
  std::string role;  // the first role's name ("server" by default)
  int max_ongoing_requests = kDefaultMaxOngoingRequests;  // per replica
  std::vector<Endpoint> endpoints;                        // ready ones only, by replica
  // A disaggregated Service (disagg_pairing.h): `role` is its decode role, and these are its
  // prefill role and that role's ready endpoints. prefill_role is "" otherwise.
  std::string prefill_role;
  std::vector<Endpoint> prefill_endpoints;
  // Groups of the routed role placed and on their way to ready (phase Starting or Recreating
  // in status.roles[].replicas): the dispatcher's queue bound counts them (dispatcher.h).
  int starting = 0;
  bool operator==(const ServiceView&) const = default;
};

// One line of `GET /api/v1/services?watch=true`.
struct ServiceEvent {
  enum class Type { kAdded, kModified, kDeleted };
  Type type = Type::kAdded;
  ServiceView service;
};

// A Service document as the head serves it (metadata.name, spec.roles[0] or the one implicit
// role written under spec, status.endpoints). A Service without a status has no endpoints.
Result<ServiceView> ParseServiceDocument(std::string_view json_text);
// `{"items": [<Service>...]}` (GET /api/v1/services).
Result<std::vector<ServiceView>> ParseServiceList(std::string_view json_text);
// `{"type": "ADDED|MODIFIED|DELETED", "object": <Service>}`.
Result<ServiceEvent> ParseServiceEvent(std::string_view json_line);

// The --static-endpoints file:
//   {"services": [{"name": "echo", "maxOngoingRequests": 5,
//                  "endpoints": [{"address": "127.0.0.1", "port": 8001, "replica": 0}]}]}
// `maxOngoingRequests` defaults to 5, `replica` to the endpoint's index, `role` to "server",
// an endpoint's `scheme` ("http" or "https") to "http".
// A disaggregated Service adds "prefillEndpoints" (its prefill replicas; "endpoints" are then
// its decode replicas) and optionally "prefillRole" (default "prefill"); any endpoint may
// carry "slice" (its locality for pairing).
Result<std::vector<ServiceView>> ParseStaticEndpoints(std::string_view json_text);

}  // namespace tessera::proxy

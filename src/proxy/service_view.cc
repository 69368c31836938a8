#include "proxy/service_view.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/object_key.h"

namespace tessera::proxy {
namespace {

using Json = nlohmann::json;

Result<Json> ParseJson(std::string_view text, std::string_view what) {
  Json doc = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) return InvalidArgument(std::string(what) + ": not valid JSON");
  if (!doc.is_object()) return InvalidArgument(std::string(what) + ": must be a JSON object");
  return doc;
}

// An integer field in [lo, hi]; `fallback` when absent.
Result<int64_t> IntField(const Json& obj, const char* key, const std::string& where,
                         int64_t fallback, int64_t lo, int64_t hi) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) return InvalidArgument(where + "." + key + ": must be an integer");
  const int64_t v = it->get<int64_t>();
  if (v < lo || v > hi) {
    return InvalidArgument(where + "." + key + ": " + std::to_string(v) + " is out of range [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return v;
}

Result<std::string> StringField(const Json& obj, const char* key, const std::string& where,
                                std::string fallback) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  if (!it->is_string()) return InvalidArgument(where + "." + key + ": must be a string");
  return it->get<std::string>();
}

Result<Endpoint> ParseEndpoint(const Json& e, const std::string& where, int default_replica) {
  if (!e.is_object()) return InvalidArgument(where + ": must be an object");
  Endpoint out;
  auto replica = IntField(e, "replica", where, default_replica, 0, 1'000'000);
  if (!replica.ok()) return replica.status();
  auto generation = IntField(e, "generation", where, 0, 0, INT64_MAX);
  if (!generation.ok()) return generation.status();
  auto address = StringField(e, "address", where, "");
  if (!address.ok()) return address.status();
  if (address->empty()) return InvalidArgument(where + ".address: required, e.g. \"127.0.0.1\"");
  auto port = IntField(e, "port", where, 0, 1, 65535);
  if (!port.ok()) return port.status();
  if (*port == 0) return InvalidArgument(where + ".port: required (1 to 65535)");
  auto scheme = StringField(e, "scheme", where, "http");
  if (!scheme.ok()) return scheme.status();
  if (*scheme != "http" && *scheme != "https")
    return InvalidArgument(where + ".scheme: must be \"http\" or \"https\", not \"" + *scheme +
                           "\"");
  out.tls = *scheme == "https";
  out.replica = static_cast<int>(*replica);
  out.generation = *generation;
  out.address = std::move(*address);
  out.port = static_cast<uint16_t>(*port);
  return out;
}

void SortEndpoints(std::vector<Endpoint>& endpoints) {
  std::sort(endpoints.begin(), endpoints.end(), [](const Endpoint& a, const Endpoint& b) {
    return std::tie(a.replica, a.generation, a.address, a.port) <
           std::tie(b.replica, b.generation, b.address, b.port);
  });
}

Result<ServiceView> FromServiceJson(const Json& doc) {
  if (!doc.is_object()) return InvalidArgument("Service: must be a JSON object");
  ServiceView out;
  const Json& meta = doc.contains("metadata") ? doc["metadata"] : Json::object();
  if (!meta.is_object() || !meta.contains("name") || !meta["name"].is_string() ||
      meta["name"].get<std::string>().empty()) {
    return InvalidArgument("metadata.name: required, a non-empty string");
  }
  std::string namespace_name(kDefaultNamespace);
  if (meta.contains("namespace")) {
    if (!meta["namespace"].is_string() || meta["namespace"].get<std::string>().empty())
      return InvalidArgument("metadata.namespace: must be a non-empty string");
    namespace_name = meta["namespace"].get<std::string>();
  }
  out.name = ObjectKey(namespace_name, meta["name"].get<std::string>());
  const std::string where = "Service " + out.name;

  const Json& spec = doc.contains("spec") ? doc["spec"] : Json::object();
  if (!spec.is_object()) return InvalidArgument(where + ": spec must be an object");
  // The first role decides; without roles the fields sit directly under spec.
  const Json* role = &spec;
  std::string role_where = where + ": spec";
  if (auto roles = spec.find("roles"); roles != spec.end() && !roles->is_null()) {
    if (!roles->is_array()) return InvalidArgument(where + ": spec.roles must be a list");
    if (!roles->empty()) {
      role = &(*roles)[0];
      role_where = where + ": spec.roles[0]";
      if (!role->is_object()) return InvalidArgument(role_where + ": must be an object");
    }
  }
  // A prefill and a decode role (disaggregation: prefill | decode): requests go to decode.
  const Json* prefill = nullptr;
  if (auto roles = spec.find("roles"); roles != spec.end() && roles->is_array()) {
    for (size_t i = 0; i < roles->size(); ++i) {
      const Json& r = (*roles)[i];
      if (!r.is_object()) continue;
      const std::string kind = r.value("disaggregation", Json("")).is_string()
                                   ? r.value("disaggregation", std::string())
                                   : std::string();
      if (kind == "decode") {
        role = &r;
        role_where = where + ": spec.roles[" + std::to_string(i) + "]";
      } else if (kind == "prefill") {
        prefill = &r;
      }
    }
    if (prefill == nullptr) role = roles->empty() ? &spec : &(*roles)[0];
    if (prefill == nullptr && !roles->empty()) role_where = where + ": spec.roles[0]";
  }
  if (prefill != nullptr) {
    auto name = StringField(*prefill, "name", where + ": the prefill role", "");
    if (!name.ok()) return name.status();
    out.prefill_role = *name;
  }
  auto role_name = StringField(*role, "name", role_where, "server");
  if (!role_name.ok()) return role_name.status();
  out.role = role == &spec ? "server" : *role_name;
  auto max_ongoing =
      IntField(*role, "maxOngoingRequests", role_where, kDefaultMaxOngoingRequests, 1, 1'000'000);
  if (!max_ongoing.ok()) return max_ongoing.status();
  out.max_ongoing_requests = static_cast<int>(*max_ongoing);

  auto status = doc.find("status");
  if (status == doc.end() || !status->is_object()) return out;
  // Each replica's slice, by role and replica index (for the pairing of disaggregated roles).
  std::map<std::pair<std::string, int>, std::string> slices;
  if (auto roles = status->find("roles"); roles != status->end() && roles->is_array()) {
    for (const Json& r : *roles) {
      if (!r.is_object() || !r.value("name", Json()).is_string()) continue;
      const Json replicas = r.value("replicas", Json::array());
      if (!replicas.is_array()) continue;
      for (const Json& rep : replicas) {
        if (rep.is_object() && r["name"] == out.role) {
          const Json phase = rep.value("phase", Json());
          if (phase == "Starting" || phase == "Recreating") ++out.starting;
        }
        if (!rep.is_object() || !rep.value("replica", Json()).is_number_integer() ||
            !rep.value("slice", Json()).is_string())
          continue;
        slices[{r["name"].get<std::string>(), rep["replica"].get<int>()}] =
            rep["slice"].get<std::string>();
      }
    }
  }
  auto endpoints = status->find("endpoints");
  if (endpoints == status->end() || endpoints->is_null()) return out;
  if (!endpoints->is_array()) return InvalidArgument(where + ": status.endpoints must be a list");
  for (size_t i = 0; i < endpoints->size(); ++i) {
    const Json& e = (*endpoints)[i];
    const std::string ewhere = where + ": status.endpoints[" + std::to_string(i) + "]";
    if (!e.is_object()) return InvalidArgument(ewhere + ": must be an object");
    const std::string erole =
        e.value("role", Json(out.role)).is_string() ? e.value("role", out.role) : std::string();
    const bool front = erole == out.role;
    const bool is_prefill = !out.prefill_role.empty() && erole == out.prefill_role;
    if (!front && !is_prefill) continue;
    if (!e.value("ready", false)) continue;
    auto endpoint = ParseEndpoint(e, ewhere, static_cast<int>(i));
    if (!endpoint.ok()) return endpoint.status();
    if (auto sl = slices.find({erole, endpoint->replica}); sl != slices.end())
      endpoint->slice = sl->second;
    (front ? out.endpoints : out.prefill_endpoints).push_back(std::move(*endpoint));
  }
  SortEndpoints(out.endpoints);
  SortEndpoints(out.prefill_endpoints);
  return out;
}

}  // namespace

std::string Endpoint::Key() const { return address + ":" + std::to_string(port); }

Result<ServiceView> ParseServiceDocument(std::string_view json_text) {
  auto doc = ParseJson(json_text, "Service");
  if (!doc.ok()) return doc.status();
  return FromServiceJson(*doc);
}

Result<std::vector<ServiceView>> ParseServiceList(std::string_view json_text) {
  auto doc = ParseJson(json_text, "service list");
  if (!doc.ok()) return doc.status();
  auto items = doc->find("items");
  if (items == doc->end() || !items->is_array()) {
    return InvalidArgument("service list: items must be a list");
  }
  std::vector<ServiceView> out;
  for (const Json& item : *items) {
    auto view = FromServiceJson(item);
    if (!view.ok()) return view.status();
    out.push_back(std::move(*view));
  }
  return out;
}

Result<ServiceEvent> ParseServiceEvent(std::string_view json_line) {
  auto doc = ParseJson(json_line, "watch event");
  if (!doc.ok()) return doc.status();
  ServiceEvent out;
  const std::string type = doc->value("type", "");
  if (type == "ADDED") {
    out.type = ServiceEvent::Type::kAdded;
  } else if (type == "MODIFIED") {
    out.type = ServiceEvent::Type::kModified;
  } else if (type == "DELETED") {
    out.type = ServiceEvent::Type::kDeleted;
  } else {
    return InvalidArgument("watch event: type must be ADDED, MODIFIED or DELETED, not '" + type +
                           "'");
  }
  auto object = doc->find("object");
  if (object == doc->end()) return InvalidArgument("watch event: object is missing");
  auto view = FromServiceJson(*object);
  if (!view.ok()) return view.status();
  out.service = std::move(*view);
  return out;
}

Result<std::vector<ServiceView>> ParseStaticEndpoints(std::string_view json_text) {
  auto doc = ParseJson(json_text, "static endpoints");
  if (!doc.ok()) return doc.status();
  for (const auto& [key, value] : doc->items()) {
    if (key != "services") {
      return InvalidArgument("static endpoints: unknown field '" + key +
                             "' (the file holds {\"services\": [...]})");
    }
  }
  auto services = doc->find("services");
  if (services == doc->end() || !services->is_array()) {
    return InvalidArgument("static endpoints: services must be a list of services");
  }
  std::vector<ServiceView> out;
  for (size_t i = 0; i < services->size(); ++i) {
    const Json& s = (*services)[i];
    const std::string where = "services[" + std::to_string(i) + "]";
    if (!s.is_object()) return InvalidArgument(where + ": must be an object");
    for (const auto& [key, value] : s.items()) {
      if (key != "name" && key != "role" && key != "maxOngoingRequests" && key != "endpoints" &&
          key != "prefillRole" && key != "prefillEndpoints") {
        return InvalidArgument(where + ": unknown field '" + key +
                               "' (fields: name, role, maxOngoingRequests, endpoints, "
                               "prefillRole, prefillEndpoints)");
      }
    }
    ServiceView view;
    auto name = StringField(s, "name", where, "");
    if (!name.ok()) return name.status();
    if (name->empty()) return InvalidArgument(where + ".name: required");
    view.name = std::move(*name);
    for (const ServiceView& seen : out) {
      if (seen.name == view.name) {
        return InvalidArgument(where + ".name: service '" + view.name + "' is listed twice");
      }
    }
    auto role = StringField(s, "role", where, "server");
    if (!role.ok()) return role.status();
    view.role = std::move(*role);
    auto max_ongoing =
        IntField(s, "maxOngoingRequests", where, kDefaultMaxOngoingRequests, 1, 1'000'000);
    if (!max_ongoing.ok()) return max_ongoing.status();
    view.max_ongoing_requests = static_cast<int>(*max_ongoing);
    auto endpoints = s.find("endpoints");
    if (endpoints == s.end() || !endpoints->is_array()) {
      return InvalidArgument(where + ".endpoints: required, a list of {address, port}");
    }
    for (size_t j = 0; j < endpoints->size(); ++j) {
      auto e = ParseEndpoint((*endpoints)[j], where + ".endpoints[" + std::to_string(j) + "]",
                             static_cast<int>(j));
      if (!e.ok()) return e.status();
      auto slice = StringField((*endpoints)[j], "slice", where, "");
      if (!slice.ok()) return slice.status();
      e->slice = std::move(*slice);
      view.endpoints.push_back(std::move(*e));
    }
    SortEndpoints(view.endpoints);
    // A disaggregated Service: `endpoints` are its decode replicas, these its prefill ones.
    if (auto prefill = s.find("prefillEndpoints"); prefill != s.end() && !prefill->is_null()) {
      if (!prefill->is_array())
        return InvalidArgument(where + ".prefillEndpoints: a list of {address, port, slice}");
      auto prefill_role = StringField(s, "prefillRole", where, "prefill");
      if (!prefill_role.ok()) return prefill_role.status();
      if (prefill_role->empty() || *prefill_role == view.role)
        return InvalidArgument(where + ".prefillRole: must name a role other than '" + view.role +
                               "'");
      view.prefill_role = std::move(*prefill_role);
      for (size_t j = 0; j < prefill->size(); ++j) {
        const std::string pwhere = where + ".prefillEndpoints[" + std::to_string(j) + "]";
        auto e = ParseEndpoint((*prefill)[j], pwhere, static_cast<int>(j));
        if (!e.ok()) return e.status();
        auto slice = StringField((*prefill)[j], "slice", pwhere, "");
        if (!slice.ok()) return slice.status();
        e->slice = std::move(*slice);
        view.prefill_endpoints.push_back(std::move(*e));
      }
      SortEndpoints(view.prefill_endpoints);
    } else if (s.contains("prefillRole")) {
      return InvalidArgument(where +
                             ".prefillRole: set only with prefillEndpoints (the prefill "
                             "replicas of a disaggregated Service)");
    }
    out.push_back(std::move(view));
  }
  return out;
}

}  // namespace tessera::proxy

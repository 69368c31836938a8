// Namespaces at the HTTP layer (docs/security.md "Namespaces"): which object a users' route
// names, and which objects of a list or watch a caller asked for.
//
// TrainJobs, Services, SliceReservations, LocalQueues and events live in a namespace; the
// controller and the store know each such object by its key (common/object_key.h: the bare
// name in "default", NAMESPACE.NAME elsewhere), and documents show metadata.name and
// metadata.namespace. A route takes the namespace from ?namespace=NS (default "default") or
// every namespace with ?allNamespaces=true; authz.h decides first whether the caller may.
//
// Thread-safety: stateless functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "api/authz.h"

namespace tessera::api {

// The key of the object a route's target names: `target.name` in its namespace for a
// namespaced kind (the namespace "default" when the target is of every namespace), the bare
// name for a cluster-wide one.
std::string TargetKey(const authz::Target& target);

// The namespace of a document: metadata.namespace, "default" when it has none.
std::string NamespaceOf(const nlohmann::json& object);

// Drops from list["items"] every object outside `namespace_name` ("" keeps every one).
void KeepNamespace(nlohmann::json& list, const std::string& namespace_name);

// A delete's answer {"name": KEY, ...} shown as documents are: name and namespace apart.
nlohmann::json ShowKey(nlohmann::json reply);

}  // namespace tessera::api

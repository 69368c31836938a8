#include "api/authz.h"

#include <algorithm>
#include <array>
#include <initializer_list>

namespace tessera::api::authz {

namespace {

constexpr std::array<std::string_view, 4> kRoleNames = {"view", "edit", "admin", "cluster-admin"};
constexpr std::array<std::string_view, 9> kVerbNames = {
    "get", "list", "watch", "logs", "create", "apply", "delete", "scale", "report-load"};

// One row of the table: the least namespace role that may do `verbs` to `kinds`. A verb on a
// kind no row names needs cluster-admin. docs/security.md prints this table.
struct Rule {
  Role least;
  std::initializer_list<std::string_view> kinds;
  std::initializer_list<Verb> verbs;
};

const Rule kRules[] = {
    {Role::kView,
     {"TrainJob", "Service", "SliceReservation", "LocalQueue", "Event"},
     {Verb::kGet, Verb::kList, Verb::kWatch, Verb::kLogs}},
    {Role::kView, {"ClusterQueue", "PriorityClass"}, {Verb::kGet, Verb::kList, Verb::kWatch}},
    // Secrets' keys and lengths only: no route serves a value to anyone (docs/security.md).
    {Role::kView, {"Secret"}, {Verb::kGet, Verb::kList, Verb::kWatch}},
    {Role::kEdit, {"Secret"}, {Verb::kCreate, Verb::kApply, Verb::kDelete}},
    {Role::kEdit,
     {"TrainJob", "Service", "SliceReservation"},
     {Verb::kCreate, Verb::kApply, Verb::kDelete, Verb::kScale, Verb::kReportLoad}},
    {Role::kAdmin, {"LocalQueue"}, {Verb::kCreate, Verb::kApply, Verb::kDelete}},
};

template <typename T>
bool Contains(std::initializer_list<T> list, const T& value) {
  return std::find(list.begin(), list.end(), value) != list.end();
}

std::string Quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

std::string DescribePrincipal(const Principal& who) {
  std::string out = "user " + Quoted(who.name) + " (" + RoleName(who.role);
  if (who.role != Role::kClusterAdmin) out += " in namespace " + Quoted(who.namespace_name);
  return out + ")";
}

}  // namespace

const char* RoleName(Role role) { return kRoleNames[static_cast<size_t>(role)].data(); }

std::optional<Role> ParseRole(std::string_view name) {
  for (size_t i = 0; i < kRoleNames.size(); ++i)
    if (kRoleNames[i] == name) return static_cast<Role>(i);
  return std::nullopt;
}

const char* VerbName(Verb verb) { return kVerbNames[static_cast<size_t>(verb)].data(); }

bool IsWrite(Verb verb) {
  return verb != Verb::kGet && verb != Verb::kList && verb != Verb::kWatch && verb != Verb::kLogs;
}

bool IsNamespaced(std::string_view kind) {
  return Contains({std::string_view("TrainJob"), std::string_view("Service"),
                   std::string_view("SliceReservation"), std::string_view("LocalQueue"),
                   std::string_view("Secret"), std::string_view("Event")},
                  kind);
}

std::string DescribeTarget(const Target& target) {
  if (target.name.empty()) {
    if (IsNamespaced(target.kind))
      return target.kind + "s in " +
             (target.namespace_name.empty() ? std::string("every namespace")
                                            : "namespace " + Quoted(target.namespace_name));
    return target.kind + "s";
  }
  if (IsNamespaced(target.kind))
    return target.kind + " " + target.namespace_name + "/" + target.name;
  return target.kind + " " + target.name;
}

Role LeastRole(Verb verb, std::string_view kind) {
  Role least = Role::kClusterAdmin;
  for (const Rule& rule : kRules)
    if (Contains(rule.kinds, kind) && Contains(rule.verbs, verb))
      least = std::min(least, rule.least);
  return least;
}

Decision Authorize(const Principal& who, Verb verb, const Target& target) {
  if (who.role == Role::kClusterAdmin) return {true, ""};
  const Role least = LeastRole(verb, target.kind);
  const bool namespaced = IsNamespaced(target.kind);
  // A namespace role holds inside its own namespace, and for the cluster-wide kinds the table
  // lets every user read; never over every namespace at once.
  const bool in_scope = !namespaced || target.namespace_name == who.namespace_name;
  if (least != Role::kClusterAdmin && who.role >= least && in_scope) return {true, ""};

  std::string needs;
  if (least == Role::kClusterAdmin) {
    needs = "that needs role cluster-admin";
  } else if (namespaced && target.namespace_name.empty()) {
    needs = "that needs role cluster-admin; a user of one namespace lists it with --namespace " +
            who.namespace_name;
  } else if (namespaced) {
    needs = std::string("that needs role ") + RoleName(least) + " in namespace " +
            Quoted(target.namespace_name) + " (or cluster-admin)";
  } else {
    needs = std::string("that needs role ") + RoleName(least) + " (or cluster-admin)";
  }
  return {false, DescribePrincipal(who) + " may not " + VerbName(verb) + " " +
                     DescribeTarget(target) + ": " + needs};
}

}  // namespace tessera::api::authz

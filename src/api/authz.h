// Authorisation of users' calls: whether a user, by the role it holds, may do a verb to an
// object, and when not, a refusal that names the user, the verb, the object and the role that
// would allow it (docs/security.md "Users and roles" holds the same table as kRules in
// authz.cc).
//
// Roles, each including the ones before it:
//   view           read the workloads (TrainJob, Service, SliceReservation), LocalQueues,
//                  events and worker logs of its namespace; read ClusterQueues and
//                  PriorityClasses (cluster-wide, needed to explain why a job waits)
//                  and the names, keys and value lengths of its Secrets (never a value: no
//                  route serves one to anyone)
//   edit           also create, apply, scale and delete the workloads and Secrets of its
//                  namespace
//   admin          also create, apply and delete the LocalQueues of its namespace
//   cluster-admin  everything, in every namespace and cluster-wide (hosts, ClusterQueues,
//                  PriorityClasses, users, the audit log, /metrics); the head's admin token is
//                  the cluster-admin named "admin"
//
// Pure: no I/O, no clock, no global state; safe from any thread.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace tessera::api::authz {

enum class Role { kView, kEdit, kAdmin, kClusterAdmin };  // ordered: each includes the previous

// "view", "edit", "admin", "cluster-admin".
const char* RoleName(Role role);
std::optional<Role> ParseRole(std::string_view name);

enum class Verb { kGet, kList, kWatch, kLogs, kCreate, kApply, kDelete, kScale, kReportLoad };

// "get", "list", ... "report-load".
const char* VerbName(Verb verb);
// True for the verbs that change something (the audit log records these).
bool IsWrite(Verb verb);

// The namespace objects live in when a document or a request names none.
inline constexpr char kDefaultNamespace[] = "default";

// True for the kinds that live in a namespace: TrainJob, Service, SliceReservation, LocalQueue,
// Secret, Event. Every other kind (ClusterQueue, PriorityClass, Host, User, AuditLog, Metrics) is
// cluster-wide.
bool IsNamespaced(std::string_view kind);

// Who calls. A cluster-admin holds its role everywhere (namespace empty); any other role holds
// in `namespace_name` only.
struct Principal {
  std::string name;
  Role role = Role::kView;
  std::string namespace_name;
};

// What a call touches. For a namespaced kind, an empty namespace_name means every namespace (a
// list with --all-namespaces); it is ignored for cluster-wide kinds. An empty name is the
// collection (list, watch, create).
struct Target {
  std::string kind;
  std::string namespace_name;
  std::string name;
};

// "TrainJob default/llama", "TrainJobs in every namespace", "Host h1", "ClusterQueues".
std::string DescribeTarget(const Target& target);

struct Decision {
  bool allowed = false;
  // When refused: "user 'ann' (view in namespace 'team-a') may not delete TrainJob
  // team-a/llama: that needs role edit in namespace 'team-a' (or cluster-admin)".
  std::string reason;
};

Decision Authorize(const Principal& who, Verb verb, const Target& target);

// The least role that may do `verb` to objects of `kind` inside the namespace it holds in
// (kClusterAdmin when no namespace role may).
Role LeastRole(Verb verb, std::string_view kind);

}  // namespace tessera::api::authz

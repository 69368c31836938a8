// Controller: Secrets (docs/security.md "Secrets"). A Secret is stored as applied (its values
// in the store, as Kubernetes keeps them in etcd), kept here by key, and served, listed, watched
// and recorded in events without its values (codec::SecretServedJson). Workloads keep only
// references (`template.env: {X: {valueFrom: {secret, key}}}`); the values join a worker's
// environment when the head builds the assignments of the hosts that run it (AddSecretValues,
// called from job_driver.cc and services.cc), so a running worker keeps the value it started
// with and reads a changed one at its next start, as a Kubernetes container does.
//
// A pending TrainJob whose reference does not resolve waits with SecretNotFound, naming the
// Secret or key and the fix, and starts in the first pass after the Secret is applied. A Secret
// (or a key of it) that a workload holding chips uses cannot be deleted: its next restart would
// otherwise start without the variable.
#include <algorithm>

#include "common/object_key.h"
#include "controller/controller.h"

namespace tessera::controller {
namespace {

constexpr const char* kSecretNotFound = "SecretNotFound";

std::string SecretObject(const std::string& key) { return "secret/" + key; }

// The first reference of `refs` that names Secret `name` and a key `keys` lacks (any, when
// `keys` is null): "DB_PASSWORD (key password)", or "".
std::string UsesMissing(const SecretEnv& refs, const std::string& name,
                        const std::map<std::string, std::string>* keys) {
  for (const auto& [var, ref] : refs)
    if (ref.secret == name && (keys == nullptr || !keys->count(ref.key)))
      return var + " (key " + ref.key + ")";
  return "";
}

std::string Joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace

Result<Json> Controller::ApplySecret(const Json& doc) {
  auto parsed = codec::ParseSecret(doc);
  if (!parsed.ok()) return parsed.status();
  const std::string key = parsed->key;
  const NamespacedName id = SplitObjectKey(key);
  const std::vector<std::string> users = SecretUsers(key, &parsed->data);
  if (!users.empty())
    return FailedPrecondition("data: secret " + id.namespace_name + "/" + id.name +
                              " would lose keys that running workloads read: " + Joined(users) +
                              "; keep those keys, or delete the workloads first");
  const bool created = !secrets_.count(key);
  store::WriteBatch batch;
  batch.Put(codec::kSecretKind, key, codec::SecretStoredJson(*parsed).dump());
  auto r = CommitWithEvents(batch, SecretObject(key),
                            {JobEvent{false, created ? "Created" : "Configured",
                                      (created ? "created with keys: " : "replaced; keys: ") + [&] {
                                        std::vector<std::string> keys;
                                        for (const auto& [k, v] : parsed->data) keys.push_back(k);
                                        return keys.empty() ? std::string("(none)") : Joined(keys);
                                      }()}});
  if (!r.ok()) return Unavailable(r.status().message());
  StoredSecret& stored = secrets_[key];
  stored = StoredSecret{std::move(*parsed), *r};
  ForgetRunningQuietLocked();  // the answers of hosts running workers carry the values
  Json out = codec::SecretServedJson(stored.secret, stored.version);
  Emit(codec::kSecretKind, created ? "ADDED" : "MODIFIED", out);
  AnnounceEvents();
  ScheduleAfterRequest();  // jobs waiting for it start now
  out["created"] = created;
  return out;
}

Result<Json> Controller::DryRunSecret(const Json& doc) const {
  auto parsed = codec::ParseSecret(doc);
  if (!parsed.ok()) return parsed.status();
  const std::vector<std::string> users = SecretUsers(parsed->key, &parsed->data);
  if (!users.empty())
    return FailedPrecondition("data: the secret would lose keys that running workloads read: " +
                              Joined(users) + "; keep those keys, or delete the workloads first");
  const NamespacedName id = SplitObjectKey(parsed->key);
  return Json{{"kind", codec::kSecretKind},
              {"metadata", {{"name", id.name}, {"namespace", id.namespace_name}}},
              {"created", secrets_.count(parsed->key) == 0},
              {"dryRun", true}};
}

Status Controller::LoadSecrets() {
  auto objects = store_.List(codec::kSecretKind);
  if (!objects.ok()) return objects.status();
  for (const auto& obj : *objects) {
    Json j = Json::parse(obj.body, nullptr, false);
    if (j.is_discarded()) return Internal("stored Secret " + obj.name + " is not JSON");
    auto parsed = codec::ParseSecret(j);
    if (!parsed.ok())
      return Internal("stored Secret " + obj.name + ": " + parsed.status().message());
    secrets_[obj.name] = StoredSecret{std::move(*parsed), obj.resource_version};
  }
  return Status::Ok();
}

Json Controller::ListSecretsLocked() const {
  Json items = Json::array();
  for (const auto& [key, s] : secrets_)
    items.push_back(codec::SecretServedJson(s.secret, s.version));
  return {{"kind", "SecretList"}, {"items", items}};
}

Json Controller::ListSecrets() const {
  auto lock = Hold();
  return ListSecretsLocked();
}

Result<Json> Controller::GetSecret(const std::string& key) const {
  auto lock = Hold();
  auto it = secrets_.find(key);
  const NamespacedName id = SplitObjectKey(key);
  if (it == secrets_.end())
    return NotFound("secret '" + id.name + "' not found in namespace " + id.namespace_name);
  return codec::SecretServedJson(it->second.secret, it->second.version);
}

Result<Json> Controller::DeleteSecret(const std::string& key) {
  auto lock = Hold();
  auto it = secrets_.find(key);
  const NamespacedName id = SplitObjectKey(key);
  if (it == secrets_.end())
    return NotFound("secret '" + id.name + "' not found in namespace " + id.namespace_name);
  const std::vector<std::string> users = SecretUsers(key, nullptr);
  if (!users.empty())
    return FailedPrecondition("cannot delete secret " + id.namespace_name + "/" + id.name +
                              ": running workloads read it: " + Joined(users) +
                              " (a restart would start them without it); wait for them or "
                              "delete them first");
  store::WriteBatch batch;
  batch.Delete(codec::kSecretKind, key);
  auto deleted =
      CommitWithEvents(batch, SecretObject(key), {JobEvent{false, "Deleted", "deleted"}});
  if (!deleted.ok()) return Unavailable(deleted.status().message());
  const Json last = codec::SecretServedJson(it->second.secret, it->second.version);
  secrets_.erase(it);
  Emit(codec::kSecretKind, "DELETED", last);
  AnnounceEvents();
  return Json{{"kind", codec::kSecretKind}, {"name", key}, {"status", "Deleted"}};
}

std::string Controller::MissingSecretReason(const std::string& workload_key,
                                            const SecretEnv& refs) const {
  const std::string ns = NamespaceOfKey(workload_key);
  for (const auto& [var, ref] : refs) {
    auto it = secrets_.find(ObjectKey(ns, ref.secret));
    if (it == secrets_.end())
      return "Secret " + ref.secret + " does not exist in namespace " + ns + " (env " + var +
             " reads its key " + ref.key + "); apply a Secret named " + ref.secret +
             " with metadata.namespace: " + ns + " and data." + ref.key +
             " (a workload reads Secrets of its own namespace only)";
    if (!it->second.secret.data.count(ref.key))
      return "Secret " + ref.secret + " in namespace " + ns + " has no key " + ref.key + " (env " +
             var + " reads it); add data." + ref.key + " to it and apply it again";
  }
  return "";
}

void Controller::AddSecretValues(const std::string& workload_key, const SecretEnv& refs,
                                 std::map<std::string, std::string>& env) const {
  const std::string ns = NamespaceOfKey(workload_key);
  for (const auto& [var, ref] : refs) {
    auto it = secrets_.find(ObjectKey(ns, ref.secret));
    if (it == secrets_.end()) continue;
    auto value = it->second.secret.data.find(ref.key);
    if (value != it->second.secret.data.end()) env[var] = value->second;
  }
}

std::vector<std::string> Controller::SecretUsers(
    const std::string& key, const std::map<std::string, std::string>* keys) const {
  const NamespacedName id = SplitObjectKey(key);
  std::vector<std::string> users;
  for (const auto& [name, job] : jobs_) {
    if (!job.HoldsChips() || job.status.deleting || NamespaceOfKey(name) != id.namespace_name)
      continue;
    if (std::string var = UsesMissing(job.spec.secret_env, id.name, keys); !var.empty())
      users.push_back("trainjob/" + SplitObjectKey(name).name + " (env " + var + ")");
  }
  for (const auto& [name, svc] : services_) {
    if (svc.PlacedReplicas() == 0 || svc.status.deleting ||
        NamespaceOfKey(name) != id.namespace_name)
      continue;
    for (const ServiceRoleSpec& role : svc.spec.roles)
      if (std::string var = UsesMissing(role.secret_env, id.name, keys); !var.empty()) {
        users.push_back("service/" + SplitObjectKey(name).name + " (env " + var + ")");
        break;
      }
  }
  return users;
}

Status Controller::HoldJobsMissingSecrets() {
  jobs_missing_secrets_.clear();
  std::vector<std::pair<std::string, std::string>> held;  // job, reason
  // Pending jobs only: never settled, so the unsettled ones are enough.
  ForEachUnsettledJob([&](std::string_view name, const TrainJob& job) {
    const TrainJobStatus& st = job.status;
    if (job.spec.secret_env.empty() || st.phase != JobPhase::kPending || st.deleting || st.stopping)
      return;
    std::string why = MissingSecretReason(std::string(name), job.spec.secret_env);
    if (!why.empty()) held.emplace_back(std::string(name), std::move(why));
  });
  for (const auto& [name, why] : held) {
    jobs_missing_secrets_.insert(name);
    TESSERA_RETURN_IF_ERROR(RunStep(
        name, [&](TrainJob& j) { return train_.SetPending(j, kSecretNotFound, why, 0, {}); },
        StatusWrite::kBatched));
  }
  return Status::Ok();
}

Status Controller::HoldServiceGroupsMissingSecrets() {
  roles_missing_secrets_.clear();
  struct Held {
    std::string service;
    ReplicaKey key;
    std::string why;
  };
  std::vector<Held> held;
  for (const auto& [name, svc] : services_) {
    if (svc.status.deleting) continue;
    for (const ReplicaKey& key : ServiceLifecycle::WaitingForSlice(svc)) {
      const ServiceRoleSpec* spec = svc.spec.Role(key.role);
      if (spec == nullptr || spec->secret_env.empty()) continue;
      std::string why = MissingSecretReason(name, spec->secret_env);
      if (why.empty()) continue;
      roles_missing_secrets_.insert(name + "/" + key.role);
      held.push_back({name, key, std::move(why)});
    }
  }
  for (const Held& h : held)
    TESSERA_RETURN_IF_ERROR(RunServiceStep(h.service, [&](Service& s) {
      return services_life_.SetPending(s, h.key, kSecretNotFound, h.why);
    }));
  return Status::Ok();
}

}  // namespace tessera::controller

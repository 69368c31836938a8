#include "api/users.h"

#include <fcntl.h>
#include <unistd.h>

#include "codec/manifest.h"
#include "protocol/credential.h"

namespace tessera::api {

using Json = nlohmann::json;

Result<std::string> RandomToken(const std::string& what) {
  unsigned char raw[32];
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || ::read(fd, raw, sizeof raw) != static_cast<ssize_t>(sizeof raw)) {
    if (fd >= 0) ::close(fd);
    return Unavailable("/dev/urandom: cannot read random bytes for " + what);
  }
  ::close(fd);
  static const char* kHex = "0123456789abcdef";
  std::string token;
  for (unsigned char c : raw) {
    token += kHex[c >> 4];
    token += kHex[c & 15];
  }
  return token;
}

Json UserToJson(const UserRecord& user, bool with_hash) {
  Json j = {{"name", user.name},
            {"role", authz::RoleName(user.role)},
            {"namespace", user.namespace_name},
            {"certificateIdentity", user.CertificateIdentity()},
            {"createdMs", user.created_ms}};
  if (with_hash) j["tokenSha256"] = user.token_sha256;
  if (user.revoked_ms) j["revokedMs"] = *user.revoked_ms;
  return j;
}

Result<UserRecord> UserFromJson(const Json& j) {
  auto has = [&j](const char* key, Json::value_t type) {
    return j.contains(key) && (j[key].type() == type || (type == Json::value_t::number_integer &&
                                                         j[key].is_number_integer()));
  };
  if (!j.is_object() || !has("name", Json::value_t::string) ||
      !has("role", Json::value_t::string) || !has("tokenSha256", Json::value_t::string) ||
      !has("createdMs", Json::value_t::number_integer))
    return InvalidArgument("User: a stored record lacks name, role, tokenSha256 or createdMs");
  UserRecord u;
  u.name = j["name"].get<std::string>();
  auto role = authz::ParseRole(j["role"].get<std::string>());
  if (!role) return InvalidArgument("User " + u.name + ": unknown role in the store");
  u.role = *role;
  u.namespace_name = j.value("namespace", "");
  u.token_sha256 = j["tokenSha256"].get<std::string>();
  u.created_ms = j["createdMs"].get<int64_t>();
  if (j.contains("revokedMs") && j["revokedMs"].is_number_integer())
    u.revoked_ms = j["revokedMs"].get<int64_t>();
  return u;
}

Status UserRegistry::Load() {
  auto objects = store_.List(kUserKind);
  if (!objects.ok()) return objects.status();
  std::lock_guard lock(mu_);
  by_name_.clear();
  name_by_hash_.clear();
  for (const store::Object& o : *objects) {
    auto user = UserFromJson(Json::parse(o.body, nullptr, false));
    if (!user.ok()) return user.status();
    name_by_hash_[user->token_sha256] = user->name;
    by_name_[user->name] = std::move(*user);
  }
  return Status::Ok();
}

Result<IssuedUser> UserRegistry::Create(const std::string& name, const std::string& role,
                                        const std::string& namespace_name, int64_t now_ms) {
  TESSERA_RETURN_IF_ERROR(codec::ValidateName("name", name));
  if (name == kAdminUserName)
    return InvalidArgument("name: 'admin' is the head's admin token; choose another name");
  auto parsed = authz::ParseRole(role);
  if (!parsed)
    return InvalidArgument("role: '" + role +
                           "' is not a role; use view, edit, admin or cluster-admin");
  if (*parsed == authz::Role::kClusterAdmin && !namespace_name.empty())
    return InvalidArgument("namespace: a cluster-admin holds every namespace; leave it out");
  if (*parsed != authz::Role::kClusterAdmin)
    TESSERA_RETURN_IF_ERROR(codec::ValidateName("namespace", namespace_name));
  auto token = RandomToken("a user's token");
  if (!token.ok()) return token.status();

  UserRecord user{name, *parsed, namespace_name, protocol::Sha256Hex(*token), now_ms, {}};
  std::lock_guard lock(mu_);
  auto old = by_name_.find(name);
  if (old != by_name_.end() && !old->second.revoked_ms)
    return AlreadyExists("name: user '" + name + "' exists; delete it first (tessera user delete " +
                         name + ")");
  store::WriteBatch batch;
  batch.Put(kUserKind, name, UserToJson(user).dump());
  auto committed = store_.Commit(batch);
  if (!committed.ok()) return committed.status();
  if (old != by_name_.end()) name_by_hash_.erase(old->second.token_sha256);
  name_by_hash_[user.token_sha256] = name;
  by_name_[name] = user;
  return IssuedUser{std::move(user), std::move(*token)};
}

Result<UserRecord> UserRegistry::Revoke(const std::string& name, int64_t now_ms) {
  std::lock_guard lock(mu_);
  auto it = by_name_.find(name);
  if (it == by_name_.end() || it->second.revoked_ms)
    return NotFound("user '" + name + "' does not exist (tessera user list shows the users)");
  UserRecord user = it->second;
  user.revoked_ms = now_ms;
  store::WriteBatch batch;
  batch.Put(kUserKind, name, UserToJson(user).dump());
  auto committed = store_.Commit(batch);
  if (!committed.ok()) return committed.status();
  it->second = user;
  return user;
}

std::vector<UserRecord> UserRegistry::List() const {
  std::lock_guard lock(mu_);
  std::vector<UserRecord> out;
  for (const auto& [name, user] : by_name_) out.push_back(user);
  return out;
}

std::optional<UserRecord> UserRegistry::FindByToken(std::string_view token) const {
  const std::string hash = protocol::Sha256Hex(token);
  std::lock_guard lock(mu_);
  auto it = name_by_hash_.find(hash);
  if (it == name_by_hash_.end()) return std::nullopt;
  return by_name_.at(it->second);
}

std::optional<UserRecord> UserRegistry::FindByCertificateIdentity(std::string_view identity) const {
  if (!identity.starts_with("user:")) return std::nullopt;
  std::lock_guard lock(mu_);
  auto it = by_name_.find(std::string(identity.substr(5)));
  if (it == by_name_.end()) return std::nullopt;
  return it->second;
}

}  // namespace tessera::api

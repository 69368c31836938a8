// UserRegistry: the head's users (docs/security.md "Users and roles"). Each user holds one role,
// in one namespace unless it is a cluster-admin, and one credential: a bearer token that the
// head makes, hands out once, and keeps only as its SHA-256. A user's record also names the
// identity a client certificate would carry for it ("user:NAME"), so a certificate can map to
// the same record. Deleting a user revokes it: the record stays, marked revoked, so its token
// is answered with a 403 that says so (not taken for an unknown one) until the name is created
// again.
//
// Records live in the store as kind "User" under the user's name (body: the JSON below), and in
// memory for the lookups every request makes. The admin token is not a record: the head maps
// it to the cluster-admin "admin", a name no record may take.
//
// Owner: the head. Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/authz.h"
#include "common/status.h"
#include "store/store.h"

namespace tessera::api {

inline constexpr char kUserKind[] = "User";
// 32 random bytes from /dev/urandom as 64 hex characters: a user's token, the admin and join
// tokens. Unavailable, naming `what` the bytes were for, when they cannot be read.
Result<std::string> RandomToken(const std::string& what);

// The name the head's admin token acts as.
inline constexpr char kAdminUserName[] = "admin";

struct UserRecord {
  std::string name;
  authz::Role role = authz::Role::kView;
  std::string namespace_name;  // empty for a cluster-admin
  std::string token_sha256;    // 64 hex digits
  int64_t created_ms = 0;      // Unix time
  std::optional<int64_t> revoked_ms;

  // "user:NAME": the subject a client certificate for this user carries.
  std::string CertificateIdentity() const { return "user:" + name; }
  authz::Principal principal() const { return {name, role, namespace_name}; }
};

// The stored form: {"name", "role", "namespace", "tokenSha256", "certificateIdentity",
// "createdMs", "revokedMs"} (the last only once revoked). Without the hash when `with_secret`
// is false: what `tessera user list` shows.
nlohmann::json UserToJson(const UserRecord& user, bool with_hash = true);
Result<UserRecord> UserFromJson(const nlohmann::json& j);

// What Create answers: the user's record and its token (shown once, never stored).
struct IssuedUser {
  UserRecord user;
  std::string token;
};

class UserRegistry {
 public:
  explicit UserRegistry(store::Store& store) : store_(store) {}

  // Reads every User record from the store.
  Status Load();

  // Makes a user and its token. Errors:
  // kInvalidArgument naming the field (a bad name, "admin", an unknown role, a namespace role
  // without a namespace or a cluster-admin with one), kAlreadyExists when a user of that name
  // is not revoked, kUnavailable when the store or /dev/urandom fails.
  Result<IssuedUser> Create(const std::string& name, const std::string& role,
                            const std::string& namespace_name, int64_t now_ms);

  // Revokes a user: its token stops working at once. kNotFound when there is no such user (or
  // it is revoked already).
  Result<UserRecord> Revoke(const std::string& name, int64_t now_ms);

  // Every user, revoked ones included, by name.
  std::vector<UserRecord> List() const;

  // The user whose token this is (revoked ones included: the caller refuses them), or nullopt.
  std::optional<UserRecord> FindByToken(std::string_view token) const;
  // The user a client certificate's identity ("user:NAME") names, or nullopt.
  std::optional<UserRecord> FindByCertificateIdentity(std::string_view identity) const;

 private:
  store::Store& store_;
  mutable std::mutex mu_;
  std::map<std::string, UserRecord> by_name_;
  std::map<std::string, std::string> name_by_hash_;
};

}  // namespace tessera::api

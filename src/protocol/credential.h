// Host credentials (docs/agent-protocol.md, "Host identity"): the secret an agent proves its
// host's identity with on every call after registration, and the hashes the two sides derive
// from it. The agent makes the credential (random, 256 bits) and keeps it in its state
// directory; the head stores only Sha256Hex(credential) with the host, so a copy of the
// head's store does not let anyone act as a host.
//
// Pure functions, no I/O; safe from any thread.
#pragma once

#include <string>
#include <string_view>

namespace tessera::protocol {

// The request header that carries the credential on heartbeats and assignment reads (the
// Authorization header keeps the join token).
inline constexpr char kHostCredentialHeader[] = "X-Tessera-Host-Credential";

// A credential is 32..128 lower-case hex digits (128..512 bits).
bool IsValidCredential(std::string_view credential);

// SHA-256 of `data` as 64 lower-case hex digits (FIPS 180-4).
std::string Sha256Hex(std::string_view data);

// The hash the head stores for a credential.
inline std::string CredentialHash(std::string_view credential) { return Sha256Hex(credential); }

// The token the head reads a host's logs with, and the only one the host's log server takes:
// derived from the credential, so each host has its own and an impostor that registered
// another name learns nothing it could use against this host. The head computes it from the
// stored hash; the agent from its credential.
inline std::string LogTokenFromHash(std::string_view credential_hash) {
  return Sha256Hex(std::string("tessera-log-read:") + std::string(credential_hash));
}

// Compares in time that depends only on the lengths, so a wrong guess does not tell how much
// of it was right.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace tessera::protocol

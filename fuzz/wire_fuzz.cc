// libFuzzer target: the agent <-> head wire decoders (src/protocol/wire.h).
//
// Every input goes through all of them: ParseRegistration and ParseHeartbeat (the head reads
// these from any holder of the join token), ParseAssignmentSnapshot and ParseRegisterReply (the
// agent reads these from the head), NormalizeHostName. Nothing may crash, hang or allocate
// without bound; a refusal is an InvalidArgument naming a field; whatever is accepted
// re-encodes to text that decodes to the same value.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "protocol/wire.h"

namespace {

using namespace tessera;
using namespace tessera::protocol;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "wire_fuzz: %s\n", what.c_str());
  std::abort();
}

void ExpectFieldError(const Status& s) {
  if (s.code() != StatusCode::kInvalidArgument) Fail("not InvalidArgument: " + s.ToString());
  if (s.message().find(": ") == std::string::npos) Fail("names no field: " + s.message());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);

  auto registration = ParseRegistration(text);
  if (registration.ok()) {
    auto again = ParseRegistration(RegistrationJson(*registration));
    if (!again.ok()) Fail("registration does not re-decode: " + again.status().ToString());
    if (!(*again == *registration)) Fail("registration changes when re-encoded");
  } else {
    ExpectFieldError(registration.status());
  }

  auto heartbeat = ParseHeartbeat(text);
  if (heartbeat.ok()) {
    auto again = ParseHeartbeat(HeartbeatJson(*heartbeat));
    if (!again.ok()) Fail("heartbeat does not re-decode: " + again.status().ToString());
    if (!(*again == *heartbeat)) Fail("heartbeat changes when re-encoded");
  } else {
    ExpectFieldError(heartbeat.status());
  }

  auto snapshot = ParseAssignmentSnapshot(text);
  if (snapshot.ok()) {
    // A snapshot read whole re-encodes to itself; entries read only in part cannot be encoded.
    bool whole = snapshot->unreadable.empty();
    std::vector<Assignment> assignments;
    for (const ParsedAssignment& a : snapshot->assignments) {
      whole = whole && a.error.empty();
      assignments.push_back(a.assignment);
    }
    if (whole) {
      auto again = ParseAssignmentSnapshot(
          AssignmentSnapshotJson(snapshot->revision, assignments, snapshot->stop));
      if (!again.ok()) Fail("snapshot does not re-decode: " + again.status().ToString());
      if (again->revision != snapshot->revision || again->stop != snapshot->stop ||
          again->assignments.size() != assignments.size())
        Fail("snapshot changes when re-encoded");
      for (size_t i = 0; i < assignments.size(); ++i)
        if (!(again->assignments[i].assignment == assignments[i]) ||
            !again->assignments[i].error.empty())
          Fail("snapshot assignment changes when re-encoded");
    }
  } else {
    ExpectFieldError(snapshot.status());
  }

  auto reply = ParseRegisterReply(text);
  if (reply.ok()) {
    auto again = ParseRegisterReply(RegisterReplyJson(*reply));
    if (!again.ok() || !(*again == *reply)) Fail("register reply changes when re-encoded");
  } else {
    ExpectFieldError(reply.status());
  }

  auto name = NormalizeHostName(text);
  if (name.ok()) {
    auto again = NormalizeHostName(*name);
    if (!again.ok() || *again != *name) Fail("host name rule is not idempotent: " + *name);
  } else {
    ExpectFieldError(name.status());
  }
  return 0;
}

// spec.checkpoint.inMemory of a TrainJob: in-memory peer checkpoints (python/tessera/peer_ckpt.py,
// docs/elastic.md "In-memory peer checkpoints").
//
//   spec:
//     checkpoint:
//       dir: /shared/ckpt/my-job
//       inMemory: {everySteps: 1, peerCopies: 1, maxBytesPerHost: 8Gi}
//
// The job's workers get TESSERA_PEER_CKPT_EVERY, TESSERA_PEER_CKPT_COPIES and
// TESSERA_PEER_CKPT_MAX_BYTES; the SDK then keeps each rank's latest state in a keeper process on
// its host and on a peer host. The keepers find each other through spec.checkpoint.dir, so it is
// required.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "common/status.h"

namespace tessera::codec {

inline constexpr char kPeerCkptEveryEnv[] = "TESSERA_PEER_CKPT_EVERY";
inline constexpr char kPeerCkptCopiesEnv[] = "TESSERA_PEER_CKPT_COPIES";
inline constexpr char kPeerCkptMaxBytesEnv[] = "TESSERA_PEER_CKPT_MAX_BYTES";
inline constexpr int64_t kDefaultPeerCkptMaxBytes = int64_t{4} << 30;  // 4Gi

// Reads checkpoint.inMemory from `checkpoint` (the spec.checkpoint object) when present and sets
// the three variables in `env`. `dir` is spec.checkpoint.dir. InvalidArgument naming the field
// and the fix otherwise.
Status ParseInMemoryCheckpoint(const nlohmann::json& checkpoint, const std::string& dir,
                               std::map<std::string, std::string>& env);

// "8Gi", "512Mi", "1G", "1000" or a JSON integer, as bytes (> 0). InvalidArgument naming `field`.
Result<int64_t> ParseByteQuantity(const std::string& field, const nlohmann::json& value);

}  // namespace tessera::codec

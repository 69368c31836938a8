// nvidia-smi: the GPUs of an NVIDIA host, from `nvidia-smi -q -x` (host discovery,
// discovery.h).
//
// ParseNvidiaSmiXml is pure (expat, no I/O): each <gpu>'s uuid, total framebuffer memory and
// NVLink fabric (clusterUuid, cliqueId, state, status; a fabric whose state is N/A is
// absent). RunNvidiaSmi runs the program and returns what it printed.
//
// Thread-safety: both may be called from any thread.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "protocol/wire.h"

namespace tessera::agent {

// The GPUs, in document order. InvalidArgument for XML that does not parse ("nvidia-smi -q
// -x: line N: <expat's reason>"), a root other than <nvidia_smi_log>, a GPU without a uuid
// ("gpus[i].uuid"), a total memory that is not "<N> MiB" ("gpus[i].fb_memory_usage.total"),
// or an attached_gpus count that differs from the <gpu> elements ("attached_gpus").
Result<std::vector<protocol::DiscoveredGpu>> ParseNvidiaSmiXml(std::string_view xml);

// Runs `<program> -q -x` (a path, or a name looked up in the colon list `path_var`) and
// returns its standard output. NotFound when the program is not an executable file;
// Unavailable when it exits non-zero (with the code and the start of its stderr), is killed,
// or runs longer than `timeout` (then it is killed).
Result<std::string> RunNvidiaSmi(const std::string& program, const std::string& path_var,
                                 std::chrono::milliseconds timeout);

}  // namespace tessera::agent

// ParsePhaseName: the enum value whose name is `name` in a table of names indexed by the enum,
// shared by the workload kinds' phase codecs (train_job.cc, service.cc).
// Pure; header-only.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "common/status.h"

namespace tessera {

// InvalidArgument naming `what` and listing the known names when `name` is not one of them.
template <typename Enum, size_t N>
Result<Enum> ParsePhaseName(const std::array<const char*, N>& names, std::string_view name,
                            std::string_view what) {
  for (size_t i = 0; i < N; ++i)
    if (name == names[i]) return static_cast<Enum>(i);
  std::string known;
  for (const char* n : names) known += (known.empty() ? "" : ", ") + std::string(n);
  return InvalidArgument(std::string(what) + ": '" + std::string(name) + "' is not one of " +
                         known);
}

}  // namespace tessera

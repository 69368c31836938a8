// Rules shared by the Store backends, so that they agree on every error code and message.
// Not part of the public API: only backends include this. Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "common/status.h"
#include "store/store.h"

namespace tessera::store {

namespace internal {

// The batch-shape checks of Commit (kInvalidArgument cases), and the change-log limit.
Status ValidateBatch(const WriteBatch& batch);
Status ValidateOptions(const Options& options);

// Whether `op` may apply when the object is at `current_version` (nullopt: absent).
Status CheckPrecondition(const WriteBatch::Op& op, std::optional<int64_t> current_version);

// The arguments check of ChangesSince and the "compacted" error, given the store's state.
// compacted_revision: every change with a revision <= it may have been dropped.
Status CheckChangesSince(int64_t revision, size_t limit, int64_t current_revision,
                         int64_t compacted_revision);

Status ClosedError();

}  // namespace internal

}  // namespace tessera::store

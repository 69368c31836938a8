// HeadTerm: the number that only grows, for fencing (docs/ha.md "Fencing"). Every head start
// takes a term greater than any head before it took on this store; the head puts it in every
// assignment snapshot, and an agent refuses a snapshot older than the newest term it has seen,
// so a head that was replaced can no longer give orders. With leader election the elected
// leader's term is fed into the controller instead (ControllerOptions::term).
//
// Stored as the document {"term": N} of kind kHeadTermKind, name kHeadTermName, advanced with
// an optimistic-concurrency write (Update at the version read, or Create when missing), so two
// heads starting on one store at once never take the same term: the loser retries.
//
// Thread-safety: a free function over a Store (which serialises itself).
#pragma once

#include <cstdint>

#include "common/status.h"
#include "store/store.h"

namespace tessera::controller {

inline constexpr char kHeadTermKind[] = "HeadTerm";
inline constexpr char kHeadTermName[] = "head";

// Takes the next term: the stored one + 1 (1 on a new store), written before it is returned.
// kInternal when the stored document is not {"term": N} (naming it, and that deleting it
// resets the count only if every agent is restarted too); the store's error when the write
// fails; kUnavailable after `attempts` conflicting writes in a row.
Result<uint64_t> TakeNextHeadTerm(store::Store& store, int attempts = 8);

}  // namespace tessera::controller

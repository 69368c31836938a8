// EventLog: the head's events, newest last, at most `max_events` kept (older ones are deleted
// from the store in the same write that adds new ones).
//
// Events are staged into the WriteBatch of the change they record, so a change and its events
// land together or not at all: Stage adds the writes, Publish (after the batch committed) adds
// the events to memory. A batch that failed is simply dropped; nothing was published.
//
// Ownership: the controller owns one. Thread-safety: none (the controller's lock).
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "common/status.h"
#include "store/store.h"
#include "workload/event.h"

namespace tessera::controller {

class EventLog {
 public:
  explicit EventLog(size_t max_events) : max_events_(max_events) {}

  // Reads the stored events (after a restart). Unreadable documents are skipped.
  Status Load(store::Store& store);

  // Names and writes `events` into `batch`, with the deletes of the oldest events that would
  // then exceed the limit. Returns the events to Publish once the batch has committed.
  std::vector<Event> Stage(std::vector<Event> events, store::WriteBatch& batch) const;
  void Publish(std::vector<Event> events);

  const std::deque<Event>& events() const { return events_; }

 private:
  size_t max_events_;
  uint64_t next_ = 1;
  std::deque<Event> events_;
};

}  // namespace tessera::controller

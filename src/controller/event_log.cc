#include "controller/event_log.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "codec/resource_json.h"

namespace tessera::controller {
namespace {

std::string EventName(uint64_t n) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "evt-%010llu", static_cast<unsigned long long>(n));
  return buf;
}

}  // namespace

Status EventLog::Load(store::Store& store) {
  auto stored = store.List(codec::kEventKind);
  if (!stored.ok()) return stored.status();
  for (const auto& obj : *stored) {
    codec::Json doc = codec::Json::parse(obj.body, nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) continue;
    auto e = codec::EventFromJson(doc);
    if (!e.ok()) continue;
    next_ = std::max<uint64_t>(next_, std::strtoull(e->name.c_str() + 4, nullptr, 10) + 1);
    events_.push_back(std::move(*e));
  }
  return Status::Ok();
}

std::vector<Event> EventLog::Stage(std::vector<Event> events, store::WriteBatch& batch) const {
  uint64_t n = next_;
  for (Event& e : events) {
    e.name = EventName(n++);
    batch.Create(codec::kEventKind, e.name, codec::EventJson(e).dump());
  }
  const size_t total = events_.size() + events.size();
  const size_t excess = total > max_events_ ? total - max_events_ : 0;
  for (size_t i = 0; i < excess && i < events_.size(); ++i)
    batch.Delete(codec::kEventKind, events_[i].name);
  return events;
}

void EventLog::Publish(std::vector<Event> events) {
  for (Event& e : events) {
    next_ = std::max<uint64_t>(next_, std::strtoull(e.name.c_str() + 4, nullptr, 10) + 1);
    events_.push_back(std::move(e));
  }
  while (events_.size() > max_events_) events_.pop_front();
}

}  // namespace tessera::controller

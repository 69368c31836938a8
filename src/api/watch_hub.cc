#include "api/watch_hub.h"

#include <algorithm>

namespace tessera::api {

WatchHub::WatchHub(WatchHubOptions options)
    : options_(std::move(options)), latest_(options_.first_version) {}

WatchHub::Kind& WatchHub::KindLocked(const std::string& kind) {
  auto [it, added] = kinds_.try_emplace(kind);
  // Nothing before this run's first version can be replayed.
  if (added) it->second.evicted_through = options_.first_version;
  return it->second;
}

std::string WatchHub::Line(const std::string& type, const nlohmann::json& object,
                           uint64_t version) {
  return nlohmann::json{
             {"type", type}, {"object", object}, {"resourceVersion", std::to_string(version)}}
             .dump() +
         "\n";
}

void WatchHub::Publish(const std::string& kind, const std::string& type,
                       const nlohmann::json& object) {
  std::lock_guard lock(mu_);
  const uint64_t version = ++latest_;
  Kind& k = KindLocked(kind);
  std::string namespace_name = "default";
  if (object.is_object() && object.contains("metadata") && object["metadata"].is_object())
    namespace_name = object["metadata"].value("namespace", namespace_name);
  Change change{version, std::move(namespace_name), Line(type, object, version)};
  std::erase_if(k.streams,
                [&](const Watcher& w) { return w.Wants(change) && !w.stream->Write(change.line); });
  k.history.push_back(std::move(change));
  if (k.history.size() > options_.history_per_kind) {
    k.evicted_through = k.history.front().version;
    k.history.pop_front();
  }
}

bool WatchHub::CanResumeLocked(const std::string& kind, uint64_t version) const {
  if (version < options_.first_version || version > latest_) return false;
  auto it = kinds_.find(kind);
  return it == kinds_.end() || version >= it->second.evicted_through;
}

bool WatchHub::FromThisRun(uint64_t version) const {
  std::lock_guard lock(mu_);
  return version >= options_.first_version && version <= latest_;
}

bool WatchHub::CanResume(const std::string& kind, uint64_t version) const {
  std::lock_guard lock(mu_);
  return CanResumeLocked(kind, version);
}

void WatchHub::Attach(const std::string& kind, uint64_t version, const std::string& namespace_name,
                      const std::vector<std::string>& initial,
                      std::shared_ptr<net::StreamWriter> stream) {
  std::lock_guard lock(mu_);
  if (!CanResumeLocked(kind, version)) {
    const nlohmann::json status = {
        {"kind", "Status"},
        {"code", 410},
        {"reason", "Expired"},
        {"message", "resourceVersion " + std::to_string(version) + " is too old for a " + kind +
                        " watch (or not from this run of the head): list again and watch from "
                        "the list's metadata.resourceVersion"}};
    stream->Write(nlohmann::json{{"type", "ERROR"}, {"object", status}}.dump() + "\n");
    stream->Close();
    return;
  }
  for (const std::string& line : initial) stream->Write(line);
  Kind& k = KindLocked(kind);
  auto first = std::upper_bound(k.history.begin(), k.history.end(), version,
                                [](uint64_t v, const Change& c) { return v < c.version; });
  Watcher watcher{namespace_name, std::move(stream)};
  for (auto it = first; it != k.history.end(); ++it)
    if (watcher.Wants(*it)) watcher.stream->Write(it->line);
  std::erase_if(k.streams, [](const Watcher& w) { return !w.stream->IsOpen(); });
  if (watcher.stream->IsOpen()) k.streams.push_back(std::move(watcher));
}

size_t WatchHub::stream_count() const {
  std::lock_guard lock(mu_);
  size_t n = 0;
  for (const auto& [kind, k] : kinds_)
    n += static_cast<size_t>(std::count_if(k.streams.begin(), k.streams.end(),
                                           [](const Watcher& w) { return w.stream->IsOpen(); }));
  return n;
}

}  // namespace tessera::api

// WatchHub: the head's watch streams, and the resource versions that make list-then-watch
// exact (Kubernetes' resourceVersion contract; docs/runtime.md "Watches").
//
// Every change the controller emits is published here, in the controller's order (the head's
// change listener runs under the controller's lock): it gets the next resource version, is
// written to every stream watching its kind, and is kept in a bounded history per kind. A list
// taken together with the number of changes published before it
// (Controller::ListWithVersion) is at version VersionAfter(changes); a watch attached after
// that version first gets the history after it, then every new change: nothing is missed and
// nothing comes twice.
//
// A watch may be of one namespace: it gets only the changes whose object's metadata.namespace
// (default "default") is that one (docs/security.md "Namespaces").
//
// Versions count changes from `first_version`. The head starts that at its start time in
// microseconds, so a version handed out by an earlier run of the head is older than any of this
// run's and gets 410 Gone instead of being mistaken for one of this run's.
//
// Ownership: the head owns one hub; the streams must end (HttpServer::Stop) before it is
// destroyed. Thread-safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "net/http.h"

namespace tessera::api {

struct WatchHubOptions {
  size_t history_per_kind = 1024;  // changes kept per kind for watches that resume
  uint64_t first_version = 0;      // the version of a list taken before any change
};

class WatchHub {
 public:
  explicit WatchHub(WatchHubOptions options);

  // The next change (the controller's change listener calls this, in order).
  void Publish(const std::string& kind, const std::string& type, const nlohmann::json& object);

  // The version of a list taken after `changes` changes were published.
  uint64_t VersionAfter(uint64_t changes) const { return options_.first_version + changes; }

  // Whether a watch of `kind` can start after `version`: false when a change of `kind` after
  // it has left the history, or `version` is not one this hub handed out (older than
  // first_version, or newer than the latest change). The caller answers 410 Gone.
  bool CanResume(const std::string& kind, uint64_t version) const;

  // Whether `version` is one this hub handed out (not older than first_version, not newer than
  // the latest change), however much history it still keeps: a list's continue token from an
  // earlier run of the head is refused with 410 (api/list_pages.h).
  bool FromThisRun(uint64_t version) const;

  // Starts `stream` watching `kind` after `version`: writes `initial` (e.g. the list as ADDED
  // lines), then the kept changes of `kind` after `version`, then each new one; with a
  // `namespace_name` ("" is every namespace) only the changes of objects in it. When the
  // history no longer reaches back to `version` it writes one ERROR line (code 410) instead
  // and closes the stream.
  void Attach(const std::string& kind, uint64_t version, const std::string& namespace_name,
              const std::vector<std::string>& initial, std::shared_ptr<net::StreamWriter> stream);

  // One watch line: {"type": ..., "object": ..., "resourceVersion": "N"} and "\n".
  static std::string Line(const std::string& type, const nlohmann::json& object, uint64_t version);

  // Streams attached and not yet seen closed (for tests).
  size_t stream_count() const;

 private:
  struct Change {
    uint64_t version = 0;
    std::string namespace_name;  // the object's metadata.namespace, "default" when it has none
    std::string line;
  };
  struct Watcher {
    std::string namespace_name;  // "" for every namespace
    std::shared_ptr<net::StreamWriter> stream;
    bool Wants(const Change& c) const {
      return namespace_name.empty() || namespace_name == c.namespace_name;
    }
  };
  struct Kind {
    std::deque<Change> history;    // oldest first
    uint64_t evicted_through = 0;  // the newest version that left the history
    std::vector<Watcher> streams;
  };
  Kind& KindLocked(const std::string& kind);
  bool CanResumeLocked(const std::string& kind, uint64_t version) const;

  const WatchHubOptions options_;
  mutable std::mutex mu_;
  uint64_t latest_;  // the version of the latest change
  std::map<std::string, Kind> kinds_;
};

}  // namespace tessera::api

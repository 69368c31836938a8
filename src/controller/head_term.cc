#include "controller/head_term.h"

#include <nlohmann/json.hpp>
#include <string>

#include "protocol/wire.h"

namespace tessera::controller {

Result<uint64_t> TakeNextHeadTerm(store::Store& store, int attempts) {
  for (int i = 0; i < attempts; ++i) {
    auto current = store.Get(kHeadTermKind, kHeadTermName);
    if (!current.ok() && current.status().code() != StatusCode::kNotFound) return current.status();
    uint64_t term = 0;
    if (current.ok()) {
      nlohmann::json doc = nlohmann::json::parse(current->body, nullptr, false);
      auto stored = doc.is_object() ? doc.find("term") : doc.end();
      if (stored == doc.end() || !stored->is_number_unsigned())
        return Internal("stored " + std::string(kHeadTermKind) + " " + kHeadTermName +
                        " is not {\"term\": N}; it must be repaired by hand (deleting it restarts "
                        "the count at 1, which agents that saw a higher term refuse until they "
                        "are restarted)");
      term = stored->get<uint64_t>();
    }
    if (term >= protocol::kMaxTerm)
      return Internal("stored " + std::string(kHeadTermKind) + " " + kHeadTermName +
                      " has reached the largest term");
    const std::string body = nlohmann::json{{"term", term + 1}}.dump();
    auto written = current.ok()
                       ? store.Update(kHeadTermKind, kHeadTermName, body, current->resource_version)
                       : store.Create(kHeadTermKind, kHeadTermName, body);
    if (written.ok()) return term + 1;
    const StatusCode code = written.status().code();
    if (code != StatusCode::kConflict && code != StatusCode::kAlreadyExists)
      return written.status();
    // Another head took a term between the read and the write: read again.
  }
  return Unavailable("could not take a head term: " + std::to_string(attempts) +
                     " conflicting writes in a row (other heads starting on this store?)");
}

}  // namespace tessera::controller

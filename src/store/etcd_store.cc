#include "store/etcd_store.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <random>
#include <thread>
#include <utility>

#include "common/text.h"
#include "store/store_internal.h"

namespace tessera::store {

using nlohmann::json;

namespace {

// How often Commit re-reads and retries after losing a race to another writer.
constexpr int kMaxCommitAttempts = 200;

// '/' separates the kind from the name in a key, so a kind's own '/' (and the escape '%')
// are escaped; names need nothing (the kind ends at its first '/').
std::string EscapeKind(std::string_view kind) {
  std::string out;
  for (char c : kind) {
    if (c == '/') {
      out += "%2F";
    } else if (c == '%') {
      out += "%25";
    } else {
      out += c;
    }
  }
  return out;
}

// EscapeKind's inverse; nullopt for text it cannot have made.
std::optional<std::string> UnescapeKind(std::string_view escaped) {
  std::string out;
  for (size_t i = 0; i < escaped.size(); ++i) {
    if (escaped[i] != '%') {
      out += escaped[i];
    } else if (escaped.substr(i, 3) == "%2F") {
      out += '/';
      i += 2;
    } else if (escaped.substr(i, 3) == "%25") {
      out += '%';
      i += 2;
    } else {
      return std::nullopt;
    }
  }
  return out;
}

struct Meta {
  int64_t revision = 0;
  int64_t compacted = 0;
  int64_t entries = 0;  // change-log entries with a revision > compacted
  int64_t mod_revision = 0;
  // Which Commit wrote this meta (EtcdStore's writer id and a counter): how a commit whose
  // answer was lost learns whether it was applied. Empty for meta written by Init.
  std::string commit;
};

std::string EncodeMeta(const Meta& m) {
  json j = {{"revision", m.revision}, {"compacted", m.compacted}, {"entries", m.entries}};
  if (!m.commit.empty()) j["commit"] = m.commit;
  return j.dump();
}

Result<Meta> DecodeMeta(const EtcdRange& range, const std::string& key) {
  if (range.kvs.empty()) return FailedPrecondition("etcd store: " + key + " is missing");
  const json j = json::parse(range.kvs[0].value, nullptr, false);
  if (!j.is_object() || !j.contains("revision") || !j["revision"].is_number_integer()) {
    return InvalidArgument("etcd store: " + key + " is not tessera's store metadata");
  }
  Meta m;
  m.revision = j.value("revision", int64_t{0});
  m.compacted = j.value("compacted", int64_t{0});
  m.entries = j.value("entries", int64_t{0});
  m.commit = j.value("commit", std::string());
  m.mod_revision = range.kvs[0].mod_revision;
  return m;
}

std::string EncodeObject(int64_t version, std::string_view body) {
  return std::to_string(version) + "\n" + std::string(body);
}

// (resource_version, body), or nullopt for a value tessera did not write.
std::optional<std::pair<int64_t, std::string>> DecodeObject(std::string_view value) {
  const size_t nl = value.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  auto version = ParseInt(value.substr(0, nl));
  if (!version) return std::nullopt;
  return std::make_pair(*version, std::string(value.substr(nl + 1)));
}

// The changes of one revision: for each, the type letter and three length-prefixed fields
// ("A5:Host2:h03:abc"). Bodies are opaque bytes, so no JSON here.
void AppendField(std::string& out, std::string_view field) {
  out += std::to_string(field.size());
  out += ':';
  out += field;
}

std::string EncodeChanges(const std::vector<Change>& changes) {
  std::string out;
  for (const Change& c : changes) {
    out += c.type == ChangeType::kAdded ? 'A' : c.type == ChangeType::kModified ? 'M' : 'D';
    AppendField(out, c.kind);
    AppendField(out, c.name);
    AppendField(out, c.body);
  }
  return out;
}

std::optional<std::vector<Change>> DecodeChanges(std::string_view text, int64_t revision) {
  std::vector<Change> out;
  size_t pos = 0;
  auto field = [&](std::string& into) {
    const size_t colon = text.find(':', pos);
    if (colon == std::string_view::npos) return false;
    auto size = ParseInt(text.substr(pos, colon - pos));
    if (!size || *size < 0 || colon + 1 + static_cast<size_t>(*size) > text.size()) return false;
    into.assign(text.substr(colon + 1, *size));
    pos = colon + 1 + *size;
    return true;
  };
  while (pos < text.size()) {
    Change c;
    switch (text[pos++]) {
      case 'A':
        c.type = ChangeType::kAdded;
        break;
      case 'M':
        c.type = ChangeType::kModified;
        break;
      case 'D':
        c.type = ChangeType::kDeleted;
        break;
      default:
        return std::nullopt;
    }
    if (!field(c.kind) || !field(c.name) || !field(c.body)) return std::nullopt;
    c.revision = revision;
    out.push_back(std::move(c));
  }
  return out;
}

// One change-log key and its value: the revision (the key's last 20 digits) and its changes.
struct LogEntry {
  int64_t revision = 0;
  std::vector<Change> changes;
};
Result<LogEntry> DecodeLogEntry(const EtcdKv& kv) {
  auto r = kv.key.size() >= 20 ? ParseInt(std::string_view(kv.key).substr(kv.key.size() - 20))
                               : std::nullopt;
  auto decoded = r ? DecodeChanges(kv.value, *r) : std::nullopt;
  if (!decoded) return Internal("etcd store: change log key " + kv.key + " is corrupt");
  return LogEntry{*r, std::move(*decoded)};
}

// The change log is read a page at a time, and a page's size is a guess: a logged revision holds
// one commit, a single change or a flush of a hundred documents (up to etcd's request limit), so
// a count of revisions alone can ask for a hundred times too much, past the client's answer limit.
// A first page is at most kFirstLogPage revisions; NextLogPage sizes the others on what the pages
// before held.
constexpr int64_t kFirstLogPage = 16;

// How many revisions the next page reads when `wanted` more changes are needed and the pages so
// far held `changes` changes in `revisions` revisions of `bytes` bytes: as many as the rest takes
// at that rate, and one more; no more than a quarter of the answer limit holds at their size; at
// least one, and at most `wanted` (every revision holds at least one change).
int64_t NextLogPage(int64_t wanted, int64_t revisions, int64_t changes, uint64_t bytes,
                    uint64_t max_response_bytes) {
  const int64_t read = std::max<int64_t>(1, revisions);
  const int64_t per_revision = std::max<int64_t>(1, changes / read);
  const uint64_t bytes_per_revision = std::max<uint64_t>(1, bytes / static_cast<uint64_t>(read));
  const int64_t fit =
      static_cast<int64_t>(std::max<uint64_t>(1, max_response_bytes / 4 / bytes_per_revision));
  return std::clamp<int64_t>(std::min((wanted + per_revision - 1) / per_revision + 1, fit), 1,
                             std::max<int64_t>(1, wanted));
}

// The oldest revisions dropped from the log `meta` describes (their keys from `from`, the first
// kept one, to `end`) until at most `limit` entries are left or none is; next.compacted and
// next.entries say what is left. How many entries a revision holds is in its value, so the oldest
// are read: first as many as should be enough at the log's mean entries per revision (at most
// kFirstLogPage), then pages sized by NextLogPage. Reading at once as many as could go (one per
// entry over the limit) read about a hundred whole logged batches for each flush of a hundred
// statuses once the log was full, tens of MiB a commit (bench/README.md, "etcd at 1,000 running
// jobs").
Status DropOldestRevisions(EtcdClient& client, const Meta& meta, std::string from,
                           const std::string& end, int64_t limit, uint64_t max_response_bytes,
                           Meta& next) {
  const int64_t revisions = std::max<int64_t>(1, meta.revision - meta.compacted);
  const int64_t per_revision = std::max<int64_t>(1, meta.entries / revisions);
  const int64_t over = next.entries - limit;
  int64_t page =
      std::min(kFirstLogPage, std::max<int64_t>(1, (over + per_revision - 1) / per_revision) + 1);
  int64_t revisions_read = 0, changes_read = 0;
  uint64_t bytes_read = 0;
  while (next.entries > limit) {
    auto oldest = client.Range(from, end, page);
    if (!oldest.ok()) return oldest.status();
    for (const EtcdKv& kv : oldest->kvs) {
      if (next.entries <= limit) break;
      auto entry = DecodeLogEntry(kv);
      if (!entry.ok()) return entry.status();
      if (entry->revision >= next.revision)
        return Internal("etcd store: change log key " + kv.key + " is corrupt");
      const auto size = static_cast<int64_t>(entry->changes.size());
      next.compacted = std::max(next.compacted, entry->revision);
      next.entries -= size;
      ++revisions_read;
      changes_read += size;
      bytes_read += kv.value.size();
    }
    if (!oldest->more || oldest->kvs.empty()) break;  // every older revision read
    from = oldest->kvs.back().key + '\0';             // the key after it
    page = NextLogPage(next.entries - limit, revisions_read, changes_read, bytes_read,
                       max_response_bytes);
  }
  return Status::Ok();
}

Result<std::vector<EtcdRange>> TxnRanges(EtcdClient& client, const json& ranges) {
  auto answer = client.Call("/v3/kv/txn", {{"success", ranges}});
  if (!answer.ok()) return answer.status();
  int64_t txn_revision = 0;  // what every read of the transaction saw
  if (auto header = answer->find("header"); header != answer->end() && header->is_object())
    txn_revision = etcd::Int(*header, "revision");
  std::vector<EtcdRange> out;
  const json& responses = (*answer)["responses"];
  if (!responses.is_array() || responses.size() != ranges.size()) {
    return Unavailable("etcd txn: answer has " + std::to_string(responses.size()) +
                       " responses for " + std::to_string(ranges.size()) + " reads");
  }
  for (const json& r : responses) {
    auto decoded = etcd::DecodeRange(r.value("response_range", json::object()));
    if (!decoded.ok()) return decoded.status();
    if (decoded->revision == 0) decoded->revision = txn_revision;
    out.push_back(std::move(*decoded));
  }
  return out;
}

// Reads the rest of a range whose first page is `range` (cut short by a limit of `page_size`
// when range.more) up to `range_end`, every page at the first page's revision, so the pages
// together are one snapshot. Appends to range.kvs.
Status ReadRemainingPages(EtcdClient& client, std::string_view range_end, int64_t page_size,
                          EtcdRange& range) {
  while (range.more) {
    if (range.kvs.empty()) return Internal("etcd range answer: more keys follow an empty page");
    auto page = client.Range(range.kvs.back().key + '\0', range_end, page_size, range.revision);
    if (!page.ok()) return page.status();
    range.more = page->more && !page->kvs.empty();
    for (EtcdKv& kv : page->kvs) range.kvs.push_back(std::move(kv));
  }
  return Status::Ok();
}

}  // namespace

EtcdStore::EtcdStore(EtcdStoreOptions options, const Options& store_options)
    : options_(std::move(options)),
      store_options_(store_options),
      client_(std::make_unique<EtcdClient>(options_.etcd)) {
  std::random_device random;
  char id[24];
  std::snprintf(id, sizeof id, "%08x%08x", random(), random());
  writer_id_ = id;
}

Result<std::unique_ptr<EtcdStore>> EtcdStore::Open(EtcdStoreOptions options,
                                                   const Options& store_options) {
  TESSERA_RETURN_IF_ERROR(internal::ValidateOptions(store_options));
  if (options.etcd.endpoints.empty()) {
    return InvalidArgument("etcd store: no endpoints; give --store etcd://host:port[,...]");
  }
  if (options.prefix.size() < 2 || options.prefix.front() != '/' || options.prefix.back() != '/') {
    return InvalidArgument("etcd store: prefix '" + options.prefix +
                           "' must start and end with '/' (e.g. /tessera/)");
  }
  std::unique_ptr<EtcdStore> store(new EtcdStore(std::move(options), store_options));
  const auto deadline = std::chrono::steady_clock::now() + store->options_.open_timeout;
  std::chrono::milliseconds wait{100};
  while (true) {
    Status init = store->Init();
    if (init.ok()) return store;
    if (init.code() != StatusCode::kUnavailable) return init;
    const auto now = std::chrono::steady_clock::now();
    if (now + wait > deadline) {
      return Unavailable(init.message() + "; gave up after " +
                         std::to_string(store->options_.open_timeout.count()) +
                         " ms of retries (is etcd running at " + store->client_->EndpointList() +
                         "?)");
    }
    if (store->options_.on_open_retry) store->options_.on_open_retry(init, wait);
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, std::chrono::milliseconds(2'000));
  }
}

Status EtcdStore::Init() {
  const std::string schema_key = options_.prefix + "schema";
  const std::string meta_key = options_.prefix + "meta";
  json txn = {{"compare", json::array({etcd::CompareCreateRevision(schema_key, 0)})},
              {"success", json::array({etcd::Put(schema_key, std::to_string(kSchemaVersion)),
                                       etcd::Put(meta_key, EncodeMeta(Meta{}))})},
              {"failure", json::array({etcd::GetRange(schema_key), etcd::GetRange(meta_key)})}};
  auto answer = client_->Call("/v3/kv/txn", txn);
  if (!answer.ok()) return answer.status();
  if (answer->value("succeeded", false)) {
    last_revision_ = 0;
    return Status::Ok();
  }
  const json& responses = (*answer)["responses"];
  if (!responses.is_array() || responses.size() != 2) return Unavailable("etcd store: bad answer");
  auto schema = etcd::DecodeRange(responses[0].value("response_range", json::object()));
  auto meta_range = etcd::DecodeRange(responses[1].value("response_range", json::object()));
  if (!schema.ok()) return schema.status();
  if (!meta_range.ok()) return meta_range.status();
  const std::string where =
      "etcd store at " + client_->EndpointList() + " prefix " + options_.prefix;
  auto version = schema->kvs.empty() ? std::nullopt : ParseInt(schema->kvs[0].value);
  if (!version) {
    return InvalidArgument(where + ": " + schema_key +
                           " is not a tessera schema version; the prefix belongs to something "
                           "else (choose another prefix)");
  }
  if (*version > kSchemaVersion) {
    return FailedPrecondition(where + " was written by schema version " + std::to_string(*version) +
                              "; this tessera reads up to version " +
                              std::to_string(kSchemaVersion) + ": run a newer tessera");
  }
  auto meta = DecodeMeta(*meta_range, meta_key);
  if (!meta.ok()) return meta.status();
  last_revision_ = meta->revision;
  return Status::Ok();
}

void EtcdStore::SetFence(std::string key, int64_t term) {
  std::lock_guard lock(fence_mu_);
  fence_key_ = term == 0 ? std::string() : std::move(key);
  fence_term_ = term;
}

std::string EtcdStore::ObjectKey(std::string_view kind, std::string_view name) const {
  return KindPrefix(kind) + std::string(name);
}

std::string EtcdStore::KindPrefix(std::string_view kind) const {
  return options_.prefix + "o/" + EscapeKind(kind) + "/";
}

std::string EtcdStore::LogKey(int64_t revision) const {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020lld", static_cast<long long>(revision));
  return options_.prefix + "log/" + digits;
}

Result<Object> EtcdStore::Get(std::string_view kind, std::string_view name) {
  if (closed_) return internal::ClosedError();
  {
    std::lock_guard lock(mirror_mu_);
    if (mirror_) {
      if (auto k = mirror_->objects.find(kind); k != mirror_->objects.end())
        if (auto it = k->second.find(name); it != k->second.end()) return it->second;
      return NotFound(std::string(kind) + "/" + std::string(name) + " not found");
    }
  }
  auto range = client_->Range(ObjectKey(kind, name));
  if (!range.ok()) return range.status();
  if (range->kvs.empty()) {
    return NotFound(std::string(kind) + "/" + std::string(name) + " not found");
  }
  auto decoded = DecodeObject(range->kvs[0].value);
  if (!decoded) return Internal("etcd store: " + range->kvs[0].key + " was not written by tessera");
  return Object{std::string(kind), std::string(name), std::move(decoded->second), decoded->first};
}

Result<std::vector<Object>> EtcdStore::List(std::string_view kind) {
  if (closed_) return internal::ClosedError();
  {
    std::lock_guard lock(mirror_mu_);
    if (mirror_) {
      std::vector<Object> out;
      if (auto k = mirror_->objects.find(kind); k != mirror_->objects.end())
        for (const auto& [name, object] : k->second) out.push_back(object);
      return out;  // by name, as etcd sorts them
    }
  }
  const std::string prefix = KindPrefix(kind);
  auto range = client_->Range(prefix, PrefixEnd(prefix), options_.page_size);
  if (!range.ok()) return range.status();
  TESSERA_RETURN_IF_ERROR(
      ReadRemainingPages(*client_, PrefixEnd(prefix), options_.page_size, *range));
  std::vector<Object> out;
  for (EtcdKv& kv : range->kvs) {
    auto decoded = DecodeObject(kv.value);
    if (!decoded) return Internal("etcd store: " + kv.key + " was not written by tessera");
    out.push_back(Object{std::string(kind), kv.key.substr(prefix.size()),
                         std::move(decoded->second), decoded->first});
  }
  return out;  // etcd sorts by key, and the keys of one kind differ only in the name
}

Status EtcdStore::Visit(std::string_view kind, const std::function<void(const Object&)>& visit) {
  if (closed_) return internal::ClosedError();
  {
    std::lock_guard lock(mirror_mu_);
    if (mirror_) {
      if (auto k = mirror_->objects.find(kind); k != mirror_->objects.end())
        for (const auto& [name, object] : k->second) visit(object);
      return Status::Ok();
    }
  }
  return Store::Visit(kind, visit);
}

namespace {

Status FencedError(const std::string& fence_key, int64_t fence_term, int64_t now_term) {
  return Unavailable("etcd store: fenced: this head's term " + std::to_string(fence_term) +
                     " is over (" + fence_key +
                     (now_term == 0 ? " is gone" : " is at term " + std::to_string(now_term)) +
                     "); the write was refused");
}

}  // namespace

Result<int64_t> EtcdStore::Commit(const WriteBatch& batch) {
  TESSERA_RETURN_IF_ERROR(internal::ValidateBatch(batch));
  StopFollowing();  // the copy does not see this store's own writes
  if (outcome_unknown_) {
    return Unavailable(
        "etcd store: an earlier commit's outcome is unknown; restart the head so "
        "that it reloads its state from etcd");
  }
  const std::string meta_key = options_.prefix + "meta";
  std::string fence_key;
  int64_t fence_term = 0;
  {
    std::lock_guard lock(fence_mu_);
    fence_key = fence_key_;
    fence_term = fence_term_;
  }
  for (int attempt = 0; attempt < kMaxCommitAttempts; ++attempt) {
    if (closed_) return internal::ClosedError();
    // 1. One snapshot of meta and every key the batch touches.
    json reads = json::array({etcd::GetRange(meta_key)});
    for (const WriteBatch::Op& op : batch.ops()) {
      reads.push_back(etcd::GetRange(ObjectKey(op.kind, op.name)));
    }
    // The fence key too, last: a deposed leader's batch is refused as fenced before its stale
    // view can fail a precondition. Otherwise a resumed leader whose event counter is behind
    // gets "Event/evt-N already exists", which the API answers 409 "the name already exists",
    // and its client takes the job as created when nothing was written (the chaos benchmark's
    // checker caught such a job as "acknowledged job lost").
    if (fence_term != 0) reads.push_back(etcd::GetRange(fence_key));
    auto snapshot = TxnRanges(*client_, reads);
    if (!snapshot.ok()) return snapshot.status();
    if (fence_term != 0) {
      const EtcdRange& leader = snapshot->back();
      const int64_t now_term = leader.kvs.empty() ? 0 : leader.kvs[0].create_revision;
      if (now_term != fence_term) return FencedError(fence_key, fence_term, now_term);
    }
    auto meta = DecodeMeta((*snapshot)[0], meta_key);
    if (!meta.ok()) return meta.status();

    // 2. The preconditions, against that snapshot, in batch order.
    const int64_t revision = meta->revision + 1;
    std::vector<Change> changes;
    json compares = json::array({etcd::CompareModRevision(meta_key, meta->mod_revision)});
    json writes = json::array();
    for (size_t i = 0; i < batch.size(); ++i) {
      const WriteBatch::Op& op = batch.ops()[i];
      const EtcdRange& current = (*snapshot)[i + 1];
      std::optional<std::pair<int64_t, std::string>> existing;
      int64_t mod_revision = 0;
      if (!current.kvs.empty()) {
        existing = DecodeObject(current.kvs[0].value);
        if (!existing) return Internal("etcd store: " + current.kvs[0].key + " is not tessera's");
        mod_revision = current.kvs[0].mod_revision;
      }
      std::optional<int64_t> version;
      if (existing) version = existing->first;
      TESSERA_RETURN_IF_ERROR(internal::CheckPrecondition(op, version));
      const std::string key = ObjectKey(op.kind, op.name);
      compares.push_back(etcd::CompareModRevision(key, mod_revision));
      if (op.type == WriteBatch::OpType::kDelete) {
        writes.push_back(etcd::DeleteRange(key));
        changes.push_back(
            Change{ChangeType::kDeleted, op.kind, op.name, revision, existing->second});
      } else {
        writes.push_back(etcd::Put(key, EncodeObject(revision, op.body)));
        changes.push_back(Change{existing ? ChangeType::kModified : ChangeType::kAdded, op.kind,
                                 op.name, revision, op.body});
      }
    }

    // 3. Compaction: keep at most change_log_limit entries, dropping whole revisions.
    Meta next{revision, meta->compacted, meta->entries + static_cast<int64_t>(changes.size()), 0,
              ""};
    const int64_t limit = static_cast<int64_t>(store_options_.change_log_limit);
    if (next.entries > limit) {
      Status dropped = DropOldestRevisions(*client_, *meta, LogKey(meta->compacted + 1),
                                           PrefixEnd(options_.prefix + "log/"), limit,
                                           options_.etcd.max_response_bytes, next);
      if (!dropped.ok()) return dropped;
      // Every older revision gone and still over: this one is not logged either.
      if (next.entries > limit) {
        next.compacted = revision;
        next.entries -= static_cast<int64_t>(changes.size());
      }
    }
    next.commit = writer_id_ + "-" + std::to_string(++commits_);
    if (next.compacted < revision)
      writes.push_back(etcd::Put(LogKey(revision), EncodeChanges(changes)));
    if (next.compacted > meta->compacted) {
      writes.push_back(etcd::DeleteRange(LogKey(meta->compacted + 1), LogKey(next.compacted + 1)));
    }
    writes.push_back(etcd::Put(meta_key, EncodeMeta(next)));
    json failure = json::array();
    if (fence_term != 0) {
      compares.push_back(etcd::CompareCreateRevision(fence_key, fence_term));
      failure.push_back(etcd::GetRange(fence_key));
    }
    failure.push_back(etcd::GetRange(meta_key));

    // 4. The write, only if nothing it read has changed and the term still holds.
    auto answer = client_->Call("/v3/kv/txn",
                                {{"compare", compares}, {"success", writes}, {"failure", failure}});
    if (!answer.ok()) {
      // No answer is not "not applied": the txn may have been applied and its answer lost.
      Meta retired = *meta;
      retired.commit = next.commit + "-retired";
      auto applied = SettleLostCommit(
          LostCommit{next.commit, revision, meta->mod_revision, EncodeMeta(retired)}, fence_key,
          fence_term);
      if (!applied.ok()) return applied.status();
      if (!*applied) return answer.status();
      last_revision_ = revision;
      return revision;
    }
    if (answer->value("succeeded", false)) {
      last_revision_ = revision;
      return revision;
    }
    const json& responses = (*answer)["responses"];
    auto range_at = [&](size_t i) {
      return responses.is_array() && responses.size() > i
                 ? etcd::DecodeRange(responses[i].value("response_range", json::object()))
                 : Result<EtcdRange>(Unavailable("no answer"));
    };
    if (fence_term != 0) {
      auto leader = range_at(0);
      if (leader.ok()) {
        const int64_t now_term = leader->kvs.empty() ? 0 : leader->kvs[0].create_revision;
        if (now_term != fence_term) return FencedError(fence_key, fence_term, now_term);
      }
    }
    // The client sends a txn again to the next endpoint when one drops the connection: the
    // first may have applied it, and then this try fails the compare on our own write.
    if (auto now_meta = range_at(fence_term != 0 ? 1 : 0); now_meta.ok()) {
      auto decoded = DecodeMeta(*now_meta, meta_key);
      if (decoded.ok() && decoded->commit == next.commit) {
        last_revision_ = revision;
        return revision;
      }
    }
    // Another writer committed between the read and the write: read again.
  }
  return Unavailable("etcd store: commit lost the race to other writers " +
                     std::to_string(kMaxCommitAttempts) + " times; retry");
}

Result<bool> EtcdStore::SettleLostCommit(const LostCommit& lost, const std::string& fence_key,
                                         int64_t fence_term) {
  const std::string meta_key = options_.prefix + "meta";
  const auto budget = std::max(std::chrono::milliseconds(1'000), 2 * options_.etcd.request_timeout);
  const auto deadline = std::chrono::steady_clock::now() + budget;
  std::chrono::milliseconds wait{50};
  std::string last_error = "no answer";
  while (true) {
    // Retire the commit: the same meta under another commit id, with the same compares on meta
    // and the term. Once this succeeds the lost txn can never apply; if it fails, meta or the
    // term has moved, and meta says whose commit moved it.
    json compares = json::array({etcd::CompareModRevision(meta_key, lost.meta_mod_revision)});
    json failure = json::array({etcd::GetRange(meta_key)});
    if (fence_term != 0) {
      compares.push_back(etcd::CompareCreateRevision(fence_key, fence_term));
      failure.push_back(etcd::GetRange(fence_key));
    }
    auto answer = client_->Call("/v3/kv/txn",
                                {{"compare", compares},
                                 {"success", json::array({etcd::Put(meta_key, lost.retired_meta)})},
                                 {"failure", failure}});
    if (answer.ok()) {
      if (answer->value("succeeded", false)) return false;
      const json& responses = (*answer)["responses"];
      auto meta_range =
          responses.is_array() && !responses.empty()
              ? etcd::DecodeRange(responses[0].value("response_range", json::object()))
              : Result<EtcdRange>(Unavailable("no answer"));
      auto now =
          meta_range.ok() ? DecodeMeta(*meta_range, meta_key) : Result<Meta>(meta_range.status());
      if (now.ok()) {
        if (now->commit == lost.commit) return true;
        // Meta has not reached its revision (the term is over, or a retirement whose answer
        // was lost went first): its compares can never hold again.
        if (now->revision < lost.revision) return false;
        // Another head has committed since; whether this one came first, meta no longer says.
        last_error = "another head has committed revision " + std::to_string(now->revision);
        break;
      }
      last_error = now.status().message();
    } else {
      last_error = answer.status().message();
    }
    if (std::chrono::steady_clock::now() + wait > deadline) break;
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, std::chrono::milliseconds(500));
  }
  outcome_unknown_ = true;
  return Unavailable("etcd store: the answer to a commit was lost and after " +
                     std::to_string(budget.count()) +
                     " ms it is still unknown whether it was "
                     "applied (" +
                     last_error +
                     "); this store refuses further writes: restart "
                     "the head so that it reloads its state from etcd");
}

int64_t EtcdStore::Revision() {
  if (closed_) return last_revision_;
  const std::string meta_key = options_.prefix + "meta";
  auto range = client_->Range(meta_key);
  if (!range.ok()) return last_revision_;
  auto meta = DecodeMeta(*range, meta_key);
  if (!meta.ok()) return last_revision_;
  last_revision_ = meta->revision;
  return meta->revision;
}

Result<int64_t> EtcdStore::CompactHistory() {
  if (closed_) return internal::ClosedError();
  auto now = client_->Range(options_.prefix + "meta");  // any read: its answer's revision
  if (!now.ok()) return now.status();
  const int64_t to = history_noted_.exchange(now->revision);
  if (to <= 0) return int64_t{0};
  // Not physical: etcd answers at once and frees the old versions in the background.
  auto compacted = client_->Call("/v3/kv/compaction", json{{"revision", std::to_string(to)}});
  if (!compacted.ok() && compacted.status().message().find(
                             "required revision has been compacted") == std::string::npos)
    return Unavailable("etcd store: compacting etcd's history up to revision " +
                       std::to_string(to) + ": " + compacted.status().message());
  return to;
}

Result<std::vector<Change>> EtcdStore::ChangesSince(int64_t revision, size_t limit) {
  if (closed_) return internal::ClosedError();
  if (revision < 0 || limit == 0) {
    return internal::CheckChangesSince(revision, limit, 0, 0);
  }
  const std::string meta_key = options_.prefix + "meta";
  const std::string log_end = PrefixEnd(options_.prefix + "log/");
  // The log in pages (NextLogPage), every page at the first one's etcd revision (one snapshot
  // with meta). Asking for `limit` revisions at once (each holds at least one change) was up to
  // a hundred times too much: a standby behind by a log of flushes read 1,000 of them in one
  // answer, past the client's answer limit, and failed to follow until it fell behind the whole
  // log and read every object again; a shorter gap was read whole by each of Follow's reads.
  auto snapshot = TxnRanges(
      *client_,
      json::array({etcd::GetRange(meta_key),
                   etcd::GetRange(LogKey(revision + 1), log_end,
                                  std::min<int64_t>(kFirstLogPage, static_cast<int64_t>(limit)))}));
  if (!snapshot.ok()) return snapshot.status();
  auto meta = DecodeMeta((*snapshot)[0], meta_key);
  if (!meta.ok()) return meta.status();
  TESSERA_RETURN_IF_ERROR(
      internal::CheckChangesSince(revision, limit, meta->revision, meta->compacted));
  const int64_t at = (*snapshot)[1].revision;
  std::vector<Change> out;
  int64_t revisions_read = 0;
  uint64_t bytes_read = 0;
  for (EtcdRange page = std::move((*snapshot)[1]);;) {
    for (const EtcdKv& kv : page.kvs) {
      if (out.size() >= limit) break;  // whole revisions only
      auto entry = DecodeLogEntry(kv);
      if (!entry.ok()) return entry.status();
      for (Change& c : entry->changes) out.push_back(std::move(c));
      ++revisions_read;
      bytes_read += kv.value.size();
    }
    if (out.size() >= limit || !page.more || page.kvs.empty()) break;
    const int64_t size =
        NextLogPage(static_cast<int64_t>(limit - out.size()), revisions_read,
                    static_cast<int64_t>(out.size()), bytes_read, options_.etcd.max_response_bytes);
    auto next = client_->Range(page.kvs.back().key + '\0', log_end, size, at);
    if (!next.ok()) return next.status();
    page = std::move(*next);
  }
  return out;
}

Status EtcdStore::ReadSnapshot() {
  const std::string meta_key = options_.prefix + "meta";
  const std::string objects = options_.prefix + "o/";
  auto snapshot = TxnRanges(
      *client_, json::array({etcd::GetRange(meta_key),
                             etcd::GetRange(objects, PrefixEnd(objects), options_.page_size)}));
  if (!snapshot.ok()) return snapshot.status();
  TESSERA_RETURN_IF_ERROR(
      ReadRemainingPages(*client_, PrefixEnd(objects), options_.page_size, (*snapshot)[1]));
  auto meta = DecodeMeta((*snapshot)[0], meta_key);
  if (!meta.ok()) return meta.status();
  Mirror copy;
  copy.revision = meta->revision;
  for (EtcdKv& kv : (*snapshot)[1].kvs) {
    const std::string_view rest = std::string_view(kv.key).substr(objects.size());
    const size_t slash = rest.find('/');
    auto kind =
        slash == std::string_view::npos ? std::nullopt : UnescapeKind(rest.substr(0, slash));
    auto decoded = DecodeObject(kv.value);
    if (!kind || !decoded) return Internal("etcd store: " + kv.key + " was not written by tessera");
    std::string name(rest.substr(slash + 1));
    copy.objects[*kind][name] = Object{*kind, name, std::move(decoded->second), decoded->first};
  }
  mirror_ = std::move(copy);
  return Status::Ok();
}

Result<int64_t> EtcdStore::Follow() {
  if (closed_) return internal::ClosedError();
  std::lock_guard lock(mirror_mu_);  // only the follower waits: nothing else reads meanwhile
  if (mirror_dropped_) return FailedPrecondition("etcd store: Follow after this store wrote");
  if (!mirror_) {
    TESSERA_RETURN_IF_ERROR(ReadSnapshot());
    return static_cast<int64_t>(0);
  }
  constexpr size_t kBatch = 1000;
  int64_t applied = 0;
  int64_t revision = mirror_->revision;
  std::vector<Change> pending;  // applied only once the copy has caught up: all or nothing
  while (true) {
    auto changes = ChangesSince(revision, kBatch);
    if (!changes.ok() && changes.status().code() == StatusCode::kFailedPrecondition) {
      TESSERA_RETURN_IF_ERROR(ReadSnapshot());  // compacted past us, or the store was reset
      return static_cast<int64_t>(0);
    }
    if (!changes.ok()) return changes.status();
    if (changes->empty()) break;
    revision = changes->back().revision;
    for (Change& c : *changes) pending.push_back(std::move(c));
  }
  for (Change& c : pending) {
    auto& objects = mirror_->objects[c.kind];
    if (c.type == ChangeType::kDeleted) {
      objects.erase(c.name);
    } else {
      objects[c.name] = Object{c.kind, c.name, std::move(c.body), c.revision};
    }
    ++applied;
  }
  mirror_->revision = revision;
  return applied;
}

void EtcdStore::StopFollowing() {
  std::lock_guard lock(mirror_mu_);
  mirror_.reset();
  mirror_dropped_ = true;
}

std::optional<int64_t> EtcdStore::following_revision() const {
  std::lock_guard lock(mirror_mu_);
  if (!mirror_) return std::nullopt;
  return mirror_->revision;
}

bool EtcdStore::VisitFollowed(std::string_view kind, int64_t after,
                              const std::function<void(const Object&)>& visit) const {
  std::lock_guard lock(mirror_mu_);
  if (!mirror_) return false;
  if (auto k = mirror_->objects.find(kind); k != mirror_->objects.end())
    for (const auto& [name, object] : k->second)
      if (object.resource_version > after) visit(object);
  return true;
}

Status EtcdStore::Close() {
  closed_ = true;
  StopFollowing();
  return Status::Ok();
}

}  // namespace tessera::store

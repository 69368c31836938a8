// Lists in pages (Controller::ListPage; api/list_pages.h has the HTTP side): the list order by
// position, and the pages of TrainJobs and Hosts cut under the lock without copying the whole
// list.
#include <algorithm>
#include <charconv>
#include <cstdio>

#include "common/object_key.h"
#include "controller/controller.h"

namespace tessera::controller {
namespace {

// Keeps the items of list["items"] in `namespace_name` ("" every one) whose position is after
// `after`, sorted by position, at most `limit` (0: all) of them.
void CutListPage(Json& list, const std::string& kind, const Controller::PageRequest& request,
                 Controller::VersionedPage& page) {
  if (!list.contains("items") || !list["items"].is_array()) return;
  std::vector<std::pair<std::string, Json*>> items;
  for (Json& item : list["items"]) {
    if (!request.namespace_name.empty()) {
      const Json& meta = item.contains("metadata") ? item["metadata"] : Json::object();
      const std::string ns =
          meta.is_object() && meta.contains("namespace") && meta["namespace"].is_string()
              ? meta["namespace"].get<std::string>()
              : std::string(kDefaultNamespace);
      if (ns != request.namespace_name) continue;
    }
    std::string position = ListPosition(kind, item);
    if (request.after.empty() || position > request.after)
      items.emplace_back(std::move(position), &item);
  }
  std::sort(items.begin(), items.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  const size_t take = request.limit == 0 ? items.size() : std::min(request.limit, items.size());
  Json kept = Json::array();
  for (size_t i = 0; i < take; ++i) kept.push_back(std::move(*items[i].second));
  page.remaining = items.size() - take;
  page.last = page.remaining > 0 ? items[take - 1].first : "";
  list["items"] = std::move(kept);
}

}  // namespace

std::string UidPosition(uint64_t uid) {
  char digits[24];
  std::snprintf(digits, sizeof digits, "%020llu", static_cast<unsigned long long>(uid));
  return digits;
}

std::string ListPosition(const std::string& kind, const Json& item) {
  const Json empty = Json::object();
  const Json& meta = item.is_object() && item.contains("metadata") && item["metadata"].is_object()
                         ? item["metadata"]
                         : empty;
  auto text = [&](const char* field) {
    return meta.contains(field) && meta[field].is_string() ? meta[field].get<std::string>() : "";
  };
  if (kind == codec::kTrainJobKind)
    return UidPosition(
        meta.contains("uid") && meta["uid"].is_number_unsigned() ? meta["uid"].get<uint64_t>() : 0);
  if (kind == codec::kEventKind) return text("name");
  return ObjectKey(text("namespace"), text("name"));
}

Result<Controller::VersionedPage> Controller::ListPage(const std::string& kind,
                                                       const PageRequest& request) const {
  VersionedPage page;
  if (kind == codec::kTrainJobKind) {
    uint64_t after = 0;
    if (!request.after.empty()) {
      const char* end = request.after.data() + request.after.size();
      auto [ptr, ec] = std::from_chars(request.after.data(), end, after);
      if (ec != std::errc() || ptr != end)
        return InvalidArgument("continue: the token's position '" + request.after +
                               "' is not a TrainJob uid; list again without continue");
    }
    auto lock = Hold();
    page.changes = changes_emitted_;
    const int64_t now = NowMs();
    // A scan of uids and keys, then a copy of the page's jobs only.
    std::vector<std::pair<uint64_t, const TrainJob*>> after_it;
    for (const auto& [key, job] : jobs_) {
      if (job.uid <= after) continue;
      if (!request.namespace_name.empty() && NamespaceOfKey(key) != request.namespace_name)
        continue;
      after_it.emplace_back(job.uid, &job);
    }
    const size_t take =
        request.limit == 0 ? after_it.size() : std::min(request.limit, after_it.size());
    std::partial_sort(after_it.begin(), after_it.begin() + static_cast<std::ptrdiff_t>(take),
                      after_it.end());
    JobsCopy copy;
    copy.now_ms = now;
    copy.jobs.reserve(take);
    for (size_t i = 0; i < take; ++i) copy.jobs.push_back(*after_it[i].second);
    page.remaining = after_it.size() - take;
    lock.unlock();
    if (page.remaining > 0) page.last = UidPosition(copy.jobs.back().uid);
    page.list = JobListJson(copy);
    return page;
  }
  if (kind == codec::kHostKind) {
    auto lock = Hold();
    page.changes = changes_emitted_;
    const std::map<std::string, SliceRoster> rosters = SliceRostersLocked();
    Json items = Json::array();
    auto it = request.after.empty() ? hosts_.begin() : hosts_.upper_bound(request.after);
    for (; it != hosts_.end() && (request.limit == 0 || items.size() < request.limit); ++it)
      items.push_back(HostJsonLocked(it->second, &rosters));
    page.remaining = static_cast<uint64_t>(std::distance(it, hosts_.end()));
    if (page.remaining > 0 && !items.empty()) page.last = std::prev(it)->first;
    page.list = {{"kind", "HostList"}, {"items", std::move(items)}};
    return page;
  }
  auto whole = ListWithVersion(kind);
  if (!whole) return NotFound("no list of kind " + kind);
  page.list = std::move(whole->list);
  page.changes = whole->changes;
  CutListPage(page.list, kind, request, page);
  return page;
}

}  // namespace tessera::controller

#include "admission/easy_pass.h"

#include <algorithm>

namespace tessera {
namespace {

// Holds the head's room and the moved workloads' hints in the pass's scratch inventory.
const OwnerId kDefragHold(OwnerId::kInvalid / 2 + 3);

int64_t Chips(const SliceRequest& r) { return r.shape.chips() * r.num_slices; }

std::string Hours(int64_t s) {
  s = std::max<int64_t>(0, s);
  // Minutes at most: the message is stored when it changes, so it must not change every pass.
  if (s < 60) return "under a minute";
  if (s < 3600) return std::to_string(s / 60) + "m";
  return std::to_string(s / 3600) + "h" + std::to_string((s % 3600) / 60) + "m";
}

std::string Name(const EasyWaiting& w) {
  return w.name.empty() ? "workload " + std::to_string(w.id.value()) : w.name;
}

// Field by field: a long line compares every waiting request with the failed ones.
bool SameRequest(const SliceRequest& a, const SliceRequest& b) {
  return a.shape.dims[0] == b.shape.dims[0] && a.shape.dims[1] == b.shape.dims[1] &&
         a.shape.dims[2] == b.shape.dims[2] && a.shape.rank == b.shape.rank &&
         a.num_slices == b.num_slices && a.generation == b.generation;
}

// Requests that did not fit in this pass, with the planner's answer.
class Failures {
 public:
  const PlanResult* Find(const SliceRequest& r) const {
    for (const auto& [request, plan] : failed_)
      if (SameRequest(request, r)) return &plan;
    return nullptr;
  }
  void Add(const SliceRequest& r, const PlanResult& plan) { failed_.push_back({r, plan}); }

 private:
  std::vector<std::pair<SliceRequest, PlanResult>> failed_;
};

Status Hold(Inventory& inv, const PlanResult& plan) {
  std::vector<HostId> free;
  for (const SlicePlacement& s : plan.slices)
    for (HostId h : s.hosts)
      if (inv.host(h).free()) free.push_back(h);
  return free.empty() ? Status::Ok() : inv.Reserve(kDefragHold, free);
}

}  // namespace

EasyPassResult RunEasyPass(const Inventory& inv, const SlicePlanner& planner,
                           const std::vector<EasyWaiting>& line,
                           const std::vector<EasyRunning>& running, int64_t now_s,
                           int64_t budget_chip_s, const EasyPassOptions& options) {
  return RunEasyPass(
      inv, planner, line, [&]() -> const std::vector<EasyRunning>& { return running; }, now_s,
      budget_chip_s, options);
}

EasyPassResult RunEasyPass(const Inventory& inv_in, const SlicePlanner& planner,
                           const std::vector<EasyWaiting>& line, const EasyRunningFn& running_fn,
                           int64_t now_s, int64_t budget_chip_s, const EasyPassOptions& o) {
  EasyPassResult out;
  const std::vector<EasyRunning>* running_list = nullptr;  // asked for when first needed
  auto running = [&]() -> const std::vector<EasyRunning>& {
    if (running_list == nullptr) running_list = &running_fn();
    return *running_list;
  };
  // The pass's inventory: `inv_in` until the pass first changes it (most passes of a long
  // replay start nothing), then its own copy.
  std::optional<Inventory> changed;
  auto inv = [&]() -> const Inventory& { return changed ? *changed : inv_in; };
  auto change = [&]() -> Inventory& {
    if (!changed) changed = inv_in;
    return *changed;
  };
  std::optional<Reservation> res;
  std::string head;
  std::optional<Inventory> blocked;      // `inv` with the reservation held
  std::vector<BackfillRunning> started;  // the workloads this pass starts
  auto owners = [](const EasyRunning& r) {
    return r.owners.empty() ? std::vector<OwnerId>{OwnerOf(r.id)} : r.owners;
  };
  auto reserve = [&](const EasyWaiting& w) {
    std::vector<BackfillRunning> br = started;
    for (const EasyRunning& r : running()) br.push_back({owners(r), r.start_s, r.expected_s});
    res = Reserve(
        inv(), [&](const Inventory& i) { return planner.Plan(i, w.request); }, Chips(w.request), br,
        now_s, o.backfill);
    head = Name(w);
  };
  // The victim search finds a candidate's hosts under OwnerOf(id): `inv` with each movable
  // workload held under its own id, when it is not already.
  auto by_workload = [&]() -> Result<Inventory> {
    Inventory out_inv = inv();
    for (const EasyRunning& r : running()) {
      if (!r.movable || r.owners.empty()) continue;
      std::vector<HostId> hosts;
      for (OwnerId owner : r.owners) {
        for (HostId h : out_inv.HostsOf(owner)) hosts.push_back(h);
        out_inv.Release(owner);
      }
      if (Status s = out_inv.Reserve(OwnerOf(r.id), hosts); !s.ok()) return s;
    }
    return out_inv;
  };
  auto head_wait = [&](const EasyWaiting& w, const std::string& note) {
    if (res->made)
      out.waiting.push_back({w.id, "WaitingForReservation",
                             "head of the line: reserved " + std::to_string(res->hosts.size()) +
                                 " host(s) in " + std::to_string(res->cubes.size()) +
                                 " cube(s), expected to start in " + Hours(res->start_s - now_s) +
                                 " (from the running jobs' expected durations)" +
                                 (note.empty() ? "" : "; " + note)});
    else
      out.waiting.push_back({w.id, "WaitingForReservation",
                             "head of the line: does not fit even when every running job has "
                             "ended" +
                                 (note.empty() ? "" : "; " + note)});
  };
  std::vector<const EasyWaiting*> starting;  // the line's workloads in out.starts
  bool defragmented = false;                 // at most once per pass
  // Plans the moves that make room for the head `w` on `inv`; on success holds the head's room
  // and the hints in `inv` and sets out.defrag (or, when only workloads this pass starts move,
  // starts them elsewhere and the head now). Else `note` says why, for the head's message.
  auto try_defrag = [&](const EasyWaiting& w, std::string& note) {
    std::vector<MoveCandidate> candidates;
    for (const EasyRunning& r : running()) {
      if (!r.movable) continue;
      const int64_t since = r.last_checkpoint_s >= r.start_s ? r.last_checkpoint_s : r.start_s;
      candidates.push_back({r.id, r.priority, r.request,
                            Chips(r.request) * std::max<int64_t>(0, now_s - since),
                            r.last_moved_s});
    }
    for (const EasyWaiting* s : starting)  // not started yet: placing it elsewhere loses nothing
      candidates.push_back({s->id, s->priority, s->request, 0, -1});
    DefragPlan d;
    if (budget_chip_s <= 0) {
      d.message = "the budget of moved work is spent";
    } else if (inv().usable_chips() < Chips(w.request)) {
      // Too few free chips for any move to help: PlanDefrag says so before it looks at the
      // candidates, so it is asked without the copy that holds them under their own ids.
      d = PlanDefrag(inv(), planner, w.request, {}, now_s, budget_chip_s, o.defrag_options);
    } else if (Result<Inventory> by_id = by_workload(); !by_id.ok()) {
      d.message =
          "the running workloads' hosts could not be told apart: " + by_id.status().message();
    } else {
      d = PlanDefrag(*by_id, planner, w.request, candidates, now_s, budget_chip_s,
                     o.defrag_options);
    }
    if (d.found && !d.moves.empty()) {
      Inventory scratch = inv();
      auto starts = out.starts;
      // A moved workload of this pass's starts gives up its placement and starts on its new one.
      std::vector<Move> moves, replaced;
      for (Move& m : d.moves) {
        auto it = std::find_if(starts.begin(), starts.end(),
                               [&](const auto& start) { return start.first == m.workload; });
        if (it == starts.end()) {
          moves.push_back(std::move(m));
          continue;
        }
        scratch.Release(OwnerOf(m.workload));
        starts.erase(it);
        replaced.push_back(std::move(m));
      }
      // A moved workload goes outside the head's room, where nothing it must wait for runs:
      // a start placed elsewhere starts there now.
      bool held = true;
      for (Move& m : replaced) {
        held = held && ApplyPlan(scratch, OwnerOf(m.workload), m.plan).ok();
        starts.push_back({m.workload, std::move(m.plan)});
      }
      if (moves.empty()) {  // only this pass's starts moved: the head's room is free now
        held = held && ApplyPlan(scratch, OwnerOf(w.id), d.plan).ok();
        starts.push_back({w.id, d.plan});
      } else {
        // Hold the head's room and the hints, so that nothing later in line takes them.
        held = held && Hold(scratch, d.plan).ok();
        for (const Move& m : moves) held = held && Hold(scratch, m.plan).ok();
      }
      if (held) {
        changed = std::move(scratch);
        out.starts = std::move(starts);
        defragmented = true;
        if (moves.empty()) {  // the head started: a later reservation sees it end
          started.push_back({{OwnerOf(w.id)}, now_s, w.expected_s});
        } else {
          d.moves = std::move(moves);
          out.defrag = std::move(d);
          out.defrag_for = w.id;
        }
        return true;
      }
      note = "defragmentation: the moves' placements could not be held";
    } else if (!d.found) {
      note = "defragmentation: " + d.message;
    }
    return false;
  };
  const EasyWaiting* defrag_head = nullptr;  // defrag_after_backfill
  size_t defrag_head_wait = 0;               // its entry in out.waiting
  Failures failed_live, failed_blocked;      // on `inv`, and on `blocked`
  for (const EasyWaiting& w : line) {
    if (!o.explain && inv().usable_chips() == 0) break;
    const int64_t need = Chips(w.request);
    const bool anywhere = !res || EndsBefore(*res, now_s, w.expected_s, o.backfill);
    Failures& failed = anywhere ? failed_live : failed_blocked;
    // The answer for `w`: planned now, or a request's that did not fit earlier in the pass
    // (read in place: a long line meets it thousands of times).
    PlanResult fresh;
    const PlanResult* answer = &fresh;
    if (!anywhere && !blocked) {
      Result<Inventory> b = Blocked(inv(), *res);
      if (b.ok()) blocked = std::move(*b);
    }
    // Behind the reservation a workload plans on `blocked` (with no such inventory, nowhere).
    const Inventory* target = anywhere ? &inv() : blocked ? &*blocked : nullptr;
    if (need > inv().usable_chips()) {
      fresh.reason = NoFit::kNotEnoughChips;
      if (o.explain)
        fresh.message = "needs " + std::to_string(need) + " chips, " +
                        std::to_string(inv().usable_chips()) + " are free";
    } else if (target != nullptr && need > target->usable_chips()) {
      fresh.reason = NoFit::kNotEnoughChips;  // off the reserved hosts (BehindReservation)
    } else if (const PlanResult* known = failed.Find(w.request)) {
      answer = known;
    } else {
      if (target != nullptr) fresh = planner.Plan(*target, w.request);
      if (!fresh.placed()) failed.Add(w.request, fresh);
    }
    const PlanResult& plan = *answer;
    if (plan.placed()) {
      if (ApplyPlan(change(), OwnerOf(w.id), plan).ok()) {
        out.starts.push_back({w.id, plan});
        starting.push_back(&w);
        started.push_back({{OwnerOf(w.id)}, now_s, w.expected_s});
        blocked.reset();
        continue;
      }
    }
    if (res) {
      if (!o.explain) continue;  // only the head's entry
      if (anywhere)
        out.waiting.push_back({w.id, NoFitName(plan.reason), plan.message});
      else
        out.waiting.push_back(
            {w.id, "BehindReservation",
             "fits only on the hosts reserved for " + head + " (expected to start in " +
                 Hours(res->start_s - now_s) + "), and its expected duration (" +
                 Hours(w.expected_s > 0 ? w.expected_s : o.backfill.default_duration_s) +
                 (w.expected_s > 0 ? "" : ", the default: no spec.expectedDuration") +
                 ") ends later"});
      continue;
    }
    if (need < o.reserve_min_chips) {  // small: waits as under plain backfill
      if (o.explain) out.waiting.push_back({w.id, NoFitName(plan.reason), plan.message});
      continue;
    }
    if (!w.may_help) {  // large, but not helped yet: waits as a small one
      if (o.explain)
        out.waiting.push_back({w.id, NoFitName(plan.reason),
                               plan.message + "; no reservation or moves for it until it has "
                                              "waited longer than the help threshold"});
      continue;
    }
    // The head of the line: make room by moving sub-cube jobs, or reserve.
    if (o.defrag && !defragmented && NeedsWholeCubes(w.request)) {
      if (o.defrag_after_backfill) {
        // Reserve now; try the moves once the rest of the line has started what fits.
        defrag_head = &w;
        reserve(w);
        defrag_head_wait = out.waiting.size();
        head_wait(w, "");
        continue;
      }
      std::string note;
      if (try_defrag(w, note)) {
        blocked.reset();
        // Starts placed elsewhere may have left hosts free: what did not fit may fit now.
        failed_live = Failures();
        failed_blocked = Failures();
        // The line goes on behind the head as behind a reservation that starts now: nothing
        // may take the held hosts.
        continue;
      }
      reserve(w);
      head_wait(w, note);
      continue;
    }
    reserve(w);
    head_wait(w, "");
  }
  if (defrag_head) {
    std::string note;
    if (try_defrag(*defrag_head, note)) {
      out.waiting.erase(out.waiting.begin() + static_cast<std::ptrdiff_t>(defrag_head_wait));
    } else if (!note.empty()) {
      out.waiting.erase(out.waiting.begin() + static_cast<std::ptrdiff_t>(defrag_head_wait));
      head_wait(*defrag_head, note);
    }
  }
  return out;
}

}  // namespace tessera

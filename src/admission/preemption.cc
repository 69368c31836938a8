#include "admission/preemption.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>

namespace tessera {
namespace {

constexpr int kFreeHost = -1;     // free and healthy now
constexpr int kBlockedHost = -2;  // owned by a non-candidate, or not healthy

// The room one slice needs, and its tie-break key (cube or slice or block, then position).
struct Room {
  std::vector<HostId> hosts;
  uint64_t key = 0;
  std::vector<CubeId> cubes;  // 3D: the cube(s) of the room, ascending
  SliceId slice;              // 2D: the fixed slice
};

struct Solution {
  std::vector<Room> rooms;
  std::vector<int> victims;  // candidate indices, ascending
  VictimCost cost;
};

class Searcher {
 public:
  Searcher(const Inventory& inv, const SlicePlanner& planner, const SliceRequest& req,
           const std::vector<PreemptionCandidate>& cands)
      : inv_(inv), planner_(planner), req_(req), cands_(cands) {
    // A pod's hosts get their state cube by cube, for the cubes a room can touch (those of the
    // candidates and their blocks): a search then costs what the candidates hold, not the
    // size of the pod. A 2D fleet's hosts all get theirs now.
    base_state_.reset(new int[inv.hosts().size()]);
    if (inv.is_3d()) {
      cube_ready_.assign(inv.cubes().size(), 0);
    } else {
      for (const Host& h : inv.hosts())
        base_state_[h.id.value()] = h.usable() ? kFreeHost : kBlockedHost;
    }
    chips_.assign(cands.size(), 0);
    touched_.assign(inv.cubes().size(), 0);
    for (size_t c = 0; c < cands.size(); ++c) {
      for (HostId h : inv.HostsOf(OwnerOf(cands[c].workload))) {
        const Host& host = inv.host(h);
        chips_[c] += host.chips;
        if (host.cube.valid()) {
          ReadyCube(host.cube);
          if (!touched_[host.cube.value()]) touched_cubes_.push_back(host.cube.value());
          touched_[host.cube.value()] = 1;
        }
        if (host.health == Health::kHealthy) base_state_[h.value()] = static_cast<int>(c);
      }
    }
    std::sort(touched_cubes_.begin(), touched_cubes_.end());
    for (uint32_t id : touched_cubes_) touched_blocks_.push_back(inv.cubes()[id].block.value());
    std::sort(touched_blocks_.begin(), touched_blocks_.end());
    touched_blocks_.erase(std::unique(touched_blocks_.begin(), touched_blocks_.end()),
                          touched_blocks_.end());
    SetRequest();
  }

  // A searcher for `req` among the same candidates (`cands` equal to like's) on the same
  // inventory: the hosts' states and the candidates' chips are copied from `like`, not found
  // again (a walk of every candidate's hosts).
  Searcher(const Searcher& like, const SliceRequest& req,
           const std::vector<PreemptionCandidate>& cands)
      : inv_(like.inv_), planner_(like.planner_), req_(req), cands_(cands) {
    const size_t hosts = inv_.hosts().size();
    base_state_.reset(new int[hosts]);
    // Bytes: hosts of cubes not ready hold no state yet (never read), so no int is read here.
    std::memcpy(base_state_.get(), like.base_state_.get(), hosts * sizeof(int));
    // Without the rooms like has taken in its last search.
    for (const auto& [h, state] : like.taken_) base_state_[h.value()] = state;
    cube_ready_ = like.cube_ready_;
    chips_ = like.chips_;
    touched_ = like.touched_;
    touched_cubes_ = like.touched_cubes_;
    touched_blocks_ = like.touched_blocks_;
    SetRequest();
  }

  int64_t chips(int c) const { return chips_[c]; }

  // The cheapest acceptable solution using only candidates with allowed[c] set. `all` says
  // that every candidate is allowed: the rooms (and, for N slices, the greedy solution) are
  // then computed once and kept for later calls with other checks.
  // `needs_group` >= 0 (with `all`): the caller's promise that `check` refuses every set
  // holding no candidate of that group (groups_), so rooms without one are not tried; the
  // answer is the same, and so is the count of rooms the check refused.
  // `needs_weight` > 0 (with needs_group): the further promise that `check` refuses every set
  // whose candidates of that group weigh (weights_) less than it in total: rooms lighter than
  // that are not asked about either (the same answer and count).
  std::optional<Solution> Search(const std::vector<char>& allowed, const VictimSetCheck& check,
                                 bool all, int needs_group = -1, int64_t needs_weight = 0) {
    allowed_ = &allowed;
    all_allowed_ = all;
    Untake(0);
    ClearInSet();
    if (req_.num_slices == 1) {
      if (!all) return SearchOne(check);
      if (!all_options_) ListAllOptions();
      // With all allowed and nothing taken, a room's victims are the candidates holding its
      // hosts: the check is asked on them and only the room it accepts is taken.
      const std::vector<Option>& options = all_options_->options;
      const int all_rooms = all_options_->all_rooms;
      if (check && needs_group >= 0 && groups_.size() == cands_.size()) {
        ListAllVictims();
        const GroupRooms& rooms = OptionsWithGroup(needs_group);
        const bool by_weight = needs_weight > 0 && weights_.size() == cands_.size();
        if (by_weight && rooms.heaviest < needs_weight) {
          rejected_by_check_ += all_rooms;  // all refused
          return std::nullopt;
        }
        for (size_t k = 0; k < rooms.options.size(); ++k) {
          const uint32_t i = rooms.options[k];
          if (by_weight && rooms.weight[k] < needs_weight) continue;
          check_arg_.assign(all_victims_.begin() + victims_at_[i],
                            all_victims_.begin() + victims_at_[i + 1]);
          if (!check(check_arg_)) continue;
          rejected_by_check_ += static_cast<int>(i);  // every room listed before it: refused
          Solution s;
          Take(options[i], s);
          return s;
        }
        rejected_by_check_ += all_rooms;
        return std::nullopt;
      }
      for (const Option& o : options) {
        if (check) {
          VictimsOf(o, check_arg_);
          if (!check(check_arg_)) {
            ++rejected_by_check_;
            continue;
          }
        }
        Solution s;
        Take(o, s);
        return s;
      }
      rejected_by_check_ += all_rooms - static_cast<int>(options.size());  // the rooms alike
      return std::nullopt;
    }
    // N slices: the greedy solution depends on the allowed candidates, not on the check, so it
    // is kept per allowed set (the retries and the minimising steps of every query ask for the
    // same sets again); with every candidate allowed, the set every query starts with, without
    // a lookup by its bytes.
    const std::optional<Solution>* kept = nullptr;
    if (all) {
      if (!greedy_all_) greedy_all_.emplace(Greedy());
      kept = &*greedy_all_;
    } else if (without_ >= 0) {  // SearchWithout: by the one candidate left out
      auto it = greedy_without_.find(without_);
      if (it == greedy_without_.end()) it = greedy_without_.emplace(without_, Greedy()).first;
      kept = &it->second;
    } else {
      auto it = greedy_.find(AsKey(allowed));
      if (it == greedy_.end()) it = greedy_.emplace(std::string(AsKey(allowed)), Greedy()).first;
      kept = &it->second;
    }
    const std::optional<Solution>& s = *kept;
    if (s && check && !check(s->victims)) {
      ++rejected_by_check_;
      return std::nullopt;
    }
    return s;
  }

  // Search with every candidate allowed but `without`. N slices: the answer is kept by that
  // candidate (no set to compare byte by byte), and on a pod the first greedy step starts from
  // the rooms the search with every candidate found (each unit's cheapest, kept by it) and
  // enumerates again only the units where `without` holds hosts; every other unit's rooms are
  // the same without it. The same answer as Search's.
  std::optional<Solution> SearchWithout(int without, const VictimSetCheck& check) {
    if (all_but_.size() != cands_.size()) all_but_.assign(cands_.size(), 1);
    all_but_[without] = 0;
    without_ = without;
    std::optional<Solution> s = Search(all_but_, check, /*all=*/false);
    without_ = -1;
    all_but_[without] = 1;
    return s;
  }

  // One shape's rooms with every candidate allowed and nothing taken, cheapest first (defined
  // below, with the rooms' type).
  struct RoomList;
  // Per shape, the rooms listed by searchers over the same candidates and inventory: each lists
  // a shape's rooms once for all of them.
  using RoomCache = std::vector<std::pair<Shape, std::shared_ptr<const RoomList>>>;

  // Shares `cache` (null: none) with the other searchers that hold it: rooms listed already are
  // taken from it, and rooms this one lists are put in it. The rooms depend only on the shape,
  // the candidates and the inventory's hosts, which all those searchers have in common.
  void ShareRooms(RoomCache* cache) {
    cache_ = cache;
    if (cache_ == nullptr || !all_options_) return;
    for (const auto& [shape, list] : *cache_)
      if (shape == req_.shape) return;
    cache_->push_back({req_.shape, all_options_});
  }

  // Per candidate: its group, for Search's needs_group (empty: no groups), and its weight, for
  // needs_weight (empty: none).
  void SetGroups(std::vector<int> groups, std::vector<int64_t> weights) {
    groups_ = std::move(groups);
    weights_ = std::move(weights);
  }

  // The rooms the check refused since ResetRejected: exact when no search found one (the
  // caller's message then); otherwise without the rooms left out for having the same victims as
  // one listed (ForEachOption).
  int rejected_by_check() const { return rejected_by_check_; }
  void ResetRejected() { rejected_by_check_ = 0; }

  VictimCost CostOf(int c) const {
    return VictimCost{cands_[c].rank, cands_[c].priority, chips_[c], cands_[c].lost_work_chip_ms};
  }

 private:
  // One candidate room with its incremental cost. Sub-cube rooms are (cube, mask index);
  // super-slice rooms are chosen cubes; fixed-slice rooms are a slice.
  struct Option {
    VictimCost cost;
    uint64_t key = 0;
    int cube = -1, mask = -1, slice = -1;
    std::vector<CubeId> cubes;
  };

 public:
  struct RoomList {
    std::vector<Option> options;  // cheapest first
    // The rooms there are: `options` and those left out for having the same victims as one
    // listed (ForEachOption), for the count of rooms a check refuses when it refuses them all.
    int all_rooms = 0;
  };

 private:
  // What depends on the request's shape.
  void SetRequest() {
    sub_shape_ = inv_.is_3d() ? SubCubeShapeIndex(req_.shape) : -1;
    if (sub_shape_ >= 0) masks_ = &planner_.SubCubeMasks(sub_shape_);
    if (inv_.is_3d() && sub_shape_ < 0)
      cubes_per_slice_ = static_cast<int>(req_.shape.chips() / 64);
  }

  // Gives the hosts of `cube` their state before any candidate's (3D; once per cube).
  void ReadyCube(CubeId id) {
    if (cube_ready_[id.value()]) return;
    cube_ready_[id.value()] = 1;
    const Cube& cube = inv_.cube(id);
    const HostMask usable = cube.usable_mask();
    for (int b = 0; b < kHostsPerCube; ++b)
      base_state_[cube.hosts[b].value()] = usable & (1u << b) ? kFreeHost : kBlockedHost;
  }

  // Only hosts of ready cubes (3D) are asked about. A host in a room already taken is blocked.
  int StateOf(HostId h) const {
    const int s = base_state_[h.value()];
    if (s >= 0 && !(*allowed_)[s]) return kBlockedHost;
    return s;
  }

  void AddCost(VictimCost& cost, int c) const {
    cost.max_rank = std::max(cost.max_rank, cands_[c].rank);
    cost.max_priority = std::max(cost.max_priority, cands_[c].priority);
    cost.chips += chips_[c];
    cost.lost_work_chip_ms += cands_[c].lost_work_chip_ms;
  }

  // Incremental cost of the room made of `hosts`, or false if a host is blocked. `seen` holds
  // candidates already counted for this room.
  template <typename HostRange>
  bool Evaluate(const HostRange& hosts, VictimCost& cost, std::vector<int>& seen) const {
    for (HostId h : hosts) {
      const int s = StateOf(h);
      if (s == kBlockedHost) return false;
      if (s == kFreeHost || in_set_[s]) continue;
      if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
      seen.push_back(s);
      AddCost(cost, s);
    }
    return true;
  }

  // A whole cube as (part of) a room: usable when no host is blocked; its victims are the
  // candidates not yet in the set that hold a host in it, each once.
  struct CubeVictims {
    bool usable = false;
    int count = 0;
    std::array<int, kHostsPerCube> victims{};
  };

  // Fills `out` for `cube`; returns out.usable.
  bool ListVictims(const Cube& cube, CubeVictims& out) const {
    out.usable = false;
    out.count = 0;
    for (HostId h : cube.hosts) {
      const int s = StateOf(h);
      if (s == kBlockedHost) return false;
      if (s == kFreeHost || in_set_[s]) continue;
      if (std::find(out.victims.begin(), out.victims.begin() + out.count, s) ==
          out.victims.begin() + out.count)
        out.victims[out.count++] = s;
    }
    out.usable = true;
    return true;
  }

  std::vector<HostId> HostsOf(const Option& o) const {
    std::vector<HostId> hosts;
    if (o.cube >= 0) {
      const Cube& cube = inv_.cubes()[o.cube];
      for (unsigned bits = (*masks_)[o.mask]; bits != 0; bits &= bits - 1)
        hosts.push_back(cube.hosts[std::countr_zero(bits)]);
    } else if (o.slice >= 0) {
      hosts = inv_.slices()[o.slice].hosts;
    } else {
      for (CubeId id : o.cubes)
        hosts.insert(hosts.end(), inv_.cube(id).hosts, inv_.cube(id).hosts + kHostsPerCube);
    }
    return hosts;
  }

  // Calls fn on each room with its incremental cost. `units` (3D; cubes for a sub-cube shape,
  // blocks for a super-slice; ascending): only the rooms in those, of the touched ones; null:
  // every room. Of a cube's sub-cube rooms with the same victims, only the first is given
  // (counted in rooms_alike_): a cube of free hosts has one room, not one per position.
  template <typename Fn>
  void ForEachOption(Fn&& fn, const std::vector<uint32_t>* units = nullptr) {
    std::vector<int> seen;
    if (sub_shape_ >= 0) {
      // Each host's state once per cube, then each mask's room from it: what Evaluate gives on
      // the mask's hosts (a blocked host rules the room out; each victim is counted once). A
      // cube holds a few victims: each with the mask of its hosts, so a room's victims are those
      // whose mask it meets.
      std::array<int, kHostsPerCube> victim;
      std::array<unsigned, kHostsPerCube> victim_hosts;
      std::vector<unsigned> given;  // per cube: the victim sets of the rooms given so far
      given.reserve(masks_->size());
      for (uint32_t id : units != nullptr ? *units : touched_cubes_) {
        if (units != nullptr && !touched_[id]) continue;  // rooms elsewhere have no victims
        const Cube& cube = inv_.cubes()[id];
        unsigned blocked = 0;
        int victims = 0;
        for (int b = 0; b < kHostsPerCube; ++b) {
          const int st = StateOf(cube.hosts[b]);
          if (st == kBlockedHost) blocked |= 1u << b;
          if (st < 0 || in_set_[st]) continue;
          int v = 0;
          while (v < victims && victim[v] != st) ++v;
          if (v == victims) {
            victim[v] = st;
            victim_hosts[v] = 0;
            ++victims;
          }
          victim_hosts[v] |= 1u << b;
        }
        // Of the rooms with the same victims only the first (the lowest key) is given: the
        // others cost as much and come after it, and a check refuses them as it refuses it.
        given.clear();
        for (size_t m = 0; m < masks_->size(); ++m) {
          const unsigned mask = (*masks_)[m];
          if (mask & blocked) continue;
          unsigned of = 0;  // bit v: victim[v] is one of the room's
          for (int v = 0; v < victims; ++v)
            if (mask & victim_hosts[v]) of |= 1u << v;
          if (std::find(given.begin(), given.end(), of) != given.end()) {
            ++rooms_alike_;
            continue;
          }
          given.push_back(of);
          Option o;
          for (int v = 0; v < victims; ++v)
            if (of & (1u << v)) AddCost(o.cost, victim[v]);
          o.cube = static_cast<int>(cube.id.value());
          o.mask = static_cast<int>(m);
          o.key = (uint64_t{cube.id.value()} << 16) | m;
          fn(o);
        }
      }
    } else if (cubes_per_slice_ > 0) {
      // Per block and per seed cube: the seed, then greedily the cheapest cube given those
      // chosen (a victim spanning several cubes is paid for once). Seeding every cube keeps
      // alternatives for `check` to choose from; with one cube per slice it is exhaustive.
      // Each cube's victims are listed once per block, so the greedy steps only add up costs.
      const int k = cubes_per_slice_;
      std::set<std::vector<CubeId>> tried;
      std::vector<CubeVictims> info;
      std::vector<char> chosen;
      std::vector<int> block_seen;
      for (uint32_t touched_block : units != nullptr ? *units : touched_blocks_) {
        // Rooms elsewhere have no victims.
        if (units != nullptr &&
            !std::binary_search(touched_blocks_.begin(), touched_blocks_.end(), touched_block))
          continue;
        const Block& block = inv_.blocks()[touched_block];
        const int n = static_cast<int>(block.cubes.size());
        if (n < k) continue;
        for (CubeId id : block.cubes) ReadyCube(id);
        info.resize(n);
        int usable = 0;
        for (int i = 0; i < n; ++i) usable += ListVictims(inv_.cube(block.cubes[i]), info[i]);
        if (usable < k) continue;  // too few usable cubes for any seed
        for (int seed = 0; seed < n; ++seed) {
          if (!info[seed].usable) continue;
          Option o;
          chosen.assign(n, 0);
          block_seen.assign(info[seed].victims.begin(),
                            info[seed].victims.begin() + info[seed].count);
          chosen[seed] = 1;
          o.cubes.push_back(block.cubes[seed]);
          for (int step = 1; step < k; ++step) {
            int best = -1;
            VictimCost best_cost;
            for (int i = 0; i < n; ++i) {
              if (chosen[i] || !info[i].usable) continue;
              VictimCost cost;
              for (int j = 0; j < info[i].count; ++j) {
                const int c = info[i].victims[j];
                if (std::find(block_seen.begin(), block_seen.end(), c) == block_seen.end())
                  AddCost(cost, c);
              }
              if (best < 0 || cost < best_cost) {
                best = i;
                best_cost = cost;
              }
            }
            chosen[best] = 1;
            o.cubes.push_back(block.cubes[best]);
            for (int j = 0; j < info[best].count; ++j) {
              const int c = info[best].victims[j];
              if (std::find(block_seen.begin(), block_seen.end(), c) == block_seen.end())
                block_seen.push_back(c);
            }
          }
          std::sort(o.cubes.begin(), o.cubes.end());
          if (!tried.insert(o.cubes).second) continue;
          for (int c : block_seen) AddCost(o.cost, c);
          o.key = (uint64_t{block.id.value()} << 32) | o.cubes.front().value();
          fn(o);
        }
      }
    } else {
      for (const FixedSlice& fs : inv_.slices()) {
        if (fs.topology.shape() != req_.shape) continue;
        Option o;
        seen.clear();
        if (!Evaluate(fs.hosts, o.cost, seen)) continue;
        o.slice = static_cast<int>(fs.id.value());
        o.key = fs.id.value();
        fn(o);
      }
    }
  }

  // Adds the option's room and its victims to the solution.
  void Take(const Option& o, Solution& s) {
    Room room{HostsOf(o), o.key, o.cubes, SliceId()};
    if (o.cube >= 0) room.cubes = {CubeId(static_cast<uint32_t>(o.cube))};
    if (o.slice >= 0) room.slice = SliceId(static_cast<uint32_t>(o.slice));
    for (HostId h : room.hosts) {
      const int st = StateOf(h);
      if (st >= 0 && !in_set_[st]) {
        in_set_[st] = 1;
        in_set_list_.push_back(st);
        s.victims.push_back(st);
        AddCost(s.cost, st);
      }
      taken_.push_back({h, base_state_[h.value()]});
      base_state_[h.value()] = kBlockedHost;
    }
    std::sort(s.victims.begin(), s.victims.end());
    s.rooms.push_back(std::move(room));
  }

  // No candidate in the set: only the entries set since the last clear are reset (a search
  // sets a few; the candidates are thousands, and a finder is asked thousands of times).
  void ClearInSet() {
    if (in_set_.size() != cands_.size()) {
      in_set_.assign(cands_.size(), 0);
    } else {
      for (int c : in_set_list_) in_set_[c] = 0;
    }
    in_set_list_.clear();
  }

  // Gives the hosts taken after the first `keep` their state back, last first (a host taken
  // twice ends with its state before the first).
  void Untake(size_t keep) {
    while (taken_.size() > keep) {
      base_state_[taken_.back().first.value()] = taken_.back().second;
      taken_.pop_back();
    }
  }

  // Rooms compare by cost, then tie-break key, then their cubes: a total order, so the answer
  // does not depend on the order rooms were enumerated in.
  static bool Less(const Option& a, const Option& b) {
    return std::tie(a.cost, a.key, a.cubes) < std::tie(b.cost, b.key, b.cubes);
  }

  // One slice, every candidate allowed: every room, cheapest first; taken from cache_ when a
  // searcher sharing it has listed them.
  void ListAllOptions() {
    if (cache_ != nullptr) {
      for (const auto& [shape, list] : *cache_) {
        if (shape != req_.shape) continue;
        all_options_ = list;
        // A super-slice's rooms are in the touched blocks' cubes, every one of which listing
        // them gives its hosts' state: they are read when a room is taken.
        if (inv_.is_3d() && sub_shape_ < 0)
          for (uint32_t id : touched_blocks_)
            for (CubeId cube : inv_.blocks()[id].cubes) ReadyCube(cube);
        return;
      }
    }
    auto list = std::make_shared<RoomList>();
    rooms_alike_ = 0;
    ForEachOption([&](const Option& o) { list->options.push_back(o); });
    list->all_rooms = static_cast<int>(list->options.size()) + rooms_alike_;
    std::sort(list->options.begin(), list->options.end(), Less);
    all_options_ = list;
    if (cache_ != nullptr) cache_->push_back({req_.shape, all_options_});
  }

  // A room's victims with nothing taken: the candidates holding its hosts, each once, ascending
  // (what Take gives).
  void VictimsOf(const Option& o, std::vector<int>& out) const {
    out.clear();
    if (o.cube >= 0) {
      // A sub-cube room: its mask's hosts, without listing them, each victim put in its place
      // as it comes (a few victims among at most a cube's hosts).
      const Cube& cube = inv_.cubes()[o.cube];
      for (unsigned bits = (*masks_)[o.mask]; bits != 0; bits &= bits - 1) {
        const int st = StateOf(cube.hosts[std::countr_zero(bits)]);
        if (st < 0) continue;
        auto at = std::lower_bound(out.begin(), out.end(), st);
        if (at == out.end() || *at != st) out.insert(at, st);
      }
      return;
    }
    for (HostId h : HostsOf(o))
      if (const int st = StateOf(h); st >= 0) out.push_back(st);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
  }

  // Every room's victims, once (all_victims_, victims_at_), for the searches by group.
  void ListAllVictims() {
    if (!victims_at_.empty()) return;
    victims_at_.assign(1, 0);
    std::vector<int> room;
    for (const Option& o : all_options_->options) {
      VictimsOf(o, room);
      all_victims_.insert(all_victims_.end(), room.begin(), room.end());
      victims_at_.push_back(static_cast<uint32_t>(all_victims_.size()));
    }
  }

  // The rooms (indices of all_options_, ascending) whose victims include a candidate of a
  // group, with the weight of the group's victims in each (weights_; 0 without).
  struct GroupRooms {
    std::vector<uint32_t> options;
    std::vector<int64_t> weight;  // per entry of `options`
    int64_t heaviest = 0;         // the most of `weight`
  };

  // The rooms with a victim of `group`.
  const GroupRooms& OptionsWithGroup(int group) {
    if (group_options_.empty()) {
      int most = -1;
      for (int g : groups_) most = std::max(most, g);
      group_options_.resize(static_cast<size_t>(most) + 2);
      const bool weighed = weights_.size() == cands_.size();
      std::vector<std::pair<int, int64_t>> seen;  // (group, weight of its victims in the room)
      for (size_t i = 0; i + 1 < victims_at_.size(); ++i) {
        seen.clear();
        for (uint32_t v = victims_at_[i]; v < victims_at_[i + 1]; ++v) {
          const int c = all_victims_[v];
          const int g = groups_[c];
          if (g < 0) continue;
          const int64_t w = weighed ? weights_[c] : 0;
          auto at = std::find_if(seen.begin(), seen.end(),
                                 [g](const std::pair<int, int64_t>& e) { return e.first == g; });
          if (at == seen.end())
            seen.push_back({g, w});
          else
            at->second += w;
        }
        for (const auto& [g, w] : seen) {
          GroupRooms& rooms = group_options_[g];
          rooms.options.push_back(static_cast<uint32_t>(i));
          rooms.weight.push_back(w);
          rooms.heaviest = std::max(rooms.heaviest, w);
        }
      }
    }
    if (group + 1 >= static_cast<int>(group_options_.size())) return group_options_.back();
    return group_options_[group];
  }

  // N slices: each room the cheapest given those chosen before it. On a pod, each step after
  // the first enumerates again only the rooms the last room taken can change: those of the
  // cubes it took and of the cubes where its victims hold hosts (a sub-cube shape), or of
  // those cubes' blocks (a super-slice). Every other room keeps its blocked hosts and cost,
  // and so each unit's cheapest room (rooms are in a total order, so the minimum over units'
  // minima is the minimum over all rooms).
  std::optional<Solution> Greedy() {
    Solution s;
    const bool by_cube = inv_.is_3d() && sub_shape_ >= 0;
    const bool by_block = inv_.is_3d() && sub_shape_ < 0 && cubes_per_slice_ > 0;
    if (!by_cube && !by_block) {
      for (int i = 0; i < req_.num_slices; ++i) {
        std::optional<Option> best;
        ForEachOption([&](const Option& o) {
          if (!best || Less(o, *best)) best = o;
        });
        if (!best) return std::nullopt;
        Take(*best, s);
      }
      return s;
    }
    auto unit_of = [&](const Option& o) -> uint32_t {
      if (by_cube) return static_cast<uint32_t>(o.cube);
      return inv_.cube(o.cubes.front()).block.value();
    };
    // Per unit with rooms (touched: the only ones enumerated), in all_units' order.
    const std::vector<uint32_t>& all_units = by_cube ? touched_cubes_ : touched_blocks_;
    std::vector<std::optional<Option>>& cheapest = greedy_cheapest_;
    cheapest.assign(all_units.size(), std::nullopt);
    auto slot_of = [&](uint32_t unit) -> size_t {
      return std::lower_bound(all_units.begin(), all_units.end(), unit) - all_units.begin();
    };
    uint32_t last_unit = UINT32_MAX;  // a unit's rooms come one after another
    size_t last_slot = 0;
    auto keep = [&](const Option& o) {
      const uint32_t unit = unit_of(o);
      if (unit != last_unit) {
        last_unit = unit;
        last_slot = slot_of(unit);
      }
      std::optional<Option>& c = cheapest[last_slot];
      if (!c || Less(o, *c)) c = o;
    };
    // The units to enumerate again (ascending, each once): those of the hosts added.
    std::vector<uint32_t> changed;
    auto add = [&](HostId h) {
      if (const CubeId cube = inv_.host(h).cube; cube.valid())
        changed.push_back(by_cube ? cube.value() : inv_.cube(cube).block.value());
    };
    auto settle = [&] {
      std::sort(changed.begin(), changed.end());
      changed.erase(std::unique(changed.begin(), changed.end()), changed.end());
    };
    for (int i = 0; i < req_.num_slices; ++i) {
      if (i == 0 && without_ >= 0 && first_all_.size() == all_units.size()) {
        // Every candidate but one allowed: the other units' rooms are as with all of them.
        cheapest = first_all_;
        for (HostId h : inv_.HostsOf(OwnerOf(cands_[without_].workload))) add(h);
        settle();
      } else if (i == 0) {
        if (all_allowed_ && cache_ != nullptr) {
          // Every candidate allowed, among searchers sharing rooms: the shape's rooms listed
          // once for all of them (here, if none has yet), cheapest first, so each unit's first
          // room is its cheapest.
          if (!all_options_) ListAllOptions();
          for (const Option& o : all_options_->options)
            if (std::optional<Option>& c = cheapest[slot_of(unit_of(o))]; !c) c = o;
        } else {
          ForEachOption(keep);
        }
        if (all_allowed_) first_all_ = cheapest;  // for SearchWithout
      }
      if (!changed.empty()) {
        for (uint32_t u : changed)
          if (const size_t at = slot_of(u); at < all_units.size() && all_units[at] == u)
            cheapest[at].reset();
        ForEachOption(keep, &changed);
      }
      const Option* best = nullptr;
      for (const std::optional<Option>& c : cheapest)
        if (c && (best == nullptr || Less(*c, *best))) best = &*c;
      if (best == nullptr) return std::nullopt;
      const Option& taken = *best;  // cheapest does not change until the next step
      Take(taken, s);
      if (i + 1 == req_.num_slices) break;
      // The units of the room's hosts and of every victim's so far (those of earlier steps
      // again: a few cubes more, the same answer).
      changed.clear();
      for (HostId h : HostsOf(taken)) add(h);
      for (int v : s.victims)
        for (HostId h : inv_.HostsOf(OwnerOf(cands_[v].workload))) add(h);
      settle();
    }
    return s;
  }

  // The one-room solution `o`, if `check` accepts it; otherwise undoes it.
  std::optional<Solution> TryRoom(const Option& o, const VictimSetCheck& check) {
    Solution s;
    const size_t taken_before = taken_.size();
    Take(o, s);
    if (!check || check(s.victims)) return s;
    ++rejected_by_check_;
    Untake(taken_before);
    for (int v : s.victims) in_set_[v] = 0;
    return std::nullopt;
  }

  std::optional<Solution> SearchOne(const VictimSetCheck& check) {
    // The rooms depend on the allowed candidates, not on the check: kept per allowed set.
    auto found = one_options_.find(AsKey(*allowed_));
    if (found == one_options_.end()) {
      found = one_options_.emplace(std::string(AsKey(*allowed_)), std::vector<Option>()).first;
      std::vector<Option>& fresh = found->second;
      ForEachOption([&](const Option& o) { fresh.push_back(o); });
    }
    const std::vector<Option>& kept = found->second;
    std::vector<Option> options = kept;
    // Usually the cheapest room passes: pick minima one by one, and sort only if many fail.
    size_t live = options.size();
    for (int tries = 0; live > 0; ++tries) {
      size_t best = 0;
      if (tries == 16) {
        std::sort(options.begin(), options.begin() + live, Less);
        std::reverse(options.begin(), options.begin() + live);
      }
      if (tries >= 16) {
        best = live - 1;
      } else {
        for (size_t i = 1; i < live; ++i)
          if (Less(options[i], options[best])) best = i;
      }
      if (std::optional<Solution> s = TryRoom(options[best], check)) return s;
      if (tries < 16) std::swap(options[best], options[live - 1]);
      --live;
    }
    return std::nullopt;
  }

  const Inventory& inv_;
  const SlicePlanner& planner_;
  const SliceRequest& req_;
  const std::vector<PreemptionCandidate>& cands_;
  // Per host: candidate index, kFreeHost or kBlockedHost; on a pod, set only in ready cubes.
  std::unique_ptr<int[]> base_state_;
  std::vector<char> cube_ready_;  // 3D, per cube: its hosts' base_state_ is set
  std::vector<int64_t> chips_;    // per candidate
  int sub_shape_ = -1;
  const std::vector<HostMask>* masks_ = nullptr;  // a sub-cube shape's rooms in one cube
  int cubes_per_slice_ = 0;
  const std::vector<char>* allowed_ = nullptr;
  // The hosts of the rooms taken so far, each with its base_state_ before: base_state_ holds
  // kBlockedHost for them until Untake puts it back.
  std::vector<std::pair<HostId, int>> taken_;
  std::vector<char> in_set_;      // per candidate: already a victim
  std::vector<int> in_set_list_;  // the candidates in_set_ marks (and some since unmarked)
  int rejected_by_check_ = 0;
  // Per cube: some candidate holds a host in it. Rooms in other cubes have no victims; the
  // caller tries the free room first, so the search skips them.
  std::vector<char> touched_;
  std::vector<uint32_t> touched_cubes_;                 // the cubes touched_ marks, ascending
  std::vector<uint32_t> touched_blocks_;                // the blocks of touched_cubes_, ascending
  std::vector<std::optional<Option>> greedy_cheapest_;  // Greedy's, kept for its capacity
  // Greedy's first step with every candidate allowed: each unit's cheapest room, for
  // SearchWithout (empty until then).
  std::vector<std::optional<Option>> first_all_;
  bool all_allowed_ = false;   // the current search allows every candidate
  int without_ = -1;           // SearchWithout's candidate, during it
  std::vector<char> all_but_;  // SearchWithout's allowed set: all 1 but during it
  std::map<int, std::optional<Solution>> greedy_without_;  // N slices, by SearchWithout's
  // Valid for the Searcher's life (its inputs do not change): with every candidate allowed, the
  // rooms sorted cheapest first (one slice); per allowed set, the greedy solution (N slices).
  std::shared_ptr<const RoomList> all_options_;
  RoomCache* cache_ = nullptr;  // ShareRooms
  // Rooms ForEachOption did not give, each with the same victims as one it gave (counted since
  // reset).
  int rooms_alike_ = 0;
  // The victims of all_options_[i]: all_victims_[victims_at_[i] .. victims_at_[i + 1]).
  std::vector<int> all_victims_;
  std::vector<uint32_t> victims_at_;
  std::vector<int> check_arg_;    // the set handed to the check (reused)
  std::vector<int> groups_;       // per candidate, SetGroups
  std::vector<int64_t> weights_;  // per candidate, SetGroups (may be empty)
  // Per group (and one empty list last): OptionsWithGroup's answers, built on first use.
  std::vector<GroupRooms> group_options_;
  // Keyed by the allowed set's bytes (AsKey): a string compares with memcmp, where a vector of
  // char compares element by element (thousands of candidates, many lookups).
  std::map<std::string, std::optional<Solution>, std::less<>> greedy_;
  std::optional<std::optional<Solution>> greedy_all_;  // every candidate allowed: once known
  std::map<std::string, std::vector<Option>, std::less<>> one_options_;  // one slice
  static std::string_view AsKey(const std::vector<char>& allowed) {
    return std::string_view(allowed.data(), allowed.size());
  }
};

// Plans one slice of `request` inside `room` alone: a sub-cube room on its cube's own hosts
// (SlicePlanner::PlaceOnHosts), any other on a small inventory holding just the room's cubes
// or slice, whose hosts are then mapped back. Cheaper than fencing a copy of the whole
// inventory, and the planner still decides worker order and rotation.
bool PlanInRoom(const Inventory& inv, const SlicePlanner& planner, const SliceRequest& request,
                const Room& room, SlicePlacement& out) {
  if (inv.is_3d() && room.cubes.size() == 1) {
    if (const int s = SubCubeShapeIndex(request.shape); s >= 0) {
      // A sub-cube room: the planner's placement on exactly the room's hosts of its cube.
      unsigned mask = 0;
      for (HostId h : room.hosts) {
        const Coord c = inv.host(h).coord;
        mask |= 1u << CubeLocalIndex(c.x, c.y, c.z);
      }
      return planner.PlaceOnHosts(inv.cube(room.cubes[0]), static_cast<HostMask>(mask), s, out);
    }
  }
  SliceRequest one = request;
  one.num_slices = 1;
  Result<Inventory> tiny =
      inv.is_3d() ? Inventory::MakePod({inv.generation(), 1, static_cast<int>(room.cubes.size())})
                  : Inventory::MakeFleet({inv.generation(), {request.shape}});
  if (!tiny.ok()) return false;  // whole cubes (their every host is in the room) or a slice
  PlanResult r = planner.Plan(*tiny, one);
  if (!r.placed()) return false;
  out = std::move(r.slices[0]);
  for (HostId& h : out.hosts) {
    const Host& th = tiny->host(h);
    h = inv.is_3d() ? inv.cube(room.cubes[th.cube.value()])
                          .hosts[CubeLocalIndex(th.coord.x, th.coord.y, th.coord.z)]
                    : inv.slice(room.slice).hosts[h.value()];
  }
  if (inv.is_3d()) {
    for (CubeId& c : out.cubes) c = room.cubes[c.value()];
    out.block = inv.cube(room.cubes[0]).block;
  } else {
    out.fixed_slice = room.slice;
  }
  return true;
}

}  // namespace

struct VictimFinder::Impl {
  Impl(const Inventory& i, const SlicePlanner& p, const SliceRequest& r,
       std::vector<PreemptionCandidate> c)
      : inv(i),
        planner(p),
        request(r),
        candidates(std::move(c)),
        valid(r.generation == i.generation() && r.num_slices >= 1 &&
              ValidateShape(r.generation, r.shape).ok()) {}

  const Inventory& inv;
  const SlicePlanner& planner;
  const SliceRequest request;
  const std::vector<PreemptionCandidate> candidates;
  const bool valid;
  std::optional<PlanResult> free_plan;  // the planner's plan with no victims, once asked for
  std::optional<Searcher> searcher;     // built on the first search that needs victims
  std::vector<int> groups;              // per candidate: SetGroups
  std::vector<int64_t> weights;         // per candidate: SetGroups (may be empty)
  std::vector<char> all_allowed;        // per candidate, all 1: the first search's set, kept
  // Shared by a finder and the finders made like it (and like those): each shape's rooms are
  // listed once for all of them. Null until the first is made.
  std::shared_ptr<Searcher::RoomCache> rooms;
};

VictimFinder::VictimFinder(const Inventory& inv, const SlicePlanner& planner,
                           const SliceRequest& request, std::vector<PreemptionCandidate> candidates)
    : impl_(std::make_unique<Impl>(inv, planner, request, std::move(candidates))) {}

VictimFinder::VictimFinder(const VictimFinder& like, const SliceRequest& request)
    : impl_(std::make_unique<Impl>(like.impl_->inv, like.impl_->planner, request,
                                   like.impl_->candidates)) {
  Impl& m = *impl_;
  m.groups = like.impl_->groups;
  m.weights = like.impl_->weights;
  Impl& l = *like.impl_;  // its room cache is shared from now on (made here if need be)
  if (!l.rooms) {
    l.rooms = std::make_shared<Searcher::RoomCache>();
    if (l.searcher) l.searcher->ShareRooms(l.rooms.get());
  }
  m.rooms = l.rooms;
  if (l.searcher && m.valid) {
    m.searcher.emplace(*l.searcher, m.request, m.candidates);
    m.searcher->SetGroups(m.groups, m.weights);
    m.searcher->ShareRooms(m.rooms.get());
  }
}

VictimFinder::~VictimFinder() = default;

void VictimFinder::SetGroups(std::vector<int> group_of_candidate,
                             std::vector<int64_t> weight_of_candidate) {
  impl_->groups = std::move(group_of_candidate);
  impl_->weights = std::move(weight_of_candidate);
  if (impl_->searcher) impl_->searcher->SetGroups(impl_->groups, impl_->weights);
}

VictimSet VictimFinder::Find(const VictimSetCheck& check, VictimPlan plan) {
  return Find(check, plan, -1);
}

VictimSet VictimFinder::Find(const VictimSetCheck& check, VictimPlan plan, int needs_group,
                             int64_t needs_weight) {
  Impl& m = *impl_;
  VictimSet out;
  if (!m.valid) {
    out.message = "the request is not valid for this cluster";
    return out;
  }
  // The free room first: no victims at all, if that is acceptable.
  if (!check || check({})) {
    if (!m.free_plan) m.free_plan = m.planner.Plan(m.inv, m.request);
    if (m.free_plan->placed()) {
      out.found = true;
      if (plan == VictimPlan::kPlan) out.plan = *m.free_plan;
      return out;
    }
  }
  if (!m.searcher) {
    m.searcher.emplace(m.inv, m.planner, m.request, m.candidates);
    m.searcher->SetGroups(m.groups, m.weights);
    m.searcher->ShareRooms(m.rooms.get());
  }
  Searcher& searcher = *m.searcher;
  searcher.ResetRejected();
  const std::vector<PreemptionCandidate>& candidates = m.candidates;
  if (m.all_allowed.size() != candidates.size()) m.all_allowed.assign(candidates.size(), 1);
  const std::vector<char>& all = m.all_allowed;
  std::optional<Solution> best =
      searcher.Search(all, check, /*all=*/true, check ? needs_group : -1, needs_weight);
  if (!best && check && m.request.num_slices > 1) {
    // N slices: the greedy solution failed the check. Try again without each of its victims in
    // turn, most expensive first (a few times), so a check that refuses one victim (e.g. "a
    // queue gives back only what it borrows") does not rule out every other set.
    std::optional<Solution> unchecked = searcher.Search(all, {}, /*all=*/true);
    if (unchecked) {
      std::vector<int> order = unchecked->victims;
      std::sort(order.begin(), order.end(), [&](int a, int b) {
        return std::make_tuple(searcher.CostOf(a), candidates[a].workload) >
               std::make_tuple(searcher.CostOf(b), candidates[b].workload);
      });
      constexpr size_t kRetries = 4;
      for (size_t i = 0; i < order.size() && i < kRetries && !best; ++i)
        best = searcher.SearchWithout(order[i], check);
    }
  }
  if (!best) {
    out.message = "no room for " + std::to_string(m.request.num_slices) + " x " +
                  m.request.shape.ToString() + " can be freed by evicting the " +
                  std::to_string(candidates.size()) + " workloads the policy allows";
    if (searcher.rejected_by_check() > 0)
      out.message += " (" + std::to_string(searcher.rejected_by_check()) +
                     " rooms could be freed, but none leaves the preemptor within its quota)";
    return out;
  }

  // Minimise: put back each victim, most expensive first, if the request still fits without it
  // (using only the remaining victims). A single room of a sub-cube, of one whole cube or of a
  // fixed slice is already minimal: every such room is scored (a one-cube room is its seed
  // cube, with no greedy step), and a room needing a subset of the victims is cheaper, so it
  // was tried first and the check refused it. Rooms of several cubes are built greedily: a
  // subset can make a room that the search with every candidate never built.
  const bool exhaustive =
      m.request.num_slices == 1 && (!m.inv.is_3d() || m.request.shape.chips() <= 64);
  std::vector<int> order = best->victims;
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return std::make_tuple(searcher.CostOf(a), candidates[a].workload) >
           std::make_tuple(searcher.CostOf(b), candidates[b].workload);
  });
  std::vector<char> allowed;
  for (int v : exhaustive ? std::vector<int>{} : order) {
    if (!std::binary_search(best->victims.begin(), best->victims.end(), v)) continue;
    allowed.assign(candidates.size(), 0);
    for (int u : best->victims)
      if (u != v) allowed[u] = 1;
    std::optional<Solution> smaller = searcher.Search(allowed, check, /*all=*/false);
    if (smaller) best = std::move(smaller);
  }

  if (plan == VictimPlan::kPlan) {
    for (const Room& room : best->rooms) {
      SlicePlacement p;
      if (!PlanInRoom(m.inv, m.planner, m.request, room, p)) {
        out.plan = PlanResult{};
        out.message = "internal: the planner could not place the request in the room freed for it";
        return out;
      }
      out.plan.slices.push_back(std::move(p));
    }
  }
  out.found = true;
  out.cost = best->cost;
  for (int v : best->victims) out.victims.push_back(candidates[v].workload);
  std::sort(out.victims.begin(), out.victims.end());
  return out;
}

VictimSet FindVictims(const Inventory& inv, const SlicePlanner& planner,
                      const SliceRequest& request,
                      const std::vector<PreemptionCandidate>& candidates,
                      const VictimSetCheck& check) {
  return VictimFinder(inv, planner, request, candidates).Find(check);
}

}  // namespace tessera

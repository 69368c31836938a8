// Strong id types: a HostId cannot be passed where a JobId is expected.
//
// Ids are small integers inside the pure core (dense, cheap to compare, and ordered, so ties
// are broken by id). Names for people live beside them in the objects that own them.
// Thread-safety: values.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <limits>

namespace tessera {

template <typename Tag, typename Rep = uint32_t>
class StrongId {
 public:
  using rep_type = Rep;
  static constexpr Rep kInvalid = std::numeric_limits<Rep>::max();

  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep v) : v_(v) {}

  constexpr Rep value() const { return v_; }
  constexpr bool valid() const { return v_ != kInvalid; }
  constexpr auto operator<=>(const StrongId&) const = default;

 private:
  Rep v_ = kInvalid;
};

using HostId = StrongId<struct HostTag>;
using CubeId = StrongId<struct CubeTag>;
using BlockId = StrongId<struct BlockTag>;
using SliceId = StrongId<struct SliceTag>;            // a fixed 2D slice (node pool)
using OwnerId = StrongId<struct OwnerTag, uint64_t>;  // who holds chips: a reservation

}  // namespace tessera

template <typename Tag, typename Rep>
struct std::hash<tessera::StrongId<Tag, Rep>> {
  size_t operator()(const tessera::StrongId<Tag, Rep>& id) const noexcept {
    return std::hash<Rep>()(id.value());
  }
};

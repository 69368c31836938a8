// SharedList<T>: an immutable list whose copies share one allocation.
// An admission cycle gives the same what-would-help list to every workload of a queue that
// waits for the same reason with the same size and priority: at 100,000 pending, tens of
// thousands of copies of a few lists. A copy of a SharedList is a reference count.
// Pure; copies may be read and destroyed on several threads at once (std::shared_ptr).
#pragma once

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

namespace tessera {

template <typename T>
class SharedList {
 public:
  using value_type = T;
  using const_iterator = typename std::vector<T>::const_iterator;

  SharedList() = default;
  // Implicit, so that a list built as a vector or written out in braces is one.
  SharedList(std::vector<T> items)  // NOLINT(google-explicit-constructor)
      : items_(items.empty() ? nullptr : std::make_shared<const std::vector<T>>(std::move(items))) {
  }
  SharedList(std::initializer_list<T> items)  // NOLINT(google-explicit-constructor)
      : SharedList(std::vector<T>(items)) {}

  const std::vector<T>& items() const { return items_ ? *items_ : Empty(); }
  const_iterator begin() const { return items().begin(); }
  const_iterator end() const { return items().end(); }
  size_t size() const { return items_ ? items_->size() : 0; }
  bool empty() const { return size() == 0; }
  const T& operator[](size_t i) const { return (*items_)[i]; }
  // Lets go of the list (other copies keep it): this one is then empty.
  void clear() { items_.reset(); }

  friend bool operator==(const SharedList& a, const SharedList& b) {
    return a.items_ == b.items_ || a.items() == b.items();
  }

 private:
  static const std::vector<T>& Empty() {
    static const std::vector<T> empty;
    return empty;
  }

  std::shared_ptr<const std::vector<T>> items_;  // null when empty
};

}  // namespace tessera

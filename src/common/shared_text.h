// SharedText: immutable text whose copies share one allocation.
// An admission cycle gives the same message to many pending workloads (every workload of a
// queue that asks for as many chips is over quota by as much): at 100,000 pending, tens of
// thousands of copies of a few strings. A copy of a SharedText is a reference count.
// Pure; copies may be read and destroyed on several threads at once (std::shared_ptr).
#pragma once

#include <cstring>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>

namespace tessera {

class SharedText {
 public:
  SharedText() = default;
  // Implicit, so that a message built as a string or a literal is one.
  SharedText(std::string_view text)  // NOLINT(google-explicit-constructor)
      : SharedText(Concat({text})) {}
  SharedText(const std::string& text)  // NOLINT(google-explicit-constructor)
      : SharedText(std::string_view(text)) {}
  SharedText(const char* text)  // NOLINT(google-explicit-constructor)
      : SharedText(std::string_view(text)) {}

  // The pieces one after another, in one allocation (no string built first).
  static SharedText Concat(std::initializer_list<std::string_view> pieces) {
    size_t size = 0;
    for (std::string_view p : pieces) size += p.size();
    SharedText t;
    if (size == 0) return t;
    std::shared_ptr<char[]> data = std::make_shared_for_overwrite<char[]>(size);
    char* at = data.get();
    for (std::string_view p : pieces) {
      if (p.empty()) continue;
      std::memcpy(at, p.data(), p.size());
      at += p.size();
    }
    t.data_ = std::move(data);
    t.size_ = size;
    return t;
  }

  std::string_view view() const { return {data_.get(), size_}; }
  operator std::string_view() const { return view(); }     // NOLINT(google-explicit-constructor)
  std::string str() const { return std::string(view()); }  // a copy
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }

  friend bool operator==(const SharedText& a, std::string_view b) { return a.view() == b; }
  friend std::ostream& operator<<(std::ostream& out, const SharedText& t) {
    return out << t.view();
  }

 private:
  std::shared_ptr<const char[]> data_;  // null when empty
  size_t size_ = 0;
};

}  // namespace tessera

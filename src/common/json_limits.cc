#include "common/json_limits.h"

#include <set>
#include <utility>
#include <vector>

namespace tessera {
namespace {

using nlohmann::json;

// A SAX handler that builds the document with nlohmann's own DOM builder and stops the parse
// (by returning false) at the first limit broken. nlohmann's public callback parser would do
// the same checks, but it rescans the parent container after every nested object (quadratic in
// a list of many small objects), so the checks sit in front of the DOM builder instead.
class BoundedSax {
 public:
  using number_integer_t = json::number_integer_t;
  using number_unsigned_t = json::number_unsigned_t;
  using number_float_t = json::number_float_t;
  using string_t = json::string_t;
  using binary_t = json::binary_t;

  BoundedSax(json& root, std::string_view what, const JsonLimits& limits)
      : dom_(root, /*allow_exceptions=*/false), what_(what), limits_(limits) {}

  bool null() { return Value() && dom_.null(); }
  bool boolean(bool v) { return Value() && dom_.boolean(v); }
  bool number_integer(number_integer_t v) { return Value() && dom_.number_integer(v); }
  bool number_unsigned(number_unsigned_t v) { return Value() && dom_.number_unsigned(v); }
  bool number_float(number_float_t v, const string_t& s) {
    return Value() && dom_.number_float(v, s);
  }
  bool string(string_t& v) { return Value() && dom_.string(v); }
  bool binary(binary_t& v) { return Value() && dom_.binary(v); }

  bool start_object(std::size_t n) { return Open(/*object=*/true) && dom_.start_object(n); }
  bool end_object() {
    frames_.pop_back();
    return dom_.end_object();
  }
  bool start_array(std::size_t n) { return Open(/*object=*/false) && dom_.start_array(n); }
  bool end_array() {
    frames_.pop_back();
    return dom_.end_array();
  }

  bool key(string_t& k) {
    Frame& f = frames_.back();
    f.key = k;
    if (!f.keys.insert(k).second) {
      return Fail(Path() + ": key appears twice; keep one (JSON and YAML documents refuse " +
                  "repeated keys)");
    }
    return dom_.key(k);
  }

  bool parse_error(std::size_t /*position*/, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& ex) {
    // The path says which field a bad number or a stray character belongs to.
    if (error_.empty()) {
      const std::string path = Path();
      error_ = std::string(what_) + ": malformed JSON" +
               (path.size() > what_.size() ? " at " + path.substr(what_.size() + 2) : "") + ": " +
               ex.what();
    }
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  struct Frame {
    bool object = false;
    std::set<std::string> keys;  // objects: the keys seen so far
    std::string key;             // objects: the key of the element being parsed
    size_t index = 0;            // lists: 1 + the index of the element being parsed
  };

  // Called for every value, scalar or container, before it is added to its parent.
  bool Value() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
    ++values_;
    if (limits_.max_values != 0 && values_ > limits_.max_values) {
      return Fail(Path() + ": more than " + std::to_string(limits_.max_values) +
                  " values; send a smaller document");
    }
    return true;
  }

  bool Open(bool object) {
    if (!Value()) return false;
    if (static_cast<int>(frames_.size()) >= limits_.max_depth) {
      return Fail(Path() + ": nested deeper than " + std::to_string(limits_.max_depth) +
                  " levels of lists and objects; flatten the document");
    }
    frames_.push_back(Frame{object, {}, {}, 0});
    return true;
  }

  // Where the parse is, as "metadata.labels.a[0][3]" (shortened when long).
  std::string Path() const {
    std::string path;
    for (const Frame& f : frames_) {
      if (path.size() > 120) {
        path += "...";
        break;
      }
      if (f.object) {
        if (!f.key.empty() || !f.keys.empty()) path += (path.empty() ? "" : ".") + ShownKey(f.key);
      } else if (f.index > 0) {
        path += "[" + std::to_string(f.index - 1) + "]";
      }
    }
    return path.empty() ? std::string(what_) : std::string(what_) + ": " + path;
  }

  static std::string ShownKey(const std::string& key) {
    std::string shown = ShownText(key, 40);
    // Plain keys read better without the quotes.
    if (shown.size() == key.size() + 2 && key.find_first_of(". ") == std::string::npos) return key;
    return shown;
  }

  bool Fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  nlohmann::detail::json_sax_dom_parser<json> dom_;
  std::string_view what_;
  JsonLimits limits_;
  std::vector<Frame> frames_;
  size_t values_ = 0;
  std::string error_;
};

}  // namespace

Result<nlohmann::json> ParseJson(std::string_view text, std::string_view what,
                                 const JsonLimits& limits) {
  json root;
  BoundedSax sax(root, what, limits);
  bool ok = false;
  try {
    ok = json::sax_parse(text, &sax, json::input_format_t::json, /*strict=*/true);
  } catch (const json::exception& e) {
    // The DOM builder throws only for sizes beyond max_size(); report it as malformed input.
    return InvalidArgument(std::string(what) + ": malformed JSON: " + e.what());
  }
  if (!ok || root.is_discarded()) {
    if (!sax.error().empty()) return InvalidArgument(sax.error());
    return InvalidArgument(std::string(what) + ": malformed JSON");
  }
  return root;
}

std::string ShownText(std::string_view text, size_t max_chars) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == max_chars) {
      out += "...";
      break;
    }
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c >= 0x7f || c == '\\' || c == '\'') {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

size_t FirstInvalidUtf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The length of the sequence and the range its second byte must fall in (RFC 3629 table).
    size_t length = 0;
    unsigned char low = 0x80, high = 0xbf;
    if (c >= 0xc2 && c <= 0xdf) {
      length = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      length = 3;
      if (c == 0xe0) low = 0xa0;   // overlong
      if (c == 0xed) high = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      length = 4;
      if (c == 0xf0) low = 0x90;   // overlong
      if (c == 0xf4) high = 0x8f;  // above U+10FFFF
    } else {
      return i;
    }
    if (i + length > text.size()) return i;
    const auto second = static_cast<unsigned char>(text[i + 1]);
    if (second < low || second > high) return i;
    for (size_t k = 2; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if (next < 0x80 || next > 0xbf) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

}  // namespace tessera

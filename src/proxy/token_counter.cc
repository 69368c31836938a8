#include "proxy/token_counter.h"

namespace tessera::proxy {

void SseTokenCounter::Feed(std::string_view bytes) {
  for (char c : bytes) {
    if (c == '\n') {
      EndLine();
    } else if (line_.size() < kMaxLine) {
      line_ += c;
    }
  }
}

void SseTokenCounter::EndLine() {
  std::string_view line = line_;
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (line.substr(0, 5) == "data:") {
    std::string_view data = line.substr(5);
    if (!data.empty() && data.front() == ' ') data.remove_prefix(1);
    const bool done = data == "[DONE]";
    const bool no_choice = data.find("\"choices\":[]") != std::string_view::npos ||
                           data.find("\"choices\": []") != std::string_view::npos;
    if (!data.empty() && !done && !no_choice) ++tokens_;
  }
  line_.clear();
}

double TimePerOutputToken(double first_byte_s, double end_s, uint64_t tokens) {
  if (tokens < 2 || end_s < first_byte_s) return -1;
  return (end_s - first_byte_s) / static_cast<double>(tokens - 1);
}

}  // namespace tessera::proxy

// FlagArgs: the `--flag value` arguments of the control-plane tools (tessera_seed_store,
// tessera_flush_commit_bench), read in order. A missing value or a number that is not one ends
// the program through the tool's own usage function, naming the flag.
//
// Thread-safety: none; used by main() only.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>
#include <utility>

namespace tessera::bench {

class FlagArgs {
 public:
  // `usage(why)` prints the tool's usage with the reason and returns its exit code.
  FlagArgs(int argc, char** argv, std::function<int(const std::string&)> usage)
      : argc_(argc), argv_(argv), usage_(std::move(usage)) {}

  // The next flag, or false when there is none left.
  bool Next(std::string& flag) {
    if (++i_ >= argc_) return false;
    flag = argv_[i_];
    return true;
  }
  // The value after the flag just read.
  std::string Value() {
    const std::string flag = argv_[i_];
    if (i_ + 1 >= argc_) std::exit(usage_(flag + ": needs a value"));
    return argv_[++i_];
  }
  // The value after the flag just read, a whole number of at least `least`.
  long long Number(long long least = 0) {
    const std::string flag = argv_[i_];
    const std::string v = Value();
    char* end = nullptr;
    const long long n = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < least)
      std::exit(usage_(flag + ": a whole number of at least " + std::to_string(least) + ", not '" +
                       v + "'"));
    return n;
  }

 private:
  int argc_;
  char** argv_;
  std::function<int(const std::string&)> usage_;
  int i_ = 0;
};

}  // namespace tessera::bench

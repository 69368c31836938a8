// Calendar dates as day counts, for the trace readers that read wall-clock times
// ("2017-10-07 01:12:09"). Pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace tessera {

// Days from 1970-01-01 to the proleptic Gregorian date y-m-d (m 1-12, d 1-31; not checked),
// by eras of 400 years, so any year works, before 1970 too.
constexpr int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2 ? 1 : 0;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t year_of_era = y - era * 400;
  const int64_t day_of_year = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + day_of_era - 719468;
}

// The days of month m (1-12) of year y.
constexpr int DaysInMonth(int64_t y, int64_t m) {
  constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return kDays[m - 1] + (m == 2 && leap ? 1 : 0);
}

// "YYYY-MM-DD HH:MM:SS" (exactly these 19 characters, digits where the pattern has them) as
// seconds from 1970-01-01 00:00:00, taken as written (no zone); nullopt when the text is not
// such a time or names a day, hour, minute or second that does not exist. `max_second` is 60
// where a leap second may be written.
inline std::optional<int64_t> ParseDateTime(std::string_view text, int max_second = 59) {
  if (text.size() != 19 || text[4] != '-' || text[7] != '-' || text[10] != ' ' || text[13] != ':' ||
      text[16] != ':')
    return std::nullopt;
  int64_t part[6] = {};  // year, month, day, hour, minute, second
  constexpr int kAt[6] = {0, 5, 8, 11, 14, 17};
  for (int i = 0; i < 6; ++i) {
    for (int k = kAt[i]; k < kAt[i] + (i == 0 ? 4 : 2); ++k) {
      if (text[k] < '0' || text[k] > '9') return std::nullopt;
      part[i] = part[i] * 10 + (text[k] - '0');
    }
  }
  const auto [y, mo, d, h, mi, s] = part;
  if (mo < 1 || mo > 12 || d < 1 || d > DaysInMonth(y, mo) || h > 23 || mi > 59 || s > max_second)
    return std::nullopt;
  return ((DaysFromCivil(y, mo, d) * 24 + h) * 60 + mi) * 60 + s;
}

static_assert(DaysFromCivil(1970, 1, 1) == 0);
static_assert(DaysFromCivil(2000, 3, 1) == 11017);
static_assert(DaysInMonth(2016, 2) == 29 && DaysInMonth(1900, 2) == 28);

}  // namespace tessera

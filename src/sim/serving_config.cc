// The serving simulation's inputs besides the trace (serving_sim.h): scaling configurations
// from their command-line text (ParseScalingConfig) and the options' checks
// (ValidateServingOptions), each error naming the flag and what it needs.
#include <cmath>
#include <sstream>

#include "sim/serving_numbers.h"
#include "sim/serving_sim.h"

namespace tessera::sim {

namespace {

// The ":key=value" options of an auto configuration, onto `a`.
Status ApplyAutoOptions(const std::string& text, const std::vector<std::string>& options,
                        AutoscalerConfig& a) {
  for (const std::string& option : options) {
    const size_t eq = option.find('=');
    const std::string key = option.substr(0, eq == std::string::npos ? option.size() : eq);
    const std::optional<double> v =
        eq == std::string::npos ? std::nullopt : ParseNumber(option.substr(eq + 1));
    if (!v || *v < 0 ||
        (key != "up" && key != "down" && key != "lookback" && key != "ttft" && key != "tpot" &&
         key != "initial"))
      return InvalidArgument("'" + text + "': '" + option +
                             "' is not up=S, down=S, lookback=S (seconds), ttft=MS, tpot=MS "
                             "(milliseconds) or initial=N (replicas at the start), each >= 0");
    const int64_t ms = std::llround(*v * 1000);
    if (key == "up") a.upscale_delay_ms = ms;
    if (key == "down") a.downscale_delay_ms = ms;
    if (key == "ttft") a.target_ttft_ms = *v;
    if (key == "tpot") a.target_tpot_ms = *v;
    if (key == "initial") {
      if (*v != std::floor(*v) || *v > 1e6)
        return InvalidArgument("'" + text + "': initial=N takes a whole number of replicas");
      a.initial_replicas = static_cast<int>(*v);
    }
    if (key == "lookback") {
      if (ms <= 0) return InvalidArgument("'" + text + "': lookback must be positive");
      a.lookback_ms = ms;
    }
  }
  if (a.initial_replicas >= 0 &&
      (a.initial_replicas < a.min_replicas || a.initial_replicas > a.max_replicas))
    return InvalidArgument("'" + text + "': initial=" + std::to_string(a.initial_replicas) +
                           " is outside [" + std::to_string(a.min_replicas) + ", " +
                           std::to_string(a.max_replicas) + "]; start within MIN-MAX");
  return Status::Ok();
}

std::vector<std::string> Split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string part;
  while (std::getline(in, part, sep)) out.push_back(part);
  return out;
}

}  // namespace

Result<ScalingConfig> ParseScalingConfig(std::string_view text, const AutoscalerConfig& defaults) {
  const std::string t(text);
  const std::string usage =
      "'" + t +
      "': expected fixed=N or auto=MIN-MAX[@TARGET][:up=S][:down=S][:lookback=S][:ttft=MS]"
      "[:tpot=MS][:initial=N]";
  ScalingConfig c;
  c.name = t;
  if (t.rfind("fixed=", 0) == 0) {
    const std::optional<int> n = ParseCount(t.substr(6));
    if (!n) return InvalidArgument(usage + " (N a whole number)");
    if (*n < 1)
      return InvalidArgument("'" + t + "': a fixed configuration needs 1 replica or more");
    c.replicas = *n;
    return c;
  }
  if (t.rfind("auto=", 0) != 0) return InvalidArgument(usage);
  std::vector<std::string> parts = Split(t.substr(5), ':');
  if (parts.empty()) return InvalidArgument(usage);
  const size_t dash = parts[0].find('-');
  const size_t at = parts[0].find('@');
  if (dash == std::string::npos || (at != std::string::npos && at < dash))
    return InvalidArgument(usage);
  const std::optional<int> lo = ParseCount(parts[0].substr(0, dash));
  const std::optional<int> hi = ParseCount(
      parts[0].substr(dash + 1, at == std::string::npos ? std::string::npos : at - dash - 1));
  const std::optional<double> target = at == std::string::npos
                                           ? std::optional<double>(defaults.target_ongoing_requests)
                                           : ParseNumber(parts[0].substr(at + 1));
  if (!lo || !hi || !target) return InvalidArgument(usage);
  AutoscalerConfig a = defaults;
  a.min_replicas = *lo;
  a.max_replicas = *hi;
  a.target_ongoing_requests = *target;
  if (a.max_replicas < 1 || a.min_replicas > a.max_replicas)
    return InvalidArgument("'" + t + "': needs 0 <= MIN <= MAX and MAX >= 1");
  if (!(a.target_ongoing_requests >= 0))
    return InvalidArgument("'" + t +
                           "': the target ongoing requests must be >= 0 (0: the default, half "
                           "of --max-ongoing-requests)");
  TESSERA_RETURN_IF_ERROR(
      ApplyAutoOptions(t, std::vector<std::string>(parts.begin() + 1, parts.end()), a));
  c.autoscaling = a;
  c.replicas = AutoscaleInitialReplicas(a);
  return c;
}

Result<std::vector<ScalingConfig>> ParseScalingConfigs(std::string_view list,
                                                       const AutoscalerConfig& defaults) {
  std::vector<ScalingConfig> out;
  int largest_fixed = 0;
  for (const std::string& item : Split(std::string(list), ',')) {
    const size_t range = item.find("..");
    if (item.rfind("fixed=", 0) == 0 && range != std::string::npos) {
      const std::optional<int> from = ParseCount(item.substr(6, range - 6));
      const std::optional<int> to = ParseCount(item.substr(range + 2));
      if (!from || !to || *from < 1 || *from > *to)
        return InvalidArgument("'" + item + "': expected fixed=A..B with 1 <= A <= B");
      for (int n = *from; n <= *to; ++n) {
        ScalingConfig c;
        c.name = "fixed=" + std::to_string(n);
        c.replicas = n;
        out.push_back(c);
      }
      largest_fixed = std::max(largest_fixed, *to);
      continue;
    }
    if (item == "auto" || item.rfind("auto:", 0) == 0) {
      out.emplace_back();  // resolved below, once the largest fixed count is known
      out.back().name = item;
      continue;
    }
    auto c = ParseScalingConfig(item, defaults);
    if (!c.ok()) return c.status();
    if (!c->autoscaling) largest_fixed = std::max(largest_fixed, c->replicas);
    out.push_back(*c);
  }
  for (ScalingConfig& c : out) {
    if (c.name != "auto" && c.name.rfind("auto:", 0) != 0) continue;
    if (largest_fixed == 0)
      return InvalidArgument("'" + c.name +
                             "': bare auto takes its maxReplicas from the fixed counts of the "
                             "list (e.g. fixed=1..16,auto); add them or write auto=1-N");
    AutoscalerConfig a = defaults;
    a.min_replicas = 1;
    a.max_replicas = largest_fixed;
    std::vector<std::string> options = Split(c.name, ':');
    options.erase(options.begin());
    TESSERA_RETURN_IF_ERROR(ApplyAutoOptions(c.name, options, a));
    c.autoscaling = a;
    c.replicas = AutoscaleInitialReplicas(a);
  }
  if (out.empty()) return InvalidArgument("name at least one configuration");
  return out;
}

Status ValidateServingOptions(const ServingSimOptions& o) {
  auto topology = SliceTopology::Make(o.accelerator, o.topology);
  if (!topology.ok())
    return InvalidArgument("topology (--topology): " + topology.status().message());
  auto positive = [](double v, const char* what) -> Status {
    if (v > 0 && std::isfinite(v)) return Status::Ok();
    std::ostringstream s;
    s << what << ": must be positive, got " << v;
    return InvalidArgument(s.str());
  };
  TESSERA_RETURN_IF_ERROR(
      positive(o.model.prefill_tokens_per_s, "prefill tokens per second (--prefill-tokens-per-s)"));
  TESSERA_RETURN_IF_ERROR(
      positive(o.model.decode_tokens_per_s, "decode tokens per second (--decode-tokens-per-s)"));
  TESSERA_RETURN_IF_ERROR(positive(o.model.decode_tokens_per_s_per_request,
                                   "decode tokens per second of one request "
                                   "(--decode-tokens-per-s-per-request)"));
  const std::vector<DecodeRow>& table = o.model.decode_table;
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string row = "decode table (--profile) row " + std::to_string(i);
    if (i == 0 && table[i].concurrency != 1)
      return InvalidArgument(row +
                             ": the first row must be concurrency 1 (one request alone), got " +
                             std::to_string(table[i].concurrency));
    if (i > 0 && table[i].concurrency <= table[i - 1].concurrency)
      return InvalidArgument(row + ": concurrency " + std::to_string(table[i].concurrency) +
                             " is not above the row before's " +
                             std::to_string(table[i - 1].concurrency) +
                             "; rows go in increasing concurrency");
    TESSERA_RETURN_IF_ERROR(positive(table[i].per_request_tokens_per_s,
                                     (row + " per-request tokens per second").c_str()));
    TESSERA_RETURN_IF_ERROR(
        positive(table[i].per_group_tokens_per_s, (row + " per-group tokens per second").c_str()));
  }
  TESSERA_RETURN_IF_ERROR(positive(o.time_scale, "time scale (--time-scale)"));
  TESSERA_RETURN_IF_ERROR(positive(static_cast<double>(o.tick_ms), "head tick (--tick-ms)"));
  TESSERA_RETURN_IF_ERROR(
      positive(static_cast<double>(o.report_ms), "router load report period (--report-ms)"));
  TESSERA_RETURN_IF_ERROR(
      positive(static_cast<double>(o.probe_period_ms), "readiness period (--probe-period-s)"));
  TESSERA_RETURN_IF_ERROR(
      positive(static_cast<double>(o.series_interval_ms), "series interval (--series-interval-s)"));
  TESSERA_RETURN_IF_ERROR(
      positive(static_cast<double>(o.oracle_window_ms), "oracle window (--oracle-window-s)"));
  TESSERA_RETURN_IF_ERROR(
      positive(static_cast<double>(o.slo.ttft_ms), "TTFT objective (--slo-ttft-ms)"));
  TESSERA_RETURN_IF_ERROR(positive(o.slo.tpot_ms, "TPOT objective (--slo-tpot-ms)"));
  TESSERA_RETURN_IF_ERROR(positive(static_cast<double>(o.max_ongoing_requests),
                                   "max ongoing requests per replica (--max-ongoing-requests)"));
  if (o.model.startup_ms < 0) return InvalidArgument("start-up time (--startup-s): must be >= 0");
  if (o.model.startup_ms >= o.startup_grace_ms)
    return InvalidArgument("start-up time (--startup-s) " +
                           std::to_string(o.model.startup_ms / 1000) +
                           " s is not below the readiness start-up grace (--startup-grace-s) " +
                           std::to_string(o.startup_grace_ms / 1000) +
                           " s: the lifecycle would recreate every group before it is ready");
  if (o.grace_ms < 0) return InvalidArgument("termination grace (--grace-s): must be >= 0");
  if (o.queue_timeout_ms < 0)
    return InvalidArgument("router queue timeout (--queue-timeout-s): must be >= 0 (0: none)");
  if (o.cluster_slices < 0)
    return InvalidArgument("cluster slices (--cluster-slices): must be >= 0 (0: unlimited)");
  return Status::Ok();
}

}  // namespace tessera::sim

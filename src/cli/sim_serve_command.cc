// `tessera sim-serve`: replay an LLM inference trace against one simulated Service under several
// scaling configurations (fixed replica counts, autoscalers) and report chip-hours, SLO
// attainment, latency and replicas over time side by side. The engine is pure
// (src/sim/serving_sim.h); this file is its shell: it opens the trace, writes the reports and
// times the run.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "sim/serving_profile.h"
#include "sim/serving_report.h"
#include "sim/serving_sim.h"

namespace tessera::cli {
namespace {

struct SimServeFlags {
  std::string trace = "../shared/traces/azure-llm-inference-2023/conv.csv";
  double time_scale = 1;
  double skip_s = 0;
  double duration_s = 0;
  std::string configs = "fixed=1..16,auto";
  double upscale_delay_s = static_cast<double>(AutoscalerConfig{}.upscale_delay_ms) / 1000;
  double downscale_delay_s = static_cast<double>(AutoscalerConfig{}.downscale_delay_ms) / 1000;
  double lookback_s = static_cast<double>(AutoscalerConfig{}.lookback_ms) / 1000;
  double oracle_window_s = 300;
  std::string accelerator = "v6e";
  std::string topology = "4x4";
  double prefill_tokens_per_s = sim::ReplicaModel{}.prefill_tokens_per_s;
  double decode_tokens_per_s = sim::ReplicaModel{}.decode_tokens_per_s;
  double decode_tokens_per_s_per_request = sim::ReplicaModel{}.decode_tokens_per_s_per_request;
  double startup_s = 120;
  std::string profile;
  std::vector<std::string> model_flags_given;  // of the four above, for --profile's check
  int max_ongoing_requests = sim::ServingSimOptions{}.max_ongoing_requests;
  double grace_s = 10;
  double probe_period_s = 10;
  double startup_grace_s = 900;
  int cluster_slices = 0;
  int64_t tick_ms = 100;
  int64_t report_ms = 1000;
  int max_queued = 100;
  double queue_timeout_s = 60;
  int64_t slo_ttft_ms = sim::SloSpec{}.ttft_ms;
  double slo_tpot_ms = sim::SloSpec{}.tpot_ms;
  uint64_t seed = 1;
  double series_interval_s = 10;
  std::string output = "text";
  std::string json;
  std::string csv;
};

int64_t Ms(double seconds) { return std::llround(seconds * 1000); }

template <typename Writer>
void WriteFile(const std::string& path, const std::string& what, Writer writer,
               const sim::ServingComparison& c) {
  std::ofstream out(path);
  if (!out) throw CommandError(what + ": cannot write " + path, 1);
  writer(out, c);
  if (!out.flush()) throw CommandError(what + ": writing " + path + " failed", 1);
}

sim::LlmTrace Window(const sim::LlmTrace& all, double skip_s, double duration_s) {
  sim::LlmTrace t;
  t.source = all.source;
  const int64_t from = Ms(skip_s) * 1000;
  const int64_t to = duration_s > 0 ? from + Ms(duration_s) * 1000 : INT64_MAX;
  for (const sim::LlmRequest& r : all.requests)
    if (r.arrival_us >= from && r.arrival_us < to) t.requests.push_back(r);
  return t;
}

void Run(const SimServeFlags& f) {
  if (f.skip_s < 0 || f.duration_s < 0)
    throw CommandError("--skip-s and --duration-s: seconds of trace time, >= 0");
  if (f.upscale_delay_s < 0 || f.downscale_delay_s < 0 || !(f.lookback_s > 0))
    throw CommandError(
        "--upscale-delay-s and --downscale-delay-s must be >= 0, --lookback-s positive");
  if (f.max_queued < 0) throw CommandError("--max-queued: must be >= 0");
  sim::ServingSimOptions o;
  auto g = ParseGeneration(f.accelerator);
  if (!g.ok()) throw CommandError("--accelerator: " + g.status().message());
  auto shape = ParseShape(f.topology);
  if (!shape.ok()) throw CommandError("--topology: " + shape.status().message());
  o.accelerator = *g;
  o.topology = *shape;
  o.model.prefill_tokens_per_s = f.prefill_tokens_per_s;
  o.model.decode_tokens_per_s = f.decode_tokens_per_s;
  o.model.decode_tokens_per_s_per_request = f.decode_tokens_per_s_per_request;
  o.model.startup_ms = Ms(f.startup_s);
  sim::ProfileLabel profile;
  if (!f.profile.empty()) {
    if (!f.model_flags_given.empty())
      throw CommandError("--profile sets the replica model: drop " + f.model_flags_given[0] +
                         ", or drop --profile to state the model with flags");
    std::ifstream in(f.profile);
    if (!in) throw CommandError("--profile: cannot open " + f.profile);
    const size_t slash = f.profile.find_last_of('/');
    auto p = sim::ReadReplicaProfile(
        in, slash == std::string::npos ? f.profile : f.profile.substr(slash + 1));
    if (!p.ok()) throw CommandError("--profile: " + p.status().message());
    o.model = p->model;
    profile = p->label;
    if (o.model.startup_ms >= Ms(f.startup_grace_s))
      throw CommandError("--profile: startupSeconds " + std::to_string(o.model.startup_ms / 1000) +
                         " s is not below the readiness start-up grace (--startup-grace-s " +
                         std::to_string(Ms(f.startup_grace_s) / 1000) + " s): raise it");
  }
  o.max_ongoing_requests = f.max_ongoing_requests;
  o.grace_ms = Ms(f.grace_s);
  o.probe_period_ms = Ms(f.probe_period_s);
  o.startup_grace_ms = Ms(f.startup_grace_s);
  o.cluster_slices = f.cluster_slices;
  o.time_scale = f.time_scale;
  o.tick_ms = f.tick_ms;
  o.report_ms = f.report_ms;
  o.max_queued = static_cast<size_t>(f.max_queued);
  o.queue_timeout_ms = Ms(f.queue_timeout_s);
  o.slo.ttft_ms = f.slo_ttft_ms;
  o.slo.tpot_ms = f.slo_tpot_ms;
  o.seed = f.seed;
  o.series_interval_ms = Ms(f.series_interval_s);
  o.oracle_window_ms = Ms(f.oracle_window_s);
  const Status valid = sim::ValidateServingOptions(o);
  if (!valid.ok()) throw CommandError(valid.message());

  AutoscalerConfig defaults;
  defaults.upscale_delay_ms = Ms(f.upscale_delay_s);
  defaults.downscale_delay_ms = Ms(f.downscale_delay_s);
  defaults.lookback_ms = Ms(f.lookback_s);
  auto parsed = sim::ParseScalingConfigs(f.configs, defaults);
  if (!parsed.ok()) throw CommandError("--configs: " + parsed.status().message());
  const std::vector<sim::ScalingConfig> configs = std::move(*parsed);

  std::ifstream in(f.trace);
  if (!in) throw CommandError("--trace: cannot open " + f.trace);
  const size_t slash = f.trace.find_last_of('/');
  auto all =
      sim::ReadLlmTrace(in, slash == std::string::npos ? f.trace : f.trace.substr(slash + 1));
  if (!all.ok()) throw CommandError("--trace: " + all.status().message());
  const sim::LlmTrace trace = Window(*all, f.skip_s, f.duration_s);
  if (trace.requests.empty())
    throw CommandError("--skip-s/--duration-s: no request of the trace falls in that window");

  const auto topology = SliceTopology::Make(o.accelerator, o.topology);
  const double span_s =
      static_cast<double>(trace.requests.back().arrival_us - trace.requests.front().arrival_us) /
      1e6 / o.time_scale;
  sim::ServingComparison c;
  c.options = o;
  c.profile = profile;
  c.offered_rps = span_s > 0 ? static_cast<double>(trace.requests.size()) / span_s : 0;
  std::ostringstream source, model;
  source << trace.source << ", " << trace.requests.size() << " requests";
  if (f.skip_s > 0 || f.duration_s > 0)
    source << " (trace seconds " << f.skip_s << " to "
           << (f.duration_s > 0 ? std::to_string(f.skip_s + f.duration_s) : std::string("end"))
           << ")";
  source << ", time scale " << f.time_scale << " (" << span_s << " s of arrivals)";
  c.source = source.str();
  model << f.accelerator << " " << f.topology << " per replica (" << topology->chips() << " chips, "
        << topology->hosts() << " hosts); prefill " << o.model.prefill_tokens_per_s
        << " tok/s, decode ";
  if (o.model.decode_table.empty()) {
    model << f.decode_tokens_per_s << " tok/s per replica and " << f.decode_tokens_per_s_per_request
          << " per request";
  } else {
    model << "tok/s per replica / per request by requests decoding at once";
    for (size_t i = 0; i < o.model.decode_table.size(); ++i) {
      const sim::DecodeRow& row = o.model.decode_table[i];
      model << (i == 0 ? " " : ", ") << row.concurrency << ": " << row.per_group_tokens_per_s
            << " / " << row.per_request_tokens_per_s;
    }
    model << " (the group flat beyond)";
  }
  model << "; start-up "
        << (f.profile.empty() ? f.startup_s : static_cast<double>(o.model.startup_ms) / 1000)
        << " s; maxOngoingRequests " << f.max_ongoing_requests << "; router queue " << f.max_queued
        << ", timeout " << f.queue_timeout_s << " s; head tick " << f.tick_ms << " ms, load report "
        << f.report_ms << " ms; autoscaler delays up " << f.upscale_delay_s << " s, down "
        << f.downscale_delay_s << " s, look-back " << f.lookback_s << " s";
  c.model = model.str();

  const auto t0 = std::chrono::steady_clock::now();
  for (const sim::ScalingConfig& config : configs) {
    auto r = sim::RunServingSimulation(trace, config, o);
    if (!r.ok()) throw CommandError(config.name + ": " + r.status().ToString(), 1);
    c.runs.push_back(std::move(*r));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  if (f.output == "json")
    sim::WriteServingJson(std::cout, c);
  else
    sim::WriteServingText(std::cout, c);
  std::cout.flush();
  if (!f.json.empty()) WriteFile(f.json, "--json", &sim::WriteServingJson, c);
  if (!f.csv.empty()) WriteFile(f.csv, "--csv", &sim::WriteServingCsv, c);
  std::fprintf(stderr, "simulated %zu configuration(s) of %zu requests in %.2f s\n", c.runs.size(),
               trace.requests.size(), seconds);
}

}  // namespace

void AddSimServeCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "sim-serve",
      "Replay an LLM inference trace against a simulated Service (the head's lifecycle and "
      "autoscaler, the router's dispatcher) and compare scaling configurations");
  auto f = std::make_shared<SimServeFlags>();
  cmd->add_option("--trace", f->trace,
                  "Azure LLM inference trace (TIMESTAMP,ContextTokens,"
                  "GeneratedTokens)")
      ->capture_default_str();
  cmd->add_option("--time-scale", f->time_scale,
                  "arrival offsets are divided by this (10: ten "
                  "times faster)")
      ->capture_default_str();
  cmd->add_option("--skip-s", f->skip_s, "start this many trace seconds after the first row")
      ->capture_default_str();
  cmd->add_option("--duration-s", f->duration_s, "replay this many trace seconds; 0 = to the end")
      ->capture_default_str();
  cmd->add_option("--configs", f->configs,
                  "comma list of fixed=N, fixed=A..B, auto (the defaults, min 1, max the largest "
                  "fixed count), auto:OPTIONS and auto=MIN-MAX[@TARGET][:up=S][:down=S]"
                  "[:lookback=S][:ttft=MS][:tpot=MS]")
      ->capture_default_str();
  cmd->add_option("--upscale-delay-s", f->upscale_delay_s, "auto configs' default")
      ->capture_default_str();
  cmd->add_option("--downscale-delay-s", f->downscale_delay_s, "auto configs' default")
      ->capture_default_str();
  cmd->add_option("--lookback-s", f->lookback_s, "auto configs' default")->capture_default_str();
  cmd->add_option("--accelerator", f->accelerator, "generation of a replica's slice")
      ->capture_default_str();
  cmd->add_option("--topology", f->topology, "shape of a replica's slice (one scaling unit)")
      ->capture_default_str();
  cmd->add_option("--prefill-tokens-per-s", f->prefill_tokens_per_s,
                  "model: prompt tokens a replica prefills per second, one request at a time")
      ->capture_default_str();
  cmd->add_option("--decode-tokens-per-s", f->decode_tokens_per_s,
                  "model: output tokens per second a replica makes, summed over its requests")
      ->capture_default_str();
  cmd->add_option("--decode-tokens-per-s-per-request", f->decode_tokens_per_s_per_request,
                  "model: the most one request decodes per second")
      ->capture_default_str();
  cmd->add_option("--startup-s", f->startup_s, "model: placement -> the server is ready")
      ->capture_default_str();
  cmd->add_option("--profile", f->profile,
                  "a measured replica model (bench/serving/profile.py's JSON): prefill, decode "
                  "by requests decoding at once, start-up; replaces the four model flags above");
  cmd->add_option("--max-ongoing-requests", f->max_ongoing_requests,
                  "per replica (the role's maxOngoingRequests)")
      ->capture_default_str();
  cmd->add_option("--grace-s", f->grace_s,
                  "a stopped group finishes its requests this long, then is killed")
      ->capture_default_str();
  cmd->add_option("--probe-period-s", f->probe_period_s, "readiness period")->capture_default_str();
  cmd->add_option("--startup-grace-s", f->startup_grace_s, "readiness start-up grace")
      ->capture_default_str();
  cmd->add_option("--cluster-slices", f->cluster_slices,
                  "slices of the topology in the cluster; 0 = unlimited")
      ->capture_default_str();
  cmd->add_option("--tick-ms", f->tick_ms, "the head's loop period")->capture_default_str();
  cmd->add_option("--report-ms", f->report_ms, "the router's load report period")
      ->capture_default_str();
  cmd->add_option("--max-queued", f->max_queued, "the router's queue bound")->capture_default_str();
  cmd->add_option("--queue-timeout-s", f->queue_timeout_s, "the router's queue timeout; 0 = none")
      ->capture_default_str();
  cmd->add_option("--slo-ttft-ms", f->slo_ttft_ms, "SLO: time to first token")
      ->capture_default_str();
  cmd->add_option("--slo-tpot-ms", f->slo_tpot_ms, "SLO: time per output token")
      ->capture_default_str();
  cmd->add_option("--seed", f->seed, "seed of the router's power-of-two-choices draws")
      ->capture_default_str();
  cmd->add_option("--series-interval-s", f->series_interval_s, "replicas-over-time sampling")
      ->capture_default_str();
  cmd->add_option("--oracle-window-s", f->oracle_window_s,
                  "the oracle's window: one replica count per window")
      ->capture_default_str();
  cmd->add_option("-o,--output", f->output, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->add_option("--json", f->json, "also write the JSON report (series, scale events) to FILE");
  cmd->add_option("--csv", f->csv, "write replicas over time to FILE");
  cmd->callback([f, cmd] {
    f->model_flags_given.clear();
    for (const char* flag : {"--prefill-tokens-per-s", "--decode-tokens-per-s",
                             "--decode-tokens-per-s-per-request", "--startup-s"})
      if (cmd->count(flag) > 0) f->model_flags_given.push_back(flag);
    Run(*f);
  });
}

}  // namespace tessera::cli

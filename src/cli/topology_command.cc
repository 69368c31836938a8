// `tessera topology GEN [SHAPE] [-o json]`: what a slice of that shape is made of.
#include <iomanip>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "topology/topology.h"

namespace tessera::cli {
namespace {

nlohmann::json TopologyJson(const SliceTopology& t) {
  nlohmann::json workers = nlohmann::json::array();
  int id = 0;
  for (const Coord& c : t.WorkerGrid()) {
    nlohmann::json w = {{"workerId", id++}, {"hostCoord", {c.x, c.y}}};
    if (t.shape().rank == 3) w["hostCoord"].push_back(c.z);
    workers.push_back(std::move(w));
  }
  nlohmann::json j = {{"generation", GenerationName(t.generation())},
                      {"topology", t.shape().ToString()},
                      {"chips", t.chips()},
                      {"chipsPerHost", t.chips_per_host()},
                      {"hosts", t.hosts()},
                      {"podType", t.PodType()},
                      {"tensorCoresPerChip", Info(t.generation()).cores_per_chip},
                      {"hostGrid", t.host_grid().ToString()},
                      {"workers", std::move(workers)}};
  if (t.shape().rank == 3) j["cubes"] = t.cubes();
  return j;
}

// The worker grid as a picture: one block per z layer, worker ids at their host coordinates.
std::string WorkerGridText(const SliceTopology& t) {
  const Shape& g = t.host_grid();
  const int width = static_cast<int>(std::to_string(t.hosts() - 1).size()) + 1;
  std::ostringstream out;
  for (int z = 0; z < g.z(); ++z) {
    if (g.rank == 3) out << "  z=" << z << "\n";
    for (int y = 0; y < g.y(); ++y) {
      out << "   ";
      for (int x = 0; x < g.x(); ++x) out << std::setw(width) << t.WorkerIdOf({x, y, z});
      out << "\n";
    }
  }
  return out.str();
}

}  // namespace

void AddTopologyCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand("topology", "Show the hosts, worker ids and pod type of a slice");
  auto generation = std::make_shared<std::string>();
  auto shape = std::make_shared<std::string>();
  auto output = std::make_shared<std::string>("text");
  cmd->add_option("generation", *generation,
                  "v2, v3, v4, v5e (v5litepod), v5p, v6e, 7x (v7x), in any case, also as Ray "
                  "writes them (TPU-V6E) or as a pod type (v6e-16)")
      ->required();
  cmd->add_option("shape", *shape,
                  "the slice's topology, e.g. 4x4 or 2x2x4 (optional after a pod type with one "
                  "shape)");
  cmd->add_option("-o,--output", *output, "text or json")->check(CLI::IsMember({"text", "json"}));
  cmd->callback([=] {
    auto t = ResolveAccelerator(*generation, *shape);
    if (!t.ok()) throw CommandError(t.status().message());
    if (*output == "json") {
      std::cout << TopologyJson(*t).dump(2) << "\n";
      return;
    }
    std::cout << "generation    " << GenerationName(t->generation()) << "\n"
              << "topology      " << t->shape().ToString() << "\n"
              << "chips         " << t->chips() << "\n"
              << "chipsPerHost  " << t->chips_per_host() << "\n"
              << "hosts         " << t->hosts() << "\n"
              << "podType       " << t->PodType() << "\n";
    if (t->shape().rank == 3) std::cout << "cubes         " << t->cubes() << "\n";
    std::cout << "hostGrid      " << t->host_grid().ToString() << "\n"
              << "workers       (TPU_WORKER_ID at each host-grid position, x across, y down)\n"
              << WorkerGridText(*t);
  });
}

}  // namespace tessera::cli

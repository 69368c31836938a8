#include "agent/devices.h"

#include <algorithm>

namespace tessera::agent {

EmulatedDevices::EmulatedDevices(int chips, Coord origin, Shape host_extent)
    : chips_(chips), origin_(origin), extent_(host_extent) {}

Result<EmulatedDevices> EmulatedDevices::ForSliceWorker(Generation generation,
                                                        const Shape& topology, int worker) {
  auto slice = SliceTopology::Make(generation, topology);
  if (!slice.ok()) return Status(slice.status().code(), "topology: " + slice.status().message());
  if (slice->shape().rank != 2) {
    return InvalidArgument("topology: " + topology.ToString() +
                           " is a 3D shape; a fixed slice is 2D (use a cube for 3D)");
  }
  if (worker < 0 || worker >= slice->hosts()) {
    return InvalidArgument("worker: " + std::to_string(worker) + " is outside 0.." +
                           std::to_string(slice->hosts() - 1) + " for a " + topology.ToString() +
                           " slice");
  }
  const Coord host = slice->HostCoordOf(worker);
  const Shape& extent = slice->host_extent();
  return EmulatedDevices(slice->chips_per_host(),
                         Coord{host.x * extent.x(), host.y * extent.y(), 0}, extent);
}

Result<EmulatedDevices> EmulatedDevices::ForCubeHost(const Coord& host_coord) {
  if (host_coord.x < 0 || host_coord.x > 1 || host_coord.y < 0 || host_coord.y > 1 ||
      host_coord.z < 0 || host_coord.z > 3) {
    return InvalidArgument("coord: " + std::to_string(host_coord.x) + "," +
                           std::to_string(host_coord.y) + "," + std::to_string(host_coord.z) +
                           " is outside the cube's 2x2x4 host grid (x,y in 0..1, z in 0..3)");
  }
  return EmulatedDevices(4, Coord{host_coord.x * 2, host_coord.y * 2, host_coord.z},
                         Shape::Of(2, 2, 1));
}

Result<std::vector<Device>> EmulatedDevices::Discover() const {
  std::vector<Device> devices;
  const int ex = std::max(1, extent_.x());
  const int ey = std::max(1, extent_.y());
  for (int i = 0; i < chips_; ++i) {
    Device d;
    d.index = i;
    d.coords = Coord{origin_.x + i % ex, origin_.y + (i / ex) % ey, origin_.z + i / (ex * ey)};
    devices.push_back(d);
  }
  return devices;
}

}  // namespace tessera::agent

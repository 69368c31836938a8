// Device discovery: which accelerator chips this host has, and where each sits in the ICI grid.
//
// DeviceDiscovery is the interface the agent registers from; EmulatedDevices (chip count and
// coordinates from flags) is the implementation tests and `tessera up` use. A real TPU or GPU
// discovery would read /dev/accel* or the vendor library behind the same interface.
//
// Thread-safety: Discover() is const and safe to call from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"
#include "protocol/wire.h"
#include "topology/topology.h"

namespace tessera::agent {

// One chip: its index on the host and its coordinates (the wire type of registrations).
using protocol::Device;

class DeviceDiscovery {
 public:
  virtual ~DeviceDiscovery() = default;
  // "emulated", "tpu", ...
  virtual std::string_view kind() const = 0;
  // The chips of this host, ordered by index. Unavailable if the devices cannot be read.
  virtual Result<std::vector<Device>> Discover() const = 0;
};

// `chips` chips laid out x-fastest, then y, then z, in the box `host_extent` whose first chip
// is at `origin`.
class EmulatedDevices : public DeviceDiscovery {
 public:
  EmulatedDevices(int chips, Coord origin, Shape host_extent);

  // Worker `worker` of a 2D slice of `topology`: its chips at the host's place in the slice.
  // InvalidArgument (naming "topology" or "worker") if the pair is not valid.
  static Result<EmulatedDevices> ForSliceWorker(Generation generation, const Shape& topology,
                                                int worker);
  // The host at host-grid coordinate `host_coord` of a 4x4x4-chip cube (2x2x4 hosts of 2x2x1
  // chips). InvalidArgument (naming "coord") when outside the cube.
  static Result<EmulatedDevices> ForCubeHost(const Coord& host_coord);

  std::string_view kind() const override { return "emulated"; }
  Result<std::vector<Device>> Discover() const override;
  int chips() const { return chips_; }

 private:
  int chips_;
  Coord origin_;
  Shape extent_;
};

}  // namespace tessera::agent

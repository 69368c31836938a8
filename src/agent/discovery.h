// Host discovery: what accelerators this host has and where it sits, read from the machine
// (`tessera agent --devices auto|tpu|nvidia`; docs/discovery.md).
//
// Four sources, asked in this order by `auto` (the first that answers wins):
//   gke       the TPU_* environment GKE gives a TPU pod (TPU_ACCELERATOR_TYPE, TPU_WORKER_ID,
//             TPU_WORKER_HOSTNAMES, TPU_TOPOLOGY, TPU_NAME, MEGASCALE_*)
//   metadata  the GCE metadata server of a Cloud TPU VM (instance/attributes/accelerator-type,
//             agent-worker-number, worker-network-endpoints, tpu-env; instance/id)
//   devices   /dev/accel* files (not directories: recent NVIDIA drivers make /dev/accel/ one)
//             and /dev/vfio/<group> whose PCI vendor is Google (0x1ae0): a chip count only
//   nvidia-smi `nvidia-smi -q -x` (nvidia_smi.h): each GPU's uuid, memory and NVLink fabric
// A source that is absent (no TPU_* variables, no metadata server or a 404 for
// accelerator-type, no device files, no nvidia-smi or one that fails) "does not answer"
// (NotFound), and `auto` goes on to the next, noting why. A source that answers wrongly
// (garbled tpu-env, an accelerator type tessera does not know, a TOPOLOGY that disagrees with
// the accelerator type, a GPU whose fabric is not ready, bad XML) is an InvalidArgument that
// names the source's field: discovery stops there rather than register a wrong inventory.
//
// The parsers (Parse*, *Facts*) are pure; ListLocalDevices, FetchMetadata, DiscoverHost (and
// RunNvidiaSmi) are the small I/O shells around them.
//
// Thread-safety: pure functions and values; the shells may run on any thread.
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/devices.h"
#include "common/status.h"
#include "protocol/wire.h"
#include "topology/topology.h"

namespace tessera::agent {

inline constexpr char kDefaultMetadataUrl[] = "http://metadata.google.internal/computeMetadata/v1";
// The PCI vendor id of Google's TPU chips (/sys/.../vendor of a vfio device).
inline constexpr char kGoogleVendor[] = "0x1ae0";

enum class DevicesMode { kAuto, kEmulated, kTpu, kNvidia };
// "auto", "emulated", "tpu", "nvidia"; InvalidArgument naming the four otherwise.
Result<DevicesMode> ParseDevicesMode(std::string_view text);

// What discovery found. The TPU sources (gke, metadata) fill the slice facts; devices fills
// chips (and device_paths); nvidia-smi fills gpus (and chips = their count).
struct HostFacts {
  std::string source;            // "gke", "metadata", "devices", "nvidia-smi"
  std::string accelerator_type;  // as the source wrote it: "v5p-16", "v5litepod-16"
  // The slice the accelerator type and topology name (ResolveAccelerator); set by gke and
  // metadata only.
  std::optional<SliceTopology> slice;
  std::string slice_name;          // TPU_NAME, tpu-env NODE_ID; "" when the source does not say
  int worker_id = -1;              // -1 when the source does not say
  std::vector<std::string> peers;  // the slice's workers, by worker id
  std::map<std::string, std::string> megascale;  // MEGASCALE_*, as given
  std::string instance_id;                       // metadata: instance/id
  int chips = 0;                                 // on this host
  std::vector<std::string> device_paths;         // devices: the files counted
  std::vector<protocol::DiscoveredGpu> gpus;     // nvidia-smi

  // The part the head is told (Registration::discovered).
  protocol::Discovered ToWire() const;
};

// Why a source did not answer (logged by the agent before the one that did).
struct SourceNote {
  std::string source;
  std::string reason;     // why it did not answer, or what it answered
  bool answered = false;  // the source whose answer was used
};

// ----- pure parsers -----

// tpu-env: lines `KEY: 'value'` (also "value" or a bare value without spaces); blank lines
// are skipped. InvalidArgument "tpu-env line N: ..." for any other line or a repeated key.
Result<std::map<std::string, std::string>> ParseTpuEnv(std::string_view text);

// worker-network-endpoints: entries "ID:WORKER_NUMBER:IP" (the first two fields may be
// "unknown") joined by ','; returns the IPs in order (worker 0 first). InvalidArgument
// "worker-network-endpoints: entry N ..." for an entry with fewer than three fields or an
// empty address.
Result<std::vector<std::string>> ParseWorkerEndpoints(std::string_view text);

// The claims of a TPU source, as text, with the names its fields have there (for errors).
struct TpuClaims {
  std::string source;  // "gke" or "metadata"
  std::string accelerator_type, accelerator_field;
  std::string topology, topology_field;  // "" when the source does not say
  std::string worker_id, worker_field;
  std::string slice_name;
  std::vector<std::string> peers;
  std::string peers_field;
  std::map<std::string, std::string> megascale;
  std::string instance_id;
};
// Checks the claims against each other and the topology catalog: a known accelerator type,
// a topology (when given) of as many chips as the type (or the type's only shape when not),
// a worker id in 0..hosts-1, as many peers as hosts (when given), MEGASCALE_NUM_SLICES >= 1
// and MEGASCALE_SLICE_ID below it. InvalidArgument naming the source's field (and both values
// when two disagree).
Result<HostFacts> ResolveTpuClaims(const TpuClaims& claims);

// GKE: NotFound when neither TPU_ACCELERATOR_TYPE nor TPU_WORKER_ID is set; InvalidArgument
// naming the variable when one is set and the rest do not agree (ResolveTpuClaims).
Result<HostFacts> FactsFromGkeEnvironment(const std::map<std::string, std::string>& env);

// The metadata server's answers; nullopt = the attribute is not there (404).
struct MetadataAnswers {
  std::optional<std::string> accelerator_type, agent_worker_number, worker_network_endpoints,
      tpu_env, instance_id;
};
// NotFound when accelerator-type is absent (not a TPU VM); InvalidArgument naming the
// attribute (or "tpu-env KEY") for a missing agent-worker-number, garbled tpu-env or
// endpoints, or claims that disagree (tpu-env WORKER_ID vs agent-worker-number, tpu-env
// ACCELERATOR_TYPE vs accelerator-type, ...).
Result<HostFacts> FactsFromMetadata(const MetadataAnswers& answers);

// What ListLocalDevices saw under a root.
struct LocalDeviceListing {
  std::vector<std::string> accel_files;  // /dev/accel* that are not directories, sorted
  std::vector<std::string> accel_dirs;   // /dev/accel* directories: ignored
  // /dev/vfio/<group> (numeric groups) -> the vendor of each PCI device in the group.
  std::map<std::string, std::vector<std::string>> vfio_vendors;
};
// Chips: the accel files, else the vfio devices whose vendor is kGoogleVendor. NotFound
// (saying what was looked at and ignored) when there are none.
Result<HostFacts> FactsFromLocalDevices(const LocalDeviceListing& listing);

// nvidia-smi GPUs (nvidia_smi.h ParseNvidiaSmiXml). NotFound for no GPU; InvalidArgument
// naming "gpus[i].fabric" when a GPU has a fabric that is not Completed/Success (the NVLink
// domain is not ready: its GPUs would be placed as NVLink peers they cannot reach yet).
Result<HostFacts> FactsFromGpus(std::vector<protocol::DiscoveredGpu> gpus);

// True when the GPU's fabric is Completed with status Success.
bool NvlinkAttached(const protocol::DiscoveredGpu& gpu);

// The http://HOST[:PORT][/PATH] of --metadata-url, split. InvalidArgument (naming
// "--metadata-url") otherwise; https is not supported.
struct HttpUrl {
  std::string host;
  uint16_t port = 80;
  std::string path;  // without a trailing '/'
};
Result<HttpUrl> ParseHttpUrl(std::string_view url);

// ----- I/O shells -----

// Lists <root>/dev/accel*, <root>/dev/vfio/<group> and their vendors under
// <root>/sys/kernel/iommu_groups/<group>/devices/*/vendor. Unreadable entries are skipped.
LocalDeviceListing ListLocalDevices(const std::string& root);

struct MetadataOptions {
  std::string url = kDefaultMetadataUrl;
  std::chrono::milliseconds connect_timeout{1'000};
  std::chrono::milliseconds read_timeout{2'000};
};
// GETs the attributes with "Metadata-Flavor: Google". Unavailable when the server cannot be
// reached or answers anything but 200/404 (naming the path and status); a 404 leaves that
// answer nullopt.
Result<MetadataAnswers> FetchMetadata(const MetadataOptions& options);

struct DiscoveryOptions {
  DevicesMode mode = DevicesMode::kAuto;           // kEmulated is not discovery: InvalidArgument
  std::map<std::string, std::string> environment;  // the process's, or a test's
  MetadataOptions metadata;
  std::string dev_root = "/";
  std::string nvidia_smi = "nvidia-smi";  // a path, or a name looked up in environment's PATH
  std::chrono::milliseconds nvidia_smi_timeout{30'000};
};
// Asks the sources the mode names (auto: all four; tpu: gke, metadata, devices; nvidia:
// nvidia-smi) in order and returns the first answer. Every source that did not answer is
// appended to `skipped` with why. NotFound listing every reason when none answered;
// InvalidArgument "<source>: <field>: ..." when one answered wrongly.
Result<HostFacts> DiscoverHost(const DiscoveryOptions& options, std::vector<SourceNote>& skipped);

// This process's environment as a map.
std::map<std::string, std::string> ProcessEnvironment();

// The devices of a discovered host: fixed chips (with their coordinates), kind() the source.
class DiscoveredDevices : public DeviceDiscovery {
 public:
  DiscoveredDevices(std::string source, std::vector<Device> devices)
      : source_(std::move(source)), devices_(std::move(devices)) {}
  std::string_view kind() const override { return source_; }
  Result<std::vector<Device>> Discover() const override { return devices_; }

 private:
  std::string source_;
  std::vector<Device> devices_;
};

}  // namespace tessera::agent

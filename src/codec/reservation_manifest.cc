#include "codec/reservation_manifest.h"

#include "codec/manifest.h"
#include "codec/manifest_fields.h"
#include "codec/stored_json.h"

namespace tessera::codec {
namespace {

using Json = nlohmann::json;

}  // namespace

Result<SliceReservationSpec> ParseSliceReservation(const Json& doc) {
  TESSERA_RETURN_IF_ERROR(RequireObject(doc, "body"));
  auto kind = DocumentKind(doc);
  if (!kind.ok()) return kind.status();
  if (*kind != kSliceReservationKind)
    return InvalidArgument("kind: expected SliceReservation, got " + *kind);
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(doc, "document", {"apiVersion", "kind", "metadata", "spec", "status"}));
  SliceReservationSpec spec;
  if (!doc.contains("metadata")) return InvalidArgument("metadata: required (metadata.name)");
  const Json& meta = doc["metadata"];
  TESSERA_RETURN_IF_ERROR(RequireObject(meta, "metadata"));
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(meta, "metadata", {"name", "namespace", "queue", "labels"}));
  auto name = GetName(meta, "name", "metadata", true);
  if (!name.ok()) return name.status();
  auto namespace_name = GetNamespace(meta);
  if (!namespace_name.ok()) return namespace_name.status();
  spec.name = ObjectKey(*namespace_name, *name);
  auto labels = GetStringMap(meta, "labels", "metadata", StringMapKind::kLabels);
  if (!labels.ok()) return labels.status();
  spec.labels = *labels;

  if (!doc.contains("spec")) return InvalidArgument("spec: required (accelerator, topology)");
  const Json& s = doc["spec"];
  TESSERA_RETURN_IF_ERROR(RequireObject(s, "spec"));
  // One name per concept across kinds (docs/serving.md "Names"): the Kubernetes spellings get
  // a 422 that points at TrainJob's.
  if (s.contains("queue") || s.contains("queueName"))
    return InvalidArgument(std::string(s.contains("queue") ? "spec.queue" : "spec.queueName") +
                           ": the LocalQueue is metadata.queue, as in a TrainJob");
  if (s.contains("priorityClassName"))
    return InvalidArgument(
        "spec.priorityClassName: the PriorityClass is spec.priority, as in a TrainJob");
  if (s.contains("numSlices"))
    return InvalidArgument(
        "spec.numSlices: the number of slices is spec.slices, as in a TrainJob (renamed; write "
        "slices: " +
        (s["numSlices"].is_number_integer() ? s["numSlices"].dump() : std::string("N")) + ")");
  TESSERA_RETURN_IF_ERROR(
      OnlyKnownFields(s, "spec", {"accelerator", "topology", "slices", "priority", "ttl"}));
  // Read after spec's fields are checked: a reservation reports a wrong spec first.
  auto queue = GetName(meta, "queue", "metadata", false);
  if (!queue.ok()) return queue.status();
  spec.queue = *queue;
  // The spellings a TrainJob takes: "v6e", "TPU-V6E", or a pod type ("v6e-16").
  auto topo = GetSliceTopology(s, "spec");
  if (!topo.ok()) return topo.status();
  spec.accelerator = topo->generation();
  spec.topology = topo->shape();
  auto n = GetInt(s, "slices", "spec", 1, 1, 4096);
  if (!n.ok()) return n.status();
  spec.num_slices = static_cast<int>(*n);
  auto priority = GetString(s, "priority", "spec", false);
  if (!priority.ok()) return priority.status();
  spec.priority = *priority;
  if (s.contains("ttl")) {
    auto ms = ParsePositiveDurationMs("spec.ttl", s["ttl"], "30m",
                                      "to hold the slices until the reservation is deleted");
    if (!ms.ok()) return ms.status();
    spec.ttl_ms = *ms;
  }
  return spec;
}

bool MigrateSliceReservationSpec(Json& spec) {
  if (!spec.is_object() || !spec.contains("numSlices")) return false;
  if (!spec.contains("slices")) spec["slices"] = spec["numSlices"];
  spec.erase("numSlices");
  return true;
}

Json SliceReservationSpecJson(const SliceReservationSpec& spec, const Json& written) {
  Json out = {{"accelerator", GenerationName(spec.accelerator)},
              {"topology", spec.topology.ToString()},
              {"slices", spec.num_slices}};
  if (!spec.priority.empty()) out["priority"] = spec.priority;
  if (written.is_object() && written.contains("ttl")) out["ttl"] = written["ttl"];
  if (spec.ttl_ms > 0) out["ttlSeconds"] = spec.ttl_ms / 1000;
  return out;
}

Json SliceReservationJson(const SliceReservation& r) {
  const SliceReservationStatus& st = r.status;
  Json meta = {
      {"uid", r.uid}, {"resourceVersion", r.version}, {"creationTimestampMs", r.created_ms}};
  PutObjectKey(meta, r.spec.name);
  if (!r.spec.queue.empty()) meta["queue"] = r.spec.queue;
  if (!r.spec.labels.empty()) meta["labels"] = r.spec.labels;
  Json slices = Json::array();
  Json hosts = Json::array();
  for (const ReservedSlice& s : st.slices) {
    slices.push_back({{"name", s.name}, {"hosts", s.hosts}});
    for (const std::string& h : s.hosts) hosts.push_back(h);
  }
  Json lost = Json::array();
  for (const LostSlice& l : st.lost_slices)
    lost.push_back({{"name", l.slice.name},
                    {"hosts", l.slice.hosts},
                    {"lostHost", l.host},
                    {"why", l.why},
                    {"held", l.held}});
  Json spec = Json::parse(r.spec_document, nullptr, /*allow_exceptions=*/false);
  if (spec.is_discarded()) spec = SliceReservationSpecJson(r.spec, Json::object());
  return {{"apiVersion", kApiVersion},
          {"kind", kSliceReservationKind},
          {"metadata", meta},
          {"spec", spec},
          {"status",
           {{"phase", ReservationPhaseName(st.phase)},
            {"reason", st.reason},
            {"message", st.message},
            {"pendingReason", st.pending_reason},
            {"queuePosition", st.queue_position},
            {"wouldHelp", WouldHelpJson(st.would_help)},
            {"slices", slices},
            {"hosts", hosts},
            {"chips", r.held_chips()},
            {"lostSlices", lost},
            {"readyTimeMs", st.ready_ms},
            {"expiresAtMs", st.expires_ms},
            {"users", st.users},
            {"releasing", st.releasing},
            {"deleting", st.deleting},
            {"preemptions", st.preemptions}}}};
}

Result<SliceReservation> SliceReservationFromJson(const Json& doc) {
  const Json meta = doc.is_object() ? doc.value("metadata", Json::object()) : Json::object();
  const std::string name = GetOr(meta, "name", std::string());
  auto fail = [&name](const std::string& why) {
    return Internal("stored slicereservation " + name + ": " + why);
  };
  Json stored_spec = doc.value("spec", Json::object());
  MigrateSliceReservationSpec(stored_spec);
  Json manifest = {{"apiVersion", kApiVersion},
                   {"kind", kSliceReservationKind},
                   {"metadata", {{"name", name}}},
                   {"spec", stored_spec}};
  CopyNamespace(meta, manifest["metadata"]);
  if (meta.contains("queue")) manifest["metadata"]["queue"] = meta["queue"];
  if (meta.contains("labels")) manifest["metadata"]["labels"] = meta["labels"];
  manifest["spec"].erase("ttlSeconds");
  auto spec = ParseSliceReservation(manifest);
  if (!spec.ok()) return fail(spec.status().message());
  SliceReservation r;
  r.uid = GetOr(meta, "uid", uint64_t{0});
  if (r.uid == 0) return fail("metadata.uid is missing");
  r.created_ms = GetOr(meta, "creationTimestampMs", int64_t{0});
  r.spec = std::move(*spec);
  r.spec_document = stored_spec.dump();
  const Json st = doc.value("status", Json::object());
  auto phase = ParseReservationPhase(GetOr(st, "phase", std::string("Pending")));
  if (!phase.ok()) return fail(phase.status().message());
  SliceReservationStatus& s = r.status;
  s.phase = *phase;
  s.reason = GetOr(st, "reason", s.reason);
  s.message = GetOr(st, "message", s.message);
  s.pending_reason = GetOr(st, "pendingReason", std::string());
  s.queue_position = GetOr(st, "queuePosition", 0);
  for (const Json& b : st.value("wouldHelp", Json::array()))
    s.would_help.push_back({GetOr(b, "name", std::string()),
                            GetOr(b, "clusterQueue", std::string()), GetOr(b, "priority", 0),
                            GetOr(b, "chips", int64_t{0}), GetOr(b, "preemptible", false)});
  for (const Json& sl : st.value("slices", Json::array())) {
    ReservedSlice slice{GetOr(sl, "name", std::string()), {}};
    for (const Json& h : sl.value("hosts", Json::array()))
      if (h.is_string()) slice.hosts.push_back(h.get<std::string>());
    if (slice.hosts.empty()) return fail("status.slices[].hosts is empty");
    s.slices.push_back(std::move(slice));
  }
  for (const Json& l : st.value("lostSlices", Json::array())) {
    LostSlice lost{{GetOr(l, "name", std::string()), {}},
                   GetOr(l, "lostHost", std::string()),
                   GetOr(l, "why", std::string()),
                   GetOr(l, "held", false)};
    for (const Json& h : l.value("hosts", Json::array()))
      if (h.is_string()) lost.slice.hosts.push_back(h.get<std::string>());
    if (lost.slice.hosts.empty()) return fail("status.lostSlices[].hosts is empty");
    s.lost_slices.push_back(std::move(lost));
  }
  for (const Json& u : st.value("users", Json::array()))
    if (u.is_string()) s.users.push_back(u.get<std::string>());
  s.ready_ms = GetOr(st, "readyTimeMs", int64_t{0});
  s.expires_ms = GetOr(st, "expiresAtMs", int64_t{0});
  s.releasing = GetOr(st, "releasing", false);
  s.deleting = GetOr(st, "deleting", false);
  s.preemptions = GetOr(st, "preemptions", 0);
  return r;
}

}  // namespace tessera::codec

// libFuzzer target: the head's document parser and the typed parsers behind it.
//
// Bytes -> ParseDocument (YAML or JSON) -> DocumentKind and every typed parser. Nothing may
// crash, hang or allocate without bound; every refusal is an InvalidArgument naming a field;
// a document that parses dumps to JSON that parses back to the same document (the head stores
// and serves the dump).
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "codec/manifest.h"

namespace {

using tessera::Status;
using tessera::StatusCode;
using tessera::codec::Json;

[[noreturn]] void Fail(const std::string& what) {
  std::fprintf(stderr, "manifest_fuzz: %s\n", what.c_str());
  std::abort();
}

void ExpectFieldError(const Status& s) {
  if (s.code() != StatusCode::kInvalidArgument) Fail("not InvalidArgument: " + s.ToString());
  if (s.message().find(": ") == std::string::npos) Fail("names no field: " + s.message());
}

template <typename R>
void CheckTyped(const R& result) {
  if (!result.ok()) ExpectFieldError(result.status());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto doc = tessera::codec::ParseDocument(text);
  if (!doc.ok()) {
    ExpectFieldError(doc.status());
    return 0;
  }
  CheckTyped(tessera::codec::DocumentKind(*doc));
  auto job = tessera::codec::ParseTrainJob(*doc);
  CheckTyped(job);
  if (job.ok()) {
    if (!tessera::codec::ValidateName("name", job->name).ok()) Fail("job name: " + job->name);
    if (job->min_slices < 1 || job->max_slices < job->min_slices) Fail("slices out of order");
    for (const auto& [key, value] : job->env)
      if (key.empty() || key.find('\0') != std::string::npos ||
          value.find('\0') != std::string::npos)
        Fail("env entry with a NUL or an empty name");
  }
  CheckTyped(tessera::codec::ParseClusterQueue(*doc));
  CheckTyped(tessera::codec::ParseLocalQueue(*doc));
  CheckTyped(tessera::codec::ParsePriorityClass(*doc));

  // The dump (what the store keeps) parses back to the same document. Every string of a parsed
  // document is UTF-8 (ParseDocument refuses other bytes), so the strict dump never throws.
  if (!doc->is_object() && !doc->is_array()) return 0;
  std::string dumped;
  try {
    dumped = doc->dump();
  } catch (const Json::exception& e) {
    Fail(std::string("a parsed document does not dump: ") + e.what());
  }
  if (dumped.size() > tessera::codec::kMaxDocumentBytes) return 0;
  auto again = tessera::codec::ParseDocument(dumped);
  if (!again.ok()) Fail("dump does not parse: " + again.status().ToString() + "\n" + dumped);
  if (*again != *doc) Fail("dump parses to another document: " + dumped);
  return 0;
}

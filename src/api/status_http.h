// The one mapping from a Status (the controller's and the codecs' answers) to the HTTP API's
// error: its status code, message and `field` (the JSON body {"error", "field"}). The
// controller never names an HTTP code; the head's routes answer every refusal through here.
//
//   kInvalidArgument    422 naming the field (a document in the body that is well-formed but
//                       wrong), or 400 when the input was the request itself (InputFrom::kRequest:
//                       a query parameter, or an agent's message the wire decoder refused)
//   kNotFound           404
//   kAlreadyExists      409 naming the field (a name taken)
//   kFailedPrecondition 409 naming the field (still in use, being deleted)
//   kConflict           409 (a store write lost a race)
//   kUnavailable, kInternal, anything else  503 "store: <message>"
//
// The field is FieldOf(status): the message's leading field path ("spec.topology: ..." ->
// "spec.topology"), or "" when it starts with none ("host 'a' not found", "cannot delete x: ...").
//
// Thread-safety: a stateless function.
#pragma once

#include <string>

#include "common/status.h"

namespace tessera::api {

// Where the input that an InvalidArgument refuses came from.
enum class InputFrom {
  kDocument,  // a document the request carries (apply, scale, load reports): 422
  kRequest,   // the request's own query or path, or an agent's wire message: 400
};

struct HttpError {
  int status = 500;
  std::string message;
  std::string field;  // "" when the error names none
};

HttpError ToHttpError(const Status& status, InputFrom input = InputFrom::kDocument);

// The field a refusal names: its message's prefix before the first ':' when that has no space.
std::string FieldOf(const Status& status);

}  // namespace tessera::api

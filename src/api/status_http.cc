#include "api/status_http.h"

namespace tessera::api {

std::string FieldOf(const Status& status) {
  const std::string& m = status.message();
  const size_t colon = m.find(':');
  if (colon == std::string::npos) return "";
  std::string field = m.substr(0, colon);
  return field.find(' ') == std::string::npos ? field : "";
}

HttpError ToHttpError(const Status& status, InputFrom input) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      return {input == InputFrom::kRequest ? 400 : 422, status.message(), FieldOf(status)};
    case StatusCode::kNotFound:
      return {404, status.message(), ""};
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition:
      return {409, status.message(), FieldOf(status)};
    case StatusCode::kConflict:
      return {409, status.message(), ""};
    case StatusCode::kOk:
      return {500, "internal: an error answer was asked for an OK status", ""};
    case StatusCode::kUnavailable:
    case StatusCode::kInternal:
      break;
  }
  return {503, "store: " + status.message(), ""};
}

}  // namespace tessera::api

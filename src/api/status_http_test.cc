#include "api/status_http.h"

#include <gtest/gtest.h>

namespace tessera::api {
namespace {

void ExpectError(const HttpError& e, int status, const std::string& message,
                 const std::string& field) {
  EXPECT_EQ(e.status, status) << e.message;
  EXPECT_EQ(e.message, message);
  EXPECT_EQ(e.field, field) << e.message;
}

TEST(StatusHttp, InvalidArgumentIs422ForADocumentAnd400ForTheRequest) {
  const Status bad = InvalidArgument("spec.roles[1].topology: must be like 4x4");
  ExpectError(ToHttpError(bad), 422, bad.message(), "spec.roles[1].topology");
  ExpectError(ToHttpError(bad, InputFrom::kDocument), 422, bad.message(), "spec.roles[1].topology");
  const Status rank = InvalidArgument("worker: trainjob 'a' has workers 0..3");
  ExpectError(ToHttpError(rank, InputFrom::kRequest), 400, rank.message(), "worker");
  // A message that does not start with a field path names none.
  ExpectError(ToHttpError(InvalidArgument("the body is not a document")), 422,
              "the body is not a document", "");
}

TEST(StatusHttp, EveryCodeHasItsHttpStatus) {
  ExpectError(ToHttpError(NotFound("trainjob 'a' not found")), 404, "trainjob 'a' not found", "");
  ExpectError(ToHttpError(AlreadyExists("metadata.name: 'a' already exists")), 409,
              "metadata.name: 'a' already exists", "metadata.name");
  ExpectError(ToHttpError(FailedPrecondition("metadata.name: service 'a' is being deleted")), 409,
              "metadata.name: service 'a' is being deleted", "metadata.name");
  ExpectError(ToHttpError(FailedPrecondition("cannot delete localqueue a: in use by trainjob/b")),
              409, "cannot delete localqueue a: in use by trainjob/b", "");
  ExpectError(ToHttpError(Conflict("TrainJob/a: expected resource_version 3")), 409,
              "TrainJob/a: expected resource_version 3", "");
  ExpectError(ToHttpError(Unavailable("disk I/O error")), 503, "store: disk I/O error", "");
  ExpectError(ToHttpError(Internal("stored trainjob a: bad")), 503, "store: stored trainjob a: bad",
              "");
  EXPECT_EQ(ToHttpError(Status::Ok()).status, 500);
}

}  // namespace
}  // namespace tessera::api

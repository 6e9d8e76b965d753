#include "client/cuda/status.h"

#include <string>

namespace batchd::cuda {

std::string Status::ToString() const {
  const char* name = "UNKNOWN";
  switch (code_) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      name = "INVALID_ARGUMENT";
      break;
    case StatusCode::kResourceExhausted:
      name = "RESOURCE_EXHAUSTED";
      break;
    case StatusCode::kFailedPrecondition:
      name = "FAILED_PRECONDITION";
      break;
    case StatusCode::kInternal:
      name = "INTERNAL";
      break;
    case StatusCode::kUnavailable:
      name = "UNAVAILABLE";
      break;
  }
  return std::string(name) + ": " + message_;
}

}  // namespace batchd::cuda

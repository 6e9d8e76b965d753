// A small status type for batchd_cuda, which depends on nothing but the CUDA
// toolkit and the C++ standard library (it must build on GPU machines that
// have no Abseil). Codes use Abseil's numbering, so the client converts a
// Status to absl::Status with a cast (see client/device_loader.cc).
//
// Thread-safety: a Status is a value; const methods are thread-safe.
#ifndef BATCHD_CLIENT_CUDA_STATUS_H_
#define BATCHD_CLIENT_CUDA_STATUS_H_

#include <string>
#include <utility>

namespace batchd::cuda {

// Same numbers as absl::StatusCode.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 3,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kInternal = 13,
  // No device or no driver: the caller falls back to the host path.
  kUnavailable = 14,
};

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message)
      : code_(code), message_(std::move(message)) {}

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "OK" or "<CODE>: message".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgumentError(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status ResourceExhaustedError(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status FailedPreconditionError(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status InternalError(std::string m) {
  return Status(StatusCode::kInternal, std::move(m));
}
inline Status UnavailableError(std::string m) {
  return Status(StatusCode::kUnavailable, std::move(m));
}

}  // namespace batchd::cuda

// Returns `expr` (a batchd::cuda::Status) from the enclosing function when it
// is not OK.
#define BATCHD_CUDA_RETURN_IF_ERROR(expr)                  \
  do {                                                     \
    ::batchd::cuda::Status batchd_cuda_status_ = (expr);   \
    if (!batchd_cuda_status_.ok()) return batchd_cuda_status_; \
  } while (false)

#endif  // BATCHD_CLIENT_CUDA_STATUS_H_

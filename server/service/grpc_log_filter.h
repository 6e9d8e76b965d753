// gRPC core's log lines, routed through one function
// (gpr_set_log_function) so that the lines a peer can cause at will are
// counted and rate-limited: a failed TLS handshake (a plaintext client, a
// port scanner, a client of another CA) makes gRPC's
// ssl_transport_security.cc log one ERROR line each, so any peer that can
// reach the port could otherwise fill the log. Such lines are counted in
// batchd_tls_handshake_failures_total and at most kTlsLogBurst of them are
// written per kTlsLogInterval, the next one saying how many were left out.
// gRPC's other ERROR lines share a second limit, kGrpcErrorLogBurst per
// kGrpcErrorLogInterval, so that no other line a peer can cause fills the
// log either. DEBUG and INFO lines (only with GRPC_VERBOSITY set to ask
// for them) are written as gRPC writes them. libprotobuf's lines have
// their own filter (protobuf_log_filter.h).
//
// The filter is process-wide, as gRPC's logging is. Thread-safe.
#ifndef BATCHD_SERVER_SERVICE_GRPC_LOG_FILTER_H_
#define BATCHD_SERVER_SERVICE_GRPC_LOG_FILTER_H_

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "server/metrics/metrics.h"

namespace batchd::server {

inline constexpr int kTlsLogBurst = 5;
inline constexpr absl::Duration kTlsLogInterval = absl::Seconds(10);
inline constexpr int kGrpcErrorLogBurst = 10;
inline constexpr absl::Duration kGrpcErrorLogInterval = absl::Seconds(10);

// Installs the filter (once per process; later calls only change the
// counter) and counts failed TLS handshakes in `tls_handshake_failures`
// (not owned; nullptr counts nothing) until RemoveGrpcLogCounter.
void InstallGrpcLogFilter(Counter* tls_handshake_failures);
// Stops counting in `counter` if it is the one installed (its owner is
// going away). The filter stays.
void RemoveGrpcLogCounter(Counter* counter);

// Whether gRPC's line from `file` saying `message` reports a failed TLS
// (or other security) handshake.
bool IsHandshakeFailure(absl::string_view file, absl::string_view message);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_GRPC_LOG_FILTER_H_

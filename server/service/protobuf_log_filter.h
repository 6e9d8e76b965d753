// libprotobuf's log lines, routed through one handler
// (google::protobuf::SetLogHandler) and rate-limited, as gRPC's are
// (grpc_log_filter.h): protobuf logs an ERROR line for each string that is
// not UTF-8 it parses or serializes, and peers choose what the daemon
// parses (and, through dataset and job names, some of what it
// serializes). At most kProtobufLogBurst lines are written per
// kProtobufLogInterval, the next one saying how many were left out; FATAL
// lines are always written.
//
// Request strings are checked before protobuf sees them (ParseRequest), so
// this is the bound for whatever else protobuf may log.
//
// The handler is process-wide, as protobuf's logging is. Thread-safe.
#ifndef BATCHD_SERVER_SERVICE_PROTOBUF_LOG_FILTER_H_
#define BATCHD_SERVER_SERVICE_PROTOBUF_LOG_FILTER_H_

#include "absl/time/time.h"

namespace batchd::server {

inline constexpr int kProtobufLogBurst = 5;
inline constexpr absl::Duration kProtobufLogInterval = absl::Seconds(10);

// Installs the handler; later calls do nothing.
void InstallProtobufLogFilter();

}  // namespace batchd::server

#endif  // BATCHD_SERVER_SERVICE_PROTOBUF_LOG_FILTER_H_

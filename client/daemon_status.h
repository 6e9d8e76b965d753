// The two one-shot questions a tool asks a daemon: its admin status
// (AdminService.GetStatus) and the datasets it serves
// (DataService.ListDatasets). One implementation for the CLI, `batchd top`,
// the Loader's diagnosis and the Python binding.
//
//   ASSIGN_OR_RETURN(batchd::v1::ServerStatus status,
//                    FetchServerStatus(channel, absl::Seconds(2)));
//
// Thread-safe functions; each blocks for at most its `timeout`.
#ifndef BATCHD_CLIENT_DAEMON_STATUS_H_
#define BATCHD_CLIENT_DAEMON_STATUS_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"
#include "client/channel_security.h"
#include "grpcpp/channel.h"

namespace batchd::client {

// The daemon's AdminService.GetStatus over `channel`, waiting at most
// `timeout`. Errors carry gRPC's code and message, prefixed with "GetStatus: ".
absl::StatusOr<batchd::v1::ServerStatus> FetchServerStatus(
    const std::shared_ptr<grpc::Channel>& channel, absl::Duration timeout);

// The datasets the daemon at `endpoint` serves, over `channel` (made with
// `security`), waiting at most `timeout`. Errors carry gRPC's code, and a
// message "ListDatasets at <endpoint>: ..." with a hint when the cause is
// likely a TLS or plaintext mismatch (WithConnectionHint).
absl::StatusOr<batchd::v1::ListDatasetsResponse> ListDatasets(
    const std::shared_ptr<grpc::Channel>& channel, absl::string_view endpoint,
    const ChannelSecurity& security, absl::Duration timeout);

}  // namespace batchd::client

#endif  // BATCHD_CLIENT_DAEMON_STATUS_H_

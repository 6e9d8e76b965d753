// batchd-health: asks a daemon's standard gRPC health service
// (grpc.health.v1.Health/Check) whether it serves, for container
// HEALTHCHECKs and scripts.
//
//   batchd-health --endpoint localhost:7070 [--service batchd.v1.DataService]
//                 [--timeout_ms 2000]
//   batchd-health --endpoint batchd-0:7070 --tls_ca ca.pem
//                 [--tls_cert client.pem --tls_key client.key]
//                 [--tls_server_name batchd-0] [--token_file batchd.token]
//
// Prints the answer and exits 0 when it is SERVING, 1 otherwise (NOT_SERVING,
// draining, unknown service, unreachable, timed out, or a usage error; Docker
// reserves exit code 2). TLS, mutual TLS and the token as batchd-client and
// batchd-top take them (client/security_flags.h).
#include <chrono>
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "client/channel_security.h"
#include "client/security_flags.h"
#include "grpcpp/grpcpp.h"

ABSL_FLAG(std::string, endpoint, "", "The daemon, host:port.");
ABSL_FLAG(std::string, service, "",
          "Service to ask about; empty (the default) asks about the whole "
          "daemon. batchd answers for \"\" and \"batchd.v1.DataService\".");
ABSL_FLAG(int, timeout_ms, 2000,
          "Deadline of the check, milliseconds, connecting included.");

namespace {

constexpr char kUsage[] =
    "batchd-health: exits 0 when a batchd daemon's gRPC health service says "
    "SERVING, 1 otherwise.\n"
    "Usage: batchd-health --endpoint host:port [--service NAME] "
    "[--timeout_ms 2000] [--tls_ca ca.pem [--tls_cert c.pem --tls_key c.key] "
    "[--tls_server_name NAME]] [--token_file FILE]";

const char* StatusName(grpc::health::v1::HealthCheckResponse::ServingStatus s) {
  using grpc::health::v1::HealthCheckResponse;
  switch (s) {
    case HealthCheckResponse::SERVING:
      return "SERVING";
    case HealthCheckResponse::NOT_SERVING:
      return "NOT_SERVING";
    case HealthCheckResponse::SERVICE_UNKNOWN:
      return "SERVICE_UNKNOWN";
    default:
      return "UNKNOWN";
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(kUsage);
  batchd::client::ShowToolFlagsInHelp("tools/health_check.cc");
  absl::ParseCommandLine(argc, argv);
  const std::string endpoint = absl::GetFlag(FLAGS_endpoint);
  const std::string service = absl::GetFlag(FLAGS_service);
  const int timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (endpoint.empty() || timeout_ms <= 0) {
    std::fprintf(stderr, "batchd-health: %s\n%s\n",
                 endpoint.empty() ? "--endpoint is required"
                                  : "--timeout_ms must be positive",
                 kUsage);
    return 1;
  }
  const std::string what =
      service.empty() ? endpoint : endpoint + " service '" + service + "'";

  absl::StatusOr<batchd::client::ChannelSecurity> security =
      batchd::client::ChannelSecurity::Load(
          batchd::client::SecurityOptionsFromFlags());
  if (!security.ok()) {
    std::fprintf(stderr, "batchd-health: %s\n",
                 std::string(security.status().message()).c_str());
    return 1;
  }
  auto stub = grpc::health::v1::Health::NewStub(
      batchd::client::NewBatchdChannel(endpoint, *security));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(timeout_ms));
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    // NOT_FOUND is the health service's answer for a name it does not know.
    if (status.error_code() == grpc::StatusCode::NOT_FOUND) {
      std::printf("%s: SERVICE_UNKNOWN\n", what.c_str());
    } else {
      std::printf("%s: no answer (gRPC code %d): %s\n", what.c_str(),
                  static_cast<int>(status.error_code()),
                  batchd::client::WithConnectionHint(status.error_message(),
                                                     *security)
                      .c_str());
    }
    return 1;
  }
  std::printf("%s: %s\n", what.c_str(), StatusName(response.status()));
  return response.status() ==
                 grpc::health::v1::HealthCheckResponse::SERVING
             ? 0
             : 1;
}

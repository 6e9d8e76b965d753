#include "server/service/grpc_log_filter.h"

#include <string>

#include "gmock/gmock.h"
#include "grpc/grpc.h"
#include "grpc/support/log.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;

constexpr char kSslFile[] = "src/core/tsi/ssl_transport_security.cc";

size_t Lines(const std::string& text, const std::string& needle) {
  size_t n = 0, at = 0;
  while ((at = text.find(needle, at)) != std::string::npos) {
    ++n;
    at += needle.size();
  }
  return n;
}

TEST(GrpcLogFilterTest, RecognisesHandshakeFailures) {
  EXPECT_TRUE(IsHandshakeFailure(
      kSslFile, "Handshake failed with fatal error SSL_ERROR_SSL: error"));
  EXPECT_TRUE(IsHandshakeFailure(
      "src/core/lib/security/transport/security_handshaker.cc",
      "Security handshake failed: {\"created\"}"));
  EXPECT_FALSE(IsHandshakeFailure("src/core/lib/surface/server.cc",
                                  "Handshake failed"));
  EXPECT_FALSE(IsHandshakeFailure(kSslFile, "Invalid private key."));
}

TEST(GrpcLogFilterTest, CountsEveryFailedHandshakeAndLogsAFew) {
  grpc_init();  // reads GRPC_VERBOSITY, as in the daemon
  Counter failures;
  InstallGrpcLogFilter(&failures);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 200; ++i) {
    gpr_log(kSslFile, 1501, GPR_LOG_SEVERITY_ERROR,
            "Handshake failed with fatal error SSL_ERROR_SSL: %d", i);
  }
  gpr_log("src/core/lib/surface/server.cc", 7, GPR_LOG_SEVERITY_ERROR,
          "something else %d", 42);
  const std::string log = ::testing::internal::GetCapturedStderr();
  RemoveGrpcLogCounter(&failures);
  EXPECT_EQ(failures.value(), 200u);
  EXPECT_EQ(Lines(log, "Handshake failed"), static_cast<size_t>(kTlsLogBurst))
      << log;
  // Other lines pass as gRPC writes them.
  EXPECT_THAT(log, HasSubstr("server.cc:7] something else 42\n"));
  // Not counted once removed.
  gpr_log(kSslFile, 1501, GPR_LOG_SEVERITY_ERROR, "Handshake failed: late");
  EXPECT_EQ(failures.value(), 200u);
  grpc_shutdown();
}

}  // namespace
}  // namespace batchd::server

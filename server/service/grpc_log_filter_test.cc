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

TEST(GrpcLogFilterTest, CountsEveryFailedHandshakeAndLogsAFewOfEachKind) {
  grpc_init();  // reads GRPC_VERBOSITY, as in the daemon
  Counter failures;
  InstallGrpcLogFilter(&failures);
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 200; ++i) {
    gpr_log(kSslFile, 1501, GPR_LOG_SEVERITY_ERROR,
            "Handshake failed with fatal error SSL_ERROR_SSL: %d", i);
  }
  // gRPC's other error lines share their own limit.
  for (int i = 0; i < 100; ++i) {
    gpr_log("src/core/lib/surface/server.cc", 7, GPR_LOG_SEVERITY_ERROR,
            "something else %d", 42 + i);
  }
  // Lines below ERROR, written only when GRPC_VERBOSITY asks for them,
  // all pass.
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_DEBUG);
  for (int i = 0; i < 30; ++i) {
    gpr_log("src/core/lib/surface/server.cc", 9, GPR_LOG_SEVERITY_INFO,
            "asked for %d", i);
  }
  gpr_set_log_verbosity(GPR_LOG_SEVERITY_ERROR);
  const std::string log = ::testing::internal::GetCapturedStderr();
  RemoveGrpcLogCounter(&failures);
  EXPECT_EQ(failures.value(), 200u);
  EXPECT_EQ(Lines(log, "Handshake failed"), static_cast<size_t>(kTlsLogBurst))
      << log;
  // Other lines are written as gRPC writes them, a few of a flood.
  EXPECT_THAT(log, HasSubstr("server.cc:7] something else 42\n"));
  EXPECT_EQ(Lines(log, "something else"),
            static_cast<size_t>(kGrpcErrorLogBurst));
  EXPECT_EQ(Lines(log, "] asked for "), 30u);
  // Not counted once removed.
  gpr_log(kSslFile, 1501, GPR_LOG_SEVERITY_ERROR, "Handshake failed: late");
  EXPECT_EQ(failures.value(), 200u);
  grpc_shutdown();
}

}  // namespace
}  // namespace batchd::server

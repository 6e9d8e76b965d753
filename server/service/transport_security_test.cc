#include "server/service/transport_security.h"

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;

TEST(TransportSecurityTest, PlaintextOffTheLoopbackNeedsInsecure) {
  EXPECT_TRUE(CheckPlaintextAllowed({"127.0.0.1:7070", "unix:/s"},
                                    /*insecure=*/false)
                  .ok());
  const absl::Status refused =
      CheckPlaintextAllowed({"127.0.0.1:7070", "0.0.0.0:7070"}, false);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), HasSubstr("plaintext on 0.0.0.0:7070"));
  EXPECT_THAT(refused.message(), HasSubstr("--tls-cert"));
  EXPECT_THAT(refused.message(), HasSubstr("--insecure"));
  EXPECT_TRUE(CheckPlaintextAllowed({"0.0.0.0:7070"}, /*insecure=*/true).ok());
}

TEST(TransportSecurityTest, CredentialsNeedBothFilesAndPem) {
  const std::string dir = ::testing::TempDir();
  const std::string not_pem = dir + "/transport_security_test_not.pem";
  std::ofstream(not_pem) << "not a certificate\n";
  TlsFiles only_cert;
  only_cert.cert_file = not_pem;
  EXPECT_THAT(MakeServerCredentials(only_cert).status().message(),
              HasSubstr("--tls-cert and --tls-key go together"));
  TlsFiles missing;
  missing.cert_file = dir + "/transport_security_test_missing.pem";
  missing.key_file = not_pem;
  EXPECT_THAT(MakeServerCredentials(missing).status().message(),
              HasSubstr("--tls-cert: cannot read"));
  TlsFiles garbage;
  garbage.cert_file = not_pem;
  garbage.key_file = not_pem;
  const absl::Status status = MakeServerCredentials(garbage).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("holds no PEM block"));
}

}  // namespace
}  // namespace batchd::server

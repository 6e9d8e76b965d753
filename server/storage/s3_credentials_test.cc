#include "server/storage/s3_credentials.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kFile[] = R"(# comment
[default]
aws_access_key_id = AKIDEXAMPLE
aws_secret_access_key=wJalrXUtnFEMI/K7MDENG
 aws_session_token = tok==

[prod]
aws_access_key_id = PRODKEY
aws_secret_access_key = PRODSECRET
)";

TEST(ParseCredentialsFileTest, PicksTheProfile) {
  ASSERT_OK_AND_ASSIGN(S3Credentials creds,
                       ParseCredentialsFile(kFile, "creds", "default"));
  EXPECT_EQ(creds.access_key, "AKIDEXAMPLE");
  EXPECT_EQ(creds.secret_key, "wJalrXUtnFEMI/K7MDENG");
  EXPECT_EQ(creds.session_token, "tok==");
  ASSERT_OK_AND_ASSIGN(creds, ParseCredentialsFile(kFile, "creds", "prod"));
  EXPECT_EQ(creds.access_key, "PRODKEY");
  EXPECT_EQ(creds.session_token, "");
}

TEST(ParseCredentialsFileTest, ErrorsNameTheFileNotTheSecret) {
  EXPECT_THAT(ParseCredentialsFile(kFile, "/etc/creds", "dev"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("/etc/creds"), HasSubstr("[dev]"))));
  EXPECT_THAT(
      ParseCredentialsFile("[default]\naws_secret_access_key = S3CR3T\n",
                           "/etc/creds", "default"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("go together"), Not(HasSubstr("S3CR3T")))));
}

}  // namespace
}  // namespace batchd::server

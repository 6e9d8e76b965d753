#include "server/service/auth.h"

#include <fstream>
#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAdmin[] = "admin-token-0123456789";
constexpr char kJobA[] = "job-a-token-0123456789";

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/auth_test_" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(TokenSetTest, ParsesTokensJobsCommentsAndBlankLines) {
  absl::StatusOr<TokenSet> set = TokenSet::Parse(
      absl::StrCat("# the trainers\n\n  ", kAdmin, "  \n", kJobA, "\tjob-a\n"),
      "tokens");
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->size(), 2u);
  absl::StatusOr<Caller> admin = set->Find(kAdmin);
  ASSERT_TRUE(admin.ok());
  EXPECT_EQ(admin->job, "");
  // Each token's identity names its line, never the token.
  EXPECT_EQ(admin->identity, "token on line 3 of --auth-token-file");
  absl::StatusOr<Caller> job = set->Find(kJobA);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job, "job-a");
  EXPECT_EQ(job->identity, "token on line 4 of --auth-token-file");
}

TEST(TokenSetTest, RejectsBadFilesNamingTheLine) {
  struct Case {
    std::string text;
    std::string message;
  };
  const Case cases[] = {
      {"short\n", "line 1: the token has 5 characters"},
      {absl::StrCat("# c\n", kAdmin, " job extra\n"), "line 2 has 3 fields"},
      {absl::StrCat(kAdmin, "\n", kAdmin, " job\n"), "line 2 repeats a token"},
      {"# only a comment\n\n", "holds no token"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<TokenSet> set = TokenSet::Parse(c.text, "f.txt");
    ASSERT_FALSE(set.ok()) << c.text;
    EXPECT_EQ(set.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(set.status().message(), HasSubstr(c.message));
    EXPECT_THAT(set.status().message(), HasSubstr("f.txt"));
  }
}

TEST(AuthorizerTest, WithoutAFileEveryCallIsAnyJob) {
  Authorizer open;
  EXPECT_FALSE(open.required());
  absl::StatusOr<Caller> caller = open.Authenticate("");
  ASSERT_TRUE(caller.ok());
  EXPECT_EQ(caller->job, "");
}

TEST(AuthorizerTest, MissingMalformedAndWrongTokensAreUnauthenticated) {
  auto authorizer = Authorizer::Create(
      WriteFile("tokens1", absl::StrCat(kAdmin, "\n", kJobA, " job-a\n")));
  ASSERT_TRUE(authorizer.ok()) << authorizer.status();
  ASSERT_TRUE((*authorizer)->required());
  for (const std::string& header :
       {std::string(), std::string(kAdmin), absl::StrCat("Basic ", kAdmin),
        absl::StrCat("Bearer ", kAdmin, "x"), std::string("Bearer "),
        absl::StrCat("Bearer ", std::string(kAdmin).substr(1))}) {
    absl::StatusOr<Caller> caller = (*authorizer)->Authenticate(header);
    ASSERT_FALSE(caller.ok()) << header;
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated);
    // The message never echoes a token, right or wrong.
    EXPECT_THAT(caller.status().message(), Not(HasSubstr("token-0123")));
  }
  absl::StatusOr<Caller> job =
      (*authorizer)->Authenticate(absl::StrCat("Bearer ", kJobA));
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(job->job, "job-a");
}

TEST(AuthorizerTest, HttpAcceptsBearerAndBasicWithTheTokenAsPassword) {
  auto authorizer = Authorizer::Create(
      WriteFile("tokens3", absl::StrCat(kAdmin, "\n", kJobA, " job-a\n")));
  ASSERT_TRUE(authorizer.ok()) << authorizer.status();
  EXPECT_TRUE((*authorizer)->AuthenticateHttp(absl::StrCat("Bearer ", kAdmin))
                  .ok());
  absl::StatusOr<Caller> basic = (*authorizer)->AuthenticateHttp(
      absl::StrCat("Basic ", absl::Base64Escape(absl::StrCat("me:", kJobA))));
  ASSERT_TRUE(basic.ok()) << basic.status();
  EXPECT_EQ(basic->job, "job-a");
  for (const std::string& header :
       {std::string(), absl::StrCat("Basic ", kAdmin),
        absl::StrCat("Basic ", absl::Base64Escape(kAdmin)),
        absl::StrCat("Basic ", absl::Base64Escape(absl::StrCat("me:", kAdmin,
                                                               "x")))}) {
    absl::StatusOr<Caller> caller = (*authorizer)->AuthenticateHttp(header);
    ASSERT_FALSE(caller.ok()) << header;
    EXPECT_EQ(caller.status().code(), absl::StatusCode::kUnauthenticated);
    EXPECT_THAT(caller.status().message(), Not(HasSubstr("token-0123")));
  }
}

TEST(AuthorizerTest, ReloadReplacesTokensAndKeepsThemOnError) {
  const std::string path = WriteFile("tokens2", absl::StrCat(kAdmin, "\n"));
  auto authorizer = Authorizer::Create(path);
  ASSERT_TRUE(authorizer.ok());
  std::ofstream(path) << kJobA << " job-a\n";
  ASSERT_TRUE((*authorizer)->Reload().ok());
  EXPECT_FALSE((*authorizer)->Authenticate(absl::StrCat("Bearer ", kAdmin)).ok());
  EXPECT_TRUE((*authorizer)->Authenticate(absl::StrCat("Bearer ", kJobA)).ok());
  std::ofstream(path) << "tooshort\n";
  const absl::Status reloaded = (*authorizer)->Reload();
  EXPECT_EQ(reloaded.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE((*authorizer)->Authenticate(absl::StrCat("Bearer ", kJobA)).ok());
}

TEST(AuthorizerTest, AMissingFileFailsCreate) {
  auto authorizer = Authorizer::Create("/nonexistent/batchd-tokens");
  ASSERT_FALSE(authorizer.ok());
  EXPECT_THAT(authorizer.status().message(),
              HasSubstr("--auth-token-file: cannot read /nonexistent"));
}

TEST(AuthTest, JobBoundTokensStreamOnlyForTheirJobAndDoNotAdminister) {
  const Caller admin{""};
  const Caller job_a{"job-a"};
  EXPECT_TRUE(CheckJob(admin, "anything").ok());
  EXPECT_TRUE(CheckJob(job_a, "job-a").ok());
  const absl::Status other = CheckJob(job_a, "job-b");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(other.message(), HasSubstr("only stream for job \"job-a\""));
  EXPECT_TRUE(CheckAdmin(admin, "SetWorkers").ok());
  EXPECT_EQ(CheckAdmin(job_a, "SetWorkers").code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace
}  // namespace batchd::server

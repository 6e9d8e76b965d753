// S3Credentials: the access key, secret and session token S3 requests are
// signed with, from an AWS shared-credentials file or the AWS_*
// environment variables. The secret is never printed: errors name the file
// and the key, never a value.
#ifndef BATCHD_SERVER_STORAGE_S3_CREDENTIALS_H_
#define BATCHD_SERVER_STORAGE_S3_CREDENTIALS_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd::server {

struct S3Credentials {
  std::string access_key;     // empty: requests go unsigned
  std::string secret_key;
  std::string session_token;  // may be empty
};

// The [`profile`] section of an AWS shared-credentials file's `text`
// (aws_access_key_id, aws_secret_access_key, aws_session_token).
// `file` names the file in errors. INVALID_ARGUMENT when the profile is
// missing or has a key id without a secret.
absl::StatusOr<S3Credentials> ParseCredentialsFile(absl::string_view text,
                                                   absl::string_view file,
                                                   absl::string_view profile);

// `credentials_file`'s [default] profile when it is not empty, else
// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (empty
// credentials when none is set).
absl::StatusOr<S3Credentials> LoadS3Credentials(
    const std::string& credentials_file);

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_S3_CREDENTIALS_H_

// ObjectStore against S3: s3rver (SigV4 checked) started by the test, with
// HttpFaultProxy in front of it for the listing's and the reads' faults.
#include "server/storage/object_store.h"

#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/http_fault_proxy.h"
#include "testing/object_servers.h"
#include "testing/status_matchers.h"
#include "server/storage/object_store_test_util.h"

namespace batchd::server {
namespace {

using ::batchd::testing::HttpFault;
using ::batchd::testing::HttpFaultProxy;
using ::batchd::testing::MakeTempDir;
using ::batchd::testing::ObjectServer;
using ::batchd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using v1::DatasetConfig;

class S3StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<ObjectServer>> s3 =
        testing::StartS3rver(MakeTempDir("s3"), {"bkt"});
    ASSERT_TRUE(s3.ok()) << s3.status();
    s3_ = *std::move(s3);
    // The proxy in front of s3rver injects the faults of the tests below.
    absl::StatusOr<std::unique_ptr<HttpFaultProxy>> proxy =
        HttpFaultProxy::Start(s3_->port());
    ASSERT_TRUE(proxy.ok()) << proxy.status();
    proxy_ = *std::move(proxy);
    for (int i = 0; i < 5; ++i) {
      shards_.push_back(Bytes(20000 + 100 * i, 10 + i));
      ASSERT_OK(testing::S3PutObject(s3_->url(), "bkt",
                                     absl::StrCat("train/s-", i, ".tar"),
                                     shards_[i]));
    }
    ASSERT_OK(testing::S3PutObject(s3_->url(), "bkt", "train/classes.txt",
                                   "cat\ndog\n"));
    ASSERT_OK(testing::S3PutObject(s3_->url(), "bkt", "other/x.tar", "x"));
    config_.set_name("s3data");
    config_.set_format(DatasetConfig::TAR_SHARDS);
    config_.set_path("s3://bkt/train/");
    config_.set_endpoint(proxy_->url());
    config_.set_region(testing::kS3rverRegion);
    credentials_ = MakeTempDir("creds") + "/credentials";
    WriteFile(credentials_,
              absl::StrCat("[other]\naws_access_key_id = NOPE\n"
                           "aws_secret_access_key = NOPE\n\n[default]\n"
                           "aws_access_key_id = ",
                           testing::kS3rverAccessKey,
                           "\naws_secret_access_key = ",
                           testing::kS3rverSecretKey, "\n"));
    config_.set_credentials_file(credentials_);
  }

  std::unique_ptr<ObjectServer> s3_;
  std::unique_ptr<HttpFaultProxy> proxy_;  // checks signatures
  std::vector<std::string> shards_;
  DatasetConfig config_;
  std::string credentials_;
};

TEST_F(S3StoreTest, ListsAcrossPagesAndReadsRanges) {
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> listed,
                       store->List("s3://bkt/train/", ListOptions()));
  EXPECT_THAT(listed, SizeIs(6));  // 3 pages of 2
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(5));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(objects[i].url, absl::StrCat("s3://bkt/train/s-", i, ".tar"));
    EXPECT_EQ(objects[i].size, shards_[i].size());
    ASSERT_OK_AND_ASSIGN(ObjectInfo stat, store->Stat(objects[i].url));
    EXPECT_EQ(stat.etag, objects[i].etag);
    EXPECT_EQ(stat.size, objects[i].size);
  }
  absl::Status status;
  EXPECT_EQ(ReadAll(*store, objects[3], 0, objects[3].size, &status),
            shards_[3]);
  EXPECT_OK(status);
  EXPECT_EQ(ReadAll(*store, objects[4], 333, 4444, &status),
            shards_[4].substr(333, 4444));
  EXPECT_OK(status);

  config_.set_path("s3://bkt/nothing/");
  EXPECT_THAT(ResolveShardObjects(config_, *store),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("s3://bkt/nothing/")));
}

TEST_F(S3StoreTest, ShardListObjectAndEnvironmentCredentials) {
  ASSERT_OK(testing::S3PutObject(s3_->url(), "bkt", "shards.txt",
                                 "train/s-2.tar\n"));
  config_.clear_credentials_file();
  setenv("AWS_ACCESS_KEY_ID", testing::kS3rverAccessKey, 1);
  setenv("AWS_SECRET_ACCESS_KEY", testing::kS3rverSecretKey, 1);
  config_.set_path("s3://bkt/shards.txt");
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(1));
  EXPECT_EQ(objects[0].url, "s3://bkt/train/s-2.tar");
  EXPECT_EQ(objects[0].size, shards_[2].size());
  config_.set_path("");
  config_.add_shards("s3://bkt/train/s-{3..4}.tar");
  ASSERT_OK_AND_ASSIGN(objects, ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(2));
  EXPECT_EQ(objects[1].size, shards_[4].size());
}

TEST_F(S3StoreTest, WrongSecretIsPermissionDeniedWithoutTheSecret) {
  const std::string secret = "hunter2-not-the-secret";
  WriteFile(credentials_, absl::StrCat("[default]\naws_access_key_id = ",
                                       testing::kS3rverAccessKey,
                                       "\naws_secret_access_key = ", secret,
                                       "\n"));
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  absl::StatusOr<std::vector<ObjectInfo>> listed =
      ResolveShardObjects(config_, *store);
  EXPECT_THAT(listed, StatusIs(absl::StatusCode::kPermissionDenied,
                               AllOf(HasSubstr("s3://bkt/train/"),
                                     HasSubstr("s3data"),
                                     HasSubstr("check the credentials"),
                                     Not(HasSubstr(secret)))));
  const absl::Status stat = store->Stat("s3://bkt/train/s-0.tar").status();
  EXPECT_THAT(stat, StatusIs(absl::StatusCode::kPermissionDenied,
                             AllOf(HasSubstr("s3://bkt/train/s-0.tar"),
                                   Not(HasSubstr(secret)))));
}

TEST_F(S3StoreTest, VirtualHostStyle) {
  config_.set_endpoint(absl::StrCat("http://s3.localhost:", proxy_->port()));
  config_.set_s3_addressing(DatasetConfig::S3_VIRTUAL_HOST);
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(5));
  EXPECT_THAT(proxy_->last_request_head(),
              HasSubstr("Host: bkt.s3.localhost:"));
  absl::Status status;
  EXPECT_EQ(ReadAll(*store, objects[1], 5, 500, &status),
            shards_[1].substr(5, 500));
  EXPECT_OK(status);
  EXPECT_THAT(proxy_->last_request_head(), HasSubstr("GET /train/s-1.tar "));
}

TEST_F(S3StoreTest, SessionTokenIsSentAndSigned) {
  config_.clear_credentials_file();
  setenv("AWS_ACCESS_KEY_ID", testing::kS3rverAccessKey, 1);
  setenv("AWS_SECRET_ACCESS_KEY", testing::kS3rverSecretKey, 1);
  setenv("AWS_SESSION_TOKEN", "session-tok-123", 1);
  absl::StatusOr<std::unique_ptr<ObjectStore>> store =
      MakeObjectStore(config_, TestOptions());
  unsetenv("AWS_ACCESS_KEY_ID");
  unsetenv("AWS_SECRET_ACCESS_KEY");
  unsetenv("AWS_SESSION_TOKEN");
  ASSERT_OK(store);
  ASSERT_OK_AND_ASSIGN(ObjectInfo object,
                       (*store)->Stat("s3://bkt/train/s-2.tar"));
  EXPECT_EQ(object.size, shards_[2].size());
  const std::string head = proxy_->last_request_head();
  EXPECT_THAT(head, HasSubstr("x-amz-security-token: session-tok-123"));
  EXPECT_THAT(head, HasSubstr(";x-amz-security-token,"));  // signed
  EXPECT_THAT(head, Not(HasSubstr(testing::kS3rverSecretKey + std::string(
                                      "\r"))));
}

TEST_F(S3StoreTest, OverwrittenObjectIsFailedPrecondition) {
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(ObjectInfo object, store->Stat("s3://bkt/train/s-0.tar"));
  ASSERT_OK(testing::S3PutObject(s3_->url(), "bkt", "train/s-0.tar",
                                 Bytes(object.size, 77)));
  absl::Status status;
  ReadAll(*store, object, 0, 1000, &status);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                               AllOf(HasSubstr("s3://bkt/train/s-0.tar"),
                                     HasSubstr("changed since it was indexed"),
                                     HasSubstr("bytes=0-999"))));
}

TEST_F(S3StoreTest, WrongAccessKeyIsPermissionDenied) {
  // s3rver itself: an access key it does not know.
  config_.set_endpoint(s3_->url());
  WriteFile(credentials_, "[default]\naws_access_key_id = NOBODY\n"
                          "aws_secret_access_key = whatever-secret\n");
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  EXPECT_THAT(ResolveShardObjects(config_, *store),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("InvalidAccessKeyId"),
                             HasSubstr("s3://bkt/train/"),
                             Not(HasSubstr("whatever-secret")))));
}

TEST_F(S3StoreTest, ListingRetriesThroughFaults) {
  HttpFaultProxy* proxy = proxy_.get();
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  proxy->FailNext(HttpFault::kStatus500);
  proxy->FailNext(HttpFault::kNone);
  proxy->FailNext(HttpFault::kTruncateBody);
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(5));
  EXPECT_EQ(proxy->faulted(), 2);
  proxy->FailNext(HttpFault::kResetMidBody);
  absl::Status status;
  EXPECT_EQ(ReadAll(*store, objects[0], 10, 15000, &status),
            shards_[0].substr(10, 15000));
  EXPECT_OK(status);
}

// A store whose listing hands out the same continuation token again: an
// error naming the dataset after the second page, not a listing forever.
TEST_F(S3StoreTest, RepeatedContinuationTokenEndsTheListing) {
  proxy_->SetListing(/*keys=*/0, /*page_keys=*/1000, absl::ZeroDuration());
  proxy_->Always(HttpFault::kRepeatingListing);
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  EXPECT_THAT(
      ResolveShardObjects(config_, *store),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("dataset \"s3data\""),
                     HasSubstr("continuation token \"same-token\" a second "
                               "time (page 2, 2000 keys)"))));
  EXPECT_EQ(proxy_->requests(), 2);
}

// Past --max-shards keys, a listing ends with RESOURCE_EXHAUSTED; only
// *.tar keys are kept.
TEST_F(S3StoreTest, ListingStopsAtTheKeyBound) {
  proxy_->SetListing(/*keys=*/5000, /*page_keys=*/100, absl::ZeroDuration());
  proxy_->Always(HttpFault::kListing);
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  EXPECT_THAT(ResolveShardObjects(config_, *store, /*max_shards=*/1000),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("dataset \"s3data\""),
                             HasSubstr("went past 1000 keys (11 pages)"),
                             HasSubstr("--max-shards"))));
  EXPECT_EQ(proxy_->requests(), 11);
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> all,
                       ResolveShardObjects(config_, *store, 5000));
  ASSERT_THAT(all, SizeIs(5000));
  EXPECT_EQ(all[4999].url, "s3://bkt/train/shard-0004999.tar");
}

}  // namespace
}  // namespace batchd::server

// ObjectStore against real servers started by the test: nginx (HTTP,
// HTTPS), s3rver (S3 with SigV4) and HttpFaultProxy in front of nginx for
// every fault a remote read can meet.
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

namespace batchd::server {
namespace {

using ::batchd::testing::HttpFault;
using ::batchd::testing::HttpFaultProxy;
using ::batchd::testing::MakeTempDir;
using ::batchd::testing::ObjectServer;
using ::batchd::testing::StatusIs;
using ::testing::_;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::SizeIs;
using v1::DatasetConfig;

// `size` bytes that differ with `seed` and position.
std::string Bytes(size_t size, uint32_t seed) {
  std::string out(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<char>(x >> 24);
  }
  return out;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Fast retries: tests fail in milliseconds, stall in about a second.
ObjectStoreOptions TestOptions() {
  ObjectStoreOptions options;
  options.connections = 4;
  options.max_attempts = 4;
  options.initial_backoff = absl::Milliseconds(5);
  options.max_backoff = absl::Milliseconds(50);
  options.deadline = absl::Seconds(20);
  options.connect_timeout = absl::Seconds(2);
  options.stall_timeout = absl::Seconds(1);
  options.list_page_size = 2;
  return options;
}

std::string ReadAll(ObjectStore& store, const ObjectInfo& object,
                    uint64_t offset, uint64_t size, absl::Status* status) {
  std::string out(size, '\0');
  *status = store.ReadRange(object, offset, size,
                            reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

class NginxStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = MakeTempDir("www");
    for (int i = 0; i < 3; ++i) {
      shards_.push_back(Bytes(100000 + 1000 * i, i));
      WriteFile(absl::StrCat(root_, "/shard-00000", i, ".tar"), shards_[i]);
    }
    absl::StatusOr<std::unique_ptr<ObjectServer>> nginx =
        testing::StartNginx(root_);
    ASSERT_TRUE(nginx.ok()) << nginx.status();
    nginx_ = *std::move(nginx);
    config_.set_name("web");
    config_.set_format(DatasetConfig::TAR_SHARDS);
    config_.set_path(nginx_->url() + "/shard-{000000..000002}.tar");
  }

  std::string root_;
  std::vector<std::string> shards_;
  std::unique_ptr<ObjectServer> nginx_;
  DatasetConfig config_;
};

TEST_F(NginxStoreTest, BraceRangeResolvesAndRangesReadBack) {
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(3));
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(objects[i].url,
              absl::StrCat(nginx_->url(), "/shard-00000", i, ".tar"));
    EXPECT_EQ(objects[i].size, shards_[i].size());
    EXPECT_FALSE(objects[i].etag.empty());
  }
  absl::Status status;
  EXPECT_EQ(ReadAll(*store, objects[1], 0, objects[1].size, &status),
            shards_[1]);
  EXPECT_OK(status);
  EXPECT_EQ(ReadAll(*store, objects[2], 12345, 5000, &status),
            shards_[2].substr(12345, 5000));
  EXPECT_OK(status);
  EXPECT_EQ(ReadAll(*store, objects[0], objects[0].size - 1, 1, &status),
            shards_[0].substr(objects[0].size - 1));
  EXPECT_OK(status);
  EXPECT_OK(store->ReadRange(objects[0], 10, 0, nullptr));
  std::string past(10, '\0');
  EXPECT_THAT(store->ReadRange(objects[0], objects[0].size - 5, 10,
                               reinterpret_cast<uint8_t*>(past.data())),
              StatusIs(absl::StatusCode::kOutOfRange,
                       HasSubstr(objects[0].url)));
}

TEST_F(NginxStoreTest, ShardListAndConfigShards) {
  WriteFile(root_ + "/train.txt",
            "# two shards\nshard-000002.tar\n\n" + nginx_->url() +
                "/shard-000000.tar\n");
  config_.set_path(nginx_->url() + "/train.txt");
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(2));
  EXPECT_EQ(objects[0].size, shards_[2].size());
  EXPECT_EQ(objects[1].size, shards_[0].size());

  config_.set_path("");
  config_.add_shards(nginx_->url() + "/shard-00000{1..2}.tar");
  ASSERT_OK_AND_ASSIGN(objects, ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(2));
  EXPECT_EQ(objects[0].size, shards_[1].size());
}

TEST_F(NginxStoreTest, MissingObjectNamesTheUrl) {
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  const std::string url = nginx_->url() + "/nope.tar";
  EXPECT_THAT(store->Stat(url),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(HasSubstr(url), HasSubstr("404"),
                             HasSubstr("wrong prefix or URL"),
                             HasSubstr("\"web\""))));
  config_.set_path(nginx_->url() + "/shard-{000000..000003}.tar");
  EXPECT_THAT(ResolveShardObjects(config_, *store),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("shard-000003.tar")));
  EXPECT_THAT(store->List(nginx_->url() + "/", ListOptions()),
              StatusIs(absl::StatusCode::kUnimplemented, HasSubstr("list")));
}

TEST_F(NginxStoreTest, ChangedObjectIsFailedPrecondition) {
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(ObjectInfo object,
                       store->Stat(nginx_->url() + "/shard-000000.tar"));
  WriteFile(root_ + "/shard-000000.tar", Bytes(object.size + 10, 99));
  absl::Status status;
  ReadAll(*store, object, 0, 100, &status);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                               AllOf(HasSubstr("changed since it was indexed"),
                                     HasSubstr(object.url))));

  // Without an ETag to compare, a different size gives the change away.
  ASSERT_OK_AND_ASSIGN(object, store->Stat(object.url));
  object.etag.clear();
  object.size += 5;
  ReadAll(*store, object, 0, 100, &status);
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                               AllOf(HasSubstr("changed since it was indexed"),
                                     HasSubstr("indexed as"))));
}

TEST_F(NginxStoreTest, HttpsWithCaFile) {
  const std::string url = nginx_->https_url() + "/shard-000001.tar";
  config_.set_path(url);
  config_.set_ca_file(nginx_->ca_file());
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  ASSERT_THAT(objects, SizeIs(1));
  absl::Status status;
  EXPECT_EQ(ReadAll(*store, objects[0], 777, 40000, &status),
            shards_[1].substr(777, 40000));
  EXPECT_OK(status);

  // Without the CA the certificate is not trusted: a clear, final error.
  config_.clear_ca_file();
  ASSERT_OK_AND_ASSIGN(auto untrusting, MakeObjectStore(config_, TestOptions()));
  EXPECT_THAT(untrusting->Stat(url),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(url), HasSubstr("ca_file"))));
}

TEST_F(NginxStoreTest, ConcurrentReadsShareAFewKeptAliveConnections) {
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  config_.set_path(proxy->url() + "/shard-{000000..000002}.tar");
  ObjectStoreOptions options = TestOptions();
  options.connections = 3;
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, options));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  const int accepted_before = proxy->connections_accepted();
  std::vector<std::thread> threads;
  std::vector<int> wrong(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const int shard = (t + i) % 3;
        const uint64_t offset = (t * 997 + i * 4099) % 90000;
        std::string dest(4096, '\0');
        const absl::Status status = store->ReadRange(
            objects[shard], offset, dest.size(),
            reinterpret_cast<uint8_t*>(dest.data()));
        if (!status.ok() ||
            dest != shards_[shard].substr(offset, dest.size())) {
          ++wrong[t];
        }
      }
    });
  }
  for (std::thread& t : threads) t.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
  EXPECT_LE(proxy->max_open_connections(), options.connections);
  EXPECT_LE(proxy->connections_accepted() - accepted_before,
            options.connections);
}

// Every fault the proxy injects, a few times in a row: the read retries
// and returns exactly the object's bytes.
class FaultTest : public NginxStoreTest,
                  public ::testing::WithParamInterface<HttpFault> {};

TEST_P(FaultTest, RetriedToTheSameBytes) {
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  proxy->SetLatency(absl::Milliseconds(50));
  config_.set_path(proxy->url() + "/shard-{000000..000002}.tar");
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  // A stall costs stall_timeout; latency is no failure, so only the first
  // request meets it.
  const int faults = GetParam() == HttpFault::kStall ||
                             GetParam() == HttpFault::kLatency
                         ? 1
                         : 2;
  proxy->FailNext(GetParam(), faults);
  absl::Status status;
  EXPECT_EQ(ReadAll(*store, objects[2], 1000, 50000, &status),
            shards_[2].substr(1000, 50000));
  EXPECT_OK(status);
  EXPECT_EQ(proxy->faulted(), faults);
}

INSTANTIATE_TEST_SUITE_P(
    AllTransient, FaultTest,
    ::testing::Values(HttpFault::kStatus500, HttpFault::kStatus429,
                      HttpFault::kResetMidBody, HttpFault::kStall,
                      HttpFault::kTruncateBody, HttpFault::kWrongContentRange,
                      HttpFault::kLatency),
    [](const ::testing::TestParamInfo<HttpFault>& info) {
      switch (info.param) {
        case HttpFault::kStatus500: return std::string("Status500");
        case HttpFault::kStatus429: return std::string("Status429");
        case HttpFault::kResetMidBody: return std::string("ResetMidBody");
        case HttpFault::kStall: return std::string("Stall");
        case HttpFault::kTruncateBody: return std::string("TruncateBody");
        case HttpFault::kWrongContentRange:
          return std::string("WrongContentRange");
        case HttpFault::kLatency: return std::string("Latency");
        default: return absl::StrCat("Fault", static_cast<int>(info.param));
      }
    });

// A fault on every request: after the bounded attempts, an error naming
// the URL, the range and what went wrong; never wrong bytes.
TEST_F(NginxStoreTest, PersistentFaultsEndInAClearError) {
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  config_.set_path(proxy->url() + "/shard-000000.tar");
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *store));
  const ObjectInfo& object = objects[0];
  struct Case {
    HttpFault fault;
    absl::StatusCode code;
    const char* says;
  };
  for (const Case& c : std::vector<Case>{
           {HttpFault::kStatus500, absl::StatusCode::kUnavailable, "HTTP 500"},
           {HttpFault::kStatus429, absl::StatusCode::kUnavailable, "HTTP 429"},
           {HttpFault::kResetMidBody, absl::StatusCode::kUnavailable, ""},
           {HttpFault::kTruncateBody, absl::StatusCode::kUnavailable, ""},
           {HttpFault::kWrongContentRange, absl::StatusCode::kUnavailable,
            "wrong Content-Range"},
           {HttpFault::kChangedEtag, absl::StatusCode::kFailedPrecondition,
            "changed since it was indexed"}}) {
    proxy->Always(c.fault);
    const int before = proxy->requests();
    std::string dest(3000, '\0');
    const absl::Status status = store->ReadRange(
        object, 100, 3000, reinterpret_cast<uint8_t*>(dest.data()));
    EXPECT_THAT(status,
                StatusIs(c.code, AllOf(HasSubstr(object.url),
                                       HasSubstr("bytes=100-3099"),
                                       HasSubstr(c.says))))
        << static_cast<int>(c.fault);
    const int attempts = proxy->requests() - before;
    if (c.code == absl::StatusCode::kUnavailable) {
      EXPECT_EQ(attempts, TestOptions().max_attempts);
      EXPECT_THAT(std::string(status.message()), HasSubstr("gave up after 4"));
    } else {
      EXPECT_EQ(attempts, 1);
    }
  }
  proxy->Always(HttpFault::kNone);
  std::string dest(3000, '\0');
  EXPECT_OK(store->ReadRange(object, 100, 3000,
                             reinterpret_cast<uint8_t*>(dest.data())));
  EXPECT_EQ(dest, shards_[0].substr(100, 3000));
}

TEST_F(NginxStoreTest, DeadlineBoundsRetries) {
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  config_.set_path(proxy->url() + "/shard-000000.tar");
  ObjectStoreOptions options = TestOptions();
  options.max_attempts = 1000;
  options.initial_backoff = absl::Milliseconds(20);
  options.deadline = absl::Milliseconds(300);
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, options));
  ASSERT_OK_AND_ASSIGN(ObjectInfo object, store->Stat(config_.path()));
  proxy->Always(HttpFault::kStatus500);
  std::string dest(10, '\0');
  EXPECT_THAT(store->ReadRange(object, 0, 10,
                               reinterpret_cast<uint8_t*>(dest.data())),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("HTTP 500")));
  EXPECT_LT(proxy->requests(), 100);
}

// Redirects: none followed by default; with same-origin only those to the
// same scheme, host and port. A redirect elsewhere never reaches its
// target.
TEST_F(NginxStoreTest, RedirectsAreFollowedOnlyToTheSameOriginWhenAllowed) {
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  // Another port: a second proxy that counts what reaches it.
  ASSERT_OK_AND_ASSIGN(auto elsewhere, HttpFaultProxy::Start(nginx_->port()));
  config_.set_path(proxy->url() + "/shard-000001.tar");

  proxy->SetRedirect(elsewhere->url());
  proxy->Always(HttpFault::kRedirect);
  for (RemoteRedirects policy :
       {RemoteRedirects::kNone, RemoteRedirects::kSameOrigin}) {
    ObjectStoreOptions options = TestOptions();
    options.redirects = policy;
    ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, options));
    EXPECT_THAT(
        ResolveShardObjects(config_, *store),
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 AllOf(HasSubstr("dataset \"web\""), HasSubstr("HTTP 302"),
                       HasSubstr(elsewhere->url() + "/shard-000001.tar"),
                       HasSubstr(policy == RemoteRedirects::kNone
                                     ? "--remote-redirects=none"
                                     : "another scheme, host or port"))));
  }
  EXPECT_EQ(elsewhere->requests(), 0);
  EXPECT_EQ(elsewhere->connections_accepted(), 0);

  // The same origin: followed under same-origin only.
  proxy->Always(HttpFault::kNone);
  proxy->SetRedirect(proxy->url());
  ObjectStoreOptions options = TestOptions();
  ASSERT_OK_AND_ASSIGN(auto strict, MakeObjectStore(config_, options));
  proxy->FailNext(HttpFault::kRedirect);
  EXPECT_THAT(ResolveShardObjects(config_, *strict),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("--remote-redirects=none")));
  options.redirects = RemoteRedirects::kSameOrigin;
  ASSERT_OK_AND_ASSIGN(auto same, MakeObjectStore(config_, options));
  proxy->FailNext(HttpFault::kRedirect);
  ASSERT_OK_AND_ASSIGN(std::vector<ObjectInfo> objects,
                       ResolveShardObjects(config_, *same));
  ASSERT_THAT(objects, SizeIs(1));
  EXPECT_EQ(objects[0].size, shards_[1].size());
  proxy->FailNext(HttpFault::kRedirect);
  absl::Status status;
  EXPECT_EQ(ReadAll(*same, objects[0], 10, 5000, &status),
            shards_[1].substr(10, 5000));
  EXPECT_OK(status);
  // A loop of same-origin redirects ends.
  proxy->Always(HttpFault::kRedirect);
  EXPECT_THAT(same->Stat(objects[0].url),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("more than 5 redirects")));
}

TEST_F(NginxStoreTest, ShardListLinesWithOtherSchemesAreRefused) {
  for (const std::string line :
       {"file:///etc/passwd", "gopher://127.0.0.1:70/_x", "ftp://h/x.tar",
        "dict://127.0.0.1:11211/stat"}) {
    WriteFile(root_ + "/list.txt", "shard-000000.tar\n" + line + "\n");
    config_.set_path(nginx_->url() + "/list.txt");
    ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
    EXPECT_THAT(ResolveShardObjects(config_, *store),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("dataset \"web\""),
                               HasSubstr("list.txt line 2"), HasSubstr(line),
                               HasSubstr("which is refused"),
                               Not(HasSubstr("404")))));
  }
  // And more lines than --max-shards.
  WriteFile(root_ + "/list.txt", "shard-000000.tar\nshard-000001.tar\n");
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  EXPECT_THAT(ResolveShardObjects(config_, *store, /*max_shards=*/1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 1 shards")));
}

// A read stalled in the middle of its body ends with CANCELLED as soon as
// the flag is set, not at the stall timeout.
TEST_F(NginxStoreTest, CancellationEndsATransferInFlight) {
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  config_.set_path(proxy->url() + "/shard-000000.tar");
  ObjectStoreOptions options = TestOptions();
  options.stall_timeout = absl::Minutes(5);
  options.deadline = absl::Minutes(5);
  auto cancelled = std::make_shared<std::atomic<bool>>(false);
  options.cancelled = cancelled;
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, options));
  ASSERT_OK_AND_ASSIGN(ObjectInfo object, store->Stat(config_.path()));
  proxy->SetStall(absl::Minutes(5));
  proxy->Always(HttpFault::kStall);
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cancelled->store(true);
  });
  absl::Status status;
  ReadAll(*store, object, 0, object.size, &status);
  canceller.join();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kCancelled,
                               AllOf(HasSubstr("dataset \"web\""),
                                     HasSubstr("the daemon is stopping"))));
  EXPECT_EQ(proxy->requests(), 2);  // the HEAD and the one stalled GET
  // Later requests do not start.
  EXPECT_THAT(store->Stat(config_.path()),
              StatusIs(absl::StatusCode::kCancelled, _));
  EXPECT_EQ(proxy->requests(), 2);
}

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

TEST(CredentialsTest, MissingProfileAndHalfCredentials) {
  DatasetConfig config;
  config.set_name("d");
  config.set_path("s3://b/p/");
  const std::string file = MakeTempDir("creds") + "/c";
  WriteFile(file, "[prod]\naws_access_key_id = A\naws_secret_access_key = S\n");
  config.set_credentials_file(file);
  EXPECT_THAT(MakeObjectStore(config, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("[default]"), Not(HasSubstr("= S")))));
  WriteFile(file, "[default]\naws_access_key_id = A\n");
  EXPECT_THAT(MakeObjectStore(config, 4),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("go together")));
  config.set_credentials_file(file + ".missing");
  EXPECT_THAT(MakeObjectStore(config, 4),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr(".missing")));
  EXPECT_THAT(MakeObjectStore(config, 0),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("at least 1")));
}

TEST(IsRemoteUrlTest, Schemes) {
  EXPECT_TRUE(IsRemoteUrl("s3://b/k"));
  EXPECT_TRUE(IsRemoteUrl("http://h/x.tar"));
  EXPECT_TRUE(IsRemoteUrl("https://h/x.tar"));
  EXPECT_FALSE(IsRemoteUrl("/data/x.tar"));
  EXPECT_FALSE(IsRemoteUrl("s3.tar"));
}

}  // namespace
}  // namespace batchd::server

// ObjectStore against real servers started by the test: nginx (HTTP,
// HTTPS), s3rver (S3 with SigV4) and HttpFaultProxy in front of nginx for
// every fault a remote read can meet.
#include "server/storage/object_store.h"

#include <stdlib.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iostream>
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
#include "server/storage/response_check.h"

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

// A changed object answers If-Match with 412 and no body; a store that
// ignores Range is named and its whole-object answer cut at the headers;
// an endless body is cut at the range. Each costs the store few bytes.
TEST_F(NginxStoreTest, AnswersAreJudgedBeforeTheirBodies) {
  // A large object: what a store sends past the headers shows.
  const std::string big = Bytes(uint64_t{64} << 20, 7);
  WriteFile(root_ + "/big.tar", big);
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, TestOptions()));
  ASSERT_OK_AND_ASSIGN(ObjectInfo object,
                       store->Stat(proxy->url() + "/big.tar"));
  std::string dest(3000, '\0');
  auto read = [&] {
    return store->ReadRange(object, 100, 3000,
                            reinterpret_cast<uint8_t*>(dest.data()));
  };

  proxy->Always(HttpFault::kObjectChanged);
  uint64_t sent = proxy->bytes_sent();
  int requests = proxy->requests();
  absl::Status status = read();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kFailedPrecondition,
                               AllOf(HasSubstr("HTTP 412"),
                                     HasSubstr("changed since it was indexed"),
                                     HasSubstr(object.url))));
  EXPECT_EQ(StoreFaultOf(status), StoreFault::kChanged);
  EXPECT_THAT(proxy->last_request_head(),
              HasSubstr(absl::StrCat("If-Match: ", object.etag)));
  EXPECT_EQ(proxy->requests() - requests, 1);
  EXPECT_LT(proxy->bytes_sent() - sent, 1024u);

  proxy->Always(HttpFault::kIgnoreRange);
  sent = proxy->bytes_sent();
  requests = proxy->requests();
  status = read();
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("the store ignores Range: answered 200 "
                                       "with the whole object (67108864 "
                                       "bytes)"),
                             HasSubstr(object.url))));
  EXPECT_EQ(StoreFaultOf(status), StoreFault::kIgnoresRange);
  EXPECT_EQ(proxy->requests() - requests, 1);
  const uint64_t ignored_range_bytes = proxy->bytes_sent() - sent;
  // Cut at the headers: what the sockets' buffers took, not the object.
  EXPECT_LT(ignored_range_bytes, big.size() / 4);
  // A read of the whole object is what such a store can serve.
  std::string whole(big.size(), '\0');
  EXPECT_OK(store->ReadRange(object, 0, big.size(),
                             reinterpret_cast<uint8_t*>(whole.data())));
  EXPECT_TRUE(whole == big);

  proxy->Always(HttpFault::kEndlessBody);
  sent = proxy->bytes_sent();
  requests = proxy->requests();
  status = read();
  EXPECT_THAT(status, StatusIs(absl::StatusCode::kUnavailable,
                               HasSubstr("more than the 3000 bytes asked")));
  const int endless_attempts = proxy->requests() - requests;
  EXPECT_EQ(endless_attempts, TestOptions().max_attempts);
  const uint64_t endless_bytes = proxy->bytes_sent() - sent;
  EXPECT_LT(endless_bytes, static_cast<uint64_t>(endless_attempts) * (16u << 20));
  std::cout << "store bytes sent: ignored Range " << ignored_range_bytes
            << " of " << big.size() << "; endless body " << endless_bytes
            << " over " << endless_attempts << " attempts\n";
}

// A store that drips: each attempt ends after the low-speed time, and every
// failed attempt is reported as slow.
TEST_F(NginxStoreTest, LowSpeedLimitEndsADrip) {
  ASSERT_OK_AND_ASSIGN(auto proxy, HttpFaultProxy::Start(nginx_->port()));
  ObjectStoreOptions options = TestOptions();
  options.max_attempts = 2;
  options.stall_timeout = absl::Seconds(30);  // the drip never stalls
  options.low_speed_bytes_per_s = 1000;
  options.low_speed_time = absl::Seconds(2);
  std::atomic<int> slow_faults{0};
  std::atomic<int> faults{0};
  options.on_fault = [&](const StoreFaultReport& report) {
    ++faults;
    if (report.slow && report.dataset == "web" &&
        report.what.find("too slow") != std::string::npos) {
      ++slow_faults;
    }
  };
  ASSERT_OK_AND_ASSIGN(auto store, MakeObjectStore(config_, options));
  ASSERT_OK_AND_ASSIGN(ObjectInfo object,
                       store->Stat(proxy->url() + "/shard-000000.tar"));
  proxy->SetDrip(absl::Milliseconds(100));
  proxy->Always(HttpFault::kDrip);
  std::string dest(3000, '\0');
  const absl::Time start = absl::Now();
  const absl::Status status = store->ReadRange(
      object, 0, 3000, reinterpret_cast<uint8_t*>(dest.data()));
  const absl::Duration took = absl::Now() - start;
  EXPECT_THAT(status,
              StatusIs(absl::StatusCode::kUnavailable,
                       AllOf(HasSubstr("too slow: under 1000 bytes/s for 2s"),
                             HasSubstr("--remote-low-speed-bytes-per-s"),
                             HasSubstr(object.url))));
  EXPECT_EQ(slow_faults.load(), 2);
  EXPECT_EQ(faults.load(), 2);
  // 2 attempts of about 2 s; without the limit, 300 s of drip each.
  EXPECT_LT(took, absl::Seconds(12));
  std::cout << "drip of 10 bytes/s: gave up after "
            << absl::FormatDuration(took) << "\n";
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

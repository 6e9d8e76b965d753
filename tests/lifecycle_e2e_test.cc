// End-to-end: the daemon's lifecycle as other programs see it, against real
// daemon processes: the grpc.health.v1 service (Check and Watch), server
// reflection, the SIGTERM drain contract of proto/batchd/v1/data.proto,
// PlanOpened.daemon, the stream limit, batchd-health and `batchd --help`.
//
// Drain tests hold a drain open deterministically: the test client stops
// reading a stream whose two requested batches (~31 MB each) cannot fit in
// gRPC's flow-control windows, so the daemon cannot finish sending them
// until the client reads again. No verdict depends on how fast anything
// runs; time limits below only guard against hangs.
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.grpc.pb.h"
#include "batchd/v1/data.grpc.pb.h"
#include "client/grpc_status.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"

namespace batchd::testing {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using ::testing::Contains;
using ::testing::HasSubstr;
using v1::StreamRequest;
using v1::StreamResponse;
using Stream = grpc::ClientReaderWriter<StreamRequest, StreamResponse>;

// Guards against hangs only.
constexpr absl::Duration kHangGuard = absl::Seconds(30);
// A drain deadline no test waits for: a daemon that exits under it did not
// wait for its deadline.
constexpr char kLongDrain[] = "120s";

std::chrono::system_clock::time_point GuardDeadline() {
  return std::chrono::system_clock::now() +
         std::chrono::milliseconds(absl::ToInt64Milliseconds(kHangGuard));
}

std::shared_ptr<grpc::Channel> Connect(const std::string& endpoint) {
  return grpc::CreateChannel(endpoint, grpc::InsecureChannelCredentials());
}

v1::Plan SmallPlan() {
  v1::Plan plan;
  plan.set_dataset("d");
  plan.set_batch_size(4);
  plan.set_seed(3);
  plan.mutable_pipeline()->mutable_eval()->set_size(32);
  return plan;
}

// Batches of 16 x 800 x 800 x 3 = 30.7 MB: two of them outstanding are far
// beyond what gRPC buffers for a client that does not read.
v1::Plan LargePlan() {
  v1::Plan plan;
  plan.set_dataset("d");
  plan.set_batch_size(16);
  plan.set_seed(5);
  plan.mutable_pipeline()->mutable_eval()->set_size(800);
  return plan;
}

// One raw StreamBatches call with its plan open.
struct OpenStream {
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream;
  v1::PlanOpened opened;
  // Set when the plan was refused instead.
  grpc::Status refused;
};

// Opens `plan`; on refusal `refused` holds the stream's status.
std::unique_ptr<OpenStream> Open(v1::DataService::Stub& stub,
                                 const v1::Plan& plan, uint32_t window) {
  auto s = std::make_unique<OpenStream>();
  s->context.set_deadline(GuardDeadline());
  s->stream = stub.StreamBatches(&s->context);
  StreamRequest open;
  *open.mutable_open()->mutable_plan() = plan;
  open.mutable_open()->set_window(window);
  s->stream->Write(open);
  StreamResponse response;
  if (s->stream->Read(&response) && response.has_opened()) {
    s->opened = response.opened();
  } else {
    s->stream->WritesDone();
    while (s->stream->Read(&response)) {
    }
    s->refused = s->stream->Finish();
    if (s->refused.ok()) {
      s->refused = grpc::Status(grpc::StatusCode::INTERNAL,
                                "the stream ended OK without PlanOpened");
    }
  }
  return s;
}

bool Request(Stream& stream, uint64_t epoch, std::vector<uint64_t> indices) {
  StreamRequest request;
  request.mutable_request()->set_epoch(epoch);
  for (uint64_t i : indices) request.mutable_request()->add_batch_indices(i);
  return stream.Write(request);
}

// What arrived for one batch.
struct Received {
  uint64_t total_bytes = 0;
  uint64_t bytes = 0;
  bool contiguous = true;
};

// Reads `stream` to its end: batches by index (header and chunks, checking
// that chunks are contiguous), rejections by index, and the final status.
struct StreamEnd {
  std::map<uint64_t, Received> batches;
  std::map<uint64_t, v1::RequestRejected> rejected;
  grpc::Status status;
};
StreamEnd ReadToEnd(Stream& stream, std::map<uint64_t, Received> batches) {
  StreamEnd end;
  end.batches = std::move(batches);
  StreamResponse response;
  while (stream.Read(&response)) {
    if (response.has_header()) {
      Received& r = end.batches[response.header().batch_index()];
      r.total_bytes = response.header().total_bytes();
    } else if (response.has_chunk()) {
      Received& r = end.batches[response.chunk().batch_index()];
      r.contiguous = r.contiguous && response.chunk().offset() == r.bytes;
      r.bytes += response.chunk().data().size();
    } else if (response.has_rejected()) {
      end.rejected[response.rejected().batch_index()] = response.rejected();
    }
  }
  end.status = stream.Finish();
  return end;
}

absl::StatusOr<HealthCheckResponse::ServingStatus> Check(
    const std::string& endpoint, const std::string& service) {
  auto stub = Health::NewStub(Connect(endpoint));
  grpc::ClientContext context;
  context.set_deadline(GuardDeadline());
  HealthCheckRequest request;
  request.set_service(service);
  HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) return client::FromGrpc(status);
  return response.status();
}

class LifecycleTest
    : public DatasetSuite</*images=*/48, /*classes=*/3,
                          /*seed=*/9> {
 protected:
  // Starts a daemon serving the dataset as "d", with `extra` flags.
  std::unique_ptr<DaemonProcess> StartDaemon(
      std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--dataset", "d=" + *dataset_,
                                     "--workers", "2"};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        DaemonProcess::Start(args);
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    return daemon.ok() ? *std::move(daemon) : nullptr;
  }
};

TEST_F(LifecycleTest, HealthCheckAnswersServingForTheDaemonAndDataService) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  EXPECT_EQ(Check(daemon->endpoint(), "").value(), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check(daemon->endpoint(), "batchd.v1.DataService").value(),
            HealthCheckResponse::SERVING);
  EXPECT_TRUE(absl::IsNotFound(
      Check(daemon->endpoint(), "no.such.Service").status()));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(LifecycleTest, ReflectionListsAndDescribesDataService) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  namespace reflection = grpc::reflection::v1alpha;
  auto stub = reflection::ServerReflection::NewStub(Connect(daemon->endpoint()));
  grpc::ClientContext context;
  context.set_deadline(GuardDeadline());
  auto stream = stub->ServerReflectionInfo(&context);

  reflection::ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  reflection::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const auto& service : response.list_services_response().service()) {
    services.push_back(service.name());
  }
  EXPECT_THAT(services, Contains("batchd.v1.DataService"));
  EXPECT_THAT(services, Contains("batchd.v1.AdminService"));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));

  // The service's file descriptor, as grpcurl fetches it to call the API.
  reflection::ServerReflectionRequest describe;
  describe.set_file_containing_symbol("batchd.v1.DataService");
  ASSERT_TRUE(stream->Write(describe));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_file_descriptor_response())
      << response.ShortDebugString();
  bool found = false;
  for (const std::string& bytes :
       response.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    if (file.name() != "batchd/v1/data.proto") continue;
    found = true;
    ASSERT_EQ(file.service_size(), 1);
    EXPECT_EQ(file.service(0).name(), "DataService");
    std::vector<std::string> methods;
    for (const auto& m : file.service(0).method()) methods.push_back(m.name());
    EXPECT_THAT(methods, Contains("StreamBatches"));
    EXPECT_EQ(file.options().java_package(), "dev.batchd.v1");
  }
  EXPECT_TRUE(found);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(LifecycleTest, ReflectionCanBeTurnedOff) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon({"--reflection=false"});
  ASSERT_NE(daemon, nullptr);
  namespace reflection = grpc::reflection::v1alpha;
  auto stub = reflection::ServerReflection::NewStub(Connect(daemon->endpoint()));
  grpc::ClientContext context;
  context.set_deadline(GuardDeadline());
  auto stream = stub->ServerReflectionInfo(&context);
  reflection::ServerReflectionRequest list;
  list.set_list_services("");
  stream->Write(list);
  stream->WritesDone();
  reflection::ServerReflectionResponse response;
  EXPECT_FALSE(stream->Read(&response));
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
  // Health does not depend on reflection.
  EXPECT_EQ(Check(daemon->endpoint(), "").value(), HealthCheckResponse::SERVING);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(LifecycleTest, PlanOpenedAndStatusCarryDaemonInfo) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon(
      {"--max-window", "7", "--default-window", "3", "--max-batch-size", "100",
       "--drain-deadline", "2.5", "--keepalive-min-ping-interval", "4s"});
  ASSERT_NE(daemon, nullptr);
  auto stub = v1::DataService::NewStub(Connect(daemon->endpoint()));
  std::unique_ptr<OpenStream> s = Open(*stub, SmallPlan(), /*window=*/0);
  ASSERT_TRUE(s->refused.ok()) << s->refused.error_message();
  const v1::DaemonInfo& info = s->opened.daemon();
  EXPECT_EQ(info.version(), BATCHD_VERSION);
  EXPECT_EQ(info.max_window(), 7u);
  EXPECT_EQ(info.default_window(), 3u);
  EXPECT_EQ(s->opened.window(), 3u);
  EXPECT_EQ(info.max_batch_size(), 100u);
  EXPECT_EQ(info.max_inbound_message_bytes(), 1u << 20);
  EXPECT_EQ(info.max_chunk_bytes(), (4u << 20) - 1024);
  EXPECT_EQ(info.min_ping_interval_ms(), 4000u);
  EXPECT_EQ(info.drain_deadline_ms(), 2500u);
  s->stream->WritesDone();
  EXPECT_TRUE(ReadToEnd(*s->stream, {}).status.ok());

  auto admin = v1::AdminService::NewStub(Connect(daemon->endpoint()));
  grpc::ClientContext context;
  context.set_deadline(GuardDeadline());
  v1::ServerStatus status;
  ASSERT_TRUE(admin->GetStatus(&context, v1::GetStatusRequest(), &status).ok());
  EXPECT_EQ(status.daemon().SerializeAsString(), info.SerializeAsString());
  EXPECT_FALSE(status.draining());
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(LifecycleTest, StreamsBeyondMaxOpenStreamsAreRefused) {
  std::unique_ptr<DaemonProcess> daemon =
      StartDaemon({"--max-open-streams", "1"});
  ASSERT_NE(daemon, nullptr);
  auto stub = v1::DataService::NewStub(Connect(daemon->endpoint()));
  std::unique_ptr<OpenStream> first = Open(*stub, SmallPlan(), 1);
  ASSERT_TRUE(first->refused.ok()) << first->refused.error_message();
  std::unique_ptr<OpenStream> second = Open(*stub, SmallPlan(), 1);
  EXPECT_EQ(second->refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  // With one place, the host's share (half, at least one) is that place:
  // the identity's cap is the limit named.
  EXPECT_THAT(second->refused.error_message(),
              HasSubstr("identity peer host 127.0.0.1 has 1 of its 1 streams "
                        "(--max-streams-per-identity)"));
  // The first stream is unaffected.
  ASSERT_TRUE(Request(*first->stream, 0, {0}));
  first->stream->WritesDone();
  StreamEnd end = ReadToEnd(*first->stream, {});
  EXPECT_TRUE(end.status.ok()) << end.status.error_message();
  ASSERT_EQ(end.batches.count(0), 1u);
  EXPECT_EQ(end.batches[0].bytes, 4u * 32 * 32 * 3);
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(LifecycleTest, BatchdHealthExitsZeroOnlyWhenServing) {
  std::unique_ptr<DaemonProcess> daemon = StartDaemon();
  ASSERT_NE(daemon, nullptr);
  const std::string tool = BuiltBinary("tools/batchd-health");
  CommandResult run = RunCommand({tool, "--endpoint", daemon->endpoint()});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("SERVING"));
  run = RunCommand({tool, "--endpoint", daemon->endpoint(), "--service",
                    "batchd.v1.DataService", "--timeout_ms", "5000"});
  EXPECT_EQ(run.exit_code, 0) << run.output;
  run = RunCommand({tool, "--endpoint", daemon->endpoint(), "--service",
                    "no.such.Service"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("SERVICE_UNKNOWN"));

  const std::string endpoint = daemon->endpoint();
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
  run = RunCommand({tool, "--endpoint", endpoint, "--timeout_ms", "2000"});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("no answer"));

  run = RunCommand({tool});
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--endpoint is required"));
}

TEST_F(LifecycleTest, HelpListsEveryLifecycleFlag) {
  CommandResult run = RunCommand({BuiltBinary("server/batchd"), "--help"});
  for (const char* flag :
       {"--drain_deadline", "--reflection", "--max_open_streams",
        "--max_concurrent_streams", "--keepalive_time", "--keepalive_timeout",
        "--keepalive_min_ping_interval", "--keepalive_max_ping_strikes",
        "--handshake_timeout", "--max_connection_idle", "--open_timeout",
        "--max_planless_streams_per_connection", "--max_streams_per_identity",
        "--max_identity_buffer_share", "--max_idle_jobs"}) {
    EXPECT_THAT(run.output, HasSubstr(flag));
  }
  EXPECT_THAT(run.output, HasSubstr("default: 10s;"));
  run = RunCommand({BuiltBinary("server/batchd"), "--version"});
  EXPECT_THAT(run.output, HasSubstr(absl::StrCat("batchd ", BATCHD_VERSION)));
}

TEST_F(LifecycleTest, BadDurationFlagsAreRefusedAtStart) {
  CommandResult run =
      RunCommand({BuiltBinary("server/batchd"), "--dataset", "d=" + *dataset_,
                  "--port", "0", "--drain-deadline", "soon"});
  EXPECT_NE(run.exit_code, 0);
  EXPECT_THAT(run.output, HasSubstr("drain_deadline"));
  EXPECT_THAT(run.output, HasSubstr("1500ms"));
  run = RunCommand({BuiltBinary("server/batchd"), "--dataset", "d=" + *dataset_,
                    "--port", "0", "--keepalive-timeout", "0"});
  EXPECT_EQ(run.exit_code, 2) << run.output;
  EXPECT_THAT(run.output, HasSubstr("--keepalive-timeout"));
}

// A daemon with a stream holding batches 0 and 1 of LargePlan in flight:
// their headers may have arrived, the rest waits for the client to read.
class DrainTest : public LifecycleTest {
 protected:
  void StartHeld(std::vector<std::string> extra) {
    daemon_ = StartDaemon(std::move(extra));
    ASSERT_NE(daemon_, nullptr);
    stub_ = v1::DataService::NewStub(Connect(daemon_->endpoint()));
    held_ = Open(*stub_, LargePlan(), /*window=*/2);
    ASSERT_TRUE(held_->refused.ok()) << held_->refused.error_message();
    ASSERT_GE(held_->opened.max_batch_bytes(), 30'000'000u);
    // One message naming both: the daemon decides a request's fate as a
    // whole, so one header arriving shows that both were accepted.
    ASSERT_TRUE(Request(*held_->stream, 0, {0, 1}));
    StreamResponse response;
    ASSERT_TRUE(held_->stream->Read(&response));
    ASSERT_TRUE(response.has_header()) << response.ShortDebugString();
    first_[response.header().batch_index()].total_bytes =
        response.header().total_bytes();
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<v1::DataService::Stub> stub_;
  std::unique_ptr<OpenStream> held_;
  std::map<uint64_t, Received> first_;  // the header read by StartHeld
};

TEST_F(DrainTest, SigtermFinishesInFlightBatchesAndSendsTheRestElsewhere) {
  StartHeld({"--drain-deadline", kLongDrain});
  const std::string endpoint = daemon_->endpoint();

  auto health = Health::NewStub(Connect(endpoint));
  grpc::ClientContext watch_context;
  watch_context.set_deadline(GuardDeadline());
  HealthCheckRequest watch_request;
  auto watch = health->Watch(&watch_context, watch_request);
  HealthCheckResponse update;
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::SERVING);

  daemon_->Terminate();

  // (a) Health goes NOT_SERVING; from here on the daemon is draining.
  ASSERT_TRUE(watch->Read(&update));
  EXPECT_EQ(update.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(endpoint, "").value(), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check(endpoint, "batchd.v1.DataService").value(),
            HealthCheckResponse::NOT_SERVING);
  CommandResult tool =
      RunCommand({BuiltBinary("tools/batchd-health"), "--endpoint", endpoint});
  EXPECT_EQ(tool.exit_code, 1) << tool.output;
  EXPECT_THAT(tool.output, HasSubstr("NOT_SERVING"));

  // (b) A new stream is refused with UNAVAILABLE and says why.
  std::unique_ptr<OpenStream> late = Open(*stub_, SmallPlan(), 1);
  EXPECT_EQ(late->refused.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(late->refused.error_message(),
              HasSubstr("batchd is draining (SIGTERM); connect to another "
                        "daemon"));

  // (c) A request on the open stream is rejected in-band with UNAVAILABLE;
  // the batches in flight arrive complete; then the stream ends UNAVAILABLE.
  ASSERT_TRUE(Request(*held_->stream, 0, {2}));
  StreamEnd end = ReadToEnd(*held_->stream, first_);
  ASSERT_EQ(end.batches.size(), 2u);
  for (uint64_t index : {0, 1}) {
    const Received& r = end.batches[index];
    EXPECT_EQ(r.total_bytes, held_->opened.max_batch_bytes()) << index;
    EXPECT_EQ(r.bytes, r.total_bytes) << index;
    EXPECT_TRUE(r.contiguous) << index;
  }
  ASSERT_EQ(end.rejected.size(), 1u);
  EXPECT_EQ(end.rejected[2].code(),
            static_cast<int>(grpc::StatusCode::UNAVAILABLE));
  EXPECT_THAT(end.rejected[2].message(),
              HasSubstr("batchd is draining (SIGTERM) and starts no new "
                        "batches; request this one from another daemon"));
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(end.status.error_message(), HasSubstr("batchd is draining"));

  // (d) With nothing left open the daemon exits 0, long before its deadline.
  absl::StatusOr<int> code = daemon_->WaitForExit(kHangGuard);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << daemon_->Log();
  EXPECT_THAT(daemon_->Log(), HasSubstr("SIGTERM received, draining"));
  // The health watch ended with the server.
  while (watch->Read(&update)) {
  }
  EXPECT_FALSE(watch->Finish().ok());
}

TEST_F(DrainTest, DrainDeadlineCancelsStreamsStillOpenAndExitsZero) {
  StartHeld({"--drain-deadline", "500ms"});
  daemon_->Terminate();
  // The client never reads again: only the deadline ends its stream.
  absl::StatusOr<int> code = daemon_->WaitForExit(kHangGuard);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << daemon_->Log();
  EXPECT_THAT(daemon_->Log(), HasSubstr("drain deadline (500ms"));
  EXPECT_THAT(daemon_->Log(), HasSubstr("1 stream still open"));
  StreamEnd end = ReadToEnd(*held_->stream, first_);
  EXPECT_FALSE(end.status.ok());
  EXPECT_THAT(end.status.error_code(),
              ::testing::AnyOf(grpc::StatusCode::UNAVAILABLE,
                               grpc::StatusCode::CANCELLED));
  uint64_t complete = 0;
  for (const auto& [index, r] : end.batches) {
    if (r.total_bytes > 0 && r.bytes == r.total_bytes) ++complete;
  }
  EXPECT_LT(complete, 2u);
}

TEST_F(DrainTest, StreamWithNothingOutstandingEndsAtOnce) {
  std::unique_ptr<DaemonProcess> daemon =
      StartDaemon({"--drain-deadline", kLongDrain});
  ASSERT_NE(daemon, nullptr);
  auto stub = v1::DataService::NewStub(Connect(daemon->endpoint()));
  std::unique_ptr<OpenStream> idle = Open(*stub, SmallPlan(), 2);
  ASSERT_TRUE(idle->refused.ok()) << idle->refused.error_message();
  // Batch 0 arrives in full (one chunk): nothing is outstanding any more.
  ASSERT_TRUE(Request(*idle->stream, 0, {0}));
  StreamResponse response;
  ASSERT_TRUE(idle->stream->Read(&response));
  ASSERT_TRUE(response.has_header());
  ASSERT_TRUE(idle->stream->Read(&response));
  ASSERT_TRUE(response.has_chunk());
  ASSERT_EQ(response.chunk().data().size(), 4u * 32 * 32 * 3);

  daemon->Terminate();
  StreamEnd end = ReadToEnd(*idle->stream, {});
  EXPECT_TRUE(end.batches.empty());
  EXPECT_TRUE(end.rejected.empty());
  EXPECT_EQ(end.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(end.status.error_message(),
              HasSubstr("every batch requested before the drain was sent"));
  // The daemon does not wait for its (long) drain deadline.
  absl::StatusOr<int> code = daemon->WaitForExit(kHangGuard);
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << daemon->Log();
  EXPECT_TRUE(absl::IsFailedPrecondition(
      daemon->WaitForExit(absl::Seconds(1)).status()));
}

}  // namespace
}  // namespace batchd::testing

// Test helpers that speak the shared-memory protocol by hand, to do what
// the Loader never does: RawStream opens a plan offering shared memory and
// requests batches naming slots; Handshake sends a descriptor to the side
// channel and returns the daemon's answer line.
//
//   RawStream stream(endpoint);
//   const v1::PlanOpened opened = stream.Open(plan, /*window=*/1);
//   EXPECT_EQ(Handshake(opened.shared_memory(), ring.fd(),
//                       opened.shared_memory().ticket() + " 1"),
//             "0 attached\n");
//
// Not thread-safe; one test thread uses each object.
#ifndef BATCHD_TESTING_SHARED_MEMORY_PEER_H_
#define BATCHD_TESTING_SHARED_MEMORY_PEER_H_

#include <sys/socket.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "batchd/v1/data.grpc.pb.h"
#include "common/shared_region.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"

namespace batchd::testing {

class RawStream {
 public:
  explicit RawStream(const std::string& endpoint)
      : stub_(batchd::v1::DataService::NewStub(grpc::CreateChannel(
            endpoint, grpc::InsecureChannelCredentials()))),
        stream_(stub_->StreamBatches(&context_)) {}
  ~RawStream() {
    if (finished_) return;
    context_.TryCancel();
    batchd::v1::StreamResponse ignored;
    while (stream_->Read(&ignored)) {
    }
    stream_->Finish().IgnoreError();
  }

  // Opens `plan` offering shared memory with `window`; returns the daemon's
  // answer (empty when the stream ended instead: see Finish).
  batchd::v1::PlanOpened Open(const batchd::v1::Plan& plan,
                              uint32_t window = 4) {
    batchd::v1::StreamRequest open;
    *open.mutable_open()->mutable_plan() = plan;
    open.mutable_open()->set_window(window);
    open.mutable_open()->set_offer_shared_memory(true);
    EXPECT_TRUE(stream_->Write(open));
    batchd::v1::StreamResponse response;
    if (!stream_->Read(&response)) return {};
    EXPECT_TRUE(response.has_opened());
    return response.opened();
  }

  void Request(uint64_t epoch, const std::vector<uint64_t>& indices,
               const std::vector<uint32_t>& slots) {
    batchd::v1::StreamRequest request;
    request.mutable_request()->set_epoch(epoch);
    for (uint64_t i : indices) request.mutable_request()->add_batch_indices(i);
    for (uint32_t s : slots) request.mutable_request()->add_slots(s);
    EXPECT_TRUE(stream_->Write(request));
  }

  batchd::v1::StreamResponse Next() {
    batchd::v1::StreamResponse response;
    EXPECT_TRUE(stream_->Read(&response));
    return response;
  }

  // The status the stream ended with, once Open or Next found it ended.
  // Call at most once.
  grpc::Status Finish() {
    finished_ = true;
    return stream_->Finish();
  }

 private:
  std::unique_ptr<batchd::v1::DataService::Stub> stub_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<batchd::v1::StreamRequest,
                                           batchd::v1::StreamResponse>>
      stream_;
  bool finished_ = false;
};

// Sends `fd` with `message` to the side channel of `invite`; returns the
// daemon's answer line(s), or why none could be had.
inline std::string Handshake(const batchd::v1::SharedMemoryInvite& invite,
                             int fd, const std::string& message) {
  absl::StatusOr<common::UniqueFd> channel =
      common::ConnectUnix(invite.socket(), absl::Seconds(5));
  if (!channel.ok()) return std::string(channel.status().message());
  if (absl::Status s = common::SendDescriptor(channel->get(), fd, message);
      !s.ok()) {
    return std::string(s.message());
  }
  char buffer[512];
  std::string answer;
  ssize_t got;
  while ((got = recv(channel->get(), buffer, sizeof(buffer), 0)) > 0) {
    answer.append(buffer, static_cast<size_t>(got));
  }
  return answer;
}

}  // namespace batchd::testing

#endif  // BATCHD_TESTING_SHARED_MEMORY_PEER_H_

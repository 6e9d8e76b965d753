// Hand-written fakes of what a StreamSession uses of its service, for
// unit tests of the session: a StreamAdmission with a per-job limit and a
// drain switch, and a BatchSource that keeps every request until the test
// answers it. Not thread-safe: tests call them from one thread.
#ifndef BATCHD_SERVER_STREAM_STREAM_SESSION_TEST_UTIL_H_
#define BATCHD_SERVER_STREAM_STREAM_SESSION_TEST_UTIL_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "server/pipeline/batch_buffer_pool.h"
#include "server/pipeline/batch_source.h"
#include "server/stream/stream_session.h"
#include "testing/status_matchers.h"

namespace batchd::server {

// The pixel bytes of a batch of the session tests' plan: 4 samples at
// 32x32 RGB.
inline constexpr uint64_t kTestBatchBytes = 4 * 32 * 32 * 3;

// Admission with a per-job stream limit and a drain switch.
class FakeAdmission : public StreamAdmission {
 public:
  absl::Status AddJobStream(const std::string& job) override {
    if (job_streams[job] >= max_job_streams) {
      return absl::ResourceExhaustedError("job limit");
    }
    ++job_streams[job];
    return absl::OkStatus();
  }
  void RemoveJobStream(const std::string& job) override { --job_streams[job]; }
  bool draining() const override { return draining_now; }
  std::string DrainMessage() const override {
    return "batchd is draining (test)";
  }
  absl::Status DrainingRefusal() const override {
    return absl::UnavailableError(
        "batchd is draining (test); connect to another daemon");
  }
  void AddSendTime(absl::Duration /*send*/) override { ++batches_sent; }

  std::map<std::string, int> job_streams;
  int max_job_streams = 8;
  bool draining_now = false;
  int batches_sent = 0;
};

// A batch source that keeps every request until the test answers it.
class FakeSource : public BatchSource {
 public:
  struct Asked {
    uint64_t epoch;
    uint64_t index;
    BatchCancellation cancelled;
    Done done;
  };

  void StreamOpened(const ResolvedPlan& /*plan*/) override { ++opened; }
  void StreamClosed(const ResolvedPlan& /*plan*/) override { ++closed; }
  absl::Status Get(std::shared_ptr<const ResolvedPlan> /*plan*/, uint64_t epoch,
                   uint64_t batch_index, BatchCancellation cancelled, Done done,
                   BatchDestination /*slot*/) override {
    if (!refusal.ok()) return refusal;
    asked.push_back(
        {epoch, batch_index, std::move(cancelled), std::move(done)});
    return absl::OkStatus();
  }

  // Answers request `i` with a built batch of `bytes` pixel bytes.
  void Build(size_t i, uint64_t bytes = kTestBatchBytes) {
    auto batch = std::make_shared<BuiltBatch>();
    batch->epoch = asked[i].epoch;
    batch->batch_index = asked[i].index;
    batch->sample_indices = {0, 1, 2, 3};
    batch->labels = {0, 1, 0, 1};
    batch->shape = {4, 32, 32, 3};
    absl::StatusOr<BatchBuffer> pixels = pool_->Acquire(bytes);
    ASSERT_OK(pixels);
    batch->pixels = std::move(*pixels);
    asked[i].done(std::move(batch));
  }
  // Answers request `i` as a build whose work was cancelled.
  void GiveBack(size_t i) { asked[i].done(nullptr); }

  std::vector<Asked> asked;
  absl::Status refusal;
  int opened = 0;
  int closed = 0;

 private:
  std::shared_ptr<BatchBufferPool> pool_ = BatchBufferPool::Create(0);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_STREAM_SESSION_TEST_UTIL_H_

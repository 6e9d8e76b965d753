// StreamSession: the logic of one StreamBatches call, without gRPC. It
// takes the client's requests as parsed messages (Open, Request, Cancel,
// Report), decides through its StreamLedger which batches to accept, asks
// the BatchSource for each accepted one, takes the built batches back, and
// says what to do next (Next): write one message, finish the call with a
// status, or nothing yet. The reactor (server/service/batch_stream.h) only
// moves bytes: it parses what it reads, serializes what Next gives, and
// converts the final status.
//
// One write in flight: Next hands out a message only after the previous
// one's WriteDone. Reading pauses while kMaxQueuedMessages small messages
// wait (PauseReading) and resumes from Next.
//
// Owns the stream's state: the plan, the ledger, the queue of what is to
// be sent, the client's shared-memory ring once attached, and the status
// the stream ends with. Nothing in its StreamSessionContext is owned. No
// threads and no clock of its own: callers pass `now`.
//
// Thread-safe: reactions, pipeline threads (batches built) and the
// shared-memory broker's thread (a ring attached) call it at once. It calls
// the BatchSource and the broker, and `wake`, without its lock held, so a
// source may hand a batch back inline.
//
// Lock order: mu_ may be held while taking the admission's (the service's
// registry), the budget's, the job statistics' and the trainer reports'
// locks, never the other way round.
#ifndef BATCHD_SERVER_STREAM_STREAM_SESSION_H_
#define BATCHD_SERVER_STREAM_STREAM_SESSION_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"
#include "common/shared_region.h"
#include "server/metrics/server_metrics.h"
#include "server/observe/job_stats.h"
#include "server/observe/trainer_reports.h"
#include "server/pipeline/batch_source.h"
#include "server/plan/resolved_plan.h"
#include "server/stream/buffer_budget.h"
#include "server/stream/send_queue.h"
#include "server/stream/shared_memory_broker.h"
#include "server/stream/stream_ledger.h"

namespace batchd::server {

// Most small messages (rejections, report answers) a stream queues for a
// client before it stops reading that client's requests: a client that
// sends and never reads meets HTTP/2 flow control instead of growing the
// daemon. One request adds at most a window's worth, so the queue holds at
// most kMaxQueuedMessages + max window messages.
inline constexpr uint32_t kMaxQueuedMessages = 64;

// What a stream needs of the daemon's other streams: the drain and the
// per-job stream count. Implemented by DataServiceImpl; thread-safe.
class StreamAdmission {
 public:
  virtual ~StreamAdmission() = default;
  // Counts a stream of `job` that opened its plan, or returns why it is
  // refused (--max-streams-per-job reached); RemoveJobStream uncounts it.
  virtual absl::Status AddJobStream(const std::string& job) = 0;
  virtual void RemoveJobStream(const std::string& job) = 0;
  virtual bool draining() const = 0;
  // "batchd is draining (SIGTERM)". REQUIRES: draining().
  virtual std::string DrainMessage() const = 0;
  // The status a stream gets that is refused because of the drain.
  virtual absl::Status DrainingRefusal() const = 0;
  // Adds `send` (a batch finished to its last chunk written) to the send
  // stage time.
  virtual void AddSendTime(absl::Duration send) = 0;
};

// Everything a StreamSession uses of its service, constant for the
// service's life. Not owned; every pointer outlives the sessions. `metrics`
// and `shared_memory` may be null (nothing recorded; shared memory
// declined).
struct StreamSessionContext {
  const DatasetMap* datasets = nullptr;
  PlanLimits limits;
  // Window granted when the client asks for 0, and the most granted.
  uint32_t default_window = 0;
  uint32_t max_window = 0;
  batchd::v1::DaemonInfo daemon_info;
  ServerMetrics* metrics = nullptr;
  SharedMemoryBroker* shared_memory = nullptr;
  // Where every accepted batch is asked for; sharing is its business.
  BatchSource* batches = nullptr;
  JobStats* stats = nullptr;
  TrainerReports* reports = nullptr;
  BufferBudget* budget = nullptr;
  StreamAdmission* admission = nullptr;
};

class StreamSession {
 public:
  using Key = StreamLedger::Key;
  // OK when the caller may stream for `job`, else why not.
  using JobCheck = std::function<absl::Status(absl::string_view job)>;
  // Held by every callback the session hands the BatchSource or the
  // broker, until that callback is dropped: whatever must outlive them
  // (the reactor holding this session). May be null.
  using KeepAlive = std::shared_ptr<const void>;

  using Message = OutgoingMessage;
  // What the reactor does next, in this order: start a read, then start
  // `write` or finish the call with `finish` (at most one of them).
  struct Action {
    bool resume_reading = false;
    std::optional<Message> write;
    std::optional<absl::Status> finish;
  };

  // `context` must outlive the session. `peer` is the client's address
  // (common/local_address.h), `identity` who is calling for the budget's
  // per-identity share (AdmissionTable's name for it), `may_stream` checks the plan's job against
  // who opened the stream, and `wake` is called, on the thread that handed
  // a batch back, when something new is queued: it should act on Next.
  StreamSession(const StreamSessionContext* context, std::string peer,
                std::string identity, JobCheck may_stream,
                std::function<void()> wake);
  StreamSession(const StreamSession&) = delete;
  StreamSession& operator=(const StreamSession&) = delete;

  // A read finished; `ok` false when the client closed its side. Returns
  // whether to handle what was read: not once the stream is ending.
  bool ReadDone(bool ok) ABSL_LOCKS_EXCLUDED(mu_);

  // Handles one request of the client, received at `now`. Returns the
  // status that ends the stream (then read no further), or OK.
  absl::Status Handle(const batchd::v1::StreamRequest& request,
                      const KeepAlive& owner, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // The four kinds of request Handle dispatches to, each returning as
  // Handle does. Open resolves the plan and admits the stream: refused
  // while draining (UNAVAILABLE), for a second plan (FAILED_PRECONDITION),
  // a bad plan (its status), a job the caller may not stream for
  // (PERMISSION_DENIED), or no room for its job or buffers
  // (RESOURCE_EXHAUSTED); opened, it queues PlanOpened and holds a share of
  // the buffer budget until the stream ends.
  absl::Status Open(const batchd::v1::OpenPlan& open, const KeepAlive& owner,
                    absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // Accepts what the ledger allows, rejecting the rest in-band, and asks
  // the BatchSource for each accepted batch.
  absl::Status Request(const batchd::v1::BatchRequest& request,
                       const KeepAlive& owner) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Cancel(const batchd::v1::CancelBatches& cancel)
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Report(const batchd::v1::TrainerReport& report, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Ends the stream with `status` because of something the client did
  // (counted as a rejected request), stops building its batches. Returns
  // `status`. The first status that ends a stream is the one it ends with.
  absl::Status Fail(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // The same, not counted: the call was cancelled, or the service ends it.
  void End(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);
  // End, unless an `open` has arrived (the open deadline's race with a
  // late `open`). Returns whether it ended the stream.
  bool EndIfNoPlan(absl::Status status) ABSL_LOCKS_EXCLUDED(mu_);

  // Called instead of starting the next read: with kMaxQueuedMessages
  // queued, reading pauses (Next resumes it) and this returns true.
  bool PauseReading() ABSL_LOCKS_EXCLUDED(mu_);

  // What to do next. A write it hands out is in flight until WriteDone; a
  // finish it hands out is final (Next answers nothing from then on).
  Action Next() ABSL_LOCKS_EXCLUDED(mu_);
  // The write in flight finished at `now`; `ok` false when the client went
  // away.
  void WriteDone(bool ok, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);

  // The call is over: forgets what was outstanding, gives back the buffer
  // budget (if Next did not already), and unregisters the stream from its
  // job, statistics, reports and shared-memory invitation. Call once.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // Accepted batches not yet fully handed to a write.
  size_t outstanding() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Pixel counts of a batch whose last message is being written.
  struct CompletedBatch {
    uint64_t images = 0;
    uint64_t bytes = 0;
    uint64_t substitutions = 0;
    absl::Time finished;
  };

  absl::Status FailLocked(absl::Status status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void CountRejected(absl::StatusCode code) const;
  // The batch source handed `key` back (null: its work was cancelled).
  // Returns whether something was queued (then call wake_).
  bool BatchBuilt(const Key& key, std::shared_ptr<const BuiltBatch> batch)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Answers an offer of shared memory: a ticket for the broker, or why
  // not. The ring may have at most `window` slots.
  void InviteSharedMemory(uint64_t max_batch_bytes, uint32_t window,
                          const KeepAlive& owner,
                          batchd::v1::SharedMemoryInvite* invite)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Runs on the broker's thread once the client's region is mapped.
  absl::Status AttachSharedMemory(std::shared_ptr<common::SharedRegion> region,
                                  uint32_t slots, uint64_t slot_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Queues the in-band rejection of batch `key` with `status`.
  void QueueRejectionLocked(const Key& key, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Answers a batch the ledger withdrew and frees its window place.
  void AnswerWithdrawnLocked(const Key& key)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The next message to write, if any, with the ledger told what it means
  // for its batch. REQUIRES: no write in flight.
  std::optional<Message> NextMessageLocked()
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Gives the stream's budget reservation back, if it holds one.
  void ReleaseBudgetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const StreamSessionContext& context_;
  const std::string peer_;
  const std::string identity_;
  const JobCheck may_stream_;
  const std::function<void()> wake_;
  // Set when the stream ends: stops the work of every batch it accepted.
  // Shared with the pipeline, which reads it from its threads.
  const std::shared_ptr<std::atomic<bool>> cancelled_;

  mutable absl::Mutex mu_;
  // Set once by Open; null before.
  std::shared_ptr<const ResolvedPlan> plan_ ABSL_GUARDED_BY(mu_);
  // The stream's id in the TrainerReports, set with plan_; 0 before.
  uint64_t report_id_ ABSL_GUARDED_BY(mu_) = 0;
  // The shared-memory ticket offered to the client; empty when none was.
  std::string ticket_ ABSL_GUARDED_BY(mu_);
  // Whether an `open` has arrived (whatever became of it).
  bool plan_arrived_ ABSL_GUARDED_BY(mu_) = false;
  StreamLedger ledger_ ABSL_GUARDED_BY(mu_);
  // Same-host shared memory, once attached: the client's ring and its
  // slot size.
  std::shared_ptr<common::SharedRegion> region_ ABSL_GUARDED_BY(mu_);
  uint64_t slot_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  SendQueue queue_ ABSL_GUARDED_BY(mu_);
  // Whether reading waits for queue_'s messages to drain (no read in
  // flight while it does).
  bool read_paused_ ABSL_GUARDED_BY(mu_) = false;
  // The batch whose last message the write in flight carries.
  std::optional<CompletedBatch> written_batch_ ABSL_GUARDED_BY(mu_);
  bool write_in_flight_ ABSL_GUARDED_BY(mu_) = false;
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // Why the stream ends, once something ended it.
  std::optional<absl::Status> finish_status_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;  // Next handed out the finish
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STREAM_STREAM_SESSION_H_

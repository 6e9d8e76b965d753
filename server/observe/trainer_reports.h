// TrainerReports: what the trainers behind the open streams say about their
// time (batchd.v1.TrainerReport), kept for the last few seconds and summed
// per job. The autoscaler and the admin status read the sums.
//
// Each stream registers when its plan opens and unregisters when it ends, so
// a trainer that goes away stops counting at once; one that stops reporting
// stops counting after kWindow.
//
// Thread-safe.
//
//   const uint64_t id = reports.Open("job-a", /*batch_size=*/256, now);
//   absl::Status ok = reports.Record(id, report, batches_sent, now);
//   std::map<std::string, TrainerLoad> loads = reports.Loads(now);
//   reports.Close(id);
#ifndef BATCHD_SERVER_OBSERVE_TRAINER_REPORTS_H_
#define BATCHD_SERVER_OBSERVE_TRAINER_REPORTS_H_

#include <cstdint>
#include <deque>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"

namespace batchd::server {

class TrainerReports {
 public:
  // Loads sum the reports received over this long: three reports at the
  // clients' 1 s interval, so that one late report does not swing them.
  static constexpr absl::Duration kWindow = absl::Seconds(3);
  // How much more time a stream's reports may account for than has passed
  // since its plan opened: reports delayed on the network arrive bunched.
  static constexpr absl::Duration kSlack = absl::Seconds(2);

  // Registers a stream of `job` whose batches hold `batch_size` samples,
  // opened at `now`; returns its id for Record and Close.
  uint64_t Open(const std::string& job, uint32_t batch_size, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Forgets the stream. Unknown ids are ignored.
  void Close(uint64_t id) ABSL_LOCKS_EXCLUDED(mu_);

  // Keeps `report` of stream `id`, received at `now`, after checking it
  // against what the stream has done: `batches_sent` batch headers so far.
  // INVALID_ARGUMENT, saying what was wrong, when a value is negative or
  // not finite, when the stream's reports account for more time than has
  // passed since it opened (plus kSlack), or for more batches than it was
  // sent; the report is then not kept.
  absl::Status Record(uint64_t id, const batchd::v1::TrainerReport& report,
                      uint64_t batches_sent, absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Per job with a stream that reported within kWindow before `now`: the
  // sums of those reports.
  std::map<std::string, batchd::v1::TrainerLoad> Loads(absl::Time now)
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Kept {
    absl::Time received;
    double wait_seconds;
    double compute_seconds;
    uint64_t images;
  };
  struct Stream {
    std::string job;
    uint32_t batch_size = 0;
    absl::Time opened;
    // Totals of every accepted report, for the checks.
    double reported_seconds = 0;
    uint64_t reported_batches = 0;
    // Reports received within kWindow, oldest first.
    std::deque<Kept> recent;
  };

  absl::Mutex mu_;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::flat_hash_map<uint64_t, Stream> streams_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_OBSERVE_TRAINER_REPORTS_H_

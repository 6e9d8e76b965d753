// The byte-exact oracle of the soak and chaos runs (tests/soak/soak.cc,
// tests/chaos/chaos.cc), and the clients it watches.
//
// A batch is a pure function of (plan, epoch, index), so every batch a
// client was handed is recorded by its pixel hash and later compared with
// the same batch read from a clean reference daemon that saw no faults. An
// epoch read to its end must hold every batch index exactly once.
//
//   OracleTotals totals;
//   std::thread t(OracleClientLoop, 0, endpoints, until, config, &totals);
//   ...faults...; t.join();
//   absl::StatusOr<OracleResult> r = CheckAgainstReference(ref, totals);
//   bool ok = r.ok() && PrintOracleReport(*r, totals);
//
// Thread-safety: OracleTotals is shared by the client threads under its
// mutex; CheckAgainstReference and PrintOracleReport run after they end.
#ifndef BATCHD_TESTS_SOAK_ORACLE_H_
#define BATCHD_TESTS_SOAK_ORACLE_H_

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "batchd/v1/data.pb.h"

namespace batchd::testing {

// One batch delivered: which plan (index into OracleTotals::plans), epoch
// and batch index.
using OracleBatchKey = std::tuple<int, uint64_t, uint64_t>;

struct OracleTotals {
  absl::Mutex mu;
  std::vector<v1::Plan> plans ABSL_GUARDED_BY(mu);
  // Pixel hash of every batch delivered.
  std::map<OracleBatchKey, uint64_t> hashes ABSL_GUARDED_BY(mu);
  uint64_t delivered ABSL_GUARDED_BY(mu) = 0;
  uint64_t duplicated ABSL_GUARDED_BY(mu) = 0;
  uint64_t lost ABSL_GUARDED_BY(mu) = 0;
  uint64_t epochs_completed ABSL_GUARDED_BY(mu) = 0;
  uint64_t epochs_abandoned ABSL_GUARDED_BY(mu) = 0;
  std::vector<std::string> errors ABSL_GUARDED_BY(mu);
  absl::Duration longest_wait ABSL_GUARDED_BY(mu);
  // The loaders' own failover figures (LoaderStats), summed.
  uint64_t rerequested ABSL_GUARDED_BY(mu) = 0;
  uint64_t hedged ABSL_GUARDED_BY(mu) = 0;
  uint64_t progress_cancels ABSL_GUARDED_BY(mu) = 0;
  // Faults injected, by name; the client loops add their own.
  std::map<std::string, int> faults ABSL_GUARDED_BY(mu);

  void Count(const std::string& fault) ABSL_LOCKS_EXCLUDED(mu) {
    absl::MutexLock lock(&mu);
    ++faults[fault];
  }
};

struct OracleClientConfig {
  // The dataset every daemon serves under this name.
  std::string dataset;
  uint64_t seed = 1;
  // LoaderOptions of the same names.
  absl::Duration stall_timeout = absl::Seconds(5);
  absl::Duration batch_progress_timeout = absl::Seconds(5);
  absl::Duration connect_timeout = absl::Seconds(10);
  // How long after `until` an epoch in progress may still finish.
  absl::Duration grace = absl::Seconds(30);
  // When set and true, the client stops at once (an interrupted run).
  const std::atomic<bool>* stop = nullptr;
};

// A random plan over `dataset` (batch size, image size, train or eval,
// layout, world size and rank, shuffle, drop_last) for job "soak-client-N".
v1::Plan RandomOraclePlan(std::mt19937_64& rng, const std::string& dataset,
                          int client);

// One client until `until`: random plans over `endpoints` (a Loader
// endpoint list), 1-3 epochs each, some abandoned mid-epoch and some with
// a stalled consumer (counted as faults); every batch delivered is
// recorded in `totals`, and errors of Create, StartEpoch and Next too.
void OracleClientLoop(int id, const std::string& endpoints, absl::Time until,
                      const OracleClientConfig& config, OracleTotals* totals);

struct OracleResult {
  uint64_t verified = 0;
  uint64_t wrong = 0;
};

// Reads every (plan, epoch) that `totals` holds from the clean daemon at
// `reference` and compares each delivered batch's hash with it.
absl::StatusOr<OracleResult> CheckAgainstReference(const std::string& reference,
                                                   OracleTotals& totals);

// Prints the faults, the load, batches verified / wrong / lost /
// duplicated, the longest trainer wait, the loaders' failover figures and
// the client errors; true when
// nothing was wrong, lost or duplicated, no client saw an error and at
// least one batch was verified.
bool PrintOracleReport(const OracleResult& result, OracleTotals& totals);

}  // namespace batchd::testing

#endif  // BATCHD_TESTS_SOAK_ORACLE_H_

// Helpers for end-to-end tests that stream from real daemon processes: read
// batches through the client library into comparable records, build plans
// and datasets, and call the admin service.
//
// A BatchRecord holds everything that decides a batch's identity (header
// fields and pixel bytes), so two runs are byte-identical exactly when their
// records compare equal.
//
// Thread-compatible; the functions may be called from several threads at
// once (each makes its own Loader or channel).
#ifndef BATCHD_TESTING_E2E_HELPERS_H_
#define BATCHD_TESTING_E2E_HELPERS_H_

#include <sys/types.h>

#include <cstdint>
#include <limits>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "batchd/v1/admin.pb.h"
#include "batchd/v1/data.pb.h"
#include "client/loader.h"
#include "testing/status_matchers.h"

namespace batchd::testing {

// One batch as received: header fields plus a copy of its pixels.
struct BatchRecord : client::BatchInfo {
  std::vector<uint64_t> shape;
  batchd::v1::Layout layout = batchd::v1::LAYOUT_NHWC;
  std::string pixels;

  // FNV-1a 64 of the pixels.
  uint64_t PixelHash() const;
};

// Compares every field, substitutions field by field (detail included).
bool operator==(const BatchRecord& a, const BatchRecord& b);
inline bool operator!=(const BatchRecord& a, const BatchRecord& b) {
  return !(a == b);
}
// gtest printer: header fields and the pixel hash, not the pixels.
void PrintTo(const BatchRecord& record, std::ostream* os);

// Copies a Batch (header fields and pixels) into a record.
BatchRecord ToRecord(const batchd::client::Batch& batch);

// Reads from `loader` (already started) until the end of the epoch or
// `max_batches` batches; the first non-OUT_OF_RANGE error is returned.
absl::StatusOr<std::vector<BatchRecord>> ReadFrom(
    batchd::client::Loader& loader,
    uint64_t max_batches = std::numeric_limits<uint64_t>::max());

// Opens `plan` at `endpoint` with a fresh Loader and reads batches
// `first_batch`.. of each epoch in [first_epoch, first_epoch + epochs).
// The next epoch's first batches are read ahead between those epochs,
// never past the last (LoaderOptions::last_epoch), so the daemon's counts
// are exactly the run's batches.
absl::StatusOr<std::vector<BatchRecord>> ReadEpochs(
    const std::string& endpoint, const batchd::v1::Plan& plan,
    uint64_t first_epoch, uint64_t epochs = 1, uint64_t first_batch = 0,
    uint32_t prefetch = 4);

// A train (RandomResizedCrop + flip) plan, shuffled.
batchd::v1::Plan TrainPlan(const std::string& dataset, uint32_t batch_size,
                           uint32_t size, uint64_t seed);
// An eval (resize + centre crop) plan, not shuffled.
batchd::v1::Plan EvalPlan(const std::string& dataset, uint32_t batch_size,
                          uint32_t size, uint64_t seed);

// Writes a synthetic ImageFolder dataset with tools/make_dataset into a new
// temporary directory and returns the directory.
absl::StatusOr<std::string> MakeDataset(int images, int classes, int seed);

// The sample paths of an ImageFolder dataset in index order: class
// directories sorted, files in each sorted by name (image extensions only).
// Only handles the flat layout make_dataset writes.
std::vector<std::string> ImageFolderOrder(const std::string& root);

// Admin calls on a fresh channel that is dropped before returning.
absl::StatusOr<batchd::v1::ServerStatus> GetServerStatus(
    const std::string& endpoint);
absl::StatusOr<batchd::v1::SetWorkersResponse> SetWorkers(
    const std::string& endpoint, uint32_t workers);

// The port a daemon wrote to `path` (--port-file, --metrics-port-file),
// waiting up to 10 s for it; "" if none came.
std::string ReadPortFile(const std::string& path);

// A /metrics page as parsed by the real Prometheus parser
// (python3-prometheus-client, via testing/metrics_page.py): sample line
// ("name{labels}", labels sorted) -> value.
using Page = std::map<std::string, double>;
absl::StatusOr<Page> ScrapeWithPrometheusParser(const std::string& url);

// A field of /proc/PID/status in bytes ("VmRSS", "RssShmem"); 0 when the
// process or the field is gone.
uint64_t ProcStatusBytes(pid_t pid, const char* field);
// File descriptors the process has open (/proc/PID/fd).
int OpenFds(pid_t pid);

// Images per second one client with `plan` reads from `endpoint` over
// `duration` (after its first batch, which pays for the connection): what
// adversarial tests compare, with and without an attack, to show that a
// well-behaved job keeps its throughput.
absl::StatusOr<double> ImagesPerSecond(const std::string& endpoint,
                                       const batchd::v1::Plan& plan,
                                       absl::Duration duration);
// The same for a client with `options` (a token, a connect timeout).
absl::StatusOr<double> ImagesPerSecond(batchd::client::LoaderOptions options,
                                       absl::Duration duration);

// The job named `job` in `status`, or nullptr.
const batchd::v1::JobStatus* FindJob(const batchd::v1::ServerStatus& status,
                                     const std::string& job);

}  // namespace batchd::testing

#endif  // BATCHD_TESTING_E2E_HELPERS_H_

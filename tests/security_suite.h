// SecuritySuite: the fixture of the security end-to-end tests
// (security_e2e_test.cc: TLS, tokens and listeners; job_limits_e2e_test.cc:
// the per-job limits): one synthetic dataset, daemons serving it, and
// loaders reading the test plan from them.
#ifndef BATCHD_TESTS_SECURITY_SUITE_H_
#define BATCHD_TESTS_SECURITY_SUITE_H_

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/loader.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {

// The test plan's batch size and image side.
inline constexpr uint32_t kBatch = 8;
inline constexpr uint32_t kSize = 32;

class SecuritySuite
    : public DatasetSuite</*images=*/24, /*classes=*/2,
                          /*seed=*/11> {
 protected:
  static void SetUpTestSuite() {
    DatasetSuite::SetUpTestSuite();
    ASSERT_NE(dataset_, nullptr);
  }
  static void TearDownTestSuite() {
    if (dataset_ != nullptr) std::filesystem::remove_all(*dataset_);
    DatasetSuite::TearDownTestSuite();
  }

  // A daemon serving the dataset as "d" with one worker, and `args`.
  static absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemon(
      std::vector<std::string> args) {
    args.insert(args.begin(), {"--dataset", "d=" + *dataset_, "--workers", "1"});
    return DaemonProcess::Start(args);
  }

  static client::LoaderOptions Options(const std::string& endpoint,
                                       client::SecurityOptions security,
                                       const std::string& job = "") {
    client::LoaderOptions options;
    options.endpoint = endpoint;
    options.plan = TrainPlan("d", kBatch, kSize, 5);
    options.plan.set_job(job);
    options.prefetch = 2;
    options.security = std::move(security);
    // A refused handshake fails Create quickly; the message is the test's.
    options.connect_timeout = absl::Seconds(3);
    return options;
  }

  static absl::StatusOr<std::vector<BatchRecord>> ReadEpoch(
      client::LoaderOptions options, uint64_t epoch = 0) {
    absl::StatusOr<std::unique_ptr<client::Loader>> loader =
        client::Loader::Create(std::move(options));
    if (!loader.ok()) return loader.status();
    if (absl::Status s = (*loader)->StartEpoch(epoch); !s.ok()) return s;
    return ReadFrom(**loader);
  }

  // Epoch 0 of the test plan from a plaintext daemon: what every secured
  // or limited path must deliver byte for byte.
  static std::vector<BatchRecord> Reference() {
    absl::StatusOr<std::unique_ptr<DaemonProcess>> d = StartDaemon({});
    EXPECT_TRUE(d.ok()) << d.status();
    if (!d.ok()) return {};
    absl::StatusOr<std::vector<BatchRecord>> records =
        ReadEpoch(Options((*d)->endpoint(), {}));
    EXPECT_TRUE(records.ok()) << records.status();
    return records.ok() ? *records : std::vector<BatchRecord>{};
  }
};

}  // namespace batchd::testing

#endif  // BATCHD_TESTS_SECURITY_SUITE_H_

// DatasetSuite: the fixture of end-to-end suites that share one synthetic
// ImageFolder dataset, written once per suite by MakeDataset
// (testing/e2e_helpers.h) and named by its parameters:
//
//   class JobsTest : public DatasetSuite</*images=*/48, /*classes=*/6,
//                                        /*seed=*/33> {};
//   TEST_F(JobsTest, ...) { DaemonProcess::Start({"--dataset",
//                                                  "d=" + *dataset_}); }
//
// A suite that alters the dataset (bad samples, extra files) defines its own
// SetUpTestSuite that calls DatasetSuite::SetUpTestSuite() first.
#ifndef BATCHD_TESTING_E2E_FIXTURE_H_
#define BATCHD_TESTING_E2E_FIXTURE_H_

#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {

template <int kSuiteImages, int kSuiteClasses, int kSuiteSeed>
class DatasetSuite : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir =
        MakeDataset(kSuiteImages, kSuiteClasses, kSuiteSeed);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dataset_ = new std::string(*std::move(dir));
  }
  static void TearDownTestSuite() {
    delete dataset_;
    dataset_ = nullptr;
  }

  // The dataset's directory; set while the suite runs.
  static std::string* dataset_;
};

template <int kSuiteImages, int kSuiteClasses, int kSuiteSeed>
std::string* DatasetSuite<kSuiteImages, kSuiteClasses, kSuiteSeed>::dataset_ =
    nullptr;

}  // namespace batchd::testing

#endif  // BATCHD_TESTING_E2E_FIXTURE_H_

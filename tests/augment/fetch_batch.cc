// batchd-augment-fetch: fetches one batch of a plan from a daemon and
// writes its pixels, for tests/augment/test_policy_replay.py (Python has
// no gRPC client in this build).
//
//   batchd-augment-fetch ENDPOINT PLAN_TEXT_FILE EPOCH BATCH OUT_FILE
//
// PLAN_TEXT_FILE is a batchd.v1.Plan in protobuf text format. OUT_FILE
// gets the batch's pixels as the daemon sent them; stdout one line:
// "shape N H W C samples I0 I1 ...". Exit status 1 with the error on
// stderr when the plan is refused or the batch cannot be read.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "google/protobuf/text_format.h"
#include "testing/e2e_helpers.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: " << argv[0]
              << " ENDPOINT PLAN_TEXT_FILE EPOCH BATCH OUT_FILE\n";
    return 2;
  }
  std::ifstream plan_file(argv[2]);
  std::stringstream text;
  text << plan_file.rdbuf();
  batchd::v1::Plan plan;
  if (!google::protobuf::TextFormat::ParseFromString(text.str(), &plan)) {
    std::cerr << "cannot parse " << argv[2] << " as a batchd.v1.Plan\n";
    return 1;
  }
  const uint64_t epoch = std::strtoull(argv[3], nullptr, 10);
  const uint64_t batch = std::strtoull(argv[4], nullptr, 10);
  absl::StatusOr<std::vector<batchd::testing::BatchRecord>> records =
      batchd::testing::ReadEpochs(argv[1], plan, epoch, /*epochs=*/1,
                                  /*first_batch=*/batch, /*prefetch=*/1);
  if (!records.ok() || records->empty()) {
    std::cerr << (records.ok() ? "no batch" : records.status().ToString())
              << "\n";
    return 1;
  }
  const batchd::testing::BatchRecord& record = records->front();
  std::ofstream out(argv[5], std::ios::binary | std::ios::trunc);
  out.write(record.pixels.data(),
            static_cast<std::streamsize>(record.pixels.size()));
  if (!out) {
    std::cerr << "cannot write " << argv[5] << "\n";
    return 1;
  }
  std::cout << "shape";
  for (uint64_t d : record.shape) std::cout << ' ' << d;
  std::cout << " samples";
  for (uint64_t s : record.sample_indices) std::cout << ' ' << s;
  std::cout << std::endl;
  return 0;
}

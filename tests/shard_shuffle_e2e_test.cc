// End-to-end: the shard-aware shuffle (Plan.shuffle_window_shards) through
// real daemons over tar shards written by batchd-prep. The same plan gives
// byte-identical batches from one daemon, another with more workers, and
// two daemons together; each epoch holds every sample exactly once, in an
// order that never has more than the window's shards in use; the ranks of
// a world together cover the epoch; batchd-client --verify knows the
// order from the layout ListDatasets sends; a folder refuses the mode.
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

namespace fs = std::filesystem;
using ::batchd::client::Loader;
using ::batchd::client::LoaderOptions;
using ::testing::HasSubstr;

constexpr int kImages = 45;
constexpr int kPerShard = 6;  // 7 shards of 6 and one of 3
constexpr uint32_t kWindow = 2;
constexpr uint32_t kBatch = 4;
constexpr uint32_t kSize = 24;

class ShardShuffleTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir = MakeDataset(kImages, /*classes=*/3, 41);
    ASSERT_TRUE(dir.ok()) << dir.status();
    folder_ = new std::string(*dir);
    shards_ = new std::string(MakeTempDir("shuffle-shards"));
    fs::remove(*shards_);
    CommandResult prep = RunCommand(
        {BuiltBinary("tools/batchd-prep"), "--quiet", "--threads", "2",
         "--input", *folder_, "--out", *shards_, "--shard-size",
         std::to_string(kPerShard)});
    ASSERT_EQ(prep.exit_code, 0) << prep.output;
  }
  static void TearDownTestSuite() {
    delete folder_;
    delete shards_;
  }

  static absl::StatusOr<std::unique_ptr<DaemonProcess>> StartDaemon(
      int workers) {
    return DaemonProcess::Start({"--dataset", "shards=" + *shards_,
                                 "--dataset", "folder=" + *folder_,
                                 "--workers", std::to_string(workers)});
  }

  static batchd::v1::Plan Plan(uint32_t rank = 0, uint32_t world_size = 1) {
    batchd::v1::Plan plan = TrainPlan("shards", kBatch, kSize, /*seed=*/23);
    plan.set_shuffle_window_shards(kWindow);
    plan.set_rank(rank);
    plan.set_world_size(world_size);
    return plan;
  }

  // The samples of `records`, batch after batch.
  static std::vector<uint64_t> Order(const std::vector<BatchRecord>& records,
                                     uint64_t epoch) {
    std::vector<uint64_t> order;
    for (const BatchRecord& record : records) {
      if (record.epoch != epoch) continue;
      order.insert(order.end(), record.sample_indices.begin(),
                   record.sample_indices.end());
    }
    return order;
  }

  static std::string* folder_;
  static std::string* shards_;
};

std::string* ShardShuffleTest::folder_ = nullptr;
std::string* ShardShuffleTest::shards_ = nullptr;

TEST_F(ShardShuffleTest, SameBytesFromAnyDaemonsAndWorkersWithinTheWindow) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> one, StartDaemon(1));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                       ReadEpochs(one->endpoint(), Plan(), 0, 2));
  ASSERT_EQ(reference.size(), 2u * 12u);  // ceil(45 / 4) per epoch

  for (uint64_t epoch : {0, 1}) {
    const std::vector<uint64_t> order = Order(reference, epoch);
    std::vector<uint64_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<uint64_t> all(kImages);
    for (int i = 0; i < kImages; ++i) all[i] = i;
    EXPECT_EQ(sorted, all) << "epoch " << epoch;
    // batchd-prep writes samples in order, kPerShard a shard, and the
    // dataset numbers them shard by shard: at every position at most
    // kWindow shards have a sample before and one after.
    std::map<uint64_t, std::pair<size_t, size_t>> span;
    for (size_t p = 0; p < order.size(); ++p) {
      auto [it, added] = span.try_emplace(order[p] / kPerShard, p, p);
      it->second.second = p;
    }
    EXPECT_EQ(span.size(), 8u);
    for (size_t p = 0; p < order.size(); ++p) {
      size_t live = 0;
      for (const auto& [shard, first_last] : span) {
        live += first_last.first <= p && p <= first_last.second;
      }
      EXPECT_LE(live, kWindow) << "epoch " << epoch << " position " << p;
    }
  }
  EXPECT_NE(Order(reference, 0), Order(reference, 1));

  // The per-sample shuffle of the same plan is another order.
  batchd::v1::Plan global = Plan();
  global.set_shuffle_window_shards(0);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> global_records,
                       ReadEpochs(one->endpoint(), global, 0, 1));
  EXPECT_NE(Order(global_records, 0), Order(reference, 0));

  // Another daemon with three workers.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> three, StartDaemon(3));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> from_three,
                       ReadEpochs(three->endpoint(), Plan(), 0, 2));
  EXPECT_EQ(from_three, reference);

  // Both at once, behind one loader.
  LoaderOptions options;
  options.endpoint = absl::StrCat(one->endpoint(), ",", three->endpoint());
  options.plan = Plan();
  options.prefetch = 6;
  options.last_epoch = 1;
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                       Loader::Create(std::move(options)));
  std::vector<BatchRecord> from_both;
  for (uint64_t epoch : {0, 1}) {
    ASSERT_TRUE(loader->StartEpoch(epoch).ok());
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records, ReadFrom(*loader));
    from_both.insert(from_both.end(), records.begin(), records.end());
  }
  EXPECT_EQ(from_both, reference);
}

TEST_F(ShardShuffleTest, RanksCoverTheEpochAndVerifyKnowsTheOrder) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon, StartDaemon(2));
  // World 2: 45 samples padded to 46 with the order's first sample.
  std::multiset<uint64_t> taken;
  std::vector<uint64_t> rank0;
  for (uint32_t rank : {0u, 1u}) {
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                         ReadEpochs(daemon->endpoint(), Plan(rank, 2), 3, 1));
    const std::vector<uint64_t> order = Order(records, 3);
    taken.insert(order.begin(), order.end());
    if (rank == 0) rank0 = order;
  }
  EXPECT_EQ(taken.size(), 46u);
  for (int i = 0; i < kImages; ++i) {
    EXPECT_EQ(taken.count(i), i == static_cast<int>(rank0[0]) ? 2u : 1u) << i;
  }

  for (const char* rank : {"0", "1"}) {
    CommandResult run = RunCommand(
        {BuiltBinary("client/batchd-client"), "--endpoint", daemon->endpoint(),
         "--dataset", "shards", "--batch_size", "4", "--size", "24",
         "--epochs", "2", "--world_size", "2", "--rank", rank,
         "--shuffle_window_shards", "3", "--drop_last", "--verify"});
    EXPECT_EQ(run.exit_code, 0) << run.output;
    EXPECT_THAT(run.output, HasSubstr("verify: epoch 1 ok")) << run.output;
  }
}

TEST_F(ShardShuffleTest, AFolderRefusesTheShardAwareShuffle) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<DaemonProcess> daemon, StartDaemon(1));
  batchd::v1::Plan plan = Plan();
  plan.set_dataset("folder");
  absl::StatusOr<std::vector<BatchRecord>> records =
      ReadEpochs(daemon->endpoint(), plan, 0, 1);
  ASSERT_FALSE(records.ok());
  EXPECT_EQ(records.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(records.status().message(), HasSubstr("has no shards"));
}

}  // namespace
}  // namespace batchd::testing

// End-to-end: plans with pipeline.decoded_max_side on daemons with and
// without --decoded-cache-bytes. The cache is not part of the plan, so a
// hit must give the bytes a miss gives: the same batches, substitutions
// included, whether the cache is off, cold, warmed by other seeds, or
// full; and bad files are substituted as in the uncapped pipeline.
#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

constexpr int kImages = 40;
constexpr uint32_t kBatch = 8;
constexpr uint32_t kSize = 48;
constexpr uint32_t kCap = 128;

v1::Plan CappedPlan(uint64_t seed) {
  v1::Plan plan = TrainPlan("d", kBatch, kSize, seed);
  plan.mutable_pipeline()->set_decoded_max_side(kCap);
  plan.set_job("seed-" + std::to_string(seed));
  return plan;
}

void Overwrite(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

class DecodedCacheTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::string> dir = MakeDataset(kImages, 4, 71);
    ASSERT_TRUE(dir.ok()) << dir.status();
    dataset_ = new std::string(*dir);
    const std::vector<std::string> order = ImageFolderOrder(*dataset_);
    ASSERT_EQ(order.size(), static_cast<size_t>(kImages));
    Overwrite(order[3], "not an image at all");  // kNotJpeg
    Overwrite(order[17], "");                    // kEmptyFile
  }
  static void TearDownTestSuite() {
    delete dataset_;
    dataset_ = nullptr;
  }
  static std::unique_ptr<DaemonProcess> Start(uint64_t cache_bytes) {
    auto daemon = DaemonProcess::Start(
        {"--dataset", "d=" + *dataset_, "--workers", "2",
         "--decoded-cache-bytes", std::to_string(cache_bytes)});
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    return daemon.ok() ? *std::move(daemon) : nullptr;
  }
  static std::string* dataset_;
};
std::string* DecodedCacheTest::dataset_ = nullptr;

TEST_F(DecodedCacheTest, HitsGiveTheBytesOfMisses) {
  std::unique_ptr<DaemonProcess> plain = Start(0);
  // 64 MiB holds every capped image (128 x 96 x 3 bytes each).
  std::unique_ptr<DaemonProcess> cached = Start(64 << 20);
  // A cache too small for the dataset: hits, misses and evictions mixed.
  std::unique_ptr<DaemonProcess> small = Start(10 * kCap * kCap * 3);
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(cached, nullptr);
  ASSERT_NE(small, nullptr);

  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                       ReadEpochs(plain->endpoint(), CappedPlan(5), 0, 2));
  ASSERT_EQ(reference.size(), 2u * kImages / kBatch);
  // Cold, then warmed by a job with another seed, then all hits.
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> cold,
                       ReadEpochs(cached->endpoint(), CappedPlan(5), 0, 2));
  EXPECT_EQ(cold, reference);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> other_seed,
                       ReadEpochs(cached->endpoint(), CappedPlan(6), 0, 1));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> warm,
                       ReadEpochs(cached->endpoint(), CappedPlan(5), 0, 2));
  EXPECT_EQ(warm, reference);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> evicting,
                       ReadEpochs(small->endpoint(), CappedPlan(5), 0, 2));
  EXPECT_EQ(evicting, reference);

  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                       GetServerStatus(cached->endpoint()));
  ASSERT_TRUE(status.has_decoded_cache());
  const v1::DecodedCacheStatus& cache = status.decoded_cache();
  // Each good image decoded once (the two bad ones each time they are
  // used: errors are not kept); everything else came from the cache.
  EXPECT_GE(cache.misses(), uint64_t{kImages - 2});
  EXPECT_GT(cache.hits(), 3u * (kImages - 2) - cache.misses());
  EXPECT_EQ(cache.evictions(), 0u);
  EXPECT_LE(cache.bytes(), cache.capacity_bytes());
  EXPECT_EQ(cache.capacity_bytes(), uint64_t{64} << 20);
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus small_status,
                       GetServerStatus(small->endpoint()));
  EXPECT_GT(small_status.decoded_cache().evictions(), 0u);
  EXPECT_LE(small_status.decoded_cache().bytes(),
            small_status.decoded_cache().capacity_bytes());
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus plain_status,
                       GetServerStatus(plain->endpoint()));
  EXPECT_FALSE(plain_status.has_decoded_cache());

  EXPECT_EQ(plain->Stop(), 0);
  EXPECT_EQ(cached->Stop(), 0);
  EXPECT_EQ(small->Stop(), 0);
}

// The cap is part of the plan: capped and uncapped batches differ in
// pixels, but a bad file (not an image, empty) is replaced by the same
// substitute, for the same reason, in both.
TEST_F(DecodedCacheTest, CapChangesPixelsNotSubstitutions) {
  std::unique_ptr<DaemonProcess> daemon = Start(64 << 20);
  ASSERT_NE(daemon, nullptr);
  v1::Plan uncapped = CappedPlan(9);
  uncapped.mutable_pipeline()->set_decoded_max_side(0);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> capped,
                       ReadEpochs(daemon->endpoint(), CappedPlan(9), 0, 1));
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> full,
                       ReadEpochs(daemon->endpoint(), uncapped, 0, 1));
  ASSERT_EQ(capped.size(), full.size());
  int substituted = 0;
  bool pixels_differ = false;
  for (size_t i = 0; i < capped.size(); ++i) {
    EXPECT_EQ(capped[i].sample_indices, full[i].sample_indices);
    ASSERT_EQ(capped[i].substitutions.size(), full[i].substitutions.size());
    for (size_t s = 0; s < capped[i].substitutions.size(); ++s) {
      const v1::Substitution& a = capped[i].substitutions[s];
      const v1::Substitution& b = full[i].substitutions[s];
      EXPECT_EQ(a.position(), b.position());
      EXPECT_EQ(a.original_index(), b.original_index());
      EXPECT_EQ(a.substitute_index(), b.substitute_index());
      EXPECT_EQ(a.reason(), b.reason());
      ++substituted;
    }
    pixels_differ |= capped[i].pixels != full[i].pixels;
  }
  EXPECT_EQ(substituted, 2);
  EXPECT_TRUE(pixels_differ);
  EXPECT_EQ(daemon->Stop(), 0);
}

}  // namespace
}  // namespace batchd::testing

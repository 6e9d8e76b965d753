// End-to-end: plans with augmentation ops (Pipeline.augment) against real
// daemons. A batch stays a pure function of (plan, epoch, batch index):
// the same bytes with 1 or 2 workers, across a restart, with the decoded
// cache on or off, for two jobs sharing the plan's builds, and NCHW the
// transpose of NHWC. A bad op is refused with INVALID_ARGUMENT naming its
// field; ops that never run leave a plan's bytes as they were without
// them; --log-augment-sample logs the drawn calls; an epoch streamed from
// two daemons, one of them killed (SIGKILL) midway, has the bytes of one.
#include <signal.h>

#include <algorithm>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "client/loader.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "testing/daemon_process.h"
#include "testing/e2e_fixture.h"
#include "testing/e2e_helpers.h"

namespace batchd::testing {
namespace {

using batchd::client::Loader;
using batchd::client::LoaderOptions;
using ::testing::HasSubstr;

constexpr int kImages = 40;
constexpr uint32_t kBatch = 8;
constexpr uint32_t kSize = 32;

// Several ops of each kind: policies, colour, geometry, AugMix's mixing.
// Ops whose kernels are table lookups or flips (invert, posterize,
// vertical flip) make sure the bytes change.
constexpr char kOps[] = R"pb(
  augment { trivial_augment_wide {} }
  augment { rand_augment { num_ops: 2 magnitude_std: 0.5 } }
  augment { auto_augment { policy: POLICY_CIFAR10 } }
  augment { aug_mix { mixture_width: 2 severity: 2 } }
  augment { color_jitter { brightness: 0.3 contrast: 0.3 hue: 0.05 p: 0.8 } }
  augment { random_grayscale { p: 0.2 } }
  augment { gaussian_blur { kernel_size: 3 p: 0.5 } }
  augment {
    random_affine { degrees_min: -10 degrees_max: 10 translate_x: 0.1 }
  }
  augment { random_posterize { bits: 3 p: 0.5 } }
  augment { random_invert { p: 0.5 } }
  augment { random_vertical_flip { p: 0.5 } }
)pb";

v1::Plan WithOps(v1::Plan plan, const std::string& ops) {
  v1::Pipeline extra;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(ops, &extra))
      << ops;
  for (const v1::Augment& op : extra.augment()) {
    *plan.mutable_pipeline()->add_augment() = op;
  }
  return plan;
}

v1::Plan AugmentedPlan(uint64_t seed = 5) {
  return WithOps(TrainPlan("d", kBatch, kSize, seed), kOps);
}

class AugmentTest : public DatasetSuite<kImages, /*classes=*/4, /*seed=*/57> {
 protected:
  static std::unique_ptr<DaemonProcess> Start(
      int workers, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"--dataset", "d=" + *dataset_, "--workers",
                                     std::to_string(workers)};
    args.insert(args.end(), extra.begin(), extra.end());
    absl::StatusOr<std::unique_ptr<DaemonProcess>> daemon =
        DaemonProcess::Start(args);
    EXPECT_TRUE(daemon.ok()) << daemon.status();
    return daemon.ok() ? *std::move(daemon) : nullptr;
  }
};

TEST_F(AugmentTest, SameBytesForWorkersRestartsAndTheDecodedCache) {
  std::unique_ptr<DaemonProcess> one = Start(1);
  std::unique_ptr<DaemonProcess> two =
      Start(2, {"--decoded-cache-bytes", std::to_string(64 << 20)});
  ASSERT_NE(one, nullptr);
  ASSERT_NE(two, nullptr);
  const v1::Plan plan = AugmentedPlan();
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                       ReadEpochs(one->endpoint(), plan, 0, 2));
  ASSERT_EQ(reference.size(), 2u * kImages / kBatch);
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> plain,
      ReadEpochs(one->endpoint(), TrainPlan("d", kBatch, kSize, 5), 0, 2));
  ASSERT_EQ(plain.size(), reference.size());
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_EQ(plain[i].sample_indices, reference[i].sample_indices);
    EXPECT_NE(plain[i].pixels, reference[i].pixels) << "batch " << i;
  }

  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> with_two,
                       ReadEpochs(two->endpoint(), plan, 0, 2));
  EXPECT_EQ(with_two, reference);
  EXPECT_EQ(one->Stop(), 0) << one->Log();
  one = Start(1);
  ASSERT_NE(one, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> restarted,
                       ReadEpochs(one->endpoint(), plan, 0, 2));
  EXPECT_EQ(restarted, reference);

  // Capped crops (Pipeline.decoded_max_side): the cache is not part of the
  // plan, so cold, warm and no cache give one set of bytes.
  v1::Plan capped = plan;
  capped.mutable_pipeline()->set_decoded_max_side(64);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> uncached,
                       ReadEpochs(one->endpoint(), capped, 0, 1));
  for (int pass = 0; pass < 2; ++pass) {
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> cached,
                         ReadEpochs(two->endpoint(), capped, 0, 1));
    EXPECT_EQ(cached, uncached) << "pass " << pass;
  }

  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                       GetServerStatus(two->endpoint()));
  EXPECT_GT(status.stage_seconds().augment(), 0);
  EXPECT_GT(status.decoded_cache().hits(), 0u);
  EXPECT_EQ(one->Stop(), 0) << one->Log();
  EXPECT_EQ(two->Stop(), 0) << two->Log();
}

// The ops run on HWC pixels; an NCHW plan's samples are augmented first
// and then written as planes: the transpose of the NHWC batch.
TEST_F(AugmentTest, NchwIsTheTransposeOfNhwc) {
  std::unique_ptr<DaemonProcess> daemon = Start(2);
  ASSERT_NE(daemon, nullptr);
  for (bool capped : {false, true}) {
    SCOPED_TRACE(capped ? "capped" : "uncapped");
    v1::Plan nhwc = AugmentedPlan(9);
    if (capped) nhwc.mutable_pipeline()->set_decoded_max_side(64);
    v1::Plan nchw = nhwc;
    nchw.mutable_pipeline()->set_layout(v1::LAYOUT_NCHW);
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> a,
                         ReadEpochs(daemon->endpoint(), nhwc, 0));
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> b,
                         ReadEpochs(daemon->endpoint(), nchw, 0));
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      const uint64_t n = a[i].sample_indices.size(), side = kSize;
      ASSERT_EQ(b[i].pixels.size(), a[i].pixels.size());
      uint64_t mismatches = 0;
      for (uint64_t s = 0; s < n; ++s) {
        for (uint64_t p = 0; p < side * side; ++p) {
          for (uint64_t c = 0; c < 3; ++c) {
            mismatches += a[i].pixels[(s * side * side + p) * 3 + c] !=
                          b[i].pixels[(s * 3 + c) * side * side + p];
          }
        }
      }
      EXPECT_EQ(mismatches, 0u) << "batch " << i;
    }
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(AugmentTest, TwoJobsShareTheAugmentedBuilds) {
  std::unique_ptr<DaemonProcess> lone = Start(2, {"--share-batches=false"});
  ASSERT_NE(lone, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                       ReadEpochs(lone->endpoint(), AugmentedPlan(), 0, 2));
  EXPECT_EQ(lone->Stop(), 0) << lone->Log();

  std::unique_ptr<DaemonProcess> daemon = Start(2);
  ASSERT_NE(daemon, nullptr);
  std::vector<BatchRecord> got[2];
  absl::Status statuses[2];
  std::vector<std::thread> jobs;
  for (int j = 0; j < 2; ++j) {
    jobs.emplace_back([&, j] {
      v1::Plan plan = AugmentedPlan();
      plan.set_job(absl::StrCat("job-", j));
      absl::StatusOr<std::vector<BatchRecord>> r =
          ReadEpochs(daemon->endpoint(), plan, 0, 2, 0, /*prefetch=*/2);
      statuses[j] = r.status();
      if (r.ok()) got[j] = *std::move(r);
    });
  }
  for (std::thread& t : jobs) t.join();
  for (int j = 0; j < 2; ++j) {
    ASSERT_TRUE(statuses[j].ok()) << statuses[j];
    EXPECT_EQ(got[j], reference) << "job " << j;
  }
  // Plans that differ only in their augmentation never share: a plain job
  // is a second plan of its own.
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> plain,
      ReadEpochs(daemon->endpoint(), TrainPlan("d", kBatch, kSize, 5), 0, 1));
  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                       GetServerStatus(daemon->endpoint()));
  ASSERT_EQ(status.shared_batches().plans_size(), 2);
  uint64_t shared = 0;
  for (const v1::PlanSharing& plan : status.shared_batches().plans()) {
    EXPECT_GT(plan.built(), 0u) << plan.plan();
    shared += plan.attached() + plan.retained();
  }
  // The two jobs ran together: some batches were built once for both.
  EXPECT_GT(shared, 0u);
  for (size_t i = 0; i < plain.size(); ++i) {
    EXPECT_NE(plain[i].pixels, reference[i].pixels) << "batch " << i;
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(AugmentTest, ABadOpIsRefusedNamingItsField) {
  std::unique_ptr<DaemonProcess> daemon = Start(1);
  ASSERT_NE(daemon, nullptr);
  const v1::Plan bad = WithOps(TrainPlan("d", kBatch, kSize, 5),
                               "augment { random_invert {} } "
                               "augment { rand_augment { magnitude: 40 } }");
  absl::StatusOr<std::vector<BatchRecord>> refused =
      ReadEpochs(daemon->endpoint(), bad, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument)
      << refused.status();
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("pipeline.augment[1].rand_augment.magnitude: 40 is "
                        "out of range 0..30"));
  v1::Plan nearest = TrainPlan("d", kBatch, kSize, 5);
  nearest.mutable_pipeline()->set_interpolation(v1::INTERPOLATION_NEAREST);
  refused = ReadEpochs(daemon->endpoint(), nearest, 0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              HasSubstr("pipeline.interpolation"));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// A plan without augment ops builds the bytes it built before
// Pipeline.augment existed: the same as a plan whose ops never run (p 0),
// which goes through the augment path (HWC scratch, planes) with no call.
TEST_F(AugmentTest, OpsThatNeverRunLeaveTheBytesUnchanged) {
  std::unique_ptr<DaemonProcess> daemon = Start(2);
  ASSERT_NE(daemon, nullptr);
  for (v1::Layout layout : {v1::LAYOUT_NHWC, v1::LAYOUT_NCHW}) {
    for (uint32_t cap : {0u, 64u}) {
      SCOPED_TRACE(absl::StrCat(v1::Layout_Name(layout), " cap ", cap));
      v1::Plan plain = TrainPlan("d", kBatch, kSize, 5);
      plain.mutable_pipeline()->set_layout(layout);
      plain.mutable_pipeline()->set_decoded_max_side(cap);
      const v1::Plan idle =
          WithOps(plain,
                  "augment { random_invert { p: 0 } } "
                  "augment { color_jitter { brightness: 0.5 p: 0 } }");
      ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> a,
                           ReadEpochs(daemon->endpoint(), plain, 0));
      ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> b,
                           ReadEpochs(daemon->endpoint(), idle, 0));
      EXPECT_EQ(a, b);
    }
  }
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

TEST_F(AugmentTest, LogAugmentSampleWritesTheDrawnCalls) {
  std::unique_ptr<DaemonProcess> daemon =
      Start(2, {"--log-augment-sample", "7"});
  ASSERT_NE(daemon, nullptr);
  const v1::Plan plan =
      WithOps(TrainPlan("d", kBatch, kSize, 5),
              "augment { random_invert { p: 1 } } "
              "augment { random_posterize { bits: 2 p: 1 } }");
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> epochs,
                       ReadEpochs(daemon->endpoint(), plan, 0, 2));
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(daemon->Log(), '\n')) {
    if (absl::StrContains(line, "batchd: augment: ")) {
      lines.emplace_back(line);
    }
  }
  // Once per epoch: sample 7 is built once in each.
  ASSERT_EQ(lines.size(), 2u) << daemon->Log();
  EXPECT_THAT(lines[0], HasSubstr(" epoch 0 sample 7: invert(), "
                                  "posterize(bits=2)"));
  EXPECT_THAT(lines[1], HasSubstr(" epoch 1 sample 7: invert(), "
                                  "posterize(bits=2)"));
  EXPECT_EQ(daemon->Stop(), 0) << daemon->Log();
}

// Failover: the batches the killed daemon owed are asked of the other one,
// which builds them from (plan, epoch, batch index) alone: the same drawn
// ops, the same bytes as a clean run against one daemon, each batch once.
// The daemon is stopped (SIGSTOP) before it is killed, so that the kill
// finds it owing requests: a running one answers these small batches
// within milliseconds and owes nothing most of the time.
TEST_F(AugmentTest, KillNineMidEpochKeepsTheAugmentedBytes) {
  constexpr uint32_t kSmallBatch = 4;  // 10 batches an epoch
  constexpr uint64_t kEpoch = 1;
  const v1::Plan plain = TrainPlan("d", kSmallBatch, kSize, 13);
  const v1::Plan plan = WithOps(
      plain,
      "augment { rand_augment { num_ops: 2 magnitude: 12 magnitude_std: 0.5 "
      "} } "
      "augment { color_jitter { brightness: 0.4 contrast: 0.4 saturation: "
      "0.4 hue: 0.1 p: 0.8 } } "
      "augment { random_affine { degrees_min: -15 degrees_max: 15 "
      "translate_x: 0.1 translate_y: 0.1 scale_min: 0.9 scale_max: 1.1 } }");
  std::unique_ptr<DaemonProcess> clean = Start(1);
  ASSERT_NE(clean, nullptr);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> reference,
                       ReadEpochs(clean->endpoint(), plan, kEpoch));
  ASSERT_EQ(reference.size(), kImages / kSmallBatch);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> unaugmented,
                       ReadEpochs(clean->endpoint(), plain, kEpoch));
  ASSERT_EQ(unaugmented.size(), reference.size());
  for (size_t i = 0; i < reference.size(); ++i) {
    EXPECT_NE(unaugmented[i].pixels, reference[i].pixels) << "batch " << i;
  }
  EXPECT_EQ(clean->Stop(), 0) << clean->Log();

  std::unique_ptr<DaemonProcess> daemons[2] = {Start(1), Start(1)};
  ASSERT_NE(daemons[0], nullptr);
  ASSERT_NE(daemons[1], nullptr);
  LoaderOptions options;
  options.endpoint =
      absl::StrCat(daemons[0]->endpoint(), ",", daemons[1]->endpoint());
  options.plan = plan;
  options.prefetch = 6;
  options.last_epoch = kEpoch;
  options.reconnect_backoff_max = absl::Milliseconds(500);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Loader> loader,
                       Loader::Create(std::move(options)));
  ASSERT_TRUE(loader->StartEpoch(kEpoch).ok());
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> records,
                       ReadFrom(*loader, /*max_batches=*/3));
  // A request goes to the daemon with the least (outstanding + 1) x recent
  // latency, the lower index on a tie, with an unknown latency taken as
  // the fastest known. Once both are idle (the ring full), the next batch
  // read frees a slot whose request goes to the faster: stop that one.
  auto idle = [&] {
    for (const client::DaemonStats& d : loader->stats().daemons) {
      if (d.requested != d.served) return false;
    }
    return true;
  };
  for (absl::Time end = absl::Now() + absl::Seconds(5);
       !idle() && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  const Loader::Stats before = loader->stats();
  ASSERT_EQ(before.daemons.size(), 2u);
  absl::Duration fastest = absl::InfiniteDuration();
  for (const client::DaemonStats& d : before.daemons) {
    if (d.latency > absl::ZeroDuration()) {
      fastest = std::min(fastest, d.latency);
    }
  }
  auto latency = [&](int i) {
    const absl::Duration l = before.daemons[i].latency;
    return l > absl::ZeroDuration() ? l : fastest;
  };
  const int victim = latency(1) < latency(0) ? 1 : 0;
  const int other = 1 - victim;
  ASSERT_EQ(kill(daemons[victim]->pid(), SIGSTOP), 0);
  auto owes = [&] {
    const client::DaemonStats d = loader->stats().daemons[victim];
    return d.requested > d.served;
  };
  while (!owes() && records.size() + 2 < reference.size()) {
    ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> one,
                         ReadFrom(*loader, /*max_batches=*/1));
    ASSERT_EQ(one.size(), 1u);
    records.push_back(std::move(one[0]));
    for (absl::Time end = absl::Now() + absl::Milliseconds(500);
         !owes() && absl::Now() < end;) {
      absl::SleepFor(absl::Milliseconds(5));
    }
  }
  const bool owed = owes();
  daemons[victim]->Kill();  // mid-epoch, owing batches of the epoch
  EXPECT_TRUE(owed) << "no request reached the stopped daemon";
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> rest, ReadFrom(*loader));
  records.insert(records.end(), rest.begin(), rest.end());

  ASSERT_EQ(records.size(), reference.size());
  std::set<uint64_t> indices;
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i], reference[i]) << "batch " << i;
    EXPECT_TRUE(indices.insert(records[i].batch_index).second)
        << "batch index " << records[i].batch_index << " delivered twice";
  }
  EXPECT_EQ(indices.size(), reference.size());
  const Loader::Stats stats = loader->stats();
  ASSERT_EQ(stats.daemons.size(), 2u);
  EXPECT_GT(stats.daemons[victim].lost, 0u);
  EXPECT_NE(stats.daemons[victim].state, "up");
  EXPECT_FALSE(stats.daemons[victim].last_error.ok());
  EXPECT_GT(stats.daemons[other].served, 0u);
  EXPECT_EQ(daemons[other]->Stop(), 0) << daemons[other]->Log();
}

}  // namespace
}  // namespace batchd::testing

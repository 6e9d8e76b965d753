// The DaemonSet's rules that are pure functions; the set itself is tested
// through the Loader (loader_test.cc, loader_errors_test.cc) and the
// multi-daemon end-to-end tests, the classes it composes in their own tests
// (daemon_roster_test.cc, daemon_watch_test.cc, batch_receipts_test.cc,
// prefetch_growth_test.cc, request_scheduler_test.cc).
#include "client/daemon_set.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::client {
namespace {

TEST(AskedWindowTest, PrefetchUnlessAutoPrefetch) {
  LoaderOptions options;
  options.prefetch = 6;
  EXPECT_EQ(AskedWindow(options), 6u);
  options.auto_prefetch = true;
  options.plan.set_batch_size(8);
  options.plan.mutable_pipeline()->mutable_train()->set_size(100);
  // Batches of 8 x 100 x 100 x 3 = 240,000 bytes; 2.4 MB holds 10.
  options.auto_prefetch_max_bytes = 2'400'000;
  EXPECT_EQ(AskedWindow(options), 10u);
  // Never below prefetch, never above 1024.
  options.auto_prefetch_max_bytes = 1;
  EXPECT_EQ(AskedWindow(options), 6u);
  options.auto_prefetch_max_bytes = uint64_t{1} << 40;
  EXPECT_EQ(AskedWindow(options), 1024u);
}

}  // namespace
}  // namespace batchd::client

#include "server/stream/admission_table.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::SizeIs;
using Handle = AdmissionTable::Handle;

const absl::Time kStart = absl::FromUnixSeconds(1000);

// Distinct handles without objects behind them.
Handle H(uintptr_t n) { return reinterpret_cast<Handle>(n * 16); }

AdmissionTable::Limits SmallLimits() {
  AdmissionTable::Limits limits;
  limits.max_open_streams = 8;
  limits.max_streams_per_identity = 6;
  limits.max_planless_per_connection = 2;
  limits.open_timeout = absl::Seconds(10);
  return limits;
}

TEST(AdmissionTableTest, ConnectionAtItsPlanlessCapEndsItsOwnOldest) {
  AdmissionTable table(SmallLimits());
  EXPECT_TRUE(table.Admit(H(1), "peer host 10.0.0.1", "ipv4:10.0.0.1:1000",
                          kStart).status.ok());
  EXPECT_TRUE(table.Admit(H(2), "peer host 10.0.0.1", "ipv4:10.0.0.1:1000",
                          kStart + absl::Seconds(1)).status.ok());
  // Another connection of the same host is not affected by the first's.
  AdmissionTable::Decision other = table.Admit(
      H(3), "peer host 10.0.0.1", "ipv4:10.0.0.1:2000", kStart);
  EXPECT_TRUE(other.status.ok());
  EXPECT_THAT(other.ended, IsEmpty());

  AdmissionTable::Decision third =
      table.Admit(H(4), "peer host 10.0.0.1", "ipv4:10.0.0.1:1000",
                  kStart + absl::Seconds(2));
  EXPECT_TRUE(third.status.ok());
  ASSERT_THAT(third.ended, SizeIs(1));
  EXPECT_EQ(third.ended[0].stream, H(1));
  EXPECT_TRUE(third.ended[0].planless);
  EXPECT_EQ(third.ended[0].status.code(),
            absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(third.ended[0].status.message(),
              HasSubstr("--max-planless-streams-per-connection"));
  EXPECT_THAT(third.ended[0].status.message(), HasSubstr("sent none in 2s"));
  EXPECT_EQ(table.open(), 3u);
  EXPECT_EQ(table.planless(), 3u);
  EXPECT_EQ(table.known(), 4u);  // the ended one until it is removed
  table.Remove(H(1));
  EXPECT_EQ(table.known(), 3u);
}

TEST(AdmissionTableTest, StreamsWithTheirPlanDoNotCountAsPlanless) {
  AdmissionTable table(SmallLimits());
  for (uintptr_t i = 1; i <= 5; ++i) {
    AdmissionTable::Decision d =
        table.Admit(H(i), "peer host a", "ipv4:a:1", kStart);
    EXPECT_TRUE(d.status.ok());
    EXPECT_THAT(d.ended, IsEmpty());
    table.PlanArrived(H(i));
    table.PlanArrived(H(i));  // idempotent
  }
  EXPECT_EQ(table.planless(), 0u);
  EXPECT_EQ(table.open("peer host a"), 5u);
}

TEST(AdmissionTableTest, IdentityAtItsCapEndsItsOldestPlanlessElseRefuses) {
  AdmissionTable table(SmallLimits());
  // Five streams with their plan, one without, on several connections.
  for (uintptr_t i = 1; i <= 5; ++i) {
    ASSERT_TRUE(table.Admit(H(i), "peer host a", absl::StrCat("c", i), kStart)
                    .status.ok());
    table.PlanArrived(H(i));
  }
  ASSERT_TRUE(table.Admit(H(6), "peer host a", "c6", kStart).status.ok());
  // The trainer's new stream, on a connection of its own: the idle
  // plan-less stream goes, not the newcomer.
  AdmissionTable::Decision d =
      table.Admit(H(7), "peer host a", "c7", kStart + absl::Seconds(1));
  EXPECT_TRUE(d.status.ok());
  ASSERT_THAT(d.ended, SizeIs(1));
  EXPECT_EQ(d.ended[0].stream, H(6));
  EXPECT_STREQ(d.ended[0].bound, "streams_per_identity");
  EXPECT_THAT(d.ended[0].status.message(),
              HasSubstr("identity peer host a has 6 of its 6 streams "
                        "(--max-streams-per-identity)"));
  table.PlanArrived(H(7));
  // Six with their plan: the identity is refused, and says so.
  AdmissionTable::Decision refused = table.Admit(H(8), "peer host a", "c8",
                                                 kStart);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_STREQ(refused.refused_by, "streams_per_identity");
  EXPECT_THAT(refused.status.message(),
              HasSubstr("identity peer host a has 6 of its 6 streams "
                        "(--max-streams-per-identity)"));
  EXPECT_THAT(refused.ended, IsEmpty());
  // Another identity is admitted meanwhile.
  EXPECT_TRUE(table.Admit(H(9), "peer host b", "d1", kStart).status.ok());
}

TEST(AdmissionTableTest, FullDaemonEndsTheOldestPlanlessStreamOfAnyone) {
  AdmissionTable table(SmallLimits());
  // 4 identities x 2 plan-less streams fill the 8 places.
  uintptr_t n = 0;
  for (int who = 0; who < 4; ++who) {
    for (int k = 0; k < 2; ++k) {
      ASSERT_TRUE(table.Admit(H(++n), absl::StrCat("host ", who),
                              absl::StrCat("conn ", who, ".", k),
                              kStart + absl::Milliseconds(n))
                      .status.ok());
    }
  }
  AdmissionTable::Decision d =
      table.Admit(H(100), "host 9", "conn 9", kStart + absl::Seconds(1));
  EXPECT_TRUE(d.status.ok());
  ASSERT_THAT(d.ended, SizeIs(1));
  EXPECT_EQ(d.ended[0].stream, H(1));
  EXPECT_THAT(d.ended[0].status.message(),
              HasSubstr("batchd has 8 streams open (--max-open-streams)"));
  EXPECT_EQ(table.open(), 8u);
}

TEST(AdmissionTableTest, FullDaemonEndsANewestStreamOfTheIdentityAboveItsShare) {
  AdmissionTable::Limits limits = SmallLimits();
  limits.max_open_streams = 12;
  limits.max_streams_per_identity = 12;
  AdmissionTable table(limits);
  // Two hogs with their plans hold the daemon: 6 each.
  uintptr_t n = 0;
  for (int who = 0; who < 2; ++who) {
    for (int k = 0; k < 6; ++k) {
      ++n;
      ASSERT_TRUE(table.Admit(H(n), absl::StrCat("hog ", who), "c", kStart)
                      .status.ok());
      table.PlanArrived(H(n));
    }
  }
  // A third identity's share is 12 / 3 = 4: it gets four places, taken
  // from the newest streams of whichever hog holds the most.
  std::vector<Handle> ended;
  for (uintptr_t k = 1; k <= 4; ++k) {
    AdmissionTable::Decision d = table.Admit(H(100 + k), "trainer", "t",
                                             kStart);
    ASSERT_TRUE(d.status.ok()) << d.status;
    ASSERT_THAT(d.ended, SizeIs(1));
    EXPECT_FALSE(d.ended[0].planless);
    EXPECT_STREQ(d.ended[0].bound, "fair_share");
    EXPECT_THAT(d.ended[0].status.message(),
                HasSubstr("more than its fair share of 4 (12 among 3 "
                          "identities)"));
    ended.push_back(d.ended[0].stream);
    table.PlanArrived(H(100 + k));
  }
  EXPECT_EQ(table.open("hog 0"), 4u);
  EXPECT_EQ(table.open("hog 1"), 4u);
  EXPECT_EQ(table.open("trainer"), 4u);
  // The newest of each: hog 0's streams are 1..6, hog 1's 7..12.
  EXPECT_THAT(ended, ::testing::UnorderedElementsAre(H(5), H(6), H(11),
                                                     H(12)));
  // At its share, the trainer is refused, and the message says whose.
  AdmissionTable::Decision refused = table.Admit(H(200), "trainer", "t",
                                                 kStart);
  EXPECT_EQ(refused.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(refused.status.message(),
              HasSubstr("identity trainer holds 4 of them; its fair share "
                        "(12 among 3 identities) is 4"));
  EXPECT_THAT(refused.ended, IsEmpty());
  // So is a hog: it is at its share too.
  EXPECT_FALSE(table.Admit(H(201), "hog 0", "c", kStart).status.ok());
}

TEST(AdmissionTableTest, SixteenHostsCannotLockOutASeventeenth) {
  // The attack of the issue at scale: 64 streams from each of 16 hosts
  // fill --max-open-streams.
  AdmissionTable::Limits limits;
  limits.max_open_streams = 1024;
  limits.max_streams_per_identity = 512;
  limits.max_planless_per_connection = 64;
  AdmissionTable table(limits);
  uintptr_t n = 0;
  for (int host = 0; host < 16; ++host) {
    for (int k = 0; k < 64; ++k) {
      ++n;
      ASSERT_TRUE(table.Admit(H(n), absl::StrCat("peer host 127.0.0.", host),
                              absl::StrCat(host, ":", k), kStart)
                      .status.ok());
      table.PlanArrived(H(n));
    }
  }
  // The 17th host gets its share, floor(1024 / 17) = 60, and no more.
  int admitted = 0;
  for (int k = 0; k < 100; ++k) {
    AdmissionTable::Decision d =
        table.Admit(H(10000 + k), "peer host 10.1.1.1", "x", kStart);
    if (!d.status.ok()) break;
    table.PlanArrived(H(10000 + k));
    for (const AdmissionTable::Ended& e : d.ended) table.Remove(e.stream);
    ++admitted;
  }
  EXPECT_EQ(admitted, 60);
  EXPECT_EQ(table.open(), 1024u);
  // A hog re-opening what it lost is refused: it holds more than 60.
  EXPECT_FALSE(
      table.Admit(H(20000), "peer host 127.0.0.0", "y", kStart).status.ok());
}

TEST(AdmissionTableTest, RestoreCountsAStreamWhosePlanCameFirst) {
  AdmissionTable table(SmallLimits());
  ASSERT_TRUE(table.Admit(H(1), "a", "c", kStart).status.ok());
  ASSERT_TRUE(table.Admit(H(2), "a", "c", kStart).status.ok());
  AdmissionTable::Decision d = table.Admit(H(3), "a", "c", kStart);
  ASSERT_THAT(d.ended, SizeIs(1));
  EXPECT_EQ(table.open("a"), 2u);
  // Its plan arrived before the end reached it: it goes on, and counts.
  table.PlanArrived(H(1));  // ignored while it is ending
  table.Restore(H(1));
  EXPECT_EQ(table.open("a"), 3u);
  EXPECT_EQ(table.planless(), 2u);
  table.Remove(H(1));
  EXPECT_EQ(table.open("a"), 2u);
  table.Remove(H(1));  // unknown now: no-op
  table.Restore(H(2));  // not ending: no-op
  EXPECT_EQ(table.open("a"), 2u);
}

TEST(AdmissionTableTest, ARefusalGivesBackThePlaceOfAStreamItEnded) {
  AdmissionTable::Limits limits = SmallLimits();
  limits.max_streams_per_identity = 2;
  limits.max_planless_per_connection = 1;
  AdmissionTable table(limits);
  ASSERT_TRUE(table.Admit(H(1), "a", "c1", kStart).status.ok());
  ASSERT_THAT(table.Admit(H(2), "a", "c1", kStart).ended, SizeIs(1));
  table.Restore(H(1));  // its plan came first
  ASSERT_THAT(table.Admit(H(3), "a", "c2", kStart).ended, SizeIs(1));
  table.Restore(H(2));
  ASSERT_EQ(table.open("a"), 3u);  // above its cap, by the restores
  // Rule 1 would end H(3), and the identity is still at its cap with
  // nothing plan-less: refused, and H(3) keeps its place.
  AdmissionTable::Decision d = table.Admit(H(4), "a", "c2", kStart);
  EXPECT_FALSE(d.status.ok());
  EXPECT_THAT(d.ended, IsEmpty());
  EXPECT_EQ(table.open("a"), 3u);
  EXPECT_EQ(table.planless(), 1u);
  table.PlanArrived(H(3));
  EXPECT_EQ(table.planless(), 0u);
}

TEST(AdmissionTableTest, OverduePlanlessStreamsStopCounting) {
  AdmissionTable table(SmallLimits());
  ASSERT_TRUE(table.Admit(H(1), "a", "c1", kStart).status.ok());
  ASSERT_TRUE(
      table.Admit(H(2), "a", "c2", kStart + absl::Seconds(5)).status.ok());
  ASSERT_TRUE(table.Admit(H(3), "a", "c3", kStart).status.ok());
  table.PlanArrived(H(3));
  EXPECT_THAT(table.Overdue(kStart + absl::Seconds(9)), IsEmpty());
  EXPECT_THAT(table.Overdue(kStart + absl::Seconds(10)),
              ::testing::ElementsAre(H(1)));
  EXPECT_EQ(table.open(), 2u);
  EXPECT_THAT(table.Overdue(kStart + absl::Seconds(100)),
              ::testing::ElementsAre(H(2)));
  EXPECT_EQ(table.open(), 1u);
  EXPECT_EQ(table.known(), 3u);
}

}  // namespace
}  // namespace batchd::server

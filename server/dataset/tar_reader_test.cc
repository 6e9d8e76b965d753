#include "server/dataset/tar_reader.h"

#include <sys/mman.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/tar_builder.h"

namespace batchd::server {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Scans `bytes` as a tar file (from an anonymous in-memory file).
TarScan Scan(const std::string& bytes) {
  const int fd = memfd_create("tar", 0);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  absl::StatusOr<TarScan> scan = ScanTarFile(fd, bytes.size(), "test.tar");
  close(fd);
  EXPECT_TRUE(scan.ok()) << scan.status();
  return scan.ok() ? *scan : TarScan();
}

std::vector<std::string> Names(const TarScan& scan) {
  std::vector<std::string> names;
  for (const TarMember& m : scan.members) names.push_back(m.name);
  return names;
}

// The member's bytes as the scan locates them.
std::string DataOf(const std::string& tar, const TarMember& member) {
  return tar.substr(member.offset, member.size);
}

TEST(TarReaderTest, UstarMembersWithOffsetsAndSizes) {
  TarBuilder tar;
  tar.AddFile("a.jpg", std::string(1000, 'a'));
  tar.AddFile("a.cls", "7");
  tar.AddFile("empty.txt", "");
  tar.AddFile("b.jpg", std::string(512, 'b'));
  tar.Finish();
  const TarScan scan = Scan(tar.bytes());
  EXPECT_THAT(scan.damage, IsEmpty());
  ASSERT_THAT(Names(scan),
              ::testing::ElementsAre("a.jpg", "a.cls", "empty.txt", "b.jpg"));
  EXPECT_EQ(scan.members[0].offset, 512u);
  EXPECT_EQ(DataOf(tar.bytes(), scan.members[0]), std::string(1000, 'a'));
  EXPECT_EQ(DataOf(tar.bytes(), scan.members[1]), "7");
  EXPECT_EQ(scan.members[2].size, 0u);
  EXPECT_EQ(DataOf(tar.bytes(), scan.members[3]), std::string(512, 'b'));
}

TEST(TarReaderTest, UstarPrefixGnuLongNameAndPaxPath) {
  const std::string deep = std::string(120, 'd') + "/" + std::string(90, 'n');
  const std::string long_name = std::string(180, 'g') + ".jpg";
  const std::string pax_name = std::string(300, 'p') + "/k.jpg";
  TarBuilder tar;
  tar.AddFile("short.jpg", "1", '0', TarFlavour::kUstar, std::string(120, 'd'));
  tar.AddFile(std::string(90, 'n'), "2", '0', TarFlavour::kUstar,
              std::string(120, 'd'));
  tar.AddGnuLongName(long_name, "3");
  tar.AddPax(TarBuilder::PaxRecord("path", pax_name) +
                 TarBuilder::PaxRecord("mtime", "1700000000.5"),
             "truncated-name", "4");
  // A GNU header's bytes 345.. are not a prefix.
  tar.AddFile("gnu.jpg", "5", '0', TarFlavour::kGnu);
  tar.AddFile("v7.jpg", "6", '0', TarFlavour::kV7);
  tar.Finish();
  const TarScan scan = Scan(tar.bytes());
  EXPECT_THAT(scan.damage, IsEmpty());
  EXPECT_THAT(Names(scan),
              ::testing::ElementsAre(std::string(120, 'd') + "/short.jpg", deep,
                                     long_name, pax_name, "gnu.jpg", "v7.jpg"));
  for (size_t i = 0; i < scan.members.size(); ++i) {
    EXPECT_EQ(DataOf(tar.bytes(), scan.members[i]), absl::StrCat(i + 1));
  }
}

TEST(TarReaderTest, PaxSizeOverridesTheHeaderForOneMember) {
  TarBuilder tar;
  const std::string data(700, 'x');
  // The header says 0 bytes; pax says 700 (as for members over 8 GiB).
  std::string records = TarBuilder::PaxRecord("size", "700");
  tar.AddRaw(TarBuilder::Header("pax", records.size(), 'x', TarFlavour::kUstar,
                                ""));
  records.resize(512, '\0');
  tar.AddRaw(records);
  tar.AddRaw(TarBuilder::Header("big.jpg", 0, '0', TarFlavour::kUstar, ""));
  tar.AddRaw(data + std::string(1024 - 700, '\0'));
  tar.AddFile("next.cls", "1");
  tar.Finish();
  const TarScan scan = Scan(tar.bytes());
  EXPECT_THAT(scan.damage, IsEmpty());
  ASSERT_THAT(Names(scan), ::testing::ElementsAre("big.jpg", "next.cls"));
  EXPECT_EQ(DataOf(tar.bytes(), scan.members[0]), data);
  EXPECT_EQ(DataOf(tar.bytes(), scan.members[1]), "1");
}

TEST(TarReaderTest, BaseTwoFiftySixSize) {
  std::string header =
      TarBuilder::Header("big.jpg", 0, '0', TarFlavour::kGnu, "");
  // Size 600 in GNU base-256: 0x80, then big-endian.
  std::string field(12, '\0');
  field[0] = static_cast<char>(0x80);
  field[10] = 0x02;
  field[11] = 0x58;
  header.replace(124, 12, field);
  memset(&header[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : header) sum += c;
  const std::string checksum = absl::StrFormat("%06o", sum);
  memcpy(&header[148], checksum.data(), 6);
  header[154] = '\0';
  TarBuilder tar;
  tar.AddRaw(header + std::string(600, 'z') + std::string(424, '\0'));
  tar.Finish();
  const TarScan scan = Scan(tar.bytes());
  EXPECT_THAT(scan.damage, IsEmpty());
  ASSERT_EQ(scan.members.size(), 1u);
  EXPECT_EQ(scan.members[0].size, 600u);
}

TEST(TarReaderTest, SkipsDirectoriesLinksAndMetadata) {
  TarBuilder tar;
  tar.AddFile("dir/", "", '5');
  tar.AddFile("link.jpg", "", '2');
  tar.AddFile("hard.jpg", "", '1');
  tar.AddRaw(TarBuilder::Header("././@LongLink", 20, 'K', TarFlavour::kGnu,
                                ""));
  tar.AddRaw(std::string(512, 'k'));
  tar.AddFile("global", TarBuilder::PaxRecord("comment", "hi"), 'g');
  tar.AddFile("dir/a.jpg", "a");
  tar.AddFile("fifo", "", '6');
  tar.AddFile("contiguous.jpg", "c", '7');
  tar.AddFile("oldstyle.jpg", "o", '\0');
  tar.Finish();
  const TarScan scan = Scan(tar.bytes());
  EXPECT_THAT(scan.damage, IsEmpty());
  EXPECT_THAT(Names(scan), ::testing::ElementsAre("dir/a.jpg", "contiguous.jpg",
                                                  "oldstyle.jpg"));
}

TEST(TarReaderTest, StopsAtTheEndMarkerAndToleratesItsAbsence) {
  TarBuilder tar;
  tar.AddFile("a.jpg", "a");
  TarBuilder unterminated = tar;
  tar.Finish();
  tar.AddFile("after.jpg", "ignored");
  EXPECT_THAT(Names(Scan(tar.bytes())), ::testing::ElementsAre("a.jpg"));
  const TarScan scan = Scan(unterminated.bytes());
  EXPECT_THAT(Names(scan), ::testing::ElementsAre("a.jpg"));
  EXPECT_THAT(scan.damage, IsEmpty());
  EXPECT_THAT(Names(Scan("")), IsEmpty());
}

TEST(TarReaderTest, BadChecksumStopsTheScan) {
  TarBuilder tar;
  tar.AddFile("a.jpg", "a");
  const size_t second = tar.AddFile("b.jpg", "b");
  tar.AddFile("c.jpg", "c");
  tar.Finish();
  std::string bytes = tar.bytes();
  bytes[second + 10] ^= 0x20;  // a name byte; the checksum no longer matches
  const TarScan scan = Scan(bytes);
  EXPECT_THAT(Names(scan), ::testing::ElementsAre("a.jpg"));
  EXPECT_THAT(scan.damage, HasSubstr(absl::StrCat(
                               "bad header checksum at offset ", second)));
}

TEST(TarReaderTest, GarbageIsDamageNotAnError) {
  std::string garbage(4096, '\0');
  for (size_t i = 0; i < garbage.size(); ++i) {
    garbage[i] = static_cast<char>((i * 7919) >> 3);
  }
  const TarScan scan = Scan(garbage);
  EXPECT_THAT(scan.members, IsEmpty());
  EXPECT_THAT(scan.damage, HasSubstr("checksum"));
}

TEST(TarReaderTest, MemberPastTheEndOfTheFile) {
  TarBuilder tar;
  tar.AddFile("a.jpg", "a");
  // A header claiming 1 MB in a file of a few KB.
  tar.AddRaw(TarBuilder::Header("huge.jpg", 1 << 20, '0', TarFlavour::kUstar,
                                ""));
  tar.AddRaw(std::string(2048, 'h'));
  tar.Finish();
  const TarScan scan = Scan(tar.bytes());
  EXPECT_THAT(Names(scan), ::testing::ElementsAre("a.jpg"));
  EXPECT_THAT(scan.damage, HasSubstr("runs past the end of the file"));
}

// Cut the archive at every byte: the members whose data lies wholly before
// the cut are found, with the right offsets; damage is reported for cuts
// inside a header, a member's data or its padding; nothing fails.
TEST(TarReaderTest, TruncatedAtEveryOffset) {
  TarBuilder tar;
  struct Expected {
    std::string name, data;
    size_t header = 0;
  };
  std::vector<Expected> expected = {{"k1.jpg", std::string(700, '1')},
                                    {"k1.cls", "3"},
                                    {std::string(150, 'L') + ".jpg", "long"},
                                    {"k3.png", std::string(1024, '3')}};
  expected[0].header = tar.AddFile(expected[0].name, expected[0].data);
  expected[1].header = tar.AddFile(expected[1].name, expected[1].data);
  expected[2].header = tar.AddGnuLongName(expected[2].name, expected[2].data);
  expected[3].header = tar.AddFile(expected[3].name, expected[3].data);
  const size_t archive_end = tar.bytes().size();
  tar.Finish();
  const std::string& full = tar.bytes();
  for (size_t cut = 0; cut <= full.size(); ++cut) {
    SCOPED_TRACE(absl::StrCat("cut at ", cut));
    const TarScan scan = Scan(full.substr(0, cut));
    // Expected members: those whose data ends at or before the cut.
    size_t complete = 0;
    for (const Expected& e : expected) {
      const size_t data_start =
          e.header + 512 * (e.name.size() > 100 ? 3 : 1);
      if (data_start + e.data.size() <= cut) ++complete;
    }
    ASSERT_EQ(scan.members.size(), complete);
    for (size_t i = 0; i < complete; ++i) {
      EXPECT_EQ(scan.members[i].name, expected[i].name);
      EXPECT_EQ(DataOf(full, scan.members[i]), expected[i].data);
    }
    // Cuts at block boundaries between members, or in the end marker, look
    // like a shorter archive; every other cut is reported.
    bool boundary = cut >= archive_end || cut == 0;
    for (size_t i = 1; i < expected.size(); ++i) {
      boundary = boundary || cut == expected[i].header;
    }
    if (boundary) {
      EXPECT_THAT(scan.damage, IsEmpty());
    } else {
      EXPECT_THAT(scan.damage, ::testing::Not(IsEmpty()));
    }
  }
}

TEST(TarReaderTest, OversizedOrMalformedMetadataIsDamage) {
  {
    TarBuilder tar;
    tar.AddFile("a.jpg", "a");
    tar.AddRaw(TarBuilder::Header("././@LongLink", kMaxTarMetadataBytes + 1,
                                  'L', TarFlavour::kGnu, ""));
    tar.AddRaw(std::string(kMaxTarMetadataBytes + 512, 'n'));
    tar.Finish();
    const TarScan scan = Scan(tar.bytes());
    EXPECT_THAT(Names(scan), ::testing::ElementsAre("a.jpg"));
    EXPECT_THAT(scan.damage, HasSubstr("GNU long name"));
  }
  {
    TarBuilder tar;
    tar.AddFile("a.jpg", "a");
    tar.AddPax("99 path=x\n", "b.jpg", "b");
    tar.Finish();
    const TarScan scan = Scan(tar.bytes());
    EXPECT_THAT(Names(scan), ::testing::ElementsAre("a.jpg"));
    EXPECT_THAT(scan.damage, HasSubstr("malformed pax header"));
  }
}

TEST(TarReaderTest, ReadErrorIsUnavailable) {
  absl::StatusOr<TarScan> scan = ScanTarFile(-1, 1024, "closed.tar");
  EXPECT_EQ(scan.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(scan.status().message()), HasSubstr("closed.tar"));
}

}  // namespace
}  // namespace batchd::server

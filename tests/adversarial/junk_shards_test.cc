// The junk web-scale shards carry, through a real tar-shard dataset in a
// real daemon: HTML pages named .jpg, empty members, truncated JPEG, PNG
// and WebP, 60,000 x 60,000 headers (decompression bombs), keys with no
// image member, keys with no caption, images named for another format.
// Nothing crashes; each junk sample is substituted with the reason that
// says what it was, once per epoch; the good ones (lossy and lossless
// WebP among them) are not; the counts per reason in GetStatus and
// /metrics match, and so do the content mismatches. And WebP files in an
// ImageFolder and a list file decode as they do in shards.
#include <webp/encode.h>

#include <cstdint>
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
#include "testing/jpeg_synth.h"
#include "testing/png_synth.h"
#include "testing/status_matchers.h"
#include "testing/tar_builder.h"

namespace batchd::testing {
namespace {

using ::testing::HasSubstr;
constexpr uint32_t kSize = 24;
constexpr uint64_t kEpochs = 2;

std::string Jpeg(uint64_t seed) {
  tools::SynthOptions options;
  options.width = 160;
  options.height = 120;
  options.seed = seed;
  absl::StatusOr<std::vector<uint8_t>> jpeg = tools::SynthesizeJpeg(options);
  EXPECT_TRUE(jpeg.ok()) << jpeg.status();
  return jpeg.ok() ? std::string(jpeg->begin(), jpeg->end()) : "";
}

std::vector<uint8_t> Rgb(int width, int height, uint64_t seed) {
  return tools::SynthesizeRgb(width, height, seed);
}

std::string Png(uint64_t seed) {
  server::PngSpec spec;
  spec.width = 96;
  spec.height = 80;
  for (uint8_t v : Rgb(spec.width, spec.height, seed)) spec.samples.push_back(v);
  return server::EncodePngForTest(spec);
}

std::string Webp(uint64_t seed, bool lossless) {
  const int width = 150, height = 110;
  const std::vector<uint8_t> rgb = Rgb(width, height, seed);
  uint8_t* out = nullptr;
  const size_t size =
      lossless ? WebPEncodeLosslessRGB(rgb.data(), width, height, width * 3,
                                       &out)
               : WebPEncodeRGB(rgb.data(), width, height, width * 3, 80, &out);
  std::string bytes(reinterpret_cast<const char*>(out), size);
  WebPFree(out);
  EXPECT_GT(size, 0u);
  return bytes;
}

// Offset of the first JPEG marker segment with `code`, walking from SOI.
size_t JpegMarker(const std::string& jpeg, uint8_t code) {
  size_t pos = 2;
  while (pos + 4 <= jpeg.size() && static_cast<uint8_t>(jpeg[pos]) == 0xFF) {
    if (static_cast<uint8_t>(jpeg[pos + 1]) == code) return pos;
    pos += 2 + ((static_cast<uint8_t>(jpeg[pos + 2]) << 8) |
                static_cast<uint8_t>(jpeg[pos + 3]));
  }
  ADD_FAILURE() << "no marker " << int{code};
  return 0;
}

void PutBig(std::string& s, size_t at, uint32_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    s[at + i] = static_cast<char>(v >> (8 * (bytes - 1 - i)));
  }
}

uint32_t Crc32(const std::string& s, size_t begin, size_t end) {
  uint32_t crc = 0xFFFFFFFFu;
  for (size_t i = begin; i < end; ++i) {
    crc ^= static_cast<uint8_t>(s[i]);
    for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & -(crc & 1));
  }
  return ~crc;
}

struct Key {
  std::string name;
  std::map<std::string, std::string> members;  // extension -> bytes
  // The expected substitution; SUBSTITUTION_REASON_UNSPECIFIED: none.
  v1::SubstitutionReason reason = v1::SUBSTITUTION_REASON_UNSPECIFIED;
  std::string detail;  // a part of the expected detail
};

std::vector<Key> JunkKeys() {
  const std::string jpeg = Jpeg(1);
  std::string truncated_jpeg = jpeg;
  {
    // Headers and 64 bytes of scan data: every crop runs past the end.
    const size_t sos = JpegMarker(jpeg, 0xDA);
    const size_t length = (static_cast<uint8_t>(jpeg[sos + 2]) << 8) |
                          static_cast<uint8_t>(jpeg[sos + 3]);
    truncated_jpeg = jpeg.substr(0, sos + 2 + length + 64);
  }
  std::string jpeg_bomb = Jpeg(2);
  const size_t sof = JpegMarker(jpeg_bomb, 0xC0);
  PutBig(jpeg_bomb, sof + 5, 60000, 2);  // height
  PutBig(jpeg_bomb, sof + 7, 60000, 2);  // width
  const std::string png = Png(3);
  // Signature, IHDR, and 16 bytes into the first IDAT's data.
  const std::string truncated_png = png.substr(0, png.find("IDAT") + 4 + 16);
  std::string png_bomb = png;
  PutBig(png_bomb, 16, 60000, 4);
  PutBig(png_bomb, 20, 60000, 4);
  PutBig(png_bomb, 29, Crc32(png_bomb, 12, 29), 4);  // a valid IHDR CRC
  const std::string webp = Webp(4, /*lossless=*/false);
  const std::string html =
      "<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head>"
      "<body><h1>Not Found</h1></body></html>\n";
  using v1::SubstitutionReason;
  return {
      {"k00", {{"jpg", Jpeg(10)}, {"txt", "a cat"}}},
      {"k01", {{"png", Png(11)}, {"txt", "\xE7\x8C\xAB"}}},
      {"k02", {{"webp", webp}, {"txt", "lossy webp"}}},
      {"k03", {{"webp", Webp(12, /*lossless=*/true)}}},  // no caption
      {"k04", {{"jpg", html}, {"txt", "an error page"}}, v1::HTML_PAGE, "HTML"},
      {"k05", {{"jpg", ""}, {"txt", "empty"}}, v1::EMPTY_FILE, "empty"},
      {"k06", {{"jpg", truncated_jpeg}}, v1::TRUNCATED, ""},
      {"k07", {{"png", truncated_png}}, v1::TRUNCATED, ""},
      {"k08", {{"webp", webp.substr(0, webp.size() / 2)}}, v1::TRUNCATED,
       "WebP"},
      {"k09", {{"jpg", jpeg_bomb}}, v1::TOO_MANY_PIXELS, "60000x60000"},
      {"k10", {{"png", png_bomb}}, v1::TOO_MANY_PIXELS, "60000x60000"},
      {"k11", {{"txt", "a caption and no image"}}, v1::NO_IMAGE_MEMBER,
       "no image member"},
      {"k12", {{"jpg", Png(13)}}},                   // a PNG named .jpg
      {"k13", {{"jpg", Jpeg(14)}, {"txt", "ok"}}},
      {"k14", {{"jpg", Webp(15, /*lossless=*/false)}}},  // a WebP named .jpg
      // jpg comes before webp in the priority list: the junk webp is not
      // the image.
      {"k15", {{"jpg", Jpeg(16)}, {"webp", "junk"}}},
      {"k16", {{"webp", Webp(17, /*lossless=*/true)}, {"json", "{}"}}},
      {"k17", {{"jpeg", Jpeg(18)}}},
  };
}

TEST(JunkShardsTest, EachJunkSampleSubstitutedWithItsReasonAndCounted) {
  const std::vector<Key> keys = JunkKeys();
  const std::string dir = MakeTempDir("junk-shards");
  server::TarBuilder tar;
  for (const Key& key : keys) {
    for (const auto& [extension, bytes] : key.members) {
      tar.AddFile(key.name + "." + extension, bytes);
    }
    tar.AddFile(key.name + ".cls", "1");
  }
  tar.AddFile("stray.txt", "neither an image nor a class: not a sample");
  tar.Finish();
  server::WriteFileForTest(dir + "/junk-000000.tar", tar.bytes());
  server::WriteFileForTest(
      dir + "/batchd.conf",
      absl::StrCat("datasets { name: \"junk\" path: \"", dir,
                   "/junk-000000.tar\" image_extensions: "
                   "\"jpg;png;jpeg;webp\" }\n"));

  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--config", dir + "/batchd.conf", "--workers", "2",
                            "--metrics-port", "0", "--metrics-port-file",
                            dir + "/metrics-port"}));
  const std::string port = ReadPortFile(dir + "/metrics-port");
  ASSERT_FALSE(port.empty()) << daemon->Log();
  EXPECT_THAT(daemon->Log(), HasSubstr("1 keys have a class but no image"));

  const v1::Plan plan = TrainPlan("junk", 6, kSize, 5);
  ASSERT_OK_AND_ASSIGN(std::vector<BatchRecord> got,
                       ReadEpochs(daemon->endpoint(), plan, 0, kEpochs));
  ASSERT_EQ(got.size(), kEpochs * keys.size() / 6);

  std::map<v1::SubstitutionReason, uint64_t> per_reason;
  std::map<std::pair<uint64_t, uint64_t>, int> seen;  // (epoch, index)
  for (const BatchRecord& r : got) {
    SCOPED_TRACE(::testing::PrintToString(r));
    std::set<uint32_t> substituted;
    for (const v1::Substitution& sub : r.substitutions) {
      SCOPED_TRACE(sub.ShortDebugString());
      ASSERT_LT(sub.original_index(), keys.size());
      const Key& key = keys[sub.original_index()];
      EXPECT_EQ(sub.reason(), key.reason)
          << key.name << ": " << v1::SubstitutionReason_Name(sub.reason());
      EXPECT_THAT(sub.detail(), HasSubstr(key.detail));
      EXPECT_FALSE(sub.detail().empty());
      // A good substitute.
      ASSERT_LT(sub.substitute_index(), keys.size());
      EXPECT_EQ(keys[sub.substitute_index()].reason,
                v1::SUBSTITUTION_REASON_UNSPECIFIED);
      ++per_reason[sub.reason()];
      substituted.insert(sub.position());
    }
    for (uint32_t p = 0; p < r.sample_indices.size(); ++p) {
      ++seen[{r.epoch, r.sample_indices[p]}];
      if (substituted.count(p) == 0) {
        EXPECT_EQ(keys[r.sample_indices[p]].reason,
                  v1::SUBSTITUTION_REASON_UNSPECIFIED)
            << keys[r.sample_indices[p]].name << " was not substituted";
      }
    }
  }
  // Every key once per epoch.
  EXPECT_EQ(seen.size(), kEpochs * keys.size());
  std::map<v1::SubstitutionReason, uint64_t> want;
  uint64_t want_total = 0;
  for (const Key& key : keys) {
    if (key.reason == v1::SUBSTITUTION_REASON_UNSPECIFIED) continue;
    want[key.reason] += kEpochs;
    want_total += kEpochs;
  }
  EXPECT_EQ(per_reason, want);

  ASSERT_OK_AND_ASSIGN(v1::ServerStatus status,
                       GetServerStatus(daemon->endpoint()));
  EXPECT_EQ(status.samples_substituted(), want_total);
  ASSERT_OK_AND_ASSIGN(
      Page page,
      ScrapeWithPrometheusParser("http://127.0.0.1:" + port + "/metrics"));
  for (const auto& [reason, count] : want) {
    std::string name = v1::SubstitutionReason_Name(reason);
    for (char& c : name) c = static_cast<char>(std::tolower(c));
    EXPECT_EQ(page["batchd_substitutions_total{reason=\"" + name + "\"}"],
              count)
        << name;
  }
  // Content against name: the PNG and the WebP named .jpg (decoded), the
  // HTML page named .jpg (substituted); an empty member is EMPTY_FILE only.
  const std::string mismatch = "batchd_content_mismatches_total";
  EXPECT_EQ(page[mismatch + "{content=\"png\",named=\"jpeg\"}"], kEpochs);
  EXPECT_EQ(page[mismatch + "{content=\"webp\",named=\"jpeg\"}"], kEpochs);
  EXPECT_EQ(page[mismatch + "{content=\"html\",named=\"jpeg\"}"], kEpochs);
  double mismatches = 0;
  for (const auto& [line, value] : page) {
    if (line.rfind(mismatch + "{", 0) == 0) mismatches += value;
  }
  EXPECT_EQ(mismatches, 3.0 * kEpochs);
  daemon.reset();  // exits cleanly: no crash on the way
}

TEST(JunkShardsTest, WebpInAnImageFolderAndAListFileIsDecoded) {
  // The same WebPs (and a JPEG) as an ImageFolder and as a list file: no
  // substitution, and the same pixels from both (same sample order).
  const std::string dir = MakeTempDir("webp-folder");
  std::string list;
  for (int i = 0; i < 6; ++i) {
    const std::string relative =
        absl::StrCat("class_", i % 2, "/img_", i, i == 5 ? ".jpg" : ".webp");
    std::filesystem::create_directories(dir + "/class_" + std::to_string(i % 2));
    server::WriteFileForTest(dir + "/" + relative,
                             i == 5 ? Jpeg(30) : Webp(30 + i, i % 2 == 0));
    absl::StrAppend(&list, relative, " ", i % 2, "\n");
  }
  server::WriteFileForTest(dir + "/list.txt", list);
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<DaemonProcess> daemon,
      DaemonProcess::Start({"--dataset", "folder=" + dir, "--dataset",
                            "list=" + dir + "/list.txt"}));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> folder,
      ReadEpochs(daemon->endpoint(), EvalPlan("folder", 6, kSize, 1), 0, 1));
  ASSERT_OK_AND_ASSIGN(
      std::vector<BatchRecord> listed,
      ReadEpochs(daemon->endpoint(), EvalPlan("list", 6, kSize, 1), 0, 1));
  ASSERT_EQ(folder.size(), 1u);
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_TRUE(folder[0].substitutions.empty());
  EXPECT_TRUE(listed[0].substitutions.empty());
  EXPECT_EQ(folder[0].sample_indices.size(), 6u);
  // Both orders are sorted by path: class_0/img_0, 2, 4, class_1/img_1, ...
  EXPECT_EQ(folder[0].pixels, listed[0].pixels);
  EXPECT_NE(folder[0].pixels, std::string(folder[0].pixels.size(), '\0'));
}

}  // namespace
}  // namespace batchd::testing

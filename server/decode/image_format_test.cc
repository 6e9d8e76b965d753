#include "server/decode/image_format.h"

#include <string>

#include "gtest/gtest.h"

namespace batchd::server {
namespace {

ContentKind Sniff(const std::string& bytes) {
  return SniffContent(
      {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
}

TEST(ImageFormatTest, SniffsByMagicBytes) {
  EXPECT_EQ(Sniff(""), ContentKind::kEmpty);
  EXPECT_EQ(Sniff("\xFF\xD8\xFF\xE0"), ContentKind::kJpeg);
  EXPECT_EQ(Sniff(std::string("\x89PNG\r\n\x1a\n\0\0", 10)), ContentKind::kPng);
  EXPECT_EQ(Sniff(std::string("RIFF\x10\0\0\0WEBPVP8 ", 16)),
            ContentKind::kWebp);
  EXPECT_EQ(Sniff(std::string("RIFF\x10\0\0\0WAVEfmt ", 16)),
            ContentKind::kUnknown);
  EXPECT_EQ(Sniff("GIF89a...."), ContentKind::kGif);
  EXPECT_EQ(Sniff(std::string("II*\0", 4)), ContentKind::kTiff);
  EXPECT_EQ(Sniff("BM" + std::string(20, 'x')), ContentKind::kBmp);
  EXPECT_EQ(Sniff("<!DOCTYPE html><html>"), ContentKind::kHtml);
  EXPECT_EQ(Sniff("\xEF\xBB\xBF \r\n\t<html><head>"), ContentKind::kHtml);
  EXPECT_EQ(Sniff("<?xml version=\"1.0\"?><Error>"), ContentKind::kHtml);
  EXPECT_EQ(Sniff("This is a text file, not a JPEG.\n"),
            ContentKind::kUnknown);
  EXPECT_EQ(Sniff("< 3"), ContentKind::kUnknown);
  EXPECT_EQ(Sniff("<"), ContentKind::kUnknown);
  // Markup further than the first 512 bytes is not looked for.
  EXPECT_EQ(Sniff(std::string(600, ' ') + "<html>"), ContentKind::kUnknown);
}

TEST(ImageFormatTest, KindFromNameGoesByTheLastExtension) {
  EXPECT_EQ(KindFromName("a/b.JPG"), ContentKind::kJpeg);
  EXPECT_EQ(KindFromName("b.jpeg"), ContentKind::kJpeg);
  EXPECT_EQ(KindFromName("k.seg.png"), ContentKind::kPng);
  EXPECT_EQ(KindFromName("000001.webp"), ContentKind::kWebp);
  EXPECT_EQ(KindFromName("x.tif"), ContentKind::kTiff);
  EXPECT_EQ(KindFromName("x.txt"), std::nullopt);
  EXPECT_EQ(KindFromName("dir.jpg/file"), std::nullopt);
  EXPECT_EQ(KindFromName("noext"), std::nullopt);
  EXPECT_STREQ(ContentKindName(ContentKind::kHtml), "html");
  EXPECT_STREQ(ContentKindName(ContentKind::kWebp), "webp");
}

}  // namespace
}  // namespace batchd::server

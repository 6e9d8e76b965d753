#include "tools/shard_prep.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "batchd/v1/config.pb.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/dataset/dataset.h"
#include "server/decode/image_decoder.h"
#include "server/decode/image_probe.h"
#include "testing/png_synth.h"
#include "testing/jpeg_synth.h"

namespace batchd::tools {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void WriteAll(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::string TempDir(const std::string& name) {
  const char* base = getenv("TEST_TMPDIR");
  const std::string dir = absl::StrCat(base != nullptr ? base : "/tmp",
                                       "/shard_prep_test_", getpid(), "/", name);
  fs::remove_all(dir);
  return dir;
}

std::shared_ptr<const server::Dataset> Load(const std::string& path) {
  batchd::v1::DatasetConfig config;
  config.set_name("d");
  config.set_path(path);
  absl::StatusOr<std::shared_ptr<const server::Dataset>> d =
      server::LoadDataset(config);
  EXPECT_TRUE(d.ok()) << d.status();
  return d.ok() ? *d : nullptr;
}

std::string SampleBytes(const server::Dataset& d, uint64_t i) {
  absl::StatusOr<server::FileBytes> b = d.ReadSample(i);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::string(b->text()) : "";
}

// All files of a directory, by name (sidecar index caches left out).
std::map<std::string, std::string> Files(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(".batchd-index", 0) == 0) continue;
    files[name] = ReadAll(entry.path().string());
  }
  return files;
}

// An ImageFolder: JPEGs of several sizes in 3 classes, one PNG, one GIF.
class ShardPrepTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    input_ = new std::string(TempDir("input"));
    const int sizes[][2] = {{120, 90}, {640, 480}, {300, 500}, {256, 200},
                            {800, 257}, {64, 64},  {257, 256}, {500, 375}};
    for (int c = 0; c < 3; ++c) {
      fs::create_directories(absl::StrFormat("%s/class_%d", *input_, c));
    }
    for (int i = 0; i < 8; ++i) {
      SynthOptions options;
      options.width = sizes[i][0];
      options.height = sizes[i][1];
      options.seed = i;
      options.quality = 80;
      absl::StatusOr<std::vector<uint8_t>> jpeg = SynthesizeJpeg(options);
      ASSERT_TRUE(jpeg.ok());
      WriteAll(absl::StrFormat("%s/class_%d/img_%02d.jpg", *input_, i % 3, i),
               std::string(jpeg->begin(), jpeg->end()));
    }
    server::PngSpec png;
    png.width = 400;
    png.height = 100;
    for (int i = 0; i < 400 * 100 * 3; ++i) {
      png.samples.push_back(static_cast<uint16_t>((i * 7) % 256));
    }
    WriteAll(*input_ + "/class_1/img_20.png", server::EncodePngForTest(png));
    server::PngSpec small_png = png;
    small_png.width = 40;
    small_png.height = 10;
    WriteAll(*input_ + "/class_1/img_21.png",
             server::EncodePngForTest(small_png));
    WriteAll(*input_ + "/class_2/img_30.gif", "GIF89a not decodable here");
  }
  static void TearDownTestSuite() {
    fs::remove_all(fs::path(*input_).parent_path());
    delete input_;
  }

  static PrepOptions Options(const std::string& out) {
    PrepOptions options;
    options.input = *input_;
    options.out = TempDir(out);
    options.shard_samples = 3;
    options.threads = 2;
    return options;
  }

  static std::string* input_;
};

std::string* ShardPrepTest::input_ = nullptr;

TEST_F(ShardPrepTest, CopiesBytesInIndexOrderWithLabels) {
  const PrepOptions options = Options("copy");
  absl::StatusOr<PrepManifest> manifest = PrepareShards(options);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_EQ(manifest->samples_in, 11u);
  EXPECT_EQ(manifest->samples_written, 10u);
  EXPECT_EQ(manifest->copied, 10u);
  EXPECT_EQ(manifest->resized, 0u);
  EXPECT_EQ(manifest->shards, 4u);  // 3 + 3 + 3 + 1
  ASSERT_EQ(manifest->skipped.size(), 1u);
  EXPECT_THAT(manifest->skipped[0].path, HasSubstr("img_30.gif"));
  EXPECT_THAT(manifest->skipped[0].reason, HasSubstr("GIF"));
  EXPECT_EQ(manifest->bytes_in, manifest->bytes_out + 25u);

  const auto folder = Load(*input_);
  const auto shards = Load(options.out);
  ASSERT_NE(folder, nullptr);
  ASSERT_NE(shards, nullptr);
  EXPECT_EQ(shards->class_names(), folder->class_names());
  ASSERT_EQ(shards->size(), 10u);
  // The GIF is the last sample of the folder: the first 10 line up.
  EXPECT_THAT(folder->sample(10).path, HasSubstr("img_30.gif"));
  for (uint64_t i = 0; i < 10; ++i) {
    EXPECT_EQ(shards->sample(i).label, folder->sample(i).label);
    EXPECT_EQ(SampleBytes(*shards, i), SampleBytes(*folder, i)) << i;
  }
  EXPECT_EQ(shards->index_stats().skipped_samples, 0u);

  const std::string json = ReadAll(options.out + "/manifest.json");
  EXPECT_THAT(json, HasSubstr("\"samples_written\": 10"));
  EXPECT_THAT(json, HasSubstr("\"resized\": 0"));
  EXPECT_THAT(json, HasSubstr("img_30.gif"));
  EXPECT_EQ(ReadAll(options.out + "/classes.txt"), "class_0\nclass_1\nclass_2\n");
}

TEST_F(ShardPrepTest, DeterministicWhateverTheThreads) {
  for (int max_side : {0, 256}) {
    PrepOptions one = Options(absl::StrCat("det1_", max_side));
    one.threads = 1;
    one.max_side = max_side;
    PrepOptions three = Options(absl::StrCat("det3_", max_side));
    three.threads = 3;
    three.max_side = max_side;
    ASSERT_TRUE(PrepareShards(one).ok());
    ASSERT_TRUE(PrepareShards(three).ok());
    PrepOptions again = one;
    again.out = TempDir(absl::StrCat("det1b_", max_side));
    ASSERT_TRUE(PrepareShards(again).ok());
    const auto files = Files(one.out);
    EXPECT_EQ(files.size(), 4u + 2u);  // shards, classes.txt, manifest.json
    EXPECT_TRUE(files == Files(three.out)) << "max_side " << max_side;
    EXPECT_TRUE(files == Files(again.out)) << "max_side " << max_side;
  }
}

TEST_F(ShardPrepTest, MaxSideCapsLargeImagesAndCopiesSmallOnes) {
  PrepOptions options = Options("capped");
  options.max_side = 256;
  absl::StatusOr<PrepManifest> manifest = PrepareShards(options);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  const auto folder = Load(*input_);
  const auto shards = Load(options.out);
  ASSERT_EQ(shards->size(), 10u);
  uint64_t resized = 0;
  server::ImageDecoder decoder;
  for (uint64_t i = 0; i < 10; ++i) {
    const std::string original = SampleBytes(*folder, i);
    const std::string out = SampleBytes(*shards, i);
    auto span = [](const std::string& s) {
      return absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(s.data()),
                                 s.size());
    };
    absl::StatusOr<server::ImageInfo> in_info = server::ProbeImage(span(original));
    absl::StatusOr<server::ImageInfo> out_info = server::ProbeImage(span(out));
    ASSERT_TRUE(in_info.ok() && out_info.ok());
    EXPECT_LE(std::max(out_info->width, out_info->height), 256);
    if (std::max(in_info->width, in_info->height) <= 256) {
      EXPECT_EQ(out, original) << "sample " << i << " should be copied";
      continue;
    }
    ++resized;
    EXPECT_EQ(out_info->format, server::ImageFormat::kJpeg);
    EXPECT_EQ(std::max(out_info->width, out_info->height), 256);
    // The aspect ratio is kept to the pixel.
    const double aspect = static_cast<double>(in_info->width) / in_info->height;
    EXPECT_NEAR(static_cast<double>(out_info->width) / out_info->height, aspect,
                aspect * 2.0 / 256 + 1e-9);
    // The content: close to the daemon's own resize of the original.
    const int w = out_info->width, h = out_info->height;
    auto whole = [&](int, int) {
      server::CropSpec crop;
      crop.width = in_info->width;
      crop.height = in_info->height;
      crop.out_width = w;
      crop.out_height = h;
      return crop;
    };
    std::vector<uint8_t> expected(w * h * 3), actual(w * h * 3);
    ASSERT_TRUE(decoder.Decode(span(original), whole, server::PixelLayout::kHWC,
                               expected.data()).ok());
    auto identity = [&](int, int) {
      server::CropSpec crop;
      crop.width = w;
      crop.height = h;
      crop.out_width = w;
      crop.out_height = h;
      return crop;
    };
    ASSERT_TRUE(decoder.Decode(span(out), identity, server::PixelLayout::kHWC,
                               actual.data()).ok());
    double error = 0;
    for (size_t k = 0; k < expected.size(); ++k) {
      error += std::abs(expected[k] - actual[k]);
    }
    // Quality 90, 4:2:0 on synthetic content with sharp colour edges (and a
    // PNG of pure noise): a mean error of a few levels, not a different image.
    EXPECT_LT(error / expected.size(), 12.0) << "sample " << i;
  }
  // 640x480, 300x500, 800x257, 257x256, 500x375 and the 400x100 PNG.
  EXPECT_EQ(resized, 6u);
  EXPECT_EQ(manifest->resized, 6u);
  EXPECT_EQ(manifest->copied, 4u);
  EXPECT_LT(manifest->bytes_out, manifest->bytes_in);
}

TEST_F(ShardPrepTest, ShardSizeInBytes) {
  PrepOptions options = Options("bytes");
  ASSERT_TRUE(ParseShardSize("40KB", &options).ok());
  absl::StatusOr<PrepManifest> manifest = PrepareShards(options);
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  EXPECT_GT(manifest->shards, 1u);
  for (const std::string& name : manifest->shard_names) {
    const uint64_t size = fs::file_size(options.out + "/" + name);
    // Over the limit only when a single sample is larger than it.
    if (size > 40000) {
      const auto one = Load(options.out + "/" + name);
      EXPECT_EQ(one->size(), 1u) << name;
    }
  }
  EXPECT_EQ(Load(options.out)->size(), 10u);
}

TEST(ShardPrepOptionsTest, ParseShardSize) {
  PrepOptions options;
  ASSERT_TRUE(ParseShardSize("500", &options).ok());
  EXPECT_EQ(options.shard_samples, 500u);
  EXPECT_EQ(options.shard_bytes, 0u);
  ASSERT_TRUE(ParseShardSize("256MB", &options).ok());
  EXPECT_EQ(options.shard_bytes, 256000000u);
  EXPECT_EQ(options.shard_samples, 0u);
  ASSERT_TRUE(ParseShardSize("1GiB", &options).ok());
  EXPECT_EQ(options.shard_bytes, uint64_t{1} << 30);
  EXPECT_FALSE(ParseShardSize("0", &options).ok());
  EXPECT_FALSE(ParseShardSize("12 parsecs", &options).ok());
  EXPECT_FALSE(ParseShardSize("MB", &options).ok());
}

TEST_F(ShardPrepTest, RefusesANonEmptyOutputAndBadOptions) {
  PrepOptions options = Options("nonempty");
  fs::create_directories(options.out);
  WriteAll(options.out + "/keep.txt", "x");
  absl::StatusOr<PrepManifest> manifest = PrepareShards(options);
  EXPECT_EQ(manifest.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(manifest.status().message(), HasSubstr("not empty"));
  options.out = TempDir("bad-quality");
  options.quality = 0;
  EXPECT_EQ(PrepareShards(options).status().code(),
            absl::StatusCode::kInvalidArgument);
  options.quality = 90;
  options.input = "/nonexistent/input";
  EXPECT_EQ(PrepareShards(options).status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace batchd::tools

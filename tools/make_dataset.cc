// make_dataset: writes a synthetic ImageFolder dataset of photo-like JPEGs
// with ImageNet-like properties, for demos, tests and benchmarks.
//
//   make_dataset --out DIR --images N --classes K [--seed S]
//
// Writes DIR/class_XXX/img_XXXXXX.jpg (image i goes to class i % K). Per
// image, drawn deterministically from (seed, i): the long side is 500 px for
// most images, 300..800 px for a quarter, 800..2000 px for a few percent;
// aspect ratios from 1:1 to 16:9, a quarter portrait; quality 75..95; 85 %
// 4:2:0, 10 % 4:2:2, 5 % 4:4:4; 3 % progressive. Prints a summary.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"
#include "common/random.h"
#include "testing/jpeg_synth.h"

namespace batchd::tools {
namespace {

struct Args {
  std::string out;
  uint64_t images = 0;
  uint64_t classes = 0;
  uint64_t seed = 0;
};

void Usage() {
  fprintf(stderr,
          "usage: make_dataset --out DIR --images N --classes K [--seed S]\n");
}

bool ParseArgs(int argc, char** argv, Args* args) {
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    std::string value;
    const size_t eq = flag.find('=');
    std::string name = flag.substr(0, eq);
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      fprintf(stderr, "missing value for %s\n", flag.c_str());
      return false;
    }
    bool ok = true;
    if (name == "--out") {
      args->out = value;
    } else if (name == "--images") {
      ok = absl::SimpleAtoi(value, &args->images);
    } else if (name == "--classes") {
      ok = absl::SimpleAtoi(value, &args->classes);
    } else if (name == "--seed") {
      ok = absl::SimpleAtoi(value, &args->seed);
    } else {
      fprintf(stderr, "unknown flag %s\n", name.c_str());
      return false;
    }
    if (!ok) {
      fprintf(stderr, "bad value for %s: %s\n", name.c_str(), value.c_str());
      return false;
    }
  }
  if (args->out.empty() || args->images == 0 || args->classes == 0) {
    fprintf(stderr, "--out, --images (> 0) and --classes (> 0) are required\n");
    return false;
  }
  return true;
}

// Creates `path` and any missing parents (mkdir -p).
bool MakeDir(const std::string& path) {
  for (size_t slash = path.find('/', 1); slash != std::string::npos;
       slash = path.find('/', slash + 1)) {
    const std::string parent = path.substr(0, slash);
    if (mkdir(parent.c_str(), 0755) != 0 && errno != EEXIST) {
      absl::FPrintF(
          stderr, "%s\n",
          common::ErrnoMessage(errno, absl::StrCat("mkdir ", parent)));
      return false;
    }
  }
  if (mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) return true;
  absl::FPrintF(stderr, "%s\n",
                common::ErrnoMessage(errno, absl::StrCat("mkdir ", path)));
  return false;
}

// The options of image `index`, a pure function of (seed, index).
SynthOptions DrawOptions(uint64_t seed, uint64_t index) {
  common::SampleRandom rng(seed, /*epoch=*/0, index,
                           common::RandomPurpose::kAugment);
  SynthOptions o;
  double long_side;
  const double size_class = rng.Uniform();
  if (size_class < 0.70) {
    long_side = 500;
  } else if (size_class < 0.96) {
    long_side = rng.Uniform(300, 800);
  } else {
    long_side = rng.Uniform(800, 2000);
  }
  static constexpr double kAspects[] = {4.0 / 3, 4.0 / 3, 4.0 / 3, 4.0 / 3,
                                        3.0 / 2, 3.0 / 2, 5.0 / 4, 16.0 / 9,
                                        1.0,     4.0 / 3};
  const double aspect = kAspects[rng.UniformInt(10)];
  const int long_px = static_cast<int>(long_side);
  const int short_px = std::max(1, static_cast<int>(long_side / aspect + 0.5));
  const bool portrait = rng.Uniform() < 0.25;
  o.width = portrait ? short_px : long_px;
  o.height = portrait ? long_px : short_px;
  o.quality = 75 + static_cast<int>(rng.UniformInt(21));
  const double sub = rng.Uniform();
  o.subsampling = sub < 0.85   ? ChromaSubsampling::k420
                  : sub < 0.95 ? ChromaSubsampling::k422
                               : ChromaSubsampling::k444;
  o.progressive = rng.Uniform() < 0.03;
  o.detail = rng.Uniform(0.5, 1.2);
  o.seed = seed * 1000003 + index;
  return o;
}

int Run(const Args& args) {
  if (!MakeDir(args.out)) return 1;
  for (uint64_t c = 0; c < args.classes; ++c) {
    if (!MakeDir(absl::StrFormat("%s/class_%03d", args.out, c))) return 1;
  }
  double total_bytes = 0;
  std::vector<int64_t> pixels;
  std::vector<std::pair<int, int>> sizes;
  for (uint64_t i = 0; i < args.images; ++i) {
    const SynthOptions options = DrawOptions(args.seed, i);
    absl::StatusOr<std::vector<uint8_t>> jpeg = SynthesizeJpeg(options);
    if (!jpeg.ok()) {
      fprintf(stderr, "image %llu: %s\n", static_cast<unsigned long long>(i),
              jpeg.status().ToString().c_str());
      return 1;
    }
    const std::string path = absl::StrFormat(
        "%s/class_%03d/img_%06d.jpg", args.out, i % args.classes, i);
    FILE* f = fopen(path.c_str(), "wb");
    if (f == nullptr ||
        fwrite(jpeg->data(), 1, jpeg->size(), f) != jpeg->size() ||
        fclose(f) != 0) {
      absl::FPrintF(
          stderr, "%s\n",
          common::ErrnoMessage(errno, absl::StrCat("writing ", path)));
      return 1;
    }
    total_bytes += jpeg->size();
    sizes.emplace_back(options.width, options.height);
  }
  // Median by pixel count.
  std::sort(sizes.begin(), sizes.end(), [](auto a, auto b) {
    return int64_t{a.first} * a.second < int64_t{b.first} * b.second;
  });
  const auto median = sizes[sizes.size() / 2];
  printf("wrote %llu images in %llu classes to %s: mean %.1f KB, median %dx%d\n",
         static_cast<unsigned long long>(args.images),
         static_cast<unsigned long long>(args.classes), args.out.c_str(),
         total_bytes / args.images / 1024, median.first, median.second);
  return 0;
}

}  // namespace
}  // namespace batchd::tools

int main(int argc, char** argv) {
  batchd::tools::Args args;
  if (!batchd::tools::ParseArgs(argc, argv, &args)) {
    batchd::tools::Usage();
    return 2;
  }
  return batchd::tools::Run(args);
}

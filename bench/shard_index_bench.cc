// Start-up cost of a TAR_SHARDS dataset's index: LoadDataset over many small
// shards, cold (no sidecar index: every shard's headers and cls members are
// read) and warm (the sidecar is read and each shard stat'ed), alternating.
// The shards stay in the page cache in both cases: "cold" means without the
// sidecar, not without the page cache.
//
//   build/bench/batchd-shard-index-bench --shards=1000 --samples=10 --repeats=5
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "batchd/v1/config.pb.h"
#include "server/dataset/dataset.h"
#include "tools/tar_writer.h"

ABSL_FLAG(int, shards, 1000, "shards to index");
ABSL_FLAG(int, samples, 10, "samples per shard");
ABSL_FLAG(int, repeats, 5, "cold and warm loads each");
ABSL_FLAG(std::string, dir, "", "where to write the shards (default: a new "
                                "temporary directory, removed at the end)");

namespace {

namespace fs = std::filesystem;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void RemoveCaches(const std::string& dir) {
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().filename().string().rfind(".batchd-index-", 0) == 0) {
      fs::remove(entry.path());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const int shards = absl::GetFlag(FLAGS_shards);
  const int samples = absl::GetFlag(FLAGS_samples);
  std::string dir = absl::GetFlag(FLAGS_dir);
  const bool temporary = dir.empty();
  if (temporary) {
    char pattern[] = "/tmp/batchd-index-bench-XXXXXX";
    dir = mkdtemp(pattern);
  }
  fs::create_directories(dir);
  // Tiny members: the benchmark measures the index, not the data.
  const std::string image(2000, 'j');
  for (int s = 0; s < shards; ++s) {
    auto tar = batchd::tools::TarWriter::Create(
        absl::StrFormat("%s/shard-%06d.tar", dir, s));
    if (!tar.ok()) {
      fprintf(stderr, "%s\n", tar.status().ToString().c_str());
      return 1;
    }
    for (int i = 0; i < samples; ++i) {
      const std::string key = absl::StrFormat("%09d", s * samples + i);
      if (!(*tar)->Add(key + ".jpg", image).ok() ||
          !(*tar)->Add(key + ".cls", absl::StrFormat("%d", i % 10)).ok()) {
        return 1;
      }
    }
    if (!(*tar)->Close().ok()) return 1;
  }
  batchd::v1::DatasetConfig config;
  config.set_name("bench");
  config.set_path(dir);
  std::vector<double> cold, warm;
  uint64_t size = 0;
  for (int r = 0; r < absl::GetFlag(FLAGS_repeats); ++r) {
    for (const bool with_cache : {false, true}) {
      if (!with_cache) RemoveCaches(dir);
      const auto start = std::chrono::steady_clock::now();
      auto dataset = batchd::server::LoadDataset(config);
      const double seconds = std::chrono::duration<double>(
                                 std::chrono::steady_clock::now() - start)
                                 .count();
      if (!dataset.ok()) {
        fprintf(stderr, "%s\n", dataset.status().ToString().c_str());
        return 1;
      }
      const auto& stats = (*dataset)->index_stats();
      if (stats.shards_from_cache != (with_cache ? stats.shards : 0)) {
        fprintf(stderr, "unexpected cache use: %llu of %llu shards\n",
                static_cast<unsigned long long>(stats.shards_from_cache),
                static_cast<unsigned long long>(stats.shards));
        return 1;
      }
      size = (*dataset)->size();
      (with_cache ? warm : cold).push_back(seconds);
    }
  }
  printf("%d shards, %llu samples: cold (no sidecar) median %.1f ms (min %.1f, "
         "max %.1f); with the sidecar median %.1f ms (min %.1f, max %.1f); "
         "%.1fx\n",
         shards, static_cast<unsigned long long>(size), Median(cold) * 1e3,
         *std::min_element(cold.begin(), cold.end()) * 1e3,
         *std::max_element(cold.begin(), cold.end()) * 1e3, Median(warm) * 1e3,
         *std::min_element(warm.begin(), warm.end()) * 1e3,
         *std::max_element(warm.begin(), warm.end()) * 1e3,
         Median(cold) / Median(warm));
  if (temporary) fs::remove_all(dir);
  return 0;
}

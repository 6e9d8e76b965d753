// batchd-prep: writes a dataset as WebDataset tar shards for batchd's
// TAR_SHARDS format, optionally with every image capped to a maximum side.
//
//   batchd-prep --input /data/train --out /data/train-shards
//   batchd-prep --input /data/train --out /data/train-320 --max-side 320
//
// The input is anything `batchd --dataset` accepts (ImageFolder, list file,
// shards). The output directory gets shard-NNNNNN.tar, classes.txt and
// manifest.json (counts, bytes in and out, resized images, skipped inputs
// with the reason). The same input and flags give byte-identical output.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_format.h"
#include "tools/shard_prep.h"

ABSL_FLAG(std::string, input, "",
          "dataset to convert: an ImageFolder directory, a list file or shards");
ABSL_FLAG(std::string, root, "",
          "list-file inputs: the directory the listed paths are relative to");
ABSL_FLAG(std::string, out, "",
          "output directory (created; must be empty if it exists)");
ABSL_FLAG(std::string, shard_size, "1000",
          "samples per shard (\"1000\") or bytes per shard (\"256MB\", "
          "\"1GiB\")");
ABSL_FLAG(int, max_side, 0,
          "resize images whose longer side exceeds this and re-encode them as "
          "JPEG; 0 copies every image unchanged");
ABSL_FLAG(int, quality, 90, "JPEG quality of re-encoded images (4:2:0)");
ABSL_FLAG(int, threads, 0, "worker threads; 0 = one per core");
ABSL_FLAG(bool, quiet, false, "no progress line");

namespace {

std::string Duration(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  if (s >= 3600) return absl::StrFormat("%dh%02dm", s / 3600, s / 60 % 60);
  if (s >= 60) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  return absl::StrFormat("%ds", s);
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "writes a dataset as WebDataset tar shards for batchd.\n"
      "  batchd-prep --input DIR_OR_LIST --out DIR [--shard-size N|BYTES] "
      "[--max-side N --quality Q] [--threads N]");
  // Flags may be written with '-' or '_' (--max-side, --max_side), as the
  // daemon's.
  std::vector<std::string> args(argv, argv + argc);
  std::vector<char*> normalized;
  for (std::string& arg : args) {
    if (arg.rfind("--", 0) == 0) {
      const size_t end = std::min(arg.find('='), arg.size());
      std::replace(arg.begin() + 2, arg.begin() + end, '-', '_');
    }
    normalized.push_back(arg.data());
  }
  absl::ParseCommandLine(static_cast<int>(normalized.size()),
                         normalized.data());
  batchd::tools::PrepOptions options;
  options.input = absl::GetFlag(FLAGS_input);
  options.root = absl::GetFlag(FLAGS_root);
  options.out = absl::GetFlag(FLAGS_out);
  options.max_side = absl::GetFlag(FLAGS_max_side);
  options.quality = absl::GetFlag(FLAGS_quality);
  options.threads = absl::GetFlag(FLAGS_threads);
  if (options.threads <= 0) {
    options.threads =
        static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }
  const absl::Status size =
      batchd::tools::ParseShardSize(absl::GetFlag(FLAGS_shard_size), &options);
  if (!size.ok()) {
    fprintf(stderr, "batchd-prep: %s\n", std::string(size.message()).c_str());
    return 2;
  }
  const auto start = std::chrono::steady_clock::now();
  const bool tty = isatty(STDERR_FILENO);
  auto last_line = start;
  if (!absl::GetFlag(FLAGS_quiet)) {
    options.progress = [&](uint64_t done, uint64_t total) {
      const auto now = std::chrono::steady_clock::now();
      // On a terminal, one line rewritten every second; in a log, a line
      // every 10 s.
      if (!tty && done < total && now - last_line < std::chrono::seconds(10)) {
        return;
      }
      last_line = now;
      const double elapsed = std::chrono::duration<double>(now - start).count();
      const double rate = elapsed > 0 ? done / elapsed : 0;
      fprintf(stderr, "%s%llu/%llu samples (%.1f %%), %.0f samples/s, ETA %s%s",
              tty ? "\r" : "", static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(total),
              total > 0 ? 100.0 * done / total : 100.0, rate,
              Duration(rate > 0 ? (total - done) / rate : 0).c_str(),
              tty ? "   " : "\n");
      fflush(stderr);
    };
  }
  absl::StatusOr<batchd::tools::PrepManifest> manifest =
      batchd::tools::PrepareShards(options);
  if (tty && !absl::GetFlag(FLAGS_quiet)) fprintf(stderr, "\n");
  if (!manifest.ok()) {
    fprintf(stderr, "batchd-prep: %s\n",
            std::string(manifest.status().message()).c_str());
    return 1;
  }
  const double seconds = std::chrono::duration<double>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  printf("wrote %llu of %llu samples in %llu shards to %s in %s: %.1f MB in, "
         "%.1f MB out, %llu resized, %llu copied, %zu skipped%s\n",
         static_cast<unsigned long long>(manifest->samples_written),
         static_cast<unsigned long long>(manifest->samples_in),
         static_cast<unsigned long long>(manifest->shards), options.out.c_str(),
         Duration(seconds).c_str(), manifest->bytes_in / 1e6,
         manifest->bytes_out / 1e6,
         static_cast<unsigned long long>(manifest->resized),
         static_cast<unsigned long long>(manifest->copied),
         manifest->skipped.size(),
         manifest->skipped.empty() ? "" : " (see manifest.json)");
  for (size_t i = 0; i < manifest->skipped.size() && i < 5; ++i) {
    fprintf(stderr, "batchd-prep: skipped %s: %s\n",
            manifest->skipped[i].path.c_str(),
            manifest->skipped[i].reason.c_str());
  }
  return 0;
}

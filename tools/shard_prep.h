// PrepareShards: converts a dataset (ImageFolder, list file, or shards)
// into WebDataset tar shards that batchd serves as a TAR_SHARDS dataset:
// "<key>.jpg" (or ".png", ".webp") and "<key>.cls" per sample, a classes.txt and a
// manifest.json. It is the library behind the batchd-prep tool.
//
// Samples keep the input's index order (key = the input index, 9 digits),
// so a plan over the shards gives the same batches as over the input when
// no image is resized or skipped. With `max_side`, images whose longer side
// exceeds it are decoded, resized with the daemon's own antialiased resize
// and re-encoded as JPEG (quality, 4:2:0); the others are copied byte for
// byte. Inputs that are not JPEG, PNG or WebP (or, with max_side, whose header or
// data cannot be decoded) are skipped and listed in the manifest.
//
// Deterministic: the same input and options give byte-identical files,
// whatever the thread count (work runs in parallel, writes in index order).
//
//   PrepOptions options;
//   options.input = "/data/train";
//   options.out = "/data/train-shards";
//   options.max_side = 320;
//   ASSIGN_OR_RETURN(PrepManifest manifest, PrepareShards(options));
//
// Thread-safe (one call uses its own threads and joins them).
#ifndef BATCHD_TOOLS_SHARD_PREP_H_
#define BATCHD_TOOLS_SHARD_PREP_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd::tools {

struct PrepOptions {
  std::string input;  // dataset path, as for `batchd --dataset`
  std::string root;   // list-file inputs: what paths are relative to
  std::string out;    // output directory: created; must be empty if it exists
  // A new shard starts after shard_samples samples, or before the sample
  // that would take it past shard_bytes (the first nonzero one applies).
  uint64_t shard_samples = 1000;
  uint64_t shard_bytes = 0;
  int max_side = 0;   // 0: copy every image
  int quality = 90;   // re-encoded JPEGs
  int threads = 1;
  // Called about once a second from the writing thread with (done, total).
  std::function<void(uint64_t done, uint64_t total)> progress;
};

struct SkippedInput {
  uint64_t index = 0;
  std::string path;
  std::string reason;
};

struct PrepManifest {
  uint64_t samples_in = 0;
  uint64_t samples_written = 0;
  uint64_t shards = 0;
  uint64_t bytes_in = 0;        // image bytes read
  uint64_t bytes_out = 0;       // image bytes written
  uint64_t tar_bytes = 0;       // shard files, headers included
  uint64_t resized = 0;
  uint64_t copied = 0;
  std::vector<SkippedInput> skipped;
  std::vector<std::string> shard_names;  // in order
};

// Parses a --shard-size value: a sample count ("1000") or bytes with a unit
// ("256MB", "1GiB", "500KB"; K/M/G are powers of 1000, Ki/Mi/Gi of 1024).
absl::Status ParseShardSize(absl::string_view text, PrepOptions* options);

// Writes the shards, classes.txt and manifest.json. Errors: the input's
// loading error; INVALID_ARGUMENT for bad options or a non-empty `out`;
// the first write error.
absl::StatusOr<PrepManifest> PrepareShards(const PrepOptions& options);

// The manifest as JSON (what manifest.json holds).
std::string ManifestJson(const PrepOptions& options,
                         const PrepManifest& manifest);

}  // namespace batchd::tools

#endif  // BATCHD_TOOLS_SHARD_PREP_H_

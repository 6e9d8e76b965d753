// ShardIndex: the WebDataset samples of one tar shard, built from its
// headers (tar_reader.h) and its "cls" members.
//
// WebDataset convention (as webdataset's tariterators): a member's key is its
// path up to the first dot of the base name, its extension the rest
// ("a/b.seg.png" is key "a/b", extension "seg.png", compared lowercased).
// Consecutive members with the same key form one sample; a key that comes
// back later starts another. A sample is a key with an image member: the
// member whose extension comes first in the image extension list
// (ImageExtensions: open_clip's "jpg;png;jpeg;webp" by default), whatever
// the member order; and a "cls" member holding a non-negative class index
// in ASCII. A key with a class but no image member is a sample without an
// image (ShardSample::has_image false), which the daemon substitutes when
// it is read (NO_IMAGE_MEMBER): web-scale shards carry such keys, and
// counting them where the batch is built says so. Members without a dot in
// the base name and "__...__" metadata members are ignored; keys lacking a
// valid class are skipped and counted. A key's other members (txt, json,
// any extension: a plan's fields) are kept with its sample by extension
// and byte range, up to kMaxOtherMembers of them.
//
// Keys with an image but no "cls" member are also kept apart in
// `unlabeled`: a dataset in which no key has a class (img2dataset's
// jpg + txt + json layout) is made of them, with label kNoLabel.
//
// Plain data; thread-compatible.
#ifndef BATCHD_SERVER_DATASET_SHARD_INDEX_H_
#define BATCHD_SERVER_DATASET_SHARD_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/dataset/read_at.h"

namespace batchd::server {

// The largest class index a "cls" member may hold (as for list files, the
// class names are "0".."max" without a classes.txt, so this bounds memory).
inline constexpr int32_t kMaxShardLabel = (1 << 20) - 1;
// A "cls" member larger than this is not a class index.
inline constexpr uint64_t kMaxClsBytes = 64;

// The label of a sample whose dataset has no classes.
inline constexpr int32_t kNoLabel = -1;
// A key's members beside its image and cls kept for plans' fields; more
// are ignored (a key is a sample, not an archive).
inline constexpr size_t kMaxOtherMembers = 16;
// A member's extension longer than this is not a field name and is
// ignored.
inline constexpr size_t kMaxExtensionBytes = 64;

// A member of a key other than its image and cls: "txt" in key.txt.
struct ShardMember {
  std::string extension;  // lowercased, as SplitMemberName gives it
  uint64_t offset = 0;    // of its data in the shard
  uint64_t size = 0;      // bytes
};

struct ShardSample {
  std::string member;   // the image member's path in the tar; the key when
                        // !has_image
  uint64_t offset = 0;  // of its data in the shard (0 when !has_image)
  uint64_t size = 0;    // bytes (0 when !has_image)
  int32_t label = 0;    // kNoLabel in `unlabeled`
  std::vector<ShardMember> others;  // in member order, extensions unique
  bool has_image = true;
};

// The image member's extensions in priority order, lowercased, without
// dots: `spec` split at ';' ("jpg;png;jpeg;webp", open_clip's default, for
// an empty spec). INVALID_ARGUMENT naming the problem for an empty entry,
// one with '.', '/' or whitespace, a repeat, "cls", or more than 16.
absl::StatusOr<std::vector<std::string>> ImageExtensions(
    absl::string_view spec);
// open_clip's default list, "jpg;png;jpeg;webp", split.
const std::vector<std::string>& DefaultImageExtensions();

struct ShardIndex {
  std::vector<ShardSample> samples;  // in member order
  // Keys with an image but no cls member (counted in skipped_no_class
  // too), in member order, label kNoLabel.
  std::vector<ShardSample> unlabeled;
  // Keys skipped: with neither an image nor a "cls" member, with an image
  // but no "cls" member, or whose "cls" is not a class index.
  uint64_t skipped_no_image = 0;
  uint64_t skipped_no_class = 0;
  uint64_t skipped_bad_class = 0;
  // The first skipped key and why, for the log; empty if none.
  std::string skipped_example;
  // The tar's damage (TarScan::damage): empty if intact.
  std::string damage;

  uint64_t skipped() const {
    return skipped_no_image + skipped_no_class + skipped_bad_class;
  }
  // Samples without an image member (in `samples`, has_image false).
  uint64_t no_image_samples() const;
};

// Splits a member path into WebDataset key and lowercased extension; false
// when the base name has no dot (or starts with one: hidden files).
bool SplitMemberName(const std::string& name, std::string* key,
                     std::string* extension);

// Indexes the shard open as `fd` (`file_size` bytes), the image of each
// key chosen by `image_extensions` (ImageExtensions). `name` is for
// messages. UNAVAILABLE when a read fails; damage is not an error.
absl::StatusOr<ShardIndex> IndexShardFile(
    int fd, uint64_t file_size, const std::string& name,
    const std::vector<std::string>& image_extensions =
        DefaultImageExtensions());

// The same over any ReadAt (ScanTar, then each key's "cls" member).
absl::StatusOr<ShardIndex> IndexShard(
    ReadAt& file, uint64_t file_size, const std::string& name,
    const std::vector<std::string>& image_extensions =
        DefaultImageExtensions());

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DATASET_SHARD_INDEX_H_

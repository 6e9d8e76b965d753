#include "server/dataset/index_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/errno_status.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "server/dataset/dataset.h"

namespace batchd::server {
namespace {

constexpr char kMagic[8] = {'B', 'A', 'T', 'C', 'H', 'D', 'I', 'X'};
// 2: the validator string replaced version 1's mtime.
// 3: the image extension list per shard; per sample a has_image flag and
// its other members (fields); the keys without a class.
constexpr uint32_t kVersion = 3;
constexpr uint32_t kMaxStringBytes = 1 << 20;

uint64_t Fnv1a64(absl::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (unsigned char c : bytes) {
    hash = (hash ^ c) * 0x100000001b3ull;
  }
  return hash;
}

class Writer {
 public:
  void U32(uint32_t v) { Raw(&v, sizeof(v)); }
  void U64(uint64_t v) { Raw(&v, sizeof(v)); }
  void I32(int32_t v) { Raw(&v, sizeof(v)); }
  void String(const std::string& s) {
    U32(static_cast<uint32_t>(s.size()));
    out_.append(s);
  }
  void Raw(const void* data, size_t size) {
    out_.append(static_cast<const char*>(data), size);
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Reads fields in order; any read past the end sets !ok() and returns zeros.
class Reader {
 public:
  explicit Reader(absl::string_view in) : in_(in) {}
  uint32_t U32() { return Pod<uint32_t>(); }
  uint64_t U64() { return Pod<uint64_t>(); }
  int32_t I32() { return Pod<int32_t>(); }
  std::string String() {
    const uint32_t size = U32();
    if (!ok_ || size > kMaxStringBytes || size > in_.size()) {
      ok_ = false;
      return "";
    }
    std::string s(in_.substr(0, size));
    in_.remove_prefix(size);
    return s;
  }
  bool ok() const { return ok_; }
  size_t remaining() const { return in_.size(); }

 private:
  template <typename T>
  T Pod() {
    T v{};
    if (!ok_ || in_.size() < sizeof(T)) {
      ok_ = false;
      return v;
    }
    memcpy(&v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return v;
  }
  absl::string_view in_;
  bool ok_ = true;
};

// A sample count, then each sample: member, offset, size, label, its
// other members (count, then extension, offset, size each).
void WriteSamples(const std::vector<ShardSample>& samples, Writer& out) {
  out.U64(samples.size());
  for (const ShardSample& sample : samples) {
    out.String(sample.member.substr(0, kMaxStringBytes));
    out.U64(sample.offset);
    out.U64(sample.size);
    out.I32(sample.label);
    out.U32(sample.has_image ? 0 : 1);  // flags: bit 0, no image member
    out.U32(static_cast<uint32_t>(sample.others.size()));
    for (const ShardMember& other : sample.others) {
      out.String(other.extension);
      out.U64(other.offset);
      out.U64(other.size);
    }
  }
}

// WriteSamples' inverse; false on anything malformed. `labelled`: labels
// are class indices, else kNoLabel.
bool ReadSamples(Reader& in, bool labelled, std::vector<ShardSample>* out) {
  const uint64_t samples = in.U64();
  // Each sample takes at least 32 bytes: a count larger than what is left
  // is damage, not something to reserve memory for.
  if (!in.ok() || samples > in.remaining() / 32) return false;
  out->resize(samples);
  for (ShardSample& sample : *out) {
    sample.member = in.String();
    sample.offset = in.U64();
    sample.size = in.U64();
    sample.label = in.I32();
    if (labelled ? (sample.label < 0 || sample.label > kMaxShardLabel)
                 : sample.label != kNoLabel) {
      return false;
    }
    const uint32_t flags = in.U32();
    if (flags > 1) return false;
    sample.has_image = flags == 0;
    const uint32_t others = in.U32();
    if (!in.ok() || others > kMaxOtherMembers) return false;
    sample.others.resize(others);
    for (ShardMember& other : sample.others) {
      other.extension = in.String();
      other.offset = in.U64();
      other.size = in.U64();
      if (other.extension.size() > kMaxExtensionBytes) return false;
    }
  }
  return in.ok();
}

}  // namespace

std::string LocalValidator(int64_t mtime_ns) {
  return absl::StrCat("mtime:", mtime_ns);
}

std::string RemoteValidator(const std::string& etag) {
  return absl::StrCat("etag:", etag);
}

absl::StatusOr<std::vector<CachedShard>> ReadIndexCache(
    const std::string& path) {
  ASSIGN_OR_RETURN(const FileBytes file, ReadFileBytes(path));
  const absl::string_view text = file.text();
  auto malformed = [&](absl::string_view why) {
    return absl::DataLossError(
        absl::StrCat("index cache '", path, "' is not usable: ", why));
  };
  if (text.size() < sizeof(kMagic) + 8 + 8 ||
      memcmp(text.data(), kMagic, sizeof(kMagic)) != 0) {
    return malformed("not a batchd index cache");
  }
  const absl::string_view body = text.substr(0, text.size() - 8);
  uint64_t stored_hash = 0;
  memcpy(&stored_hash, text.data() + body.size(), 8);
  if (Fnv1a64(body) != stored_hash) return malformed("checksum mismatch");
  Reader in(body.substr(sizeof(kMagic)));
  if (in.U32() != kVersion) return malformed("another version");
  const uint32_t count = in.U32();
  std::vector<CachedShard> shards;
  for (uint32_t i = 0; i < count && in.ok(); ++i) {
    CachedShard shard;
    shard.path = in.String();
    shard.size = in.U64();
    shard.validator = in.String();
    shard.image_extensions = in.String();
    ShardIndex& index = shard.index;
    index.skipped_no_image = in.U64();
    index.skipped_no_class = in.U64();
    index.skipped_bad_class = in.U64();
    index.skipped_example = in.String();
    index.damage = in.String();
    if (!ReadSamples(in, /*labelled=*/true, &index.samples) ||
        !ReadSamples(in, /*labelled=*/false, &index.unlabeled)) {
      return malformed("bad sample");
    }
    shards.push_back(std::move(shard));
  }
  if (!in.ok() || in.remaining() != 0) return malformed("bad length");
  return shards;
}

absl::Status WriteIndexCache(const std::string& path,
                             const std::vector<CachedShard>& shards) {
  Writer out;
  out.Raw(kMagic, sizeof(kMagic));
  out.U32(kVersion);
  out.U32(static_cast<uint32_t>(shards.size()));
  for (const CachedShard& shard : shards) {
    out.String(shard.path);
    out.U64(shard.size);
    out.String(shard.validator.substr(0, kMaxStringBytes));
    out.String(shard.image_extensions.substr(0, kMaxStringBytes));
    const ShardIndex& index = shard.index;
    out.U64(index.skipped_no_image);
    out.U64(index.skipped_no_class);
    out.U64(index.skipped_bad_class);
    out.String(index.skipped_example.substr(0, kMaxStringBytes));
    out.String(index.damage.substr(0, kMaxStringBytes));
    WriteSamples(index.samples, out);
    WriteSamples(index.unlabeled, out);
  }
  out.U64(Fnv1a64(out.out()));

  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid());
  const int fd =
      ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return common::ErrnoStatus(errno, absl::StrCat("create '", temp, "'"));
  }
  const std::string& bytes = out.out();
  const absl::Status written = common::WriteFileRange(
      fd, /*offset=*/0, bytes.data(), bytes.size(),
      [&] { return absl::StrCat("write '", temp, "'"); });
  if (!written.ok()) {
    ::close(fd);
    ::unlink(temp.c_str());
    return written;
  }
  if (::close(fd) != 0) {
    const absl::Status status =
        common::ErrnoStatus(errno, absl::StrCat("close '", temp, "'"));
    ::unlink(temp.c_str());
    return status;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const absl::Status status = common::ErrnoStatus(
        errno, absl::StrCat("rename '", temp, "' to '", path, "'"));
    ::unlink(temp.c_str());
    return status;
  }
  return absl::OkStatus();
}

}  // namespace batchd::server

#include "tools/shard_prep.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "batchd/v1/config.pb.h"
#include "common/errno_status.h"
#include "common/status_macros.h"
#include "server/dataset/dataset.h"
#include "server/decode/image_decoder.h"
#include "server/decode/image_format.h"
#include "server/decode/image_probe.h"
#include "tools/jpeg_encoder.h"
#include "tools/tar_writer.h"

namespace batchd::tools {
namespace {

namespace fs = std::filesystem;
using server::Dataset;
using server::FileBytes;

// One sample's output, computed by a worker.
struct Converted {
  std::string skip_reason;  // non-empty: not written
  std::string data;         // the image member's bytes
  const char* extension = "jpg";
  bool resized = false;
  uint64_t bytes_in = 0;
};

Converted Convert(const Dataset& dataset, uint64_t index,
                  const PrepOptions& options, server::ImageDecoder& decoder) {
  Converted out;
  absl::StatusOr<FileBytes> file = dataset.ReadSample(index);
  if (!file.ok()) {
    out.skip_reason = absl::StrCat("read: ", file.status().message());
    return out;
  }
  out.bytes_in = file->size();
  absl::StatusOr<server::ImageInfo> info = server::ProbeImage(file->bytes());
  const server::ContentKind kind = server::SniffContent(file->bytes());
  if (kind != server::ContentKind::kJpeg && kind != server::ContentKind::kPng &&
      kind != server::ContentKind::kWebp) {
    out.skip_reason =
        info.ok() ? absl::StrCat(server::ContentKindName(kind), " content")
                  : std::string(info.status().message());
    return out;
  }
  out.extension = kind == server::ContentKind::kPng    ? "png"
                  : kind == server::ContentKind::kWebp ? "webp"
                                                       : "jpg";
  if (options.max_side > 0) {
    // The size decides whether to resize: a header that cannot be read
    // cannot be capped either.
    if (!info.ok()) {
      out.skip_reason = std::string(info.status().message());
      return out;
    }
    const int long_side = std::max(info->width, info->height);
    if (long_side > options.max_side) {
      const double scale = static_cast<double>(options.max_side) / long_side;
      const int width =
          info->width >= info->height
              ? options.max_side
              : std::max(1, static_cast<int>(std::lround(info->width * scale)));
      const int height =
          info->height > info->width
              ? options.max_side
              : std::max(1, static_cast<int>(std::lround(info->height * scale)));
      std::vector<uint8_t> rgb(static_cast<size_t>(width) * height * 3);
      const server::DecodeResult decoded = decoder.Decode(
          file->bytes(),
          [&](int w, int h) {
            server::CropSpec crop;
            crop.width = w;
            crop.height = h;
            crop.out_width = width;
            crop.out_height = height;
            return crop;
          },
          server::PixelLayout::kHWC, rgb.data());
      if (!decoded.ok()) {
        out.skip_reason = absl::StrCat("decode: ", decoded.detail);
        return out;
      }
      JpegEncodeOptions encode;
      encode.quality = options.quality;
      absl::StatusOr<std::string> jpeg =
          EncodeJpeg(rgb.data(), width, height, encode);
      if (!jpeg.ok()) {
        out.skip_reason = absl::StrCat("encode: ", jpeg.status().message());
        return out;
      }
      out.data = *std::move(jpeg);
      out.extension = "jpg";
      out.resized = true;
      return out;
    }
  }
  out.data.assign(file->text().data(), file->size());
  return out;
}

// Runs Convert over all samples on `threads` threads and hands the results
// to `write` in index order, at most `window` ahead of the writer.
class OrderedConverter {
 public:
  OrderedConverter(const Dataset& dataset, const PrepOptions& options)
      : dataset_(dataset),
        options_(options),
        total_(dataset.size()),
        window_(static_cast<uint64_t>(4 * std::max(options.threads, 1))) {
    for (int t = 0; t < std::max(options.threads, 1); ++t) {
      threads_.emplace_back([this] { Work(); });
    }
  }
  ~OrderedConverter() {
    {
      absl::MutexLock lock(&mu_);
      cancelled_ = true;
    }
    for (std::thread& thread : threads_) thread.join();
  }

  // The result of sample `index`; blocks until it is ready.
  // REQUIRES: called for 0, 1, 2, ... in order.
  Converted Take(uint64_t index) {
    absl::MutexLock lock(&mu_);
    waiting_for_ = index;
    mu_.Await(absl::Condition(this, &OrderedConverter::Ready));
    auto it = ready_.find(index);
    Converted result = std::move(it->second);
    ready_.erase(it);
    next_to_write_ = index + 1;
    return result;
  }

 private:
  bool Ready() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return ready_.count(waiting_for_) > 0;
  }

  bool CanClaim() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cancelled_ || next_to_claim_ >= total_ ||
           next_to_claim_ < next_to_write_ + window_;
  }

  void Work() {
    server::ImageDecoder decoder;
    while (true) {
      uint64_t index;
      {
        absl::MutexLock lock(&mu_);
        mu_.Await(absl::Condition(this, &OrderedConverter::CanClaim));
        if (cancelled_ || next_to_claim_ >= total_) return;
        index = next_to_claim_++;
      }
      Converted result = Convert(dataset_, index, options_, decoder);
      absl::MutexLock lock(&mu_);
      ready_.emplace(index, std::move(result));
    }
  }

  // Constant after construction.
  const Dataset& dataset_;
  const PrepOptions& options_;
  const uint64_t total_;
  const uint64_t window_;

  absl::Mutex mu_;
  uint64_t next_to_claim_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t next_to_write_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  // Finished samples not yet taken; at most window_ of them.
  std::map<uint64_t, Converted> ready_ ABSL_GUARDED_BY(mu_);
  uint64_t waiting_for_ ABSL_GUARDED_BY(mu_) = 0;  // the index Take wants

  std::vector<std::thread> threads_;  // last: joined before the rest goes
};

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return common::ErrnoStatus(errno, absl::StrCat("write '", path, "'"));
  }
  return absl::OkStatus();
}

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

absl::Status PrepareOutputDirectory(const std::string& out) {
  std::error_code ec;
  if (fs::exists(out, ec)) {
    if (!fs::is_directory(out, ec)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--out '", out, "' exists and is not a directory"));
    }
    if (!fs::is_empty(out, ec)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--out '", out, "' is not empty; choose a new directory"));
    }
    return absl::OkStatus();
  }
  fs::create_directories(out, ec);
  if (ec) {
    return absl::UnavailableError(
        absl::StrCat("create '", out, "': ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ParseShardSize(absl::string_view text, PrepOptions* options) {
  const std::string lower = absl::AsciiStrToLower(text);
  size_t digits = 0;
  while (digits < lower.size() && absl::ascii_isdigit(lower[digits])) ++digits;
  uint64_t value = 0;
  if (digits == 0 || !absl::SimpleAtoi(lower.substr(0, digits), &value) ||
      value == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--shard-size '", text,
        "': expected a positive sample count or bytes (e.g. 256MB)"));
  }
  const std::string unit = lower.substr(digits);
  static const std::pair<const char*, uint64_t> kUnits[] = {
      {"b", 1},           {"kb", 1000},         {"mb", 1000000},
      {"gb", 1000000000}, {"kib", uint64_t{1} << 10},
      {"mib", uint64_t{1} << 20}, {"gib", uint64_t{1} << 30},
      {"k", 1000},        {"m", 1000000},       {"g", 1000000000}};
  if (unit.empty()) {
    options->shard_samples = value;
    options->shard_bytes = 0;
    return absl::OkStatus();
  }
  for (const auto& [name, multiplier] : kUnits) {
    if (unit == name) {
      options->shard_samples = 0;
      options->shard_bytes = value * multiplier;
      return absl::OkStatus();
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--shard-size '", text, "': unknown unit '", unit,
      "' (B, KB, MB, GB, KiB, MiB, GiB)"));
}

std::string ManifestJson(const PrepOptions& options,
                         const PrepManifest& m) {
  std::string json = "{\n";
  absl::StrAppend(&json, "  \"input\": ", JsonString(options.input), ",\n");
  absl::StrAppend(&json, "  \"max_side\": ", options.max_side, ",\n");
  absl::StrAppend(&json, "  \"quality\": ", options.quality, ",\n");
  absl::StrAppend(&json, "  \"shard_samples\": ", options.shard_samples, ",\n");
  absl::StrAppend(&json, "  \"shard_bytes\": ", options.shard_bytes, ",\n");
  absl::StrAppend(&json, "  \"samples_in\": ", m.samples_in, ",\n");
  absl::StrAppend(&json, "  \"samples_written\": ", m.samples_written, ",\n");
  absl::StrAppend(&json, "  \"shards\": ", m.shards, ",\n");
  absl::StrAppend(&json, "  \"bytes_in\": ", m.bytes_in, ",\n");
  absl::StrAppend(&json, "  \"bytes_out\": ", m.bytes_out, ",\n");
  absl::StrAppend(&json, "  \"tar_bytes\": ", m.tar_bytes, ",\n");
  absl::StrAppend(&json, "  \"resized\": ", m.resized, ",\n");
  absl::StrAppend(&json, "  \"copied\": ", m.copied, ",\n");
  json += "  \"skipped\": [";
  for (size_t i = 0; i < m.skipped.size(); ++i) {
    const SkippedInput& s = m.skipped[i];
    absl::StrAppend(&json, i == 0 ? "\n" : ",\n", "    {\"index\": ", s.index,
                    ", \"path\": ", JsonString(s.path),
                    ", \"reason\": ", JsonString(s.reason), "}");
  }
  json += m.skipped.empty() ? "]\n" : "\n  ]\n";
  json += "}\n";
  return json;
}

absl::StatusOr<PrepManifest> PrepareShards(const PrepOptions& options) {
  if (options.input.empty() || options.out.empty()) {
    return absl::InvalidArgumentError("--input and --out are required");
  }
  if (options.max_side < 0 || options.quality < 1 || options.quality > 100 ||
      (options.shard_samples == 0 && options.shard_bytes == 0)) {
    return absl::InvalidArgumentError(
        "--max-side >= 0, --quality in 1..100 and a positive --shard-size "
        "are required");
  }
  batchd::v1::DatasetConfig config;
  config.set_name("input");
  config.set_path(options.input);
  config.set_root(options.root);
  ASSIGN_OR_RETURN(std::shared_ptr<const Dataset> dataset,
                   server::LoadDataset(config));
  RETURN_IF_ERROR(PrepareOutputDirectory(options.out));

  PrepManifest manifest;
  manifest.samples_in = dataset->size();
  std::unique_ptr<TarWriter> shard;
  uint64_t shard_samples = 0;
  auto close_shard = [&]() -> absl::Status {
    if (shard == nullptr) return absl::OkStatus();
    RETURN_IF_ERROR(shard->Close());
    manifest.tar_bytes += shard->bytes();
    shard.reset();
    return absl::OkStatus();
  };
  auto last_progress = std::chrono::steady_clock::now();
  {
    OrderedConverter converter(*dataset, options);
    for (uint64_t index = 0; index < dataset->size(); ++index) {
      Converted converted = converter.Take(index);
      manifest.bytes_in += converted.bytes_in;
      if (!converted.skip_reason.empty()) {
        manifest.skipped.push_back(
            {index, dataset->sample(index).path, converted.skip_reason});
      } else {
        const std::string key = absl::StrFormat("%09d", index);
        const std::string label = absl::StrCat(dataset->sample(index).label);
        // Headers, data and padding of the two members.
        const uint64_t member_bytes =
            1024 + (converted.data.size() + 511) / 512 * 512 + 512;
        const bool full =
            shard != nullptr &&
            ((options.shard_samples > 0 &&
              shard_samples >= options.shard_samples) ||
             (options.shard_bytes > 0 &&
              shard->bytes() + member_bytes + 1024 > options.shard_bytes));
        if (full) RETURN_IF_ERROR(close_shard());
        if (shard == nullptr) {
          const std::string name =
              absl::StrFormat("shard-%06d.tar", manifest.shards);
          ASSIGN_OR_RETURN(shard,
                           TarWriter::Create((fs::path(options.out) / name).string()));
          manifest.shard_names.push_back(name);
          ++manifest.shards;
          shard_samples = 0;
        }
        RETURN_IF_ERROR(
            shard->Add(absl::StrCat(key, ".", converted.extension), converted.data));
        RETURN_IF_ERROR(shard->Add(key + ".cls", label));
        ++shard_samples;
        ++manifest.samples_written;
        manifest.bytes_out += converted.data.size();
        ++(converted.resized ? manifest.resized : manifest.copied);
      }
      const auto now = std::chrono::steady_clock::now();
      if (options.progress && now - last_progress >= std::chrono::seconds(1)) {
        options.progress(index + 1, dataset->size());
        last_progress = now;
      }
    }
  }
  RETURN_IF_ERROR(close_shard());
  if (manifest.samples_written == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "no input sample could be written (", manifest.skipped.size(),
        " skipped; the first: ",
        manifest.skipped.empty() ? "" : manifest.skipped[0].reason, ")"));
  }
  std::string classes;
  for (const std::string& name : dataset->class_names()) {
    absl::StrAppend(&classes, name, "\n");
  }
  RETURN_IF_ERROR(
      WriteText((fs::path(options.out) / "classes.txt").string(), classes));
  RETURN_IF_ERROR(WriteText((fs::path(options.out) / "manifest.json").string(),
                            ManifestJson(options, manifest)));
  if (options.progress) options.progress(dataset->size(), dataset->size());
  return manifest;
}

}  // namespace batchd::tools

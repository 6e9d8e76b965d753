#include "tools/tar_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_status.h"

namespace batchd::tools {
namespace {

constexpr size_t kBlock = 512;
// Largest size an 11-digit octal field holds.
constexpr uint64_t kMaxOctalSize = (uint64_t{1} << 33) - 1;

std::string PaxRecord(absl::string_view key, absl::string_view value) {
  const std::string body = absl::StrCat(" ", key, "=", value, "\n");
  size_t length = body.size() + 1;
  while (absl::StrCat(length).size() + body.size() != length) ++length;
  return absl::StrCat(length, body);
}

// Splits `name` into ustar prefix (<= 155) and name (<= 100) at a slash;
// false if it cannot be.
bool SplitUstar(absl::string_view name, absl::string_view* prefix,
                absl::string_view* rest) {
  if (name.size() <= 100) {
    *prefix = "";
    *rest = name;
    return true;
  }
  for (size_t slash = name.find('/'); slash != absl::string_view::npos;
       slash = name.find('/', slash + 1)) {
    if (slash <= 155 && name.size() - slash - 1 <= 100 && slash > 0 &&
        slash + 1 < name.size()) {
      *prefix = name.substr(0, slash);
      *rest = name.substr(slash + 1);
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TarWriter>> TarWriter::Create(
    const std::string& path) {
  FILE* file = fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return common::ErrnoStatus(errno, absl::StrCat("create '", path, "'"));
  }
  return std::unique_ptr<TarWriter>(new TarWriter(path, file));
}

TarWriter::~TarWriter() {
  if (file_ != nullptr) fclose(file_);
}

absl::Status TarWriter::Write(absl::string_view bytes) {
  if (file_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("'", path_, "' is closed"));
  }
  if (fwrite(bytes.data(), 1, bytes.size(), file_) != bytes.size()) {
    return common::ErrnoStatus(errno, absl::StrCat("write '", path_, "'"));
  }
  bytes_ += bytes.size();
  return absl::OkStatus();
}

absl::Status TarWriter::WritePadded(absl::string_view data) {
  absl::Status status = Write(data);
  if (!status.ok()) return status;
  static const char kZeros[kBlock] = {};
  return Write(absl::string_view(kZeros, (kBlock - data.size() % kBlock) % kBlock));
}

absl::Status TarWriter::WriteHeader(absl::string_view name, uint64_t size,
                                    char type, absl::string_view prefix) {
  char h[kBlock] = {};
  memcpy(h, name.data(), std::min<size_t>(name.size(), 100));
  memcpy(h + 100, "0000644", 7);
  memcpy(h + 108, "0000000", 7);
  memcpy(h + 116, "0000000", 7);
  const std::string size_field =
      absl::StrFormat("%011o", std::min(size, kMaxOctalSize));
  memcpy(h + 124, size_field.data(), 11);
  memcpy(h + 136, "00000000000", 11);  // mtime 0: reproducible
  h[156] = type;
  memcpy(h + 257, "ustar\0" "00", 8);
  memcpy(h + 345, prefix.data(), std::min<size_t>(prefix.size(), 155));
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  const std::string checksum = absl::StrFormat("%06o", sum);
  memcpy(h + 148, checksum.data(), 6);
  h[154] = '\0';
  h[155] = ' ';
  return Write(absl::string_view(h, kBlock));
}

absl::Status TarWriter::Add(absl::string_view name, absl::string_view data) {
  if (name.empty() || name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad tar member name '", absl::CHexEscape(name), "'"));
  }
  absl::string_view prefix, rest;
  const bool fits = SplitUstar(name, &prefix, &rest);
  if (!fits || data.size() > kMaxOctalSize) {
    std::string records;
    if (!fits) records += PaxRecord("path", name);
    if (data.size() > kMaxOctalSize) {
      records += PaxRecord("size", absl::StrCat(data.size()));
    }
    absl::Status status = WriteHeader("PaxHeader", records.size(), 'x', "");
    if (status.ok()) status = WritePadded(records);
    if (!status.ok()) return status;
    if (!fits) {
      prefix = "";
      rest = name.substr(0, 100);
    }
  }
  absl::Status status = WriteHeader(rest, data.size(), '0', prefix);
  if (!status.ok()) return status;
  return WritePadded(data);
}

absl::Status TarWriter::Close() {
  static const char kEnd[2 * kBlock] = {};
  absl::Status status = Write(absl::string_view(kEnd, sizeof(kEnd)));
  if (file_ != nullptr && fclose(file_) != 0 && status.ok()) {
    status = common::ErrnoStatus(errno, absl::StrCat("close '", path_, "'"));
  }
  file_ = nullptr;
  return status;
}

}  // namespace batchd::tools

#include "server/dataset/tar_reader.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>

#include "absl/strings/numbers.h"
#include "common/status_macros.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace batchd::server {
namespace {

// Header field offsets and sizes (POSIX ustar; GNU shares the first 345
// bytes).
constexpr size_t kNameOffset = 0, kNameSize = 100;
constexpr size_t kSizeOffset = 124, kSizeSize = 12;
constexpr size_t kChecksumOffset = 148, kChecksumSize = 8;
constexpr size_t kTypeOffset = 156;
constexpr size_t kMagicOffset = 257;
constexpr size_t kPrefixOffset = 345, kPrefixSize = 155;

// A NUL-terminated (or full-width) string field.
std::string Field(const char* header, size_t offset, size_t size) {
  const char* start = header + offset;
  return std::string(start, strnlen(start, size));
}

// A numeric field: octal ASCII (leading spaces, ending at NUL or space) or
// GNU base-256 (first byte 0x80, then big-endian). nullopt when malformed
// or negative.
std::optional<uint64_t> ParseNumber(const char* header, size_t offset,
                                    size_t size) {
  const unsigned char* field =
      reinterpret_cast<const unsigned char*>(header + offset);
  if (field[0] == 0x80) {
    uint64_t value = 0;
    for (size_t i = 1; i < size; ++i) {
      if (value >> 56 != 0) return std::nullopt;  // would overflow
      value = (value << 8) | field[i];
    }
    return value;
  }
  if (field[0] & 0x80) return std::nullopt;  // base-256 negative
  size_t i = 0;
  while (i < size && field[i] == ' ') ++i;
  uint64_t value = 0;
  bool any = false;
  for (; i < size && field[i] != '\0' && field[i] != ' '; ++i) {
    if (field[i] < '0' || field[i] > '7') return std::nullopt;
    if (value >> 61 != 0) return std::nullopt;
    value = value * 8 + (field[i] - '0');
    any = true;
  }
  if (!any) return std::nullopt;
  return value;
}

// The header's checksum is the sum of its bytes with the checksum field
// read as spaces. Historic tars summed signed chars; accept either.
bool ChecksumMatches(const char* header) {
  const std::optional<uint64_t> stored =
      ParseNumber(header, kChecksumOffset, kChecksumSize);
  if (!stored.has_value()) return false;
  int64_t unsigned_sum = 0;
  int64_t signed_sum = 0;
  for (size_t i = 0; i < kTarBlockBytes; ++i) {
    const bool in_field =
        i >= kChecksumOffset && i < kChecksumOffset + kChecksumSize;
    const char c = in_field ? ' ' : header[i];
    unsigned_sum += static_cast<unsigned char>(c);
    signed_sum += static_cast<signed char>(c);
  }
  return static_cast<int64_t>(*stored) == unsigned_sum ||
         static_cast<int64_t>(*stored) == signed_sum;
}

bool IsZeroBlock(const char* block) {
  for (size_t i = 0; i < kTarBlockBytes; ++i) {
    if (block[i] != 0) return false;
  }
  return true;
}

uint64_t Padded(uint64_t size) {
  return (size + kTarBlockBytes - 1) / kTarBlockBytes * kTarBlockBytes;
}

// Metadata for the next member from a pax extended header: "path" and
// "size" records ("<length> <key>=<value>\n"). Returns false when a record
// is malformed.
bool ParsePax(absl::string_view data, std::optional<std::string>* path,
              std::optional<uint64_t>* size) {
  while (!data.empty()) {
    const size_t space = data.find(' ');
    uint64_t length = 0;
    if (space == absl::string_view::npos ||
        !absl::SimpleAtoi(data.substr(0, space), &length) ||
        length <= space + 1 || length > data.size() ||
        data[length - 1] != '\n') {
      return false;
    }
    const absl::string_view record = data.substr(space + 1, length - space - 2);
    data.remove_prefix(length);
    const size_t equals = record.find('=');
    if (equals == absl::string_view::npos) return false;
    const absl::string_view key = record.substr(0, equals);
    const absl::string_view value = record.substr(equals + 1);
    if (key == "path") {
      *path = std::string(value);
    } else if (key == "size") {
      uint64_t parsed = 0;
      if (!absl::SimpleAtoi(value, &parsed)) return false;
      *size = parsed;
    }
  }
  return true;
}

}  // namespace

absl::StatusOr<TarScan> ScanTarFile(int fd, uint64_t file_size,
                                    const std::string& name) {
  FdReadAt file(fd, name);
  return ScanTar(file, file_size, name);
}

absl::StatusOr<TarScan> ScanTar(ReadAt& file, uint64_t file_size,
                                const std::string& name) {
  TarScan scan;
  ASSIGN_OR_RETURN(scan.damage,
                   VisitTar(file, file_size, name, [&](TarMember member) {
                     scan.members.push_back(std::move(member));
                     return absl::OkStatus();
                   }));
  return scan;
}

absl::StatusOr<std::string> VisitTar(
    ReadAt& file, uint64_t file_size, const std::string& name,
    const std::function<absl::Status(TarMember)>& visit) {
  TarScan scan;
  // Metadata from "L" and "x" members, applied to the next member.
  std::optional<std::string> next_name;
  std::optional<uint64_t> next_size;
  char header[kTarBlockBytes];
  uint64_t pos = 0;
  while (pos < file_size) {
    absl::StatusOr<size_t> got =
        file.Read(pos, header, kTarBlockBytes);
    if (!got.ok()) return got.status();
    if (*got < kTarBlockBytes) {
      // A cut inside the end-of-archive marker loses nothing.
      if (std::all_of(header, header + *got, [](char c) { return c == 0; })) {
        break;
      }
      scan.damage = absl::StrCat("'", name, "' ends inside a header at offset ",
                                 pos, " (", *got, " of 512 bytes)");
      break;
    }
    if (IsZeroBlock(header)) break;  // end-of-archive marker
    if (!ChecksumMatches(header)) {
      scan.damage =
          absl::StrCat("'", name, "': bad header checksum at offset ", pos);
      break;
    }
    const std::optional<uint64_t> header_size =
        ParseNumber(header, kSizeOffset, kSizeSize);
    if (!header_size.has_value()) {
      scan.damage =
          absl::StrCat("'", name, "': bad size field in the header at offset ",
                       pos);
      break;
    }
    const char type = header[kTypeOffset];
    // pax "size" overrides the header's only for the member it describes.
    const uint64_t size =
        (type == 'x' || type == 'g' || type == 'L' || type == 'K')
            ? *header_size
            : next_size.value_or(*header_size);
    const uint64_t data_offset = pos + kTarBlockBytes;
    if (size > file_size || data_offset + size > file_size) {
      scan.damage = absl::StrCat("'", name, "': member at offset ", pos,
                                 " (", size, " bytes) runs past the end of the "
                                 "file (", file_size, " bytes)");
      break;
    }
    const uint64_t next_pos = data_offset + Padded(size);

    if (type == 'K' || type == 'g') {
      // A long link name or global pax header: nothing a sample needs.
    } else if (type == 'L' || type == 'x') {
      if (size > kMaxTarMetadataBytes) {
        scan.damage = absl::StrCat("'", name, "': ",
                                   type == 'L' ? "GNU long name" : "pax header",
                                   " at offset ", pos, " is ", size,
                                   " bytes, more than ", kMaxTarMetadataBytes);
        break;
      }
      std::string data(size, '\0');
      absl::StatusOr<size_t> read =
          file.Read(data_offset, data.data(), size);
      if (!read.ok()) return read.status();
      if (type == 'L') {
        data.resize(strnlen(data.data(), data.size()));
        next_name = std::move(data);
      } else if (!ParsePax(data, &next_name, &next_size)) {
        scan.damage = absl::StrCat("'", name,
                                   "': malformed pax header at offset ", pos);
        break;
      }
    } else {
      const bool regular = type == '0' || type == '\0' || type == '7';
      if (regular) {
        std::string member_name;
        if (next_name.has_value()) {
          member_name = *std::move(next_name);
        } else {
          member_name = Field(header, kNameOffset, kNameSize);
          // POSIX ustar splits long paths into prefix "/" name; GNU tars use
          // those bytes for other fields and say "ustar  " instead.
          if (memcmp(header + kMagicOffset, "ustar\0", 6) == 0) {
            const std::string prefix =
                Field(header, kPrefixOffset, kPrefixSize);
            if (!prefix.empty()) member_name = prefix + "/" + member_name;
          }
        }
        RETURN_IF_ERROR(visit({std::move(member_name), data_offset, size}));
      }
      // Links, directories and devices carry no data, whatever their size
      // field says (as Python's tarfile reads them); other types do.
      const bool no_data = type >= '1' && type <= '6';
      next_name.reset();
      next_size.reset();
      if (no_data) {
        pos = data_offset;
        continue;
      }
    }
    if (next_pos > file_size) {
      // The data is complete but the padding after it is not: keep the
      // member, report the truncation.
      scan.damage = absl::StrCat("'", name,
                                 "' ends inside the padding of the member at "
                                 "offset ", pos);
      break;
    }
    pos = next_pos;
  }
  if (scan.damage.empty() && (next_name.has_value() || next_size.has_value()) &&
      pos >= file_size) {
    scan.damage = absl::StrCat("'", name, "' ends after a long name or pax "
                               "header, before the member it describes");
  }
  return scan.damage;
}

}  // namespace batchd::server

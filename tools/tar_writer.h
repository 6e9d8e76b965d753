// TarWriter: writes a tar file of regular-file members, as WebDataset
// shards are: POSIX ustar headers, with a pax extended header for a name
// that does not fit (longer than 100 bytes and not splittable into the
// 155-byte prefix) or a member of 8 GiB or more. Every header field that
// could vary between runs (mtime, owner, mode) is fixed, so the same
// members give the same bytes.
//
//   ASSIGN_OR_RETURN(auto tar, TarWriter::Create("shard-000000.tar"));
//   RETURN_IF_ERROR(tar->Add("000000000.jpg", jpeg_bytes));
//   RETURN_IF_ERROR(tar->Close());
//
// Thread-compatible.
#ifndef BATCHD_TOOLS_TAR_WRITER_H_
#define BATCHD_TOOLS_TAR_WRITER_H_

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace batchd::tools {

class TarWriter {
 public:
  // Creates (truncates) `path`. The error names it.
  static absl::StatusOr<std::unique_ptr<TarWriter>> Create(
      const std::string& path);
  // Closes without the end marker if Close was not called (a partial file).
  ~TarWriter();
  TarWriter(const TarWriter&) = delete;
  TarWriter& operator=(const TarWriter&) = delete;

  // Appends a member. INVALID_ARGUMENT for an empty name or one with a NUL;
  // the write's error otherwise.
  absl::Status Add(absl::string_view name, absl::string_view data);
  // Writes the end-of-archive marker (two zero blocks) and closes the file.
  absl::Status Close();

  // Bytes written so far.
  uint64_t bytes() const { return bytes_; }

 private:
  TarWriter(std::string path, FILE* file) : path_(std::move(path)), file_(file) {}
  absl::Status Write(absl::string_view bytes);
  absl::Status WriteHeader(absl::string_view name, uint64_t size, char type,
                           absl::string_view prefix);
  absl::Status WritePadded(absl::string_view data);

  const std::string path_;
  FILE* file_;  // nullptr once closed
  uint64_t bytes_ = 0;
};

}  // namespace batchd::tools

#endif  // BATCHD_TOOLS_TAR_WRITER_H_

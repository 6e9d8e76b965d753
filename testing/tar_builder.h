// TarBuilder: hand-built tar archives for tests, byte by byte, so that tests
// can cover each header format and damage the result precisely (offsets of
// every header are returned).
//
//   TarBuilder tar;
//   tar.AddFile("a.jpg", jpeg);
//   size_t header = tar.AddFile("a.cls", "3");
//   tar.Finish();
//   std::string bytes = tar.bytes();
//   bytes[header + 148] ^= 1;  // break a checksum
//
// Thread-compatible.
#ifndef BATCHD_TESTING_TAR_BUILDER_H_
#define BATCHD_TESTING_TAR_BUILDER_H_

#include <cstddef>
#include <cstdint>
#include <string>

namespace batchd::server {

enum class TarFlavour { kUstar, kGnu, kV7 };

class TarBuilder {
 public:
  // A member with `type` ('0' regular), name in the header's name field
  // (truncated to 100 bytes), optional ustar `prefix`. Returns the offset
  // of its header.
  size_t AddFile(const std::string& name, const std::string& data,
                 char type = '0', TarFlavour flavour = TarFlavour::kUstar,
                 const std::string& prefix = "");
  // A GNU "././@LongLink" ('L') member carrying `name`, then the file.
  size_t AddGnuLongName(const std::string& name, const std::string& data);
  // A pax extended header ('x') with `records` ("<len> key=value\n" each,
  // see PaxRecord), then the file with `header_name` in its header.
  size_t AddPax(const std::string& records, const std::string& header_name,
                const std::string& data);
  // Appends raw bytes.
  void AddRaw(const std::string& bytes) { bytes_ += bytes; }
  // The end-of-archive marker: two zero blocks.
  void Finish();

  const std::string& bytes() const { return bytes_; }

  // One pax record, "<length> <key>=<value>\n", length counting itself.
  static std::string PaxRecord(const std::string& key,
                               const std::string& value);
  // A 512-byte header with a valid checksum.
  static std::string Header(const std::string& name, uint64_t size, char type,
                            TarFlavour flavour, const std::string& prefix);

 private:
  void AddData(const std::string& data);
  std::string bytes_;
};

// Writes `bytes` to `path`; aborts the test binary if it cannot.
void WriteFileForTest(const std::string& path, const std::string& bytes);

}  // namespace batchd::server

#endif  // BATCHD_TESTING_TAR_BUILDER_H_

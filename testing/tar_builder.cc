#include "testing/tar_builder.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace batchd::server {

std::string TarBuilder::Header(const std::string& name, uint64_t size,
                               char type, TarFlavour flavour,
                               const std::string& prefix) {
  std::string h(512, '\0');
  memcpy(&h[0], name.data(), std::min<size_t>(name.size(), 100));
  memcpy(&h[100], "0000644", 7);
  memcpy(&h[108], "0000000", 7);
  memcpy(&h[116], "0000000", 7);
  const std::string size_field = absl::StrFormat("%011o", size);
  memcpy(&h[124], size_field.data(), 11);
  memcpy(&h[136], "00000000000", 11);
  h[156] = type;
  if (flavour == TarFlavour::kUstar) {
    memcpy(&h[257], "ustar\0" "00", 8);
    memcpy(&h[345], prefix.data(), std::min<size_t>(prefix.size(), 155));
  } else if (flavour == TarFlavour::kGnu) {
    memcpy(&h[257], "ustar  \0", 8);
  }
  memset(&h[148], ' ', 8);
  unsigned sum = 0;
  for (unsigned char c : h) sum += c;
  const std::string checksum = absl::StrFormat("%06o", sum);
  memcpy(&h[148], checksum.data(), 6);
  h[154] = '\0';
  h[155] = ' ';
  return h;
}

void TarBuilder::AddData(const std::string& data) {
  bytes_ += data;
  bytes_.append((512 - data.size() % 512) % 512, '\0');
}

size_t TarBuilder::AddFile(const std::string& name, const std::string& data,
                           char type, TarFlavour flavour,
                           const std::string& prefix) {
  const size_t offset = bytes_.size();
  bytes_ += Header(name, data.size(), type, flavour, prefix);
  AddData(data);
  return offset;
}

size_t TarBuilder::AddGnuLongName(const std::string& name,
                                  const std::string& data) {
  const size_t offset = bytes_.size();
  const std::string long_name = name + std::string(1, '\0');
  bytes_ += Header("././@LongLink", long_name.size(), 'L', TarFlavour::kGnu,
                   "");
  AddData(long_name);
  bytes_ += Header(name.substr(0, 100), data.size(), '0', TarFlavour::kGnu,
                   "");
  AddData(data);
  return offset;
}

size_t TarBuilder::AddPax(const std::string& records,
                          const std::string& header_name,
                          const std::string& data) {
  const size_t offset = bytes_.size();
  bytes_ += Header("PaxHeaders/x", records.size(), 'x', TarFlavour::kUstar,
                   "");
  AddData(records);
  bytes_ += Header(header_name, data.size(), '0', TarFlavour::kUstar, "");
  AddData(data);
  return offset;
}

void TarBuilder::Finish() { bytes_.append(1024, '\0'); }

std::string TarBuilder::PaxRecord(const std::string& key,
                                  const std::string& value) {
  const std::string body = absl::StrCat(" ", key, "=", value, "\n");
  size_t length = body.size() + 1;
  while (absl::StrCat(length).size() + body.size() != length) ++length;
  return absl::StrCat(length, body);
}

void WriteFileForTest(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  if (f == nullptr || fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size() ||
      fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", path.c_str());
    abort();
  }
}

}  // namespace batchd::server

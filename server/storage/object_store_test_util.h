// What the ObjectStore tests share: deterministic object bytes, a file
// writer, fast-retry store options and a whole-range read.
#ifndef BATCHD_SERVER_STORAGE_OBJECT_STORE_TEST_UTIL_H_
#define BATCHD_SERVER_STORAGE_OBJECT_STORE_TEST_UTIL_H_

#include <cstdint>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "server/storage/object_store.h"

namespace batchd::server {

// `size` bytes that differ with `seed` and position.
inline std::string Bytes(size_t size, uint32_t seed) {
  std::string out(size, '\0');
  uint32_t x = seed * 2654435761u + 1;
  for (size_t i = 0; i < size; ++i) {
    x = x * 1664525u + 1013904223u;
    out[i] = static_cast<char>(x >> 24);
  }
  return out;
}

inline void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// Fast retries: tests fail in milliseconds, stall in about a second.
inline ObjectStoreOptions TestOptions() {
  ObjectStoreOptions options;
  options.connections = 4;
  options.max_attempts = 4;
  options.initial_backoff = absl::Milliseconds(5);
  options.max_backoff = absl::Milliseconds(50);
  options.deadline = absl::Seconds(20);
  options.connect_timeout = absl::Seconds(2);
  options.stall_timeout = absl::Seconds(1);
  options.list_page_size = 2;
  return options;
}

inline std::string ReadAll(ObjectStore& store, const ObjectInfo& object,
                    uint64_t offset, uint64_t size, absl::Status* status) {
  std::string out(size, '\0');
  *status = store.ReadRange(object, offset, size,
                            reinterpret_cast<uint8_t*>(out.data()));
  return out;
}

}  // namespace batchd::server

#endif  // BATCHD_SERVER_STORAGE_OBJECT_STORE_TEST_UTIL_H_

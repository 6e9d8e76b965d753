#include "common/chunk_codec.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "grpcpp/support/slice.h"

namespace batchd::common {
namespace {

using google::protobuf::io::CodedOutputStream;
using batchd::v1::StreamResponse;

constexpr int kVarint = 0;
constexpr int kFixed64 = 1;
constexpr int kLengthDelimited = 2;
constexpr int kFixed32 = 5;

constexpr uint32_t Tag(int field, int wire_type) {
  return static_cast<uint32_t>(field << 3 | wire_type);
}

// Field numbers, from proto/batchd/v1/data.proto.
constexpr int kResponseChunk = 3;  // StreamResponse.chunk
constexpr int kChunkEpoch = 1;
constexpr int kChunkBatchIndex = 2;
constexpr int kChunkOffset = 3;
constexpr int kChunkData = 4;

// Reads protobuf wire primitives across a ByteBuffer's slices.
class SliceReader {
 public:
  struct Position {
    size_t slice = 0;
    size_t offset = 0;
  };

  explicit SliceReader(const std::vector<grpc::Slice>& slices)
      : slices_(slices) {
    for (const grpc::Slice& s : slices_) remaining_ += s.size();
    SkipEmpty();
  }

  uint64_t remaining() const { return remaining_; }
  Position position() const { return pos_; }

  bool ReadVarint(uint64_t* value) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (remaining_ == 0) return false;
      const uint8_t byte = slices_[pos_.slice].begin()[pos_.offset];
      Advance(1);
      result |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) {
        *value = result;
        return true;
      }
    }
    return false;
  }

  bool Skip(uint64_t n) {
    if (n > remaining_) return false;
    Advance(n);
    return true;
  }

  // Copies `n` bytes starting at `from` to `dest`. REQUIRES: they exist.
  void CopyFrom(Position from, uint64_t n, uint8_t* dest) const {
    while (n > 0) {
      const grpc::Slice& s = slices_[from.slice];
      const size_t take = std::min<uint64_t>(n, s.size() - from.offset);
      std::memcpy(dest, s.begin() + from.offset, take);
      dest += take;
      n -= take;
      ++from.slice;
      from.offset = 0;
    }
  }

 private:
  void Advance(uint64_t n) {
    remaining_ -= n;
    while (n > 0) {
      const size_t left = slices_[pos_.slice].size() - pos_.offset;
      if (n < left) {
        pos_.offset += n;
        return;
      }
      n -= left;
      ++pos_.slice;
      pos_.offset = 0;
    }
    SkipEmpty();
  }
  void SkipEmpty() {
    while (pos_.slice < slices_.size() &&
           pos_.offset == slices_[pos_.slice].size()) {
      ++pos_.slice;
      pos_.offset = 0;
    }
  }

  const std::vector<grpc::Slice>& slices_;
  Position pos_;
  uint64_t remaining_ = 0;
};

absl::Status Malformed(const std::string& what) {
  return absl::InternalError(
      absl::StrCat("protocol error: malformed StreamResponse: ", what));
}

// Skips one field's value of `wire_type`.
bool SkipValue(SliceReader& reader, int wire_type) {
  uint64_t value = 0;
  switch (wire_type) {
    case kVarint:
      return reader.ReadVarint(&value);
    case kFixed64:
      return reader.Skip(8);
    case kLengthDelimited:
      return reader.ReadVarint(&value) && reader.Skip(value);
    case kFixed32:
      return reader.Skip(4);
    default:
      return false;
  }
}

// The fast path: a buffer that is exactly one `chunk` field. Returns false
// (without error) for anything else, which then takes the protobuf path.
absl::StatusOr<bool> DecodeChunk(const std::vector<grpc::Slice>& slices,
                                 ChunkDestination destination,
                                 ChunkInfo* out) {
  SliceReader reader(slices);
  uint64_t tag = 0, length = 0;
  if (!reader.ReadVarint(&tag) || tag != Tag(kResponseChunk, kLengthDelimited)) {
    return false;
  }
  if (!reader.ReadVarint(&length) || length != reader.remaining()) {
    return false;
  }
  ChunkInfo info;
  bool have_data = false;
  SliceReader::Position data_at;
  while (reader.remaining() > 0) {
    if (!reader.ReadVarint(&tag)) return Malformed("bad field tag");
    const int field = static_cast<int>(tag >> 3);
    const int wire_type = static_cast<int>(tag & 7);
    bool ok = true;
    if (field == kChunkEpoch && wire_type == kVarint) {
      ok = reader.ReadVarint(&info.epoch);
    } else if (field == kChunkBatchIndex && wire_type == kVarint) {
      ok = reader.ReadVarint(&info.batch_index);
    } else if (field == kChunkOffset && wire_type == kVarint) {
      ok = reader.ReadVarint(&info.offset);
    } else if (field == kChunkData && wire_type == kLengthDelimited) {
      if (have_data) return false;  // repeated field: let protobuf decide
      ok = reader.ReadVarint(&info.length);
      data_at = reader.position();
      ok = ok && reader.Skip(info.length);
      have_data = true;
    } else {
      ok = SkipValue(reader, wire_type);
    }
    if (!ok) return Malformed("truncated chunk field");
  }
  absl::StatusOr<uint8_t*> dest = destination(info);
  if (!dest.ok()) return dest.status();
  if (have_data && info.length > 0) reader.CopyFrom(data_at, info.length, *dest);
  *out = info;
  return true;
}

void ReleaseOwner(void* owner) {
  delete static_cast<std::shared_ptr<const void>*>(owner);
}

}  // namespace

grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& message) {
  std::string bytes = message.SerializeAsString();
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

grpc::ByteBuffer EncodeChunk(uint64_t epoch, uint64_t batch_index,
                             uint64_t offset, const uint8_t* data,
                             size_t length, std::shared_ptr<const void> owner) {
  // Proto3 leaves zero-valued scalars out; so do we, to match protobuf.
  size_t inner = 0;
  if (epoch != 0) inner += 1 + CodedOutputStream::VarintSize64(epoch);
  if (batch_index != 0) inner += 1 + CodedOutputStream::VarintSize64(batch_index);
  if (offset != 0) inner += 1 + CodedOutputStream::VarintSize64(offset);
  if (length != 0) inner += 1 + CodedOutputStream::VarintSize64(length) + length;

  uint8_t prefix[64];
  uint8_t* p = prefix;
  p = CodedOutputStream::WriteVarint32ToArray(
      Tag(kResponseChunk, kLengthDelimited), p);
  p = CodedOutputStream::WriteVarint64ToArray(inner, p);
  auto put = [&p](int field, uint64_t value) {
    if (value == 0) return;
    p = CodedOutputStream::WriteVarint32ToArray(Tag(field, kVarint), p);
    p = CodedOutputStream::WriteVarint64ToArray(value, p);
  };
  put(kChunkEpoch, epoch);
  put(kChunkBatchIndex, batch_index);
  put(kChunkOffset, offset);
  if (length == 0) {
    grpc::Slice head(prefix, static_cast<size_t>(p - prefix));
    return grpc::ByteBuffer(&head, 1);
  }
  p = CodedOutputStream::WriteVarint32ToArray(Tag(kChunkData, kLengthDelimited),
                                              p);
  p = CodedOutputStream::WriteVarint64ToArray(length, p);
  grpc::Slice slices[2] = {
      grpc::Slice(prefix, static_cast<size_t>(p - prefix)),
      grpc::Slice(const_cast<uint8_t*>(data), length, &ReleaseOwner,
                  new std::shared_ptr<const void>(std::move(owner)))};
  return grpc::ByteBuffer(slices, 2);
}

absl::StatusOr<StreamResponse::KindCase> DecodeResponse(
    const grpc::ByteBuffer& buffer, StreamResponse* message,
    ChunkDestination destination, ChunkInfo* chunk) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Malformed("unreadable buffer");
  ChunkInfo info;
  absl::StatusOr<bool> fast = DecodeChunk(slices, destination, &info);
  if (!fast.ok()) return fast.status();
  if (*fast) {
    if (chunk != nullptr) *chunk = info;
    return StreamResponse::kChunk;
  }
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  if (!message->ParseFromString(bytes)) return Malformed("protobuf parse failed");
  if (message->kind_case() == StreamResponse::kChunk) {
    const batchd::v1::BatchChunk& c = message->chunk();
    info = {c.epoch(), c.batch_index(), c.offset(), c.data().size()};
    absl::StatusOr<uint8_t*> dest = destination(info);
    if (!dest.ok()) return dest.status();
    if (!c.data().empty()) std::memcpy(*dest, c.data().data(), c.data().size());
    if (chunk != nullptr) *chunk = info;
  }
  return message->kind_case();
}

}  // namespace batchd::common

// Chunk codec: the wire encoding of StreamResponse messages without copying
// batch pixels in user space.
//
// Sending: EncodeChunk builds the serialized bytes of
// StreamResponse{chunk: BatchChunk{epoch, batch_index, offset, data}} as a
// grpc::ByteBuffer of two slices: a small prefix (the fields and the data
// field's tag and length) and a slice that refers to the batch's own memory,
// kept alive by `owner` until gRPC releases it. The bytes are exactly what
// protobuf would produce, so any protobuf client can parse them.
//
// Receiving: DecodeResponse reads a received ByteBuffer. A chunk's data is
// copied once, straight from gRPC's slices to the destination the caller
// chooses from the chunk's (epoch, batch index, offset, length); every other
// message is parsed with protobuf. The client reads its stream as raw
// ByteBuffers through grpc::GenericStub (client/daemon_stream.h), so no
// custom gRPC serializer is needed.
//
// Thread-compatible functions.
#ifndef BATCHD_COMMON_CHUNK_CODEC_H_
#define BATCHD_COMMON_CHUNK_CODEC_H_

#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "batchd/v1/data.pb.h"
#include "grpcpp/support/byte_buffer.h"

namespace batchd::common {

// Serializes `message` into a ByteBuffer (copies; for small messages).
// The daemon parses its requests with ParseRequest
// (server/service/parse_request.h).
grpc::ByteBuffer EncodeMessage(const google::protobuf::MessageLite& message);

// The serialized StreamResponse chunk, with `data` not copied. `owner` keeps
// the memory alive until gRPC no longer needs it.
grpc::ByteBuffer EncodeChunk(uint64_t epoch, uint64_t batch_index,
                             uint64_t offset, const uint8_t* data,
                             size_t length, std::shared_ptr<const void> owner);

struct ChunkInfo {
  uint64_t epoch = 0;
  uint64_t batch_index = 0;
  uint64_t offset = 0;
  uint64_t length = 0;
};

// Where a chunk's bytes go: a pointer with room for `info.length` bytes, or
// an error (e.g. a protocol violation) that DecodeResponse returns.
using ChunkDestination =
    absl::FunctionRef<absl::StatusOr<uint8_t*>(const ChunkInfo& info)>;

// Decodes `buffer`. For a chunk, copies its data to `destination(info)` and
// sets `*chunk` (if non-null) and returns StreamResponse::kChunk with
// `message` untouched; for anything else parses into `message` and returns
// its kind. INTERNAL when the bytes are not a valid StreamResponse.
absl::StatusOr<batchd::v1::StreamResponse::KindCase> DecodeResponse(
    const grpc::ByteBuffer& buffer, batchd::v1::StreamResponse* message,
    ChunkDestination destination, ChunkInfo* chunk = nullptr);

}  // namespace batchd::common

#endif  // BATCHD_COMMON_CHUNK_CODEC_H_

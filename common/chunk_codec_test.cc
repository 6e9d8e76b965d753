#include "common/chunk_codec.h"

#include <memory>
#include <string>
#include <vector>

#include "testing/status_matchers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "grpcpp/support/slice.h"

namespace batchd::common {
namespace {

using batchd::v1::StreamResponse;
using ::batchd::testing::StatusIs;
using ::testing::HasSubstr;

std::string Flatten(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

// `bytes` as a ByteBuffer cut into slices at `cuts`.
grpc::ByteBuffer Split(const std::string& bytes, std::vector<size_t> cuts) {
  std::vector<grpc::Slice> slices;
  size_t start = 0;
  cuts.push_back(bytes.size());
  for (size_t cut : cuts) {
    slices.emplace_back(bytes.data() + start, cut - start);
    start = cut;
  }
  return grpc::ByteBuffer(slices.data(), slices.size());
}

std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>(i * 7 + i / 251);
  return s;
}

TEST(ChunkCodecTest, EncodesExactlyWhatProtobufEncodes) {
  struct Case {
    uint64_t epoch, batch, offset;
    size_t length;
  };
  for (const Case& c : std::vector<Case>{{0, 0, 0, 0},
                                         {0, 0, 0, 1},
                                         {1, 2, 3, 100},
                                         {1ull << 40, 127, 128, 300},
                                         {5, 9, (4ull << 20) * 9, (4u << 20) - 1024}}) {
    const std::string data = Pattern(c.length);
    StreamResponse expected;
    expected.mutable_chunk()->set_epoch(c.epoch);
    expected.mutable_chunk()->set_batch_index(c.batch);
    expected.mutable_chunk()->set_offset(c.offset);
    expected.mutable_chunk()->set_data(data);
    grpc::ByteBuffer encoded =
        EncodeChunk(c.epoch, c.batch, c.offset,
                    reinterpret_cast<const uint8_t*>(data.data()), data.size(),
                    nullptr);
    EXPECT_EQ(Flatten(encoded), expected.SerializeAsString())
        << c.epoch << " " << c.batch << " " << c.offset << " " << c.length;
  }
}

TEST(ChunkCodecTest, DataIsNotCopiedAndItsOwnerIsReleasedWithTheBuffer) {
  auto owner = std::make_shared<std::string>(Pattern(1000));
  std::weak_ptr<std::string> watch = owner;
  {
    grpc::ByteBuffer encoded = EncodeChunk(
        1, 2, 3, reinterpret_cast<const uint8_t*>(owner->data()),
        owner->size(), owner);
    owner.reset();
    EXPECT_FALSE(watch.expired());
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(encoded.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(reinterpret_cast<const char*>(slices[1].begin()),
              watch.lock()->data());
  }
  EXPECT_TRUE(watch.expired());
}

TEST(ChunkCodecTest, DecodesChunksStraightIntoTheDestination) {
  const std::string data = Pattern(5000);
  StreamResponse original;
  original.mutable_chunk()->set_epoch(3);
  original.mutable_chunk()->set_batch_index(11);
  original.mutable_chunk()->set_offset(4096);
  original.mutable_chunk()->set_data(data);
  const std::string bytes = original.SerializeAsString();
  // Every way of cutting the message in two, and a few in three.
  for (size_t cut = 1; cut < bytes.size(); cut += (cut < 20 ? 1 : 97)) {
    for (std::vector<size_t> cuts :
         {std::vector<size_t>{cut}, std::vector<size_t>{cut / 2, cut}}) {
      if (!cuts.empty() && cuts[0] == 0) cuts.erase(cuts.begin());
      std::string out(5000, 'x');
      StreamResponse message;
      ChunkInfo info;
      absl::StatusOr<StreamResponse::KindCase> kind = DecodeResponse(
          Split(bytes, cuts), &message,
          [&](const ChunkInfo& i) -> absl::StatusOr<uint8_t*> {
            EXPECT_EQ(i.length, 5000u);
            return reinterpret_cast<uint8_t*>(out.data());
          },
          &info);
      ASSERT_OK(kind);
      EXPECT_EQ(*kind, StreamResponse::kChunk);
      EXPECT_EQ(info.epoch, 3u);
      EXPECT_EQ(info.batch_index, 11u);
      EXPECT_EQ(info.offset, 4096u);
      EXPECT_EQ(out, data) << "cut at " << cut;
      EXPECT_EQ(message.kind_case(), StreamResponse::KIND_NOT_SET);
    }
  }
}

// Large chunks take the streaming-store copy: every destination alignment,
// lengths that are not multiples of the store width, several slices.
TEST(ChunkCodecTest, LargeChunksLandIntactAtAnyAlignment) {
  for (size_t length : {size_t{64 * 1024}, size_t{64 * 1024 + 1},
                        size_t{300 * 1024 + 37}}) {
    const std::string data = Pattern(length);
    StreamResponse original;
    original.mutable_chunk()->set_data(data);
    const std::string bytes = original.SerializeAsString();
    for (size_t misalign = 0; misalign < 17; misalign += 3) {
      std::string out(length + 32, 'x');
      uint8_t* dest = reinterpret_cast<uint8_t*>(out.data()) + misalign;
      absl::StatusOr<StreamResponse::KindCase> kind = DecodeResponse(
          Split(bytes, {7, bytes.size() / 3, bytes.size() * 2 / 3 + 5}),
          nullptr, [&](const ChunkInfo&) -> absl::StatusOr<uint8_t*> {
            return dest;
          });
      ASSERT_OK(kind);
      EXPECT_EQ(out.substr(misalign, length), data)
          << length << " bytes at +" << misalign;
      EXPECT_EQ(out.substr(0, misalign), std::string(misalign, 'x'));
      EXPECT_EQ(out.substr(misalign + length),
                std::string(32 - misalign, 'x'));
    }
  }
}

TEST(ChunkCodecTest, AcceptsChunkFieldsInAnyOrderAndUnknownFields) {
  // data (4) first, then an unknown varint field 9, then offset and epoch.
  std::string inner;
  inner += '\x22';
  inner += '\x03';
  inner += "abc";
  inner += '\x48';
  inner += '\x05';
  inner += '\x18';
  inner += '\x07';
  inner += '\x08';
  inner += '\x02';
  std::string bytes = "\x1a";
  bytes += static_cast<char>(inner.size());
  bytes += inner;
  std::string out(3, '.');
  ChunkInfo info;
  StreamResponse message;
  ASSERT_OK(DecodeResponse(
      Split(bytes, {}), &message,
      [&](const ChunkInfo&) -> absl::StatusOr<uint8_t*> {
        return reinterpret_cast<uint8_t*>(out.data());
      },
      &info));
  EXPECT_EQ(out, "abc");
  EXPECT_EQ(info.offset, 7u);
  EXPECT_EQ(info.epoch, 2u);
}

TEST(ChunkCodecTest, OtherMessagesAreParsedWithProtobuf) {
  StreamResponse header;
  header.mutable_header()->set_epoch(4);
  header.mutable_header()->add_sample_indices(17);
  header.mutable_header()->set_total_bytes(12);
  StreamResponse message;
  bool called = false;
  absl::StatusOr<StreamResponse::KindCase> kind = DecodeResponse(
      EncodeMessage(header), &message,
      [&](const ChunkInfo&) -> absl::StatusOr<uint8_t*> {
        called = true;
        return nullptr;
      });
  ASSERT_OK(kind);
  EXPECT_EQ(*kind, StreamResponse::kHeader);
  EXPECT_FALSE(called);
  EXPECT_EQ(message.header().sample_indices(0), 17u);
}

TEST(ChunkCodecTest, MalformedBytesAndRefusedDestinationsAreErrors) {
  StreamResponse original;
  original.mutable_chunk()->set_data(Pattern(100));
  const std::string bytes = original.SerializeAsString();
  StreamResponse message;
  auto anywhere = [](const ChunkInfo&) -> absl::StatusOr<uint8_t*> {
    static uint8_t sink[200];
    return sink;
  };
  EXPECT_THAT(DecodeResponse(Split(bytes.substr(0, 50), {}), &message, anywhere),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("protocol error")));
  EXPECT_THAT(DecodeResponse(Split("\xff\xff\xff", {}), &message, anywhere),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("protocol error")));
  EXPECT_THAT(DecodeResponse(Split(bytes, {7}), &message,
                             [](const ChunkInfo&) -> absl::StatusOr<uint8_t*> {
                               return absl::InternalError("no such batch");
                             }),
              StatusIs(absl::StatusCode::kInternal, HasSubstr("no such batch")));
}

}  // namespace
}  // namespace batchd::common

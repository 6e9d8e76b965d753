// What decoding one sample gives back, whatever the format: the error or
// damage (SampleError, which batchd.v1.SubstitutionReason mirrors), the
// limits a decode runs under, and the time it spent per stage. Shared by
// JpegDecoder, PngDecoder and the pipeline that substitutes bad samples.
#ifndef BATCHD_SERVER_DECODE_DECODE_RESULT_H_
#define BATCHD_SERVER_DECODE_DECODE_RESULT_H_

#include <cstdint>
#include <string>

namespace batchd::server {

// Why a sample could not be decoded. Mirrors batchd.v1.SubstitutionReason.
enum class SampleError {
  kNone = 0,
  kReadError,
  kEmptyFile,
  kNotJpeg,
  kUnsupportedFormat,  // GIF, BMP, TIFF, animated WebP: recognised by magic
  kTruncated,
  kCorrupt,
  kTooManyPixels,
  kTooManyScans,
  kHtmlPage,   // markup (an error page saved under an image name)
  kNoImage,    // a tar shard key without an image member
};

struct DecodeResult {
  SampleError error = SampleError::kNone;
  std::string detail;  // the decoder's message when error != kNone
  // With DecodeLimits.decode_damaged: the damage (kTruncated or kCorrupt)
  // libjpeg decoded past, grey where data was missing, and its message;
  // kNone for an intact file. The result is ok() either way.
  SampleError damage = SampleError::kNone;
  std::string damage_detail;
  bool ok() const { return error == SampleError::kNone; }
};

struct DecodeLimits {
  uint64_t max_pixels = 64ull << 20;            // width * height
  int max_scans = 500;                           // progressive scans
  uint64_t max_memory_bytes = 512ull << 20;      // libjpeg max_memory_to_use
  // --corrupt-policy: false (substitute) stops at the first sign of damaged
  // entropy-coded data (a premature end of file, a bad Huffman code, a
  // marker inside the scan) and reports kTruncated or kCorrupt; true
  // (decode) lets libjpeg go on as PIL does, filling what it cannot decode
  // with grey, and reports the damage in DecodeResult.damage.
  bool decode_damaged = false;
};

// Time spent per stage by the last Decode call, for the daemon's stage
// breakdown.
struct DecodeTimings {
  double decode_seconds = 0;     // header + entropy decode + IDCT + colour
  double transform_seconds = 0;  // resize + flip + layout write
};

}  // namespace batchd::server

#endif  // BATCHD_SERVER_DECODE_DECODE_RESULT_H_

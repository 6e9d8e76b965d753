#include "tools/jpeg_encoder.h"

// jpeglib.h needs FILE and size_t declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>
#include <cstdlib>

#include <jpeglib.h>

#include "absl/strings/str_cat.h"

namespace batchd::tools {
namespace {

// libjpeg glue: C-style, no objects with destructors (libjpeg longjmps).
struct EncodeError {
  jpeg_error_mgr pub;  // first member: libjpeg casts cinfo->err to this
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void OnEncodeError(j_common_ptr cinfo) {
  EncodeError* err = reinterpret_cast<EncodeError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  longjmp(err->jump, 1);
}

struct EncodeArgs {
  const uint8_t* rgb;
  int width, height, quality, subsample;
  unsigned char* out;  // malloc'ed by jpeg_mem_dest
  unsigned long out_size;
};

// The only setjmp. Returns false (message in err) if libjpeg failed.
bool Encode(j_compress_ptr cinfo, EncodeError* err, EncodeArgs* args) {
  if (setjmp(err->jump)) return false;
  jpeg_create_compress(cinfo);
  jpeg_mem_dest(cinfo, &args->out, &args->out_size);
  cinfo->image_width = static_cast<JDIMENSION>(args->width);
  cinfo->image_height = static_cast<JDIMENSION>(args->height);
  cinfo->input_components = 3;
  cinfo->in_color_space = JCS_RGB;
  jpeg_set_defaults(cinfo);
  jpeg_set_quality(cinfo, args->quality, TRUE);
  cinfo->dct_method = JDCT_ISLOW;  // the same bytes on every CPU
  const int factor = args->subsample ? 2 : 1;
  cinfo->comp_info[0].h_samp_factor = factor;
  cinfo->comp_info[0].v_samp_factor = factor;
  jpeg_start_compress(cinfo, TRUE);
  const size_t stride = static_cast<size_t>(args->width) * 3;
  while (cinfo->next_scanline < cinfo->image_height) {
    JSAMPROW row =
        const_cast<JSAMPROW>(args->rgb + cinfo->next_scanline * stride);
    jpeg_write_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_compress(cinfo);
  return true;
}

}  // namespace

absl::StatusOr<std::string> EncodeJpeg(const uint8_t* rgb, int width,
                                       int height,
                                       const JpegEncodeOptions& options) {
  if (width < 1 || height < 1 || width > 65500 || height > 65500) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot encode a ", width, "x", height, " JPEG"));
  }
  if (options.quality < 1 || options.quality > 100) {
    return absl::InvalidArgumentError(
        absl::StrCat("JPEG quality ", options.quality, " is not in 1..100"));
  }
  jpeg_compress_struct cinfo;
  EncodeError err;
  cinfo.err = jpeg_std_error(&err.pub);
  err.pub.error_exit = OnEncodeError;
  EncodeArgs args{rgb, width, height, options.quality, options.subsample,
                  nullptr, 0};
  const bool ok = Encode(&cinfo, &err, &args);
  jpeg_destroy_compress(&cinfo);
  std::string jpeg;
  if (ok) jpeg.assign(reinterpret_cast<const char*>(args.out), args.out_size);
  free(args.out);
  if (!ok) return absl::InternalError(absl::StrCat("libjpeg: ", err.message));
  return jpeg;
}

}  // namespace batchd::tools

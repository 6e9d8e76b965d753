#include "server/service/parse_request.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "common/utf8_fields.h"
#include "grpcpp/support/slice.h"

namespace batchd::server {

absl::Status ParseRequest(const grpc::ByteBuffer& bytes,
                          google::protobuf::Message* request) {
  request->Clear();
  grpc::Slice slice;
  const bool whole = bytes.DumpToSingleSlice(&slice).ok();
  const absl::string_view view(reinterpret_cast<const char*>(slice.begin()),
                               slice.size());
  if (whole) {
    RETURN_IF_ERROR(common::CheckUtf8Fields(view, *request->GetDescriptor()));
  }
  if (!whole ||
      !request->ParseFromArray(view.data(), static_cast<int>(view.size()))) {
    return absl::InvalidArgumentError(
        absl::StrCat("the request is not a ", request->GetTypeName(),
                     "; check the client against batchd's .proto files"));
  }
  return absl::OkStatus();
}

}  // namespace batchd::server

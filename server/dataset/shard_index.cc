#include "server/dataset/shard_index.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "server/dataset/tar_reader.h"

namespace batchd::server {
namespace {

constexpr size_t kMaxImageExtensions = 16;

// The members of one key, as they are grouped.
struct Group {
  std::string key;
  std::optional<TarMember> image;
  size_t image_rank = 0;  // image's extension's position in the list
  std::optional<TarMember> cls;
  std::vector<ShardMember> others;
};

absl::StatusOr<std::string> ReadSmallMember(ReadAt& file,
                                            const TarMember& member,
                                            const std::string& name) {
  std::string data(member.size, '\0');
  absl::StatusOr<size_t> got = file.Read(member.offset, data.data(), data.size());
  if (!got.ok()) {
    return absl::Status(got.status().code(),
                        absl::StrCat(got.status().message(), " (member '",
                                     member.name, "')"));
  }
  if (*got < data.size()) {
    return absl::UnavailableError(absl::StrCat(
        "read '", name, "' member '", member.name, "': the file shrank"));
  }
  return data;
}

}  // namespace

const std::vector<std::string>& DefaultImageExtensions() {
  static const std::vector<std::string>* const kDefault =
      new std::vector<std::string>{"jpg", "png", "jpeg", "webp"};
  return *kDefault;
}

absl::StatusOr<std::vector<std::string>> ImageExtensions(
    absl::string_view spec) {
  if (spec.empty()) return DefaultImageExtensions();
  std::vector<std::string> extensions;
  for (absl::string_view part : absl::StrSplit(spec, ';')) {
    const std::string extension = absl::AsciiStrToLower(part);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(
          "image extensions '", absl::CHexEscape(spec), "': ", why,
          "; write them as open_clip does, e.g. \"jpg;png;jpeg;webp\""));
    };
    if (extension.empty()) return bad("an empty extension");
    if (extension.find_first_of("./ \t\r\n") != std::string::npos) {
      return bad(absl::StrCat("'", absl::CHexEscape(extension),
                              "' has a dot, slash or space"));
    }
    if (extension == "cls") return bad("'cls' is the class, not an image");
    if (std::find(extensions.begin(), extensions.end(), extension) !=
        extensions.end()) {
      return bad(absl::StrCat("'", extension, "' is listed twice"));
    }
    if (extensions.size() == kMaxImageExtensions) {
      return bad(absl::StrCat("more than ", kMaxImageExtensions,
                              " extensions"));
    }
    extensions.push_back(extension);
  }
  return extensions;
}

uint64_t ShardIndex::no_image_samples() const {
  uint64_t count = 0;
  for (const ShardSample& sample : samples) count += sample.has_image ? 0 : 1;
  return count;
}

bool SplitMemberName(const std::string& name, std::string* key,
                     std::string* extension) {
  const size_t slash = name.rfind('/');
  const size_t base = slash == std::string::npos ? 0 : slash + 1;
  const size_t dot = name.find('.', base);
  if (dot == std::string::npos || dot == base) return false;
  *key = name.substr(0, dot);
  *extension = absl::AsciiStrToLower(name.substr(dot + 1));
  return true;
}

absl::StatusOr<ShardIndex> IndexShardFile(
    int fd, uint64_t file_size, const std::string& name,
    const std::vector<std::string>& image_extensions) {
  FdReadAt file(fd, name);
  return IndexShard(file, file_size, name, image_extensions);
}

absl::StatusOr<ShardIndex> IndexShard(
    ReadAt& file, uint64_t file_size, const std::string& name,
    const std::vector<std::string>& image_extensions) {
  ShardIndex index;

  auto skip = [&](const Group& group, uint64_t* counter, std::string why) {
    ++*counter;
    if (index.skipped_example.empty()) {
      index.skipped_example = absl::StrCat("key '", absl::CHexEscape(group.key),
                                           "' in '", name, "': ", why);
    }
  };
  auto finish = [&](const Group& group) -> absl::Status {
    if (group.key.empty()) return absl::OkStatus();
    if (!group.image.has_value() && !group.cls.has_value()) {
      skip(group, &index.skipped_no_image,
           absl::StrCat("neither an image (", absl::StrJoin(image_extensions, ";"),
                        ") nor a cls member"));
      return absl::OkStatus();
    }
    if (!group.cls.has_value()) {
      skip(group, &index.skipped_no_class, "no cls member");
      index.unlabeled.push_back({group.image->name, group.image->offset,
                                 group.image->size, kNoLabel, group.others});
      return absl::OkStatus();
    }
    if (group.cls->size > kMaxClsBytes) {
      skip(group, &index.skipped_bad_class,
           absl::StrCat("cls member is ", group.cls->size,
                        " bytes, not a class index"));
      return absl::OkStatus();
    }
    ASSIGN_OR_RETURN(const std::string text,
                     ReadSmallMember(file, *group.cls, name));
    const absl::string_view digits = absl::StripAsciiWhitespace(text);
    int32_t label = 0;
    bool all_digits = !digits.empty();
    for (char c : digits) all_digits = all_digits && absl::ascii_isdigit(c);
    if (!all_digits || !absl::SimpleAtoi(digits, &label) ||
        label > kMaxShardLabel) {
      skip(group, &index.skipped_bad_class,
           absl::StrCat("cls '", absl::CHexEscape(digits),
                        "' is not a class index in [0, ", kMaxShardLabel,
                        "]"));
      return absl::OkStatus();
    }
    if (!group.image.has_value()) {
      index.samples.push_back({group.key, 0, 0, label, group.others,
                               /*has_image=*/false});
    } else {
      index.samples.push_back({group.image->name, group.image->offset,
                               group.image->size, label, group.others});
    }
    return absl::OkStatus();
  };

  // Members are grouped as the scan reads their headers: a key's "cls" is
  // read when the next key starts, while its block is still at hand.
  Group group;
  auto visit = [&](TarMember member) -> absl::Status {
    const size_t slash = member.name.rfind('/');
    const std::string base =
        slash == std::string::npos ? member.name : member.name.substr(slash + 1);
    if (slash == std::string::npos && base.size() >= 4 &&
        base.compare(0, 2, "__") == 0 &&
        base.compare(base.size() - 2, 2, "__") == 0) {
      return absl::OkStatus();  // webdataset's metadata members
    }
    std::string key, extension;
    if (!SplitMemberName(member.name, &key, &extension)) {
      return absl::OkStatus();
    }
    if (key != group.key) {
      RETURN_IF_ERROR(finish(group));
      group = Group();
      group.key = std::move(key);
    }
    const auto image_it = std::find(image_extensions.begin(),
                                    image_extensions.end(), extension);
    if (image_it != image_extensions.end()) {
      const size_t rank = image_it - image_extensions.begin();
      if (!group.image.has_value() || rank < group.image_rank) {
        group.image = std::move(member);
        group.image_rank = rank;
      }
    } else if (extension == "cls" && !group.cls.has_value()) {
      group.cls = std::move(member);
    } else if (extension != "cls" &&
               extension.size() <= kMaxExtensionBytes &&
               group.others.size() < kMaxOtherMembers &&
               std::none_of(group.others.begin(), group.others.end(),
                            [&](const ShardMember& m) {
                              return m.extension == extension;
                            })) {
      group.others.push_back({extension, member.offset, member.size});
    }
    return absl::OkStatus();
  };
  ASSIGN_OR_RETURN(index.damage, VisitTar(file, file_size, name, visit));
  RETURN_IF_ERROR(finish(group));
  return index;
}

}  // namespace batchd::server

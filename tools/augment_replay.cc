#include "tools/augment_replay.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace batchd::tools {

absl::StatusOr<double> ReplayArgs::Number(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing ", key, "="));
  }
  double value = 0;
  if (!absl::SimpleAtod(it->second, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(key, "=", it->second, " is not a number"));
  }
  return value;
}

double ReplayArgs::NumberOr(const std::string& key, double fallback) const {
  absl::StatusOr<double> value = Number(key);
  return value.ok() ? *value : fallback;
}

std::string ReplayArgs::Text(const std::string& key) const {
  auto it = values_.find(key);
  return it == values_.end() ? "" : it->second;
}

namespace {

absl::Status RunCommand(const std::string& line) {
  std::map<std::string, std::string> values;
  for (absl::string_view word :
       absl::StrSplit(line, ' ', absl::SkipWhitespace())) {
    std::pair<std::string, std::string> kv = absl::StrSplit(word, '=');
    values[kv.first] = kv.second;
  }
  const ReplayArgs args(values);
  absl::StatusOr<double> width = args.Number("width");
  absl::StatusOr<double> height = args.Number("height");
  if (!width.ok()) return width.status();
  if (!height.ok()) return height.status();
  const int w = static_cast<int>(*width), h = static_cast<int>(*height);
  if (w <= 0 || h <= 0) return absl::InvalidArgumentError("empty image");
  std::ifstream in(args.Text("in"), std::ios::binary);
  std::vector<uint8_t> pixels((std::istreambuf_iterator<char>(in)),
                              std::istreambuf_iterator<char>());
  if (pixels.size() != static_cast<size_t>(w) * h * 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(args.Text("in"), " holds ", pixels.size(),
                     " bytes, not width * height * 3"));
  }
  server::augment::Image image{pixels.data(), w, h, ptrdiff_t{3} * w};
  const std::string op = args.Text("op");
  absl::StatusOr<bool> done = ReplayColorOp(op, args, image);
  if (done.ok() && !*done) done = ReplayGeometryOp(op, args, image);
  if (!done.ok()) return done.status();
  if (!*done) return absl::InvalidArgumentError(absl::StrCat("unknown op ", op));
  std::ofstream out(args.Text("out"), std::ios::binary);
  out.write(reinterpret_cast<const char*>(pixels.data()),
            static_cast<std::streamsize>(pixels.size()));
  if (!out) return absl::UnavailableError("cannot write " + args.Text("out"));
  return absl::OkStatus();
}

}  // namespace
}  // namespace batchd::tools

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    const absl::Status status = batchd::tools::RunCommand(line);
    std::cout << (status.ok() ? std::string("ok")
                              : "error: " + std::string(status.message()))
              << std::endl;
  }
  return 0;
}

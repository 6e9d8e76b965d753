// The live page's files, compiled into the daemon: the page, its script,
// uPlot's script and style, and uPlot's licence, each with the path the
// metrics endpoint serves it at.
//
//   for (const WebAsset& asset : LivePageAssets()) {
//     routes.push_back({std::string(asset.path), ...});
//   }
//
// Constant data; thread-safe.
#ifndef BATCHD_SERVER_WEB_WEB_ASSETS_H_
#define BATCHD_SERVER_WEB_WEB_ASSETS_H_

#include <vector>

#include "absl/strings/string_view.h"

namespace batchd::server {

struct WebAsset {
  absl::string_view path;          // "/", "/static/uPlot.min.js", ...
  absl::string_view content_type;  // "text/html; charset=utf-8", ...
  absl::string_view body;
};

// "/" (the page), "/static/live_page.js", and unless built without npm
// "/static/uPlot.min.js", "/static/uPlot.min.css" and "/licenses/uplot".
const std::vector<WebAsset>& LivePageAssets();

}  // namespace batchd::server

#endif  // BATCHD_SERVER_WEB_WEB_ASSETS_H_

// The files compiled into this build (web/CMakeLists.txt): whether they are the Vite build or the
// placeholder page, they must be servable under the panel's CSP.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "panel/panel.h"

namespace sovai::panel {
namespace {

const Asset* FindAsset(std::string_view path) {
  for (const Asset& a : EmbeddedAssets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

TEST(EmbeddedAssetsTest, IndexExistsAndEveryFileIsWellFormed) {
  ASSERT_NE(FindAsset("/index.html"), nullptr);
  std::set<std::string_view> paths;
  for (const Asset& a : EmbeddedAssets()) {
    EXPECT_TRUE(a.path.starts_with("/")) << a.path;
    EXPECT_TRUE(paths.insert(a.path).second) << "duplicate " << a.path;
    EXPECT_GE(a.etag.size(), 3u) << a.path;
    EXPECT_TRUE(a.etag.starts_with("\"") && a.etag.ends_with("\"")) << a.path;
    EXPECT_NE(ContentTypeOf(a.path), "application/octet-stream") << a.path;
  }
}

// Every <script> has a src (the CSP allows no inline script), and every script and stylesheet
// index.html names is embedded.
TEST(EmbeddedAssetsTest, IndexNamesOnlyEmbeddedFilesAndNoInlineScript) {
  const std::string html(FindAsset("/index.html")->data);
  size_t at = 0;
  while ((at = html.find("<script", at)) != std::string::npos) {
    const size_t end = html.find('>', at);
    ASSERT_NE(end, std::string::npos);
    const std::string tag = html.substr(at, end - at);
    EXPECT_NE(tag.find(" src=\""), std::string::npos) << "inline script: " << tag;
    at = end;
  }
  for (const char* attribute : {" src=\"", " href=\""}) {
    at = 0;
    while ((at = html.find(attribute, at)) != std::string::npos) {
      at += std::string_view(attribute).size();
      const std::string url = html.substr(at, html.find('"', at) - at);
      if (url.starts_with("/")) {
        EXPECT_NE(FindAsset(url), nullptr) << url << " is not embedded";
      }
      EXPECT_FALSE(url.starts_with("http:") || url.starts_with("https:") || url.starts_with("//"))
          << url << ": the panel must work without the network";
    }
  }
  EXPECT_EQ(html.find(" style=\""), std::string::npos) << "inline style attribute";
}

}  // namespace
}  // namespace sovai::panel

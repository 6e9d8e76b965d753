#include "server/storage/object_url.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "testing/status_matchers.h"

namespace batchd::server {
namespace {

using ::batchd::testing::StatusIs;
using ::testing::_;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseS3UrlTest, BucketAndKey) {
  ASSERT_OK_AND_ASSIGN(S3Location loc, ParseS3Url("s3://data/train/a.tar"));
  EXPECT_EQ(loc.bucket, "data");
  EXPECT_EQ(loc.key, "train/a.tar");
  ASSERT_OK_AND_ASSIGN(loc, ParseS3Url("s3://data"));
  EXPECT_EQ(loc.bucket, "data");
  EXPECT_EQ(loc.key, "");
  ASSERT_OK_AND_ASSIGN(loc, ParseS3Url("s3://data/prefix/"));
  EXPECT_EQ(loc.key, "prefix/");
}

TEST(ParseS3UrlTest, RejectsOtherForms) {
  EXPECT_THAT(ParseS3Url("https://x/y"),
              StatusIs(absl::StatusCode::kInvalidArgument, _));
  EXPECT_THAT(ParseS3Url("s3:///key"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("bucket")));
}

TEST(ExpandBracesTest, ZeroPaddedRange) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> urls,
                       ExpandBraces("https://h/d/shards-{000000..000002}.tar"));
  EXPECT_THAT(urls, ElementsAre("https://h/d/shards-000000.tar",
                                "https://h/d/shards-000001.tar",
                                "https://h/d/shards-000002.tar"));
}

TEST(ExpandBracesTest, PaddingFollowsTheFirstBound) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> urls,
                       ExpandBraces("s-{8..10}.tar"));
  EXPECT_THAT(urls, ElementsAre("s-8.tar", "s-9.tar", "s-10.tar"));
  ASSERT_OK_AND_ASSIGN(urls, ExpandBraces("s-{08..10}.tar"));
  EXPECT_THAT(urls, ElementsAre("s-08.tar", "s-09.tar", "s-10.tar"));
}

TEST(ExpandBracesTest, SeveralBracesRightmostFastest) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> urls,
                       ExpandBraces("http://h/{0..1}/p-{00..01}.tar"));
  EXPECT_THAT(urls, ElementsAre("http://h/0/p-00.tar", "http://h/0/p-01.tar",
                                "http://h/1/p-00.tar", "http://h/1/p-01.tar"));
}

TEST(ExpandBracesTest, NoBracesIsItself) {
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> urls,
                       ExpandBraces("s3://b/one.tar"));
  EXPECT_THAT(urls, ElementsAre("s3://b/one.tar"));
}

TEST(ExpandBracesTest, Malformed) {
  for (const char* bad : {"a-{1..2.tar", "a-{2..1}.tar", "a-{x..2}.tar",
                          "a-{1,2}.tar", "a-1..2}.tar", "a-{..2}.tar"}) {
    EXPECT_THAT(ExpandBraces(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, _))
        << bad;
  }
  EXPECT_THAT(ExpandBraces("{0..999}{0..999}", /*max_urls=*/1000),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("more than 1000")));
}

TEST(UriEncodeTest, KeepsUnreservedAndOptionallySlash) {
  EXPECT_EQ(UriEncode("a b/c~d_e.f-g+h=", /*keep_slash=*/true),
            "a%20b/c~d_e.f-g%2Bh%3D");
  EXPECT_EQ(UriEncode("a/b", /*keep_slash=*/false), "a%2Fb");
}

TEST(S3HttpUrlTest, PathAndVirtualHostStyle) {
  EXPECT_EQ(S3HttpUrl("http://127.0.0.1:4568", /*virtual_host=*/false, "b",
                      "p/x y.tar"),
            "http://127.0.0.1:4568/b/p/x%20y.tar");
  EXPECT_EQ(S3HttpUrl("https://s3.eu-west-1.amazonaws.com/",
                      /*virtual_host=*/true, "b", "p/x.tar"),
            "https://b.s3.eu-west-1.amazonaws.com/p/x.tar");
}

TEST(XmlUnescapeTest, EntitiesAndNumericReferences) {
  EXPECT_EQ(XmlUnescape("&quot;ab&quot; &lt;&amp;&gt; &apos;&#65;&#x42;"),
            "\"ab\" <&> 'AB");
  EXPECT_EQ(XmlUnescape("&#xE9;"), "\xC3\xA9");
  EXPECT_EQ(XmlUnescape("a & b &bogus; &"), "a & b &bogus; &");
}

TEST(ParseListObjectsV2Test, PageWithToken) {
  const char* xml = R"(<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>b</Name><Prefix>train/</Prefix><KeyCount>2</KeyCount>
  <IsTruncated>true</IsTruncated>
  <NextContinuationToken>tok&amp;1</NextContinuationToken>
  <Contents><Key>train/a&amp;b.tar</Key><Size>1024</Size>
    <ETag>&quot;abc&quot;</ETag></Contents>
  <Contents><Key>train/c.tar</Key><ETag>"def"</ETag><Size>7</Size></Contents>
</ListBucketResult>)";
  ASSERT_OK_AND_ASSIGN(ListPage page, ParseListObjectsV2(xml, "b"));
  ASSERT_EQ(page.objects.size(), 2u);
  EXPECT_EQ(page.objects[0].url, "s3://b/train/a&b.tar");
  EXPECT_EQ(page.objects[0].size, 1024u);
  EXPECT_EQ(page.objects[0].etag, "\"abc\"");
  EXPECT_EQ(page.objects[1].url, "s3://b/train/c.tar");
  EXPECT_EQ(page.objects[1].size, 7u);
  EXPECT_TRUE(page.truncated);
  EXPECT_EQ(page.next_continuation_token, "tok&1");
}

TEST(ParseListObjectsV2Test, LastPageAndErrors) {
  ASSERT_OK_AND_ASSIGN(
      ListPage page,
      ParseListObjectsV2("<ListBucketResult><IsTruncated>false</IsTruncated>"
                         "</ListBucketResult>",
                         "b"));
  EXPECT_TRUE(page.objects.empty());
  EXPECT_FALSE(page.truncated);
  EXPECT_THAT(ParseListObjectsV2("<Error><Code>X</Code></Error>", "b"),
              StatusIs(absl::StatusCode::kInvalidArgument, _));
  EXPECT_THAT(ParseListObjectsV2("<ListBucketResult><IsTruncated>true"
                                 "</IsTruncated></ListBucketResult>",
                                 "b"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("NextContinuationToken")));
  EXPECT_THAT(ParseListObjectsV2("<ListBucketResult><Contents><Key>k</Key>"
                                 "<Size>x</Size></Contents></ListBucketResult>",
                                 "b"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Size")));
}

TEST(ParseContentRangeTest, Forms) {
  ASSERT_OK_AND_ASSIGN(ContentRange r, ParseContentRange("bytes 10-19/100"));
  EXPECT_EQ(r.first, 10u);
  EXPECT_EQ(r.last, 19u);
  EXPECT_EQ(r.total, 100);
  ASSERT_OK_AND_ASSIGN(r, ParseContentRange("bytes 0-0/*"));
  EXPECT_EQ(r.total, -1);
  for (const char* bad : {"", "bytes 5-4/10", "bytes 0-9/5", "items 0-1/2",
                          "bytes */100", "bytes 1-2"}) {
    EXPECT_THAT(ParseContentRange(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, _))
        << bad;
  }
}

TEST(ParseShardListTest, RelativeEntriesFollowTheList) {
  ASSERT_OK_AND_ASSIGN(
      std::vector<std::string> urls,
      ParseShardList("# shards\n a.tar \n\n./b.tar\nsub/c.tar\n"
                     "https://o/d.tar\ns3://x/e.tar\n./f:1.tar\n",
                     "s3://bkt/lists/train.txt"));
  EXPECT_THAT(urls, ElementsAre("s3://bkt/lists/a.tar", "s3://bkt/lists/b.tar",
                                "s3://bkt/lists/sub/c.tar", "https://o/d.tar",
                                "s3://x/e.tar", "s3://bkt/lists/f:1.tar"));
}

TEST(ParseShardListTest, OtherSchemesAreRefusedNamingTheLine) {
  for (const char* line :
       {"file:///etc/passwd", "gopher://127.0.0.1:70/x", "ftp://h/x.tar",
        "dict://127.0.0.1:11211/stats", "FILE:///etc/passwd",
        "ldap://h/x", "f:1.tar"}) {
    SCOPED_TRACE(line);
    EXPECT_THAT(
        ParseShardList(absl::StrCat("a.tar\n# c\n", line, "\n"),
                       "https://h/l.txt"),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("https://h/l.txt line 3"), HasSubstr(line),
                       HasSubstr("which is refused"),
                       HasSubstr("only s3://, http:// and https://"))));
  }
  // An allowed scheme written otherwise.
  EXPECT_THAT(ParseShardList("HTTP://h/x.tar\n", "https://h/l.txt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("is not written in lower case")));
}

TEST(ParseShardListTest, MoreEntriesThanTheBoundAreRefused) {
  EXPECT_THAT(ParseShardList("a.tar\nb.tar\nc.tar\n", "https://h/l.txt",
                             /*max_entries=*/2),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("more than 2 shards"),
                             HasSubstr("line 3"),
                             HasSubstr("--max-shards"))));
  EXPECT_OK(ParseShardList("a.tar\nb.tar\n", "https://h/l.txt", 2).status());
}

TEST(UrlSchemeTest, SchemesAndRelativePaths) {
  EXPECT_EQ(UrlScheme("file:///etc/passwd"), "file");
  EXPECT_EQ(UrlScheme("HTTPS://h/x"), "https");
  EXPECT_EQ(UrlScheme("svn+ssh://h/x"), "svn+ssh");
  EXPECT_EQ(UrlScheme("dir/x.tar"), "");
  EXPECT_EQ(UrlScheme("./a:b.tar"), "");
  EXPECT_EQ(UrlScheme("dir/a:b.tar"), "");
  EXPECT_EQ(UrlScheme(":x"), "");
  EXPECT_EQ(UrlScheme("1a://x"), "");
}

TEST(ParseUrlOriginTest, SchemeHostAndPortWithDefaults) {
  ASSERT_OK_AND_ASSIGN(UrlOrigin a, ParseUrlOrigin("http://Host.example/x"));
  EXPECT_EQ(a.scheme, "http");
  EXPECT_EQ(a.host, "host.example");
  EXPECT_EQ(a.port, 80);
  ASSERT_OK_AND_ASSIGN(UrlOrigin b,
                       ParseUrlOrigin("http://host.example:80/y?z"));
  EXPECT_TRUE(a == b);
  ASSERT_OK_AND_ASSIGN(UrlOrigin c, ParseUrlOrigin("https://host.example/x"));
  EXPECT_EQ(c.port, 443);
  EXPECT_FALSE(a == c);
  ASSERT_OK_AND_ASSIGN(UrlOrigin d,
                       ParseUrlOrigin("http://u:p@127.0.0.1:8080"));
  EXPECT_EQ(d.host, "127.0.0.1");
  EXPECT_EQ(d.port, 8080);
  ASSERT_OK_AND_ASSIGN(UrlOrigin e, ParseUrlOrigin("http://[::1]:9000/x"));
  EXPECT_EQ(e.host, "[::1]");
  EXPECT_EQ(e.port, 9000);
  for (const char* bad : {"ftp://h/x", "http:///x", "http://h:0/",
                          "http://h:70000/", "http://h:x/", "s3://b/k"}) {
    EXPECT_THAT(ParseUrlOrigin(bad),
                StatusIs(absl::StatusCode::kInvalidArgument, _))
        << bad;
  }
}

}  // namespace
}  // namespace batchd::server

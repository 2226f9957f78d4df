#include "objstore/s3_xml.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace sovai::objstore {
namespace {

using namespace std::string_view_literals;

// Request bodies exactly as botocore 1.43 serializes them (boto3 and aws-cli share it), captured
// with a before-send hook on a client pointed at a fake endpoint.
constexpr std::string_view kBotoCreateBucket =
    R"(<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><LocationConstraint>eu-west-1</LocationConstraint></CreateBucketConfiguration>)";
constexpr std::string_view kBotoDelete =
    R"(<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>a.txt</Key></Object><Object><Key>dir/b &amp; &lt;c&gt;</Key><VersionId>3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY</VersionId></Object><Quiet>true</Quiet></Delete>)";
// Keys "a\rb\nc\td", "x\x01y" and "café 😀": botocore writes \r and \n as references but the
// \x01 byte raw, which XML 1.0 cannot carry.
constexpr std::string_view kBotoDeleteControl =
    "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"><Object><Key>a&#xD;b&#xA;c\td</Key>"
    "</Object><Object><Key>x\x01y</Key></Object><Object><Key>caf\xC3\xA9 \xF0\x9F\x98\x80</Key>"
    "</Object></Delete>";
constexpr std::string_view kBotoDeleteConditional =
    R"(<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Object><Key>k</Key><ETag>"e"</ETag><Size>5</Size><LastModifiedTime>Mon, 01 Jan 2024 00:00:00 GMT</LastModifiedTime></Object></Delete>)";
constexpr std::string_view kBotoComplete =
    R"(<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><PartNumber>1</PartNumber><ETag>"0cc175b9c0f1b6a831c399e269772661"</ETag><ChecksumCRC32>6Tmsjg==</ChecksumCRC32></Part><Part><PartNumber>2</PartNumber><ETag>"92eb5ffee6ae2fec3ad71c777531578f"</ETag><ChecksumCRC32>HpNvzg==</ChecksumCRC32></Part></CompleteMultipartUpload>)";
// aws-cli `s3api complete-multipart-upload --multipart-upload file://parts.json` (ETag first).
constexpr std::string_view kCliComplete =
    R"(<CompleteMultipartUpload xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Part><ETag>"a"</ETag><PartNumber>1</PartNumber></Part><Part><ETag>"b"</ETag><PartNumber>2</PartNumber><ChecksumCRC64NVME>AAAAAAAAAAA=</ChecksumCRC64NVME><ChecksumSHA256>x</ChecksumSHA256><ChecksumSHA1>y</ChecksumSHA1><ChecksumCRC32C>z</ChecksumCRC32C></Part></CompleteMultipartUpload>)";
constexpr std::string_view kBotoTagging =
    R"(<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag><Key>project</Key><Value>sovai</Value></Tag><Tag><Key>env</Key><Value /></Tag></TagSet></Tagging>)";
constexpr std::string_view kBotoVersioning =
    R"(<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Status>Enabled</Status><MfaDelete>Disabled</MfaDelete></VersioningConfiguration>)";
constexpr std::string_view kBotoCors =
    R"(<CORSConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><CORSRule><ID>web</ID><AllowedHeader>*</AllowedHeader><AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod><AllowedOrigin>https://*.example.com</AllowedOrigin><AllowedOrigin>http://localhost:3000</AllowedOrigin><ExposeHeader>ETag</ExposeHeader><ExposeHeader>x-amz-request-id</ExposeHeader><MaxAgeSeconds>3000</MaxAgeSeconds></CORSRule><CORSRule><AllowedMethod>GET</AllowedMethod><AllowedOrigin>*</AllowedOrigin></CORSRule></CORSConfiguration>)";

constexpr std::string_view kDecl = R"(<?xml version="1.0" encoding="UTF-8"?>)";

template <class T>
S3Code CodeOf(const S3Result<T>& r) {
  EXPECT_FALSE(r.ok());
  return r.ok() ? S3Code::kInternalError : r.error().code;
}

std::string MessageOf(const S3Status& s) { return s ? s->message : std::string(); }
template <class T>
std::string MessageOf(const S3Result<T>& r) {
  return r.ok() ? std::string() : r.error().message;
}

std::string Repeat(std::string_view s, size_t n) {
  std::string out;
  out.reserve(s.size() * n);
  for (size_t i = 0; i < n; ++i) out.append(s);
  return out;
}

std::string DeleteBody(size_t objects) {
  return "<Delete xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">" +
         Repeat("<Object><Key>k</Key></Object>", objects) + "</Delete>";
}

// ------------------------------------------------------------------------------------------------
// XmlWriter

TEST(XmlWriterTest, WritesDeclarationNamespaceAndElements) {
  XmlWriter w;
  w.Open("ListBucketResult", kS3Namespace);
  w.Element("Name", "bucket");
  w.Element("MaxKeys", 1000);
  w.Element("Size", uint64_t{18446744073709551615u});
  w.Element("Delta", int64_t{-5});
  w.BoolElement("IsTruncated", false);
  w.Open("Contents");
  w.Element("Key", "");
  w.Close();
  w.Close();
  EXPECT_FALSE(w.lossy());
  EXPECT_EQ(w.Finish(),
            std::string(kDecl) +
                R"(<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
                "<Name>bucket</Name><MaxKeys>1000</MaxKeys><Size>18446744073709551615</Size>"
                "<Delta>-5</Delta><IsTruncated>false</IsTruncated><Contents><Key></Key></Contents>"
                "</ListBucketResult>");
}

TEST(XmlWriterTest, TextInsideAnOpenElement) {
  XmlWriter w;
  w.Open("LocationConstraint", kS3Namespace);
  w.Text("eu-west-1&<");
  w.Close();
  EXPECT_EQ(w.Finish(),
            std::string(kDecl) +
                R"(<LocationConstraint xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
                "eu-west-1&amp;&lt;</LocationConstraint>");
}

TEST(XmlWriterTest, EscapesMarkupAndCarriageReturn) {
  XmlWriter w;
  w.Element("Key", "a&b<c>d]]>e\"f'g\rh\ni\tj");
  EXPECT_FALSE(w.lossy());
  EXPECT_EQ(w.Finish(),
            std::string(kDecl) + "<Key>a&amp;b&lt;c&gt;d]]&gt;e\"f'g&#13;h\ni\tj</Key>");
}

TEST(XmlWriterTest, KeepsValidUtf8) {
  XmlWriter w;
  std::string text = "caf\xC3\xA9 \xF0\x9F\x98\x80 \xEF\xBF\xBD \x7F";
  w.Element("Key", text);
  EXPECT_FALSE(w.lossy());
  EXPECT_EQ(w.Finish(), std::string(kDecl) + "<Key>" + text + "</Key>");
}

TEST(XmlWriterTest, ReplacesWhatXml10CannotCarry) {
  struct Case {
    std::string in;
    std::string out;
  };
  const std::string fffd = "\xEF\xBF\xBD";
  std::vector<Case> cases = {
      {std::string("a\0b", 3), "a" + fffd + "b"},
      {"a\x01\x1F"
       "b",
       "a" + fffd + fffd + "b"},
      {"\xFF", fffd},                        // not UTF-8
      {"\xC3", fffd},                        // truncated
      {"\xC0\xAF", fffd + fffd},             // overlong '/'
      {"\xED\xA0\x80", fffd + fffd + fffd},  // surrogate
      {"\xEF\xBF\xBE", fffd},                // U+FFFE
      {"\xEF\xBF\xBF", fffd},                // U+FFFF
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::PrintToString(c.in));
    EXPECT_FALSE(XmlCanRepresent(c.in));
    XmlWriter w;
    w.Element("K", c.in);
    EXPECT_TRUE(w.lossy());
    EXPECT_EQ(w.Finish(), std::string(kDecl) + "<K>" + c.out + "</K>");
  }
  EXPECT_TRUE(XmlCanRepresent("a\r\n\tb \xF0\x9F\x98\x80"));
  EXPECT_TRUE(XmlCanRepresent(""));
}

TEST(XmlWriterTest, FinishResetsTheWriter) {
  XmlWriter w;
  w.Element("A", "\x01");
  EXPECT_TRUE(w.lossy());
  (void)w.Finish();
  EXPECT_FALSE(w.lossy());
  EXPECT_EQ(w.Finish(), "");
}

TEST(XmlWriterDeathTest, MisuseIsABug) {
  EXPECT_DEATH(
      {
        XmlWriter w;
        w.Close();
      },
      "without an open element");
  EXPECT_DEATH(
      {
        XmlWriter w;
        w.Open("A");
        (void)w.Finish();
      },
      "still open");
  EXPECT_DEATH(
      {
        XmlWriter w;
        w.Element("a b", "x");
      },
      "invalid XML element name");
  EXPECT_DEATH(
      {
        XmlWriter w;
        w.Open("<A>");
      },
      "invalid XML element name");
  EXPECT_DEATH(
      {
        XmlWriter w;
        w.Text("x");
      },
      "outside an element");
}

TEST(RenderS3ErrorXmlTest, CodeMessageDetailsResourceRequestId) {
  S3Error e(S3Code::kNoSuchKey, "The specified key does not exist.");
  e.With("Key", "a&b").With("BucketName", "bkt");
  EXPECT_EQ(RenderS3ErrorXml(e, "/bkt/a&b", "4442587FB7D0A2F9"),
            std::string(kDecl) +
                "<Error><Code>NoSuchKey</Code><Message>The specified key does not exist.</Message>"
                "<Key>a&amp;b</Key><BucketName>bkt</BucketName><Resource>/bkt/a&amp;b</Resource>"
                "<RequestId>4442587FB7D0A2F9</RequestId></Error>");
}

TEST(RenderS3ErrorXmlTest, NoResource) {
  S3Error e(S3Code::kSlowDown, "Please reduce your request rate.");
  EXPECT_EQ(RenderS3ErrorXml(e, "", "r1"),
            std::string(kDecl) +
                "<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message>"
                "<RequestId>r1</RequestId></Error>");
}

// ------------------------------------------------------------------------------------------------
// CreateBucketConfiguration

TEST(ParseCreateBucketConfigurationTest, Boto3Body) {
  auto r = ParseCreateBucketConfiguration(kBotoCreateBucket);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(r->location_constraint, "eu-west-1");
  EXPECT_TRUE(r->tags.empty());
}

TEST(ParseCreateBucketConfigurationTest, EmptyBodiesAndEmptyDocuments) {
  for (std::string_view body :
       {std::string_view(""), std::string_view(" \r\n\t"),
        std::string_view(
            R"(<CreateBucketConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>)"),
        std::string_view("<?xml version=\"1.0\"?>\n<CreateBucketConfiguration>\n  "
                         "<LocationConstraint/>\n</CreateBucketConfiguration>\n")}) {
    SCOPED_TRACE(body);
    auto r = ParseCreateBucketConfiguration(body);
    ASSERT_TRUE(r.ok()) << MessageOf(r);
    EXPECT_EQ(r->location_constraint, "");
  }
}

TEST(ParseCreateBucketConfigurationTest, Tags) {
  auto r = ParseCreateBucketConfiguration(
      "<CreateBucketConfiguration><LocationConstraint>us-west-2</LocationConstraint><Tags><Tag>"
      "<Key>team</Key><Value>ml</Value></Tag></Tags></CreateBucketConfiguration>");
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(r->location_constraint, "us-west-2");
  EXPECT_EQ(r->tags, (std::vector<Tag>{{"team", "ml"}}));

  EXPECT_EQ(CodeOf(ParseCreateBucketConfiguration(
                "<CreateBucketConfiguration><Tags><Tag><Key>aws:x</Key><Value/></Tag></Tags>"
                "</CreateBucketConfiguration>")),
            S3Code::kInvalidTag);
}

TEST(ParseCreateBucketConfigurationTest, Errors) {
  EXPECT_EQ(CodeOf(ParseCreateBucketConfiguration(
                "<CreateBucketConfiguration><Location><Type>AvailabilityZone</Type></Location>"
                "</CreateBucketConfiguration>")),
            S3Code::kNotImplemented);
  EXPECT_EQ(CodeOf(ParseCreateBucketConfiguration(
                "<CreateBucketConfiguration><Region>x</Region></CreateBucketConfiguration>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseCreateBucketConfiguration(
                "<CreateBucketConfiguration><LocationConstraint>a</LocationConstraint>"
                "<LocationConstraint>b</LocationConstraint></CreateBucketConfiguration>")),
            S3Code::kMalformedXML);
  auto r = ParseCreateBucketConfiguration("<Delete/>");
  EXPECT_EQ(CodeOf(r), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(r).find("root element is <Delete>, expected <CreateBucketConfiguration>"),
            std::string::npos)
      << MessageOf(r);
}

// ------------------------------------------------------------------------------------------------
// Delete

TEST(ParseDeleteTest, Boto3Body) {
  auto r = ParseDelete(kBotoDelete);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_TRUE(r->quiet);
  ASSERT_EQ(r->objects.size(), 2u);
  EXPECT_EQ(r->objects[0].key, "a.txt");
  EXPECT_EQ(r->objects[0].version_id, "");
  EXPECT_EQ(r->objects[1].key, "dir/b & <c>");
  EXPECT_EQ(r->objects[1].version_id, "3HL4kqtJlcpXroDTDmJ+rmSpXd3dIbrHY");
  EXPECT_FALSE(r->objects[1].etag.has_value());
}

TEST(ParseDeleteTest, Boto3ConditionalFields) {
  auto r = ParseDelete(kBotoDeleteConditional);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_FALSE(r->quiet);
  ASSERT_EQ(r->objects.size(), 1u);
  EXPECT_EQ(r->objects[0].etag, "e");
  EXPECT_EQ(r->objects[0].size, 5u);
  EXPECT_EQ(r->objects[0].last_modified_time, "Mon, 01 Jan 2024 00:00:00 GMT");
}

TEST(ParseDeleteTest, ControlCharacterFromBoto3IsRefused) {
  // botocore sends \x01 raw: not XML 1.0, so the whole body is MalformedXML (as on S3). Clients
  // must not put such keys in a DeleteObjects body.
  auto r = ParseDelete(kBotoDeleteControl);
  EXPECT_EQ(CodeOf(r), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(r).find("control character 1 at byte"), std::string::npos) << MessageOf(r);
}

TEST(ParseDeleteTest, CarriageReturnAndUnicodeKeysSurvive) {
  std::string body(kBotoDeleteControl);
  size_t start = body.find("<Object><Key>x");
  size_t end = body.find("</Object>", start) + 9;
  body.erase(start, end - start);
  auto r = ParseDelete(body);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  ASSERT_EQ(r->objects.size(), 2u);
  EXPECT_EQ(r->objects[0].key, "a\rb\nc\td");
  EXPECT_EQ(r->objects[1].key, "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST(ParseDeleteTest, PrefixedNamespacePrettyPrintedCdataAndComments) {
  // minio-go style: Quiet first, indented; a namespace prefix; keys keep their own whitespace.
  constexpr std::string_view kBody = R"(<?xml version="1.0" encoding="UTF-8"?>
<!-- sent by a client -->
<s3:Delete xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/">
  <s3:Quiet>false</s3:Quiet>
  <s3:Object>
    <s3:Key> spaced key </s3:Key>
  </s3:Object>
  <s3:Object><s3:Key><![CDATA[a<b>&c]]></s3:Key><?pi ignored?></s3:Object>
  <s3:Object><s3:Key>x<!-- c -->y</s3:Key><s3:VersionId>null</s3:VersionId></s3:Object>
</s3:Delete>
)";
  auto r = ParseDelete(kBody);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_FALSE(r->quiet);
  ASSERT_EQ(r->objects.size(), 3u);
  EXPECT_EQ(r->objects[0].key, " spaced key ");
  EXPECT_EQ(r->objects[1].key, "a<b>&c");
  EXPECT_EQ(r->objects[2].key, "xy");
  EXPECT_EQ(r->objects[2].version_id, "null");
}

TEST(ParseDeleteTest, ObjectLimits) {
  auto ok = ParseDelete(DeleteBody(1000));
  ASSERT_TRUE(ok.ok()) << MessageOf(ok);
  EXPECT_EQ(ok->objects.size(), 1000u);

  auto too_many = ParseDelete(DeleteBody(1001));
  EXPECT_EQ(CodeOf(too_many), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(too_many).find("more than 1000 objects"), std::string::npos);

  auto none = ParseDelete("<Delete><Quiet>true</Quiet></Delete>");
  EXPECT_EQ(CodeOf(none), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(none).find("at least one <Object>"), std::string::npos);
}

TEST(ParseDeleteTest, SchemaErrors) {
  struct Case {
    std::string_view body;
    std::string_view message;
  };
  const Case cases[] = {
      {"<Delete><Object><Key></Key></Object></Delete>", "must not be empty"},
      {"<Delete><Object><VersionId>v</VersionId></Object></Delete>", "needs a <Key>"},
      {"<Delete><Object><Key>a</Key><Key>b</Key></Object></Delete>", "more than once"},
      {"<Delete><Object><Key>a</Key></Object><Quiet>yes</Quiet></Delete>", "true or false"},
      {"<Delete><Object><Key>a</Key></Object><Quiet>true</Quiet><Quiet>true</Quiet></Delete>",
       "more than once"},
      {"<Delete><Object><Key>a<b/></Key></Object></Delete>", "must contain only text"},
      {"<Delete>text<Object><Key>a</Key></Object></Delete>", "unexpected text in <Delete>"},
      {"<Delete><Object><Key>a</Key><Bogus/></Object></Delete>", "unexpected element <Bogus>"},
      {"<Delete><Object><Key>a</Key><Size>-1</Size></Object></Delete>", "non-negative integer"},
      {"<Delete><Item><Key>a</Key></Item></Delete>", "unexpected element <Item> in <Delete>"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    auto r = ParseDelete(c.body);
    EXPECT_EQ(CodeOf(r), S3Code::kMalformedXML);
    EXPECT_NE(MessageOf(r).find(c.message), std::string::npos) << MessageOf(r);
    EXPECT_EQ(MessageOf(r).find("The XML you provided was not well-formed"), 0u);
  }
}

TEST(ParseDeleteTest, QuietSpellings) {
  const std::pair<std::string_view, bool> kCases[] = {
      {"true", true}, {"TRUE", true}, {"1", true}, {" false ", false}, {"0", false}};
  for (auto [text, want] : kCases) {
    auto r = ParseDelete("<Delete><Object><Key>a</Key></Object><Quiet>" + std::string(text) +
                         "</Quiet></Delete>");
    ASSERT_TRUE(r.ok()) << text << ": " << MessageOf(r);
    EXPECT_EQ(r->quiet, want) << text;
  }
}

// ------------------------------------------------------------------------------------------------
// CompleteMultipartUpload

TEST(ParseCompleteMultipartUploadTest, Boto3Body) {
  auto r = ParseCompleteMultipartUpload(kBotoComplete);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  ASSERT_EQ(r->parts.size(), 2u);
  EXPECT_EQ(r->parts[0].part_number, 1);
  EXPECT_EQ(r->parts[0].etag, "0cc175b9c0f1b6a831c399e269772661");
  EXPECT_EQ(r->parts[0].checksum_crc32, "6Tmsjg==");
  EXPECT_FALSE(r->parts[0].checksum_sha256.has_value());
  EXPECT_EQ(r->parts[1].part_number, 2);
  EXPECT_EQ(r->parts[1].etag, "92eb5ffee6ae2fec3ad71c777531578f");
  EXPECT_EQ(r->parts[1].checksum_crc32, "HpNvzg==");
}

TEST(ParseCompleteMultipartUploadTest, AwsCliBodyWithEveryChecksum) {
  auto r = ParseCompleteMultipartUpload(kCliComplete);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  ASSERT_EQ(r->parts.size(), 2u);
  EXPECT_EQ(r->parts[0].etag, "a");
  CompletedPart want;
  want.part_number = 2;
  want.etag = "b";
  want.checksum_crc64nvme = "AAAAAAAAAAA=";
  want.checksum_sha256 = "x";
  want.checksum_sha1 = "y";
  want.checksum_crc32c = "z";
  EXPECT_EQ(r->parts[1], want);
}

TEST(ParseCompleteMultipartUploadTest, UnquotedETagAndWhitespace) {
  auto r = ParseCompleteMultipartUpload(
      "<CompleteMultipartUpload>\n <Part>\n  <PartNumber> 7 </PartNumber>\n  <ETag>\n"
      "   &quot;abc&quot;\n  </ETag>\n </Part>\n <Part><PartNumber>9</PartNumber><ETag>def</ETag>"
      "</Part></CompleteMultipartUpload>");
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(r->parts[0].part_number, 7);
  EXPECT_EQ(r->parts[0].etag, "abc");
  EXPECT_EQ(r->parts[1].etag, "def");
}

TEST(ParseCompleteMultipartUploadTest, TenThousandParts) {
  std::string body = "<CompleteMultipartUpload>";
  for (int i = 1; i <= kMaxPartNumber; ++i) {
    body += "<Part><PartNumber>" + std::to_string(i) +
            "</PartNumber><ETag>\"0cc175b9c0f1b6a831c399e269772661\"</ETag><ChecksumCRC32>"
            "6Tmsjg==</ChecksumCRC32></Part>";
  }
  body += "</CompleteMultipartUpload>";
  ASSERT_LE(body.size(), kMaxXmlBodyBytes);
  auto r = ParseCompleteMultipartUpload(body);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(r->parts.size(), 10000u);
  EXPECT_EQ(r->parts.back().part_number, 10000);
}

std::string OnePart(std::string_view number) {
  return "<CompleteMultipartUpload><Part><PartNumber>" + std::string(number) +
         "</PartNumber><ETag>e</ETag></Part></CompleteMultipartUpload>";
}

TEST(ParseCompleteMultipartUploadTest, PartNumbers) {
  EXPECT_TRUE(ParseCompleteMultipartUpload(OnePart("1")).ok());
  EXPECT_TRUE(ParseCompleteMultipartUpload(OnePart("10000")).ok());
  EXPECT_TRUE(ParseCompleteMultipartUpload(OnePart("00042")).ok());

  auto zero = ParseCompleteMultipartUpload(OnePart("0"));
  EXPECT_EQ(CodeOf(zero), S3Code::kInvalidArgument);
  EXPECT_NE(MessageOf(zero).find("between 1 and 10000"), std::string::npos);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(OnePart("-3"))), S3Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(OnePart("-99999999999999999999999"))),
            S3Code::kInvalidArgument);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(OnePart("10001"))), S3Code::kInvalidPart);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(OnePart("99999999999999999999999"))),
            S3Code::kInvalidPart);
  for (std::string_view bad : {"", "abc", "1.5", "+1", "0x10", "1 2", "-"}) {
    SCOPED_TRACE(bad);
    EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(OnePart(bad))), S3Code::kMalformedXML);
  }
}

TEST(ParseCompleteMultipartUploadTest, Errors) {
  auto order = ParseCompleteMultipartUpload(
      "<CompleteMultipartUpload><Part><PartNumber>2</PartNumber><ETag>a</ETag></Part>"
      "<Part><PartNumber>1</PartNumber><ETag>b</ETag></Part></CompleteMultipartUpload>");
  EXPECT_EQ(CodeOf(order), S3Code::kInvalidPartOrder);
  EXPECT_NE(MessageOf(order).find("part 1 follows part 2"), std::string::npos);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(
                "<CompleteMultipartUpload><Part><PartNumber>3</PartNumber><ETag>a</ETag></Part>"
                "<Part><PartNumber>3</PartNumber><ETag>a</ETag></Part></CompleteMultipartUpload>")),
            S3Code::kInvalidPartOrder);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload("<CompleteMultipartUpload/>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(
                "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber></Part>"
                "</CompleteMultipartUpload>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(
                "<CompleteMultipartUpload><Part><ETag>a</ETag></Part></CompleteMultipartUpload>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(
                "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>a</ETag>"
                "<ChecksumSHA512>x</ChecksumSHA512></Part></CompleteMultipartUpload>")),
            S3Code::kNotImplemented);
  EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(
                "<CompleteMultipartUpload><Part><PartNumber>1</PartNumber><ETag>a</ETag>"
                "<Size>5</Size></Part></CompleteMultipartUpload>")),
            S3Code::kMalformedXML);
}

// ------------------------------------------------------------------------------------------------
// Tagging

TEST(ParseTaggingTest, Boto3Body) {
  auto r = ParseTagging(kBotoTagging, /*for_bucket=*/false);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(*r, (std::vector<Tag>{{"project", "sovai"}, {"env", ""}}));
}

TEST(ParseTaggingTest, RoundTripThroughRender) {
  std::vector<Tag> tags = {{"a&b", "<v>"}, {"line\r\nbreak", " spaced "}, {"\xC3\xA9", ""}};
  std::string xml = RenderTagging(tags);
  EXPECT_EQ(xml.find(std::string(kDecl) +
                     R"(<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag>)"),
            0u);
  auto r = ParseTagging(xml, /*for_bucket=*/true);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(*r, tags);
  EXPECT_EQ(RenderTagging({}), std::string(kDecl) +
                                   R"(<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)"
                                   "<TagSet></TagSet></Tagging>");
  auto empty = ParseTagging(RenderTagging({}), false);
  ASSERT_TRUE(empty.ok()) << MessageOf(empty);
  EXPECT_TRUE(empty->empty());
}

std::vector<Tag> NTags(size_t n) {
  std::vector<Tag> tags;
  for (size_t i = 0; i < n; ++i) tags.push_back({"k" + std::to_string(i), "v"});
  return tags;
}

TEST(ValidateTagsTest, Counts) {
  EXPECT_FALSE(ValidateTags(NTags(10), false));
  EXPECT_EQ(ValidateTags(NTags(11), false)->code, S3Code::kInvalidTag);
  EXPECT_NE(MessageOf(ValidateTags(NTags(11), false)).find("greater than 10"), std::string::npos);
  EXPECT_FALSE(ValidateTags(NTags(11), true));
  EXPECT_FALSE(ValidateTags(NTags(50), true));
  EXPECT_EQ(ValidateTags(NTags(51), true)->code, S3Code::kInvalidTag);
  EXPECT_FALSE(ValidateTags({}, false));
}

TEST(ValidateTagsTest, KeysAndValues) {
  std::string e_acute = "\xC3\xA9";  // 2 bytes, 1 character
  EXPECT_FALSE(ValidateTags({{Repeat(e_acute, 128), Repeat(e_acute, 256)}}, false));
  struct Case {
    Tag tag;
    std::string_view message;
  };
  const Case cases[] = {
      {{Repeat(e_acute, 129), ""}, "TagKey you have provided is too long"},
      {{"k", Repeat("v", 257)}, "TagValue you have provided is too long"},
      {{"", "v"}, "empty"},
      {{"aws:created", "v"}, "prefixed with aws:"},
      {{"AWS:x", "v"}, "prefixed with aws:"},
      {{"k\xFF", "v"}, "valid UTF-8"},
      {{"k", "a\x01"}, "control characters"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.tag.key);
    S3Status s = ValidateTags({c.tag}, false);
    ASSERT_TRUE(s);
    EXPECT_EQ(s->code, S3Code::kInvalidTag);
    EXPECT_NE(s->message.find(c.message), std::string::npos) << s->message;
  }
  S3Status dup = ValidateTags({{"a", "1"}, {"b", "2"}, {"a", "3"}}, false);
  ASSERT_TRUE(dup);
  EXPECT_EQ(dup->code, S3Code::kInvalidTag);
  EXPECT_NE(dup->message.find("same key"), std::string::npos);
  ASSERT_EQ(dup->details.size(), 1u);
  EXPECT_EQ(dup->details[0], (std::pair<std::string, std::string>{"TagKey", "a"}));
}

TEST(ParseTaggingTest, Errors) {
  EXPECT_EQ(CodeOf(ParseTagging(
                "<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value></Tag><Tag><Key>a</Key>"
                "<Value>2</Value></Tag></TagSet></Tagging>",
                false)),
            S3Code::kInvalidTag);
  EXPECT_EQ(CodeOf(ParseTagging("<Tagging/>", false)), S3Code::kMalformedXML);
  EXPECT_EQ(
      CodeOf(ParseTagging("<Tagging><TagSet><Tag><Key>a</Key></Tag></TagSet></Tagging>", false)),
      S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseTagging("<Tagging><TagSet/><TagSet/></Tagging>", false)),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseTagging("<Tagging><TagSet><Key>a</Key></TagSet></Tagging>", false)),
            S3Code::kMalformedXML);
  std::string eleven = "<Tagging><TagSet>";
  for (int i = 0; i < 11; ++i) {
    eleven += "<Tag><Key>k" + std::to_string(i) + "</Key><Value/></Tag>";
  }
  eleven += "</TagSet></Tagging>";
  EXPECT_EQ(CodeOf(ParseTagging(eleven, false)), S3Code::kInvalidTag);
  EXPECT_TRUE(ParseTagging(eleven, true).ok());
}

TEST(TaggingHeaderTest, Parse) {
  auto r = ParseTaggingHeader("a+b=c&d=e%2Ff&empty=&novalue&%C3%A9=%E2%82%AC", false);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(*r, (std::vector<Tag>{{"a b", "c"},
                                  {"d", "e/f"},
                                  {"empty", ""},
                                  {"novalue", ""},
                                  {"\xC3\xA9", "\xE2\x82\xAC"}}));
  auto none = ParseTaggingHeader("", false);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
  auto v = ParseTaggingHeader("k=a=b", false);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<Tag>{{"k", "a=b"}}));
}

TEST(TaggingHeaderTest, Errors) {
  auto bad = ParseTaggingHeader("k=%zz", false);
  EXPECT_EQ(CodeOf(bad), S3Code::kInvalidArgument);
  EXPECT_NE(MessageOf(bad).find("x-amz-tagging"), std::string::npos);
  EXPECT_EQ(CodeOf(ParseTaggingHeader("a=1&a=2", false)), S3Code::kInvalidTag);
  EXPECT_EQ(CodeOf(ParseTaggingHeader("=v", false)), S3Code::kInvalidTag);
  EXPECT_EQ(CodeOf(ParseTaggingHeader("k=%01", false)), S3Code::kInvalidTag);
  std::string eleven;
  for (int i = 0; i < 11; ++i) eleven += "k" + std::to_string(i) + "=v&";
  EXPECT_EQ(CodeOf(ParseTaggingHeader(eleven, false)), S3Code::kInvalidTag);
  EXPECT_TRUE(ParseTaggingHeader(eleven, true).ok());
}

TEST(TaggingHeaderTest, FormatRoundTrip) {
  std::vector<Tag> tags = {{"a b", "c/d"}, {"x&y=z", "100%"}, {"\xC3\xA9", ""}};
  std::string header = FormatTaggingHeader(tags);
  EXPECT_EQ(header, "a%20b=c%2Fd&x%26y%3Dz=100%25&%C3%A9=");
  auto r = ParseTaggingHeader(header, false);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(*r, tags);
  EXPECT_EQ(FormatTaggingHeader({}), "");
}

// ------------------------------------------------------------------------------------------------
// Versioning

TEST(ParseVersioningConfigurationTest, Boto3Body) {
  auto r = ParseVersioningConfiguration(kBotoVersioning);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  EXPECT_EQ(r->status, VersioningStatus::kEnabled);
  EXPECT_FALSE(r->mfa_delete);
  auto s = ParseVersioningConfiguration(
      "<VersioningConfiguration><Status>Suspended</Status></VersioningConfiguration>");
  ASSERT_TRUE(s.ok()) << MessageOf(s);
  EXPECT_EQ(s->status, VersioningStatus::kSuspended);
}

TEST(ParseVersioningConfigurationTest, Errors) {
  EXPECT_EQ(CodeOf(ParseVersioningConfiguration(
                "<VersioningConfiguration><Status>enabled</Status></VersioningConfiguration>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseVersioningConfiguration("<VersioningConfiguration/>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseVersioningConfiguration(
                "<VersioningConfiguration><Status>Enabled</Status><MfaDelete>Enabled</MfaDelete>"
                "</VersioningConfiguration>")),
            S3Code::kNotImplemented);
  EXPECT_EQ(CodeOf(ParseVersioningConfiguration(
                "<VersioningConfiguration><Status>Enabled</Status><MfaDelete>maybe</MfaDelete>"
                "</VersioningConfiguration>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseVersioningConfiguration(
                "<VersioningConfiguration><Status>Enabled</Status><Status>Enabled</Status>"
                "</VersioningConfiguration>")),
            S3Code::kMalformedXML);
}

TEST(RenderVersioningConfigurationTest, Forms) {
  const std::string open =
      std::string(kDecl) +
      R"(<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/">)";
  EXPECT_EQ(RenderVersioningConfiguration({}), open + "</VersioningConfiguration>");
  EXPECT_EQ(RenderVersioningConfiguration({VersioningStatus::kEnabled, false}),
            open + "<Status>Enabled</Status></VersioningConfiguration>");
  for (VersioningStatus s : {VersioningStatus::kEnabled, VersioningStatus::kSuspended}) {
    VersioningConfiguration config{s, false};
    auto r = ParseVersioningConfiguration(RenderVersioningConfiguration(config));
    ASSERT_TRUE(r.ok()) << MessageOf(r);
    EXPECT_EQ(*r, config);
  }
}

// ------------------------------------------------------------------------------------------------
// CORS

TEST(ParseCorsConfigurationTest, Boto3Body) {
  auto r = ParseCorsConfiguration(kBotoCors);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  ASSERT_EQ(r->rules.size(), 2u);
  const CorsRule& web = r->rules[0];
  EXPECT_EQ(web.id, "web");
  EXPECT_EQ(web.allowed_headers, (std::vector<std::string>{"*"}));
  EXPECT_EQ(web.allowed_methods, (std::vector<std::string>{"GET", "PUT"}));
  EXPECT_EQ(web.allowed_origins,
            (std::vector<std::string>{"https://*.example.com", "http://localhost:3000"}));
  EXPECT_EQ(web.expose_headers, (std::vector<std::string>{"ETag", "x-amz-request-id"}));
  EXPECT_EQ(web.max_age_seconds, 3000);
  EXPECT_EQ(r->rules[1].allowed_origins, (std::vector<std::string>{"*"}));
  EXPECT_FALSE(r->rules[1].max_age_seconds.has_value());
}

TEST(ParseCorsConfigurationTest, RoundTripThroughRender) {
  auto r = ParseCorsConfiguration(kBotoCors);
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  std::string xml = RenderCorsConfiguration(*r);
  auto again = ParseCorsConfiguration(xml);
  ASSERT_TRUE(again.ok()) << MessageOf(again);
  EXPECT_EQ(*again, *r);
  // The rendered form is botocore's own order, with the declaration in front.
  EXPECT_EQ(xml, std::string(kDecl) + std::string(kBotoCors));
}

std::string CorsBody(std::string_view rule_inner) {
  return "<CORSConfiguration><CORSRule>" + std::string(rule_inner) +
         "</CORSRule></CORSConfiguration>";
}

TEST(ParseCorsConfigurationTest, Errors) {
  struct Case {
    std::string body;
    S3Code code;
    std::string_view message;
  };
  const std::string min = "<AllowedMethod>GET</AllowedMethod><AllowedOrigin>*</AllowedOrigin>";
  std::string many = "<CORSConfiguration>";
  for (int i = 0; i < 101; ++i) many += "<CORSRule>" + min + "</CORSRule>";
  many += "</CORSConfiguration>";
  const Case cases[] = {
      {CorsBody("<AllowedMethod>PATCH</AllowedMethod><AllowedOrigin>*</AllowedOrigin>"),
       S3Code::kInvalidRequest, "Unsupported method is PATCH"},
      {CorsBody("<AllowedMethod>get</AllowedMethod><AllowedOrigin>*</AllowedOrigin>"),
       S3Code::kInvalidRequest, "Unsupported method is get"},
      {CorsBody("<AllowedMethod>GET</AllowedMethod><AllowedOrigin>https://*.*.com</AllowedOrigin>"),
       S3Code::kInvalidRequest, "can not have more than one wildcard"},
      {CorsBody(min + "<AllowedHeader>x-*-*</AllowedHeader>"), S3Code::kInvalidRequest,
       "AllowedHeader \"x-*-*\""},
      {CorsBody(min + "<ExposeHeader>*</ExposeHeader>"), S3Code::kInvalidRequest,
       "wildcard for ExposeHeader"},
      {CorsBody(min + "<MaxAgeSeconds>abc</MaxAgeSeconds>"), S3Code::kMalformedXML,
       "<MaxAgeSeconds> must be an integer"},
      {CorsBody(min + "<MaxAgeSeconds>-1</MaxAgeSeconds>"), S3Code::kInvalidRequest,
       "must not be negative"},
      {CorsBody(min + "<ID>" + Repeat("i", 256) + "</ID>"), S3Code::kInvalidRequest,
       "longer than 255"},
      {CorsBody(min + "<ID>a</ID><ID>b</ID>"), S3Code::kMalformedXML, "more than once"},
      {CorsBody("<AllowedMethod>GET</AllowedMethod>"), S3Code::kMalformedXML,
       "at least one AllowedMethod and one AllowedOrigin"},
      {CorsBody(min + "<AllowedHeaders>*</AllowedHeaders>"), S3Code::kMalformedXML,
       "unexpected element <AllowedHeaders>"},
      {"<CORSConfiguration/>", S3Code::kMalformedXML, "at least one CORSRule"},
      {many, S3Code::kInvalidRequest, "at most 100"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body.substr(0, 200));
    auto r = ParseCorsConfiguration(c.body);
    EXPECT_EQ(CodeOf(r), c.code);
    EXPECT_NE(MessageOf(r).find(c.message), std::string::npos) << MessageOf(r);
  }
  std::string hundred = "<CORSConfiguration>";
  for (int i = 0; i < 100; ++i) hundred += "<CORSRule>" + min + "</CORSRule>";
  hundred += "</CORSConfiguration>";
  EXPECT_TRUE(ParseCorsConfiguration(hundred).ok());
}

// ------------------------------------------------------------------------------------------------
// Hostile and broken bodies: the same gate guards every parser.

TEST(XmlGateTest, EveryTruncationIsMalformed) {
  for (std::string_view body : {kBotoDelete, kBotoComplete, kBotoTagging, kBotoCors}) {
    for (size_t n = 0; n < body.size(); ++n) {
      std::string_view prefix = body.substr(0, n);
      SCOPED_TRACE(prefix);
      EXPECT_EQ(CodeOf(ParseDelete(prefix)), S3Code::kMalformedXML);
      EXPECT_EQ(CodeOf(ParseCompleteMultipartUpload(prefix)), S3Code::kMalformedXML);
      EXPECT_EQ(CodeOf(ParseTagging(prefix, true)), S3Code::kMalformedXML);
      EXPECT_EQ(CodeOf(ParseCorsConfiguration(prefix)), S3Code::kMalformedXML);
    }
  }
}

TEST(XmlGateTest, DoctypeAndEntitiesAreRefused) {
  const std::string billion_laughs =
      "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">"
      "<!ENTITY lol1 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">"
      "<!ENTITY lol2 \"&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;\">]>"
      "<Delete><Object><Key>&lol2;</Key></Object></Delete>";
  auto r = ParseDelete(billion_laughs);
  EXPECT_EQ(CodeOf(r), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(r).find("DOCTYPE declarations are not allowed"), std::string::npos);

  const std::string xxe =
      "<!DOCTYPE Delete [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>"
      "<Delete><Object><Key>&xxe;</Key></Object></Delete>";
  EXPECT_EQ(CodeOf(ParseDelete(xxe)), S3Code::kMalformedXML);

  auto undefined = ParseDelete("<Delete><Object><Key>&lol;</Key></Object></Delete>");
  EXPECT_EQ(CodeOf(undefined), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(undefined).find("undefined entity &lol;"), std::string::npos);

  EXPECT_EQ(CodeOf(ParseDelete("<Delete><Object><Key>a & b</Key></Object></Delete>")),
            S3Code::kMalformedXML);
  EXPECT_EQ(CodeOf(ParseDelete("<Delete x=\"&foo;\"><Object><Key>a</Key></Object></Delete>")),
            S3Code::kMalformedXML);
}

TEST(XmlGateTest, CharacterReferences) {
  auto ok = ParseDelete(
      "<Delete><Object><Key>&#13;&#x9;&#65;&#x1F600;&apos;&quot;</Key></Object></Delete>");
  ASSERT_TRUE(ok.ok()) << MessageOf(ok);
  EXPECT_EQ(ok->objects[0].key, "\r\tA\xF0\x9F\x98\x80'\"");
  for (std::string_view ref : {"&#0;", "&#x0;", "&#1;", "&#xFFFE;", "&#xD800;", "&#x110000;",
                               "&#99999999999999999999;", "&#;", "&#x;", "&#12a;"}) {
    SCOPED_TRACE(ref);
    EXPECT_EQ(CodeOf(ParseDelete("<Delete><Object><Key>a" + std::string(ref) +
                                 "b</Key></Object></Delete>")),
              S3Code::kMalformedXML);
  }
}

TEST(XmlGateTest, NestingElementAndAttributeLimits) {
  // 100k levels: refused by the scan before any DOM is built.
  std::string deep = "<Delete>" + Repeat("<a>", 100000) + Repeat("</a>", 100000) + "</Delete>";
  auto r = ParseDelete(deep);
  EXPECT_EQ(CodeOf(r), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(r).find("nested more than 16 deep"), std::string::npos);
  // 16 levels pass the gate (and fail the schema).
  std::string ok_depth = "<Delete>" + Repeat("<a>", 15) + Repeat("</a>", 15) + "</Delete>";
  EXPECT_NE(MessageOf(ParseDelete(ok_depth)).find("unexpected element <a>"), std::string::npos);

  std::string wide = "<Delete>" + Repeat("<a/>", kMaxXmlElements) + "</Delete>";
  ASSERT_LE(wide.size(), kMaxXmlBodyBytes);
  EXPECT_NE(MessageOf(ParseDelete(wide)).find("more than 131072 elements"), std::string::npos);

  std::string attrs = "<Delete";
  for (int i = 0; i < 17; ++i) attrs += " a" + std::to_string(i) + "=\"x\"";
  attrs += "><Object><Key>k</Key></Object></Delete>";
  EXPECT_NE(MessageOf(ParseDelete(attrs)).find("more than 16 attributes"), std::string::npos);

  std::string big =
      "<Delete><Object><Key>" + std::string(kMaxXmlBodyBytes, 'k') + "</Key></Object></Delete>";
  auto too_big = ParseDelete(big);
  EXPECT_EQ(CodeOf(too_big), S3Code::kMalformedXML);
  EXPECT_NE(MessageOf(too_big).find("limit is 2 MiB"), std::string::npos);
}

TEST(XmlGateTest, DocumentStructure) {
  struct Case {
    std::string body;
    std::string_view message;
  };
  const Case cases[] = {
      {"", "no root element"},
      {"   ", "no root element"},
      {"<!-- only a comment -->", "no root element"},
      {"<Delete/><Delete/>", "a second root element"},
      {"<Delete><Object><Key>a</Key></Object></Delete>junk", "text outside the root element"},
      {"junk<Delete/>", "text outside the root element"},
      {"<Delete><Object></Key></Delete>", "mismatch"},
      {"<Delete></Object></Delete>", "end tag without a start tag"},
      {"<Delete><Object><Key>a</Key></Object></Delete></Delete>", "end tag without a start tag"},
      {" <?xml version=\"1.0\"?><Delete/>", "declaration must come first"},
      {"<Delete><Object><Key>a]]>b</Key></Object></Delete>", "\"]]>\" in text"},
      {"<Delete a=\"<\"/>", "'<' in an attribute value"},
      {"<![CDATA[x]]><Delete/>", "CDATA section outside the root element"},
      {"<Delete><!ELEMENT x ANY></Delete>", "unexpected markup declaration"},
      {"<Delete><!-- unterminated </Delete>", "unterminated comment"},
      {"<Delete><Object><Key>\xC3\x28</Key></Object></Delete>", "invalid UTF-8"},
      {std::string("<Delete><Object><Key>a\0b</Key></Object></Delete>"sv), "control character 0"},
      {"<Delete><Object><Key>\xEF\xBF\xBF</Key></Object></Delete>", "not allowed in XML 1.0"},
      {"\xFF\xFE<\0D\0/\0>\0", "invalid UTF-8"},  // UTF-16 is not accepted
      {"<Delete", "truncated start tag"},
      {"<1Delete/>", "tag"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::PrintToString(c.body));
    auto r = ParseDelete(c.body);
    EXPECT_EQ(CodeOf(r), S3Code::kMalformedXML);
    EXPECT_NE(MessageOf(r).find(c.message), std::string::npos) << MessageOf(r);
  }
}

TEST(XmlGateTest, ByteOrderMarkAndCrLfAreFine) {
  auto r = ParseDelete(
      "\xEF\xBB\xBF<?xml version=\"1.0\" encoding=\"UTF-8\"?>\r\n<Delete>\r\n<Object><Key>a\r\nb"
      "</Key></Object>\r\n</Delete>\r\n");
  ASSERT_TRUE(r.ok()) << MessageOf(r);
  // A literal CR LF in text is a line break to XML: it reads as "\n" (send &#13; for a CR).
  EXPECT_EQ(r->objects[0].key, "a\nb");
}

}  // namespace
}  // namespace sovai::objstore

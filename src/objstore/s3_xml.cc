#include "objstore/s3_xml.h"

#include <algorithm>
#include <array>
#include <climits>
#include <functional>
#include <pugixml.hpp>

#include "base/check.h"
#include "base/strings.h"
#include "objstore/names.h"

namespace sovai::objstore {
namespace {

// ================================================================================================
// Characters.

// XML 1.0 production [2] Char.
bool IsXmlChar(int32_t cp) {
  return cp == 0x9 || cp == 0xA || cp == 0xD || (cp >= 0x20 && cp <= 0xD7FF) ||
         (cp >= 0xE000 && cp <= 0xFFFD) || (cp >= 0x10000 && cp <= 0x10FFFF);
}

bool IsXmlSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool AllXmlSpace(std::string_view s) { return std::all_of(s.begin(), s.end(), IsXmlSpace); }

std::string_view TrimXmlSpace(std::string_view s) {
  while (!s.empty() && IsXmlSpace(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsXmlSpace(s.back())) s.remove_suffix(1);
  return s;
}

// Element names the writer accepts: ASCII letter or '_' first, then letters, digits, '_', '-',
// '.', ':'. Every S3 element name is of that form.
bool IsWriterName(std::string_view name) {
  if (name.empty()) return false;
  const auto alpha = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  if (!alpha(name[0]) && name[0] != '_') return false;
  return std::all_of(name.begin(), name.end(), [&](char c) {
    return alpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.' || c == ':';
  });
}

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

// Appends `text` escaped for element content (or for a double-quoted attribute value when
// `attribute`). Returns false if something had to be replaced by U+FFFD.
bool AppendEscaped(std::string* out, std::string_view text, bool attribute) {
  bool exact = true;
  size_t pos = 0;
  while (pos < text.size()) {
    char c = text[pos];
    if (static_cast<unsigned char>(c) < 0x80) {
      ++pos;
      switch (c) {
        case '&':
          out->append("&amp;");
          continue;
        case '<':
          out->append("&lt;");
          continue;
        case '>':
          out->append("&gt;");
          continue;
        case '\r':
          out->append("&#13;");
          continue;
        case '"':
          if (attribute) {
            out->append("&quot;");
            continue;
          }
          break;
        case '\t':
          if (attribute) {
            out->append("&#9;");
            continue;
          }
          break;
        case '\n':
          if (attribute) {
            out->append("&#10;");
            continue;
          }
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            out->append(kReplacementChar);
            exact = false;
            continue;
          }
      }
      out->push_back(c);
      continue;
    }
    size_t start = pos;
    int32_t cp = NextUtf8CodePoint(text, &pos);
    if (cp < 0 || !IsXmlChar(cp)) {
      out->append(kReplacementChar);
      exact = false;
    } else {
      out->append(text.substr(start, pos - start));
    }
  }
  return exact;
}

// ================================================================================================
// The gate: a linear scan of the raw body before pugixml sees it. It enforces what pugixml does
// not (pugixml is a lenient, non-validating parser): characters are valid UTF-8 XML 1.0 Chars,
// no DOCTYPE, only the five predefined entities and character references to valid Chars, one
// root element, no text outside it, and the depth, element and attribute limits (so no DOM is
// built for a hostile body). Tag-name matching and the rest of the syntax are pugixml's.

constexpr std::string_view kMalformedPrefix =
    "The XML you provided was not well-formed or did not validate against our published schema: ";

S3Error Malformed(std::string detail) {
  return S3Error(S3Code::kMalformedXML, std::string(kMalformedPrefix) + detail);
}

std::string AtByte(size_t offset) { return " at byte " + std::to_string(offset); }

// Checks the reference starting at s[amp] ('&') and returns the offset just past its ';'.
S3Result<size_t> CheckReference(std::string_view s, size_t amp) {
  size_t semi = s.find(';', amp + 1);
  // The longest valid reference is "&#x10FFFF;" (10) or "&#1114111;" (10); allow leading zeros.
  if (semi == std::string_view::npos || semi - amp > 32) {
    return Malformed("'&' that does not start a reference" + AtByte(amp) +
                     " (write a literal '&' as &amp;)");
  }
  std::string_view body = s.substr(amp + 1, semi - amp - 1);
  static constexpr std::array<std::string_view, 5> kPredefined = {"lt", "gt", "amp", "apos",
                                                                  "quot"};
  if (std::find(kPredefined.begin(), kPredefined.end(), body) != kPredefined.end()) return semi + 1;
  if (body.size() >= 2 && body[0] == '#') {
    bool hex = body[1] == 'x';
    std::string_view digits = body.substr(hex ? 2 : 1);
    int64_t value = 0;
    bool ok = !digits.empty();
    for (char c : digits) {
      int d;
      if (c >= '0' && c <= '9') {
        d = c - '0';
      } else if (hex && c >= 'a' && c <= 'f') {
        d = c - 'a' + 10;
      } else if (hex && c >= 'A' && c <= 'F') {
        d = c - 'A' + 10;
      } else {
        ok = false;
        break;
      }
      value = value * (hex ? 16 : 10) + d;
      if (value > 0x10FFFF) {
        ok = false;
        break;
      }
    }
    if (ok && IsXmlChar(static_cast<int32_t>(value))) return semi + 1;
    return Malformed("character reference &" + std::string(body) + ";" + AtByte(amp) +
                     " is not a character XML 1.0 allows");
  }
  return Malformed("undefined entity &" + std::string(body) + ";" + AtByte(amp) +
                   " (only &lt; &gt; &amp; &apos; &quot; and character references are allowed)");
}

// Character data between markup: references must be valid; "]]>" is not allowed.
S3Status CheckCharData(std::string_view s, size_t begin, size_t end) {
  for (size_t i = begin; i < end;) {
    if (s[i] == '&') {
      SOVAI_S3_ASSIGN_OR_RETURN(i, CheckReference(s.substr(0, end), i));
    } else if (s[i] == ']' && s.substr(i, 3) == "]]>") {
      return Malformed("\"]]>\" in text" + AtByte(i));
    } else {
      ++i;
    }
  }
  return std::nullopt;
}

S3Status CheckCharacters(std::string_view xml) {
  size_t pos = 0;
  while (pos < xml.size()) {
    size_t start = pos;
    if (static_cast<unsigned char>(xml[pos]) < 0x80) {
      char c = xml[pos++];
      if (static_cast<unsigned char>(c) < 0x20 && !IsXmlSpace(c)) {
        return Malformed("control character " + std::to_string(static_cast<int>(c)) +
                         AtByte(start) +
                         " is not allowed in XML 1.0 (escape it in the key, or "
                         "use a key without it)");
      }
      continue;
    }
    int32_t cp = NextUtf8CodePoint(xml, &pos);
    if (cp < 0) return Malformed("invalid UTF-8" + AtByte(start) + " (the body must be UTF-8)");
    if (!IsXmlChar(cp)) return Malformed("character not allowed in XML 1.0" + AtByte(start));
  }
  return std::nullopt;
}

S3Status CheckMarkup(std::string_view xml) {
  const size_t n = xml.size();
  int depth = 0;
  bool root_done = false;
  size_t elements = 0;
  size_t i = 0;
  while (i < n) {
    if (xml[i] != '<') {
      size_t j = std::min(xml.find('<', i), n);
      if (depth == 0) {
        if (!AllXmlSpace(xml.substr(i, j - i))) {
          return Malformed("text outside the root element" + AtByte(i));
        }
      } else {
        SOVAI_S3_RETURN_IF_ERROR(CheckCharData(xml, i, j));
      }
      i = j;
      continue;
    }
    std::string_view rest = xml.substr(i);
    if (rest.starts_with("<?")) {
      size_t end = xml.find("?>", i + 2);
      if (end == std::string_view::npos) {
        return Malformed("unterminated processing instruction" + AtByte(i));
      }
      std::string_view target = xml.substr(i + 2, std::min<size_t>(4, end - i - 2));
      if (i != 0 && target.size() >= 3 && base::EqualsIgnoreCase(target.substr(0, 3), "xml") &&
          (target.size() == 3 || IsXmlSpace(target[3]))) {
        return Malformed("the XML declaration must come first" + AtByte(i));
      }
      i = end + 2;
    } else if (rest.starts_with("<!--")) {
      size_t end = xml.find("-->", i + 4);
      if (end == std::string_view::npos) return Malformed("unterminated comment" + AtByte(i));
      i = end + 3;
    } else if (rest.starts_with("<![CDATA[")) {
      if (depth == 0) return Malformed("CDATA section outside the root element" + AtByte(i));
      size_t end = xml.find("]]>", i + 9);
      if (end == std::string_view::npos) {
        return Malformed("unterminated CDATA section" + AtByte(i));
      }
      i = end + 3;
    } else if (rest.starts_with("<!")) {
      if (base::EqualsIgnoreCase(rest.substr(0, 9), "<!DOCTYPE")) {
        return Malformed("DOCTYPE declarations are not allowed" + AtByte(i));
      }
      return Malformed("unexpected markup declaration" + AtByte(i));
    } else if (rest.starts_with("</")) {
      size_t end = xml.find('>', i + 2);
      if (end == std::string_view::npos) return Malformed("truncated end tag" + AtByte(i));
      if (--depth < 0) return Malformed("end tag without a start tag" + AtByte(i));
      if (depth == 0) root_done = true;
      i = end + 1;
    } else {
      // A start tag.
      if (depth == 0 && root_done) return Malformed("a second root element" + AtByte(i));
      if (++elements > kMaxXmlElements) {
        return Malformed("more than " + std::to_string(kMaxXmlElements) + " elements");
      }
      size_t attributes = 0;
      char quote = 0;
      size_t j = i + 1;
      for (; j < n; ++j) {
        char c = xml[j];
        if (quote != 0) {
          if (c == quote) {
            quote = 0;
          } else if (c == '<') {
            return Malformed("'<' in an attribute value" + AtByte(j));
          } else if (c == '&') {
            SOVAI_S3_ASSIGN_OR_RETURN(size_t next, CheckReference(xml, j));
            j = next - 1;
          }
        } else if (c == '"' || c == '\'') {
          quote = c;
        } else if (c == '=') {
          if (++attributes > kMaxXmlAttributesPerElement) {
            return Malformed("more than " + std::to_string(kMaxXmlAttributesPerElement) +
                             " attributes on one element" + AtByte(i));
          }
        } else if (c == '>') {
          break;
        } else if (c == '<') {
          return Malformed("'<' inside a tag" + AtByte(j));
        }
      }
      if (j >= n) return Malformed("truncated start tag" + AtByte(i));
      bool self_closing = xml[j - 1] == '/';
      if (self_closing) {
        if (depth == 0) root_done = true;
      } else if (++depth > kMaxXmlDepth) {
        return Malformed("elements nested more than " + std::to_string(kMaxXmlDepth) + " deep" +
                         AtByte(i));
      }
      i = j + 1;
    }
  }
  if (depth != 0) return Malformed("the document ends inside an element (truncated body?)");
  if (!root_done) return Malformed("the body has no root element");
  return std::nullopt;
}

// ================================================================================================
// The DOM walk.

std::string_view LocalName(pugi::xml_node node) {
  std::string_view name = node.name();
  size_t colon = name.find(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

// Parses `xml` into `doc`, requiring the root element `root_name`.
S3Result<pugi::xml_node> Load(std::string_view xml, std::string_view root_name,
                              pugi::xml_document* doc) {
  if (xml.size() > kMaxXmlBodyBytes) {
    return Malformed("the body is " + std::to_string(xml.size()) +
                     " bytes, the limit is 2 MiB for an XML request body");
  }
  if (xml.starts_with("\xEF\xBB\xBF")) xml.remove_prefix(3);  // UTF-8 byte order mark
  SOVAI_S3_RETURN_IF_ERROR(CheckCharacters(xml));
  SOVAI_S3_RETURN_IF_ERROR(CheckMarkup(xml));
  constexpr unsigned kOptions = pugi::parse_cdata | pugi::parse_escapes | pugi::parse_eol |
                                pugi::parse_wconv_attribute | pugi::parse_ws_pcdata;
  pugi::xml_parse_result result =
      doc->load_buffer(xml.data(), xml.size(), kOptions, pugi::encoding_utf8);
  if (!result) {
    return Malformed(std::string(result.description()) +
                     AtByte(static_cast<size_t>(result.offset)));
  }
  pugi::xml_node root = doc->document_element();
  if (!root) return Malformed("the body has no root element");
  if (LocalName(root) != root_name) {
    return Malformed("the root element is <" + std::string(root.name()) + ">, expected <" +
                     std::string(root_name) + ">");
  }
  return root;
}

// Calls f(child) for each child element of `parent` (`path` names it in messages). Text other
// than whitespace between the children is an error.
S3Status ForEachChild(pugi::xml_node parent, std::string_view path,
                      const std::function<S3Status(pugi::xml_node)>& f) {
  for (pugi::xml_node child : parent.children()) {
    switch (child.type()) {
      case pugi::node_element:
        SOVAI_S3_RETURN_IF_ERROR(f(child));
        break;
      case pugi::node_pcdata:
      case pugi::node_cdata:
        if (!AllXmlSpace(child.value())) {
          return Malformed("unexpected text in <" + std::string(path) + ">");
        }
        break;
      default:
        break;
    }
  }
  return std::nullopt;
}

S3Error Unexpected(pugi::xml_node child, std::string_view path) {
  return Malformed("unexpected element <" + std::string(child.name()) + "> in <" +
                   std::string(path) + ">");
}

// The text of a leaf element (its text and CDATA children, concatenated); a child element is an
// error.
S3Result<std::string> LeafText(pugi::xml_node node) {
  std::string out;
  for (pugi::xml_node child : node.children()) {
    if (child.type() == pugi::node_element) {
      return Malformed("<" + std::string(LocalName(node)) + "> must contain only text, found <" +
                       std::string(child.name()) + ">");
    }
    if (child.type() == pugi::node_pcdata || child.type() == pugi::node_cdata) {
      out.append(child.value());
    }
  }
  return out;
}

// Reads the leaf `node` into `*slot`, which must not be set yet.
S3Status ReadOnce(pugi::xml_node node, std::string_view path, std::optional<std::string>* slot) {
  if (slot->has_value()) {
    return Malformed("<" + std::string(LocalName(node)) + "> appears more than once in <" +
                     std::string(path) + ">");
  }
  SOVAI_S3_ASSIGN_OR_RETURN(*slot, LeafText(node));
  return std::nullopt;
}

S3Error Missing(std::string_view element, std::string_view path) {
  return Malformed("<" + std::string(path) + "> needs a <" + std::string(element) + ">");
}

std::string StripQuotes(std::string_view etag) {
  etag = TrimXmlSpace(etag);
  if (etag.size() >= 2 && etag.front() == '"' && etag.back() == '"') {
    etag = etag.substr(1, etag.size() - 2);
  }
  return std::string(etag);
}

// <Tag><Key/><Value/></Tag> (both required, Value may be empty).
S3Result<Tag> ParseTagElement(pugi::xml_node node, std::string_view path) {
  std::optional<std::string> key, value;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, path, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "Key") return ReadOnce(c, path, &key);
    if (name == "Value") return ReadOnce(c, path, &value);
    return Unexpected(c, path);
  }));
  if (!key) return Missing("Key", path);
  if (!value) return Missing("Value", path);
  return Tag{std::move(*key), std::move(*value)};
}

// The Tag children of a TagSet (or CreateBucketConfiguration's Tags).
S3Result<std::vector<Tag>> ParseTagList(pugi::xml_node node, std::string_view path) {
  std::vector<Tag> tags;
  const std::string tag_path = std::string(path) + "/Tag";
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, path, [&](pugi::xml_node c) -> S3Status {
    if (LocalName(c) != "Tag") return Unexpected(c, path);
    SOVAI_S3_ASSIGN_OR_RETURN(Tag tag, ParseTagElement(c, tag_path));
    tags.push_back(std::move(tag));
    return std::nullopt;
  }));
  return tags;
}

bool StartsWithAwsPrefix(std::string_view key) {
  return key.size() >= 4 && base::EqualsIgnoreCase(key.substr(0, 4), "aws:");
}

S3Error InvalidTag(std::string message, std::string_view key) {
  return S3Error(S3Code::kInvalidTag, std::move(message)).With("TagKey", std::string(key));
}

}  // namespace

// ================================================================================================
// XmlWriter.

XmlWriter::XmlWriter() : out_(R"(<?xml version="1.0" encoding="UTF-8"?>)") {}

void XmlWriter::Open(std::string_view name, std::string_view xmlns) {
  SOVAI_CHECK(IsWriterName(name)) << "invalid XML element name: " << name;
  out_.push_back('<');
  out_.append(name);
  if (!xmlns.empty()) {
    out_.append(" xmlns=\"");
    if (!AppendEscaped(&out_, xmlns, /*attribute=*/true)) lossy_ = true;
    out_.push_back('"');
  }
  out_.push_back('>');
  open_.emplace_back(name);
}

void XmlWriter::Close() {
  SOVAI_CHECK(!open_.empty()) << "XmlWriter::Close() without an open element";
  out_.append("</");
  out_.append(open_.back());
  out_.push_back('>');
  open_.pop_back();
}

void XmlWriter::Element(std::string_view name, std::string_view text) {
  SOVAI_CHECK(IsWriterName(name)) << "invalid XML element name: " << name;
  out_.push_back('<');
  out_.append(name);
  out_.push_back('>');
  AppendText(text);
  out_.append("</");
  out_.append(name);
  out_.push_back('>');
}

void XmlWriter::Text(std::string_view text) {
  SOVAI_CHECK(!open_.empty()) << "XmlWriter::Text() outside an element";
  AppendText(text);
}

void XmlWriter::BoolElement(std::string_view name, bool value) {
  Element(name, value ? std::string_view("true") : std::string_view("false"));
}

void XmlWriter::AppendText(std::string_view text) {
  if (!AppendEscaped(&out_, text, /*attribute=*/false)) lossy_ = true;
}

std::string XmlWriter::Finish() {
  SOVAI_CHECK(open_.empty()) << "XmlWriter::Finish() with <" << open_.back() << "> still open";
  std::string out = std::move(out_);
  out_.clear();
  lossy_ = false;
  return out;
}

bool XmlCanRepresent(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    if (!IsXmlChar(NextUtf8CodePoint(text, &pos))) return false;
  }
  return true;
}

std::string RenderS3ErrorXml(const S3Error& error, std::string_view resource,
                             std::string_view request_id) {
  XmlWriter w;
  w.Open("Error");
  w.Element("Code", error.name());
  w.Element("Message", error.message);
  for (const auto& [name, value] : error.details) w.Element(name, value);
  if (!resource.empty()) w.Element("Resource", resource);
  w.Element("RequestId", request_id);
  w.Close();
  return w.Finish();
}

// ================================================================================================
// Tagging.

S3Status ValidateTags(const std::vector<Tag>& tags, bool for_bucket) {
  const size_t limit = for_bucket ? kMaxBucketTags : kMaxObjectTags;
  if (tags.size() > limit) {
    return S3Error(S3Code::kInvalidTag,
                   std::string(for_bucket ? "Bucket" : "Object") + " tags cannot be greater than " +
                       std::to_string(limit) + " (found " + std::to_string(tags.size()) + ").");
  }
  for (size_t i = 0; i < tags.size(); ++i) {
    const Tag& tag = tags[i];
    if (!IsValidUtf8(tag.key) || !IsValidUtf8(tag.value)) {
      return InvalidTag("Tag keys and values must be valid UTF-8.", tag.key);
    }
    if (!XmlCanRepresent(tag.key) || !XmlCanRepresent(tag.value)) {
      return InvalidTag("Tag keys and values must not contain control characters.", tag.key);
    }
    size_t key_chars = Utf8Length(tag.key);
    if (key_chars == 0) return InvalidTag("The TagKey you have provided is empty.", tag.key);
    if (key_chars > kMaxTagKeyChars) {
      return InvalidTag("The TagKey you have provided is too long, max 128 characters (found " +
                            std::to_string(key_chars) + ").",
                        tag.key);
    }
    size_t value_chars = Utf8Length(tag.value);
    if (value_chars > kMaxTagValueChars) {
      return InvalidTag("The TagValue you have provided is too long, max 256 characters (found " +
                            std::to_string(value_chars) + ").",
                        tag.key);
    }
    if (StartsWithAwsPrefix(tag.key)) {
      return InvalidTag("Your TagKey cannot be prefixed with aws: (reserved for system tags).",
                        tag.key);
    }
    for (size_t j = 0; j < i; ++j) {
      if (tags[j].key == tag.key) {
        return InvalidTag("Cannot provide multiple Tags with the same key.", tag.key);
      }
    }
  }
  return std::nullopt;
}

S3Result<std::vector<Tag>> ParseTagging(std::string_view xml, bool for_bucket) {
  pugi::xml_document doc;
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, "Tagging", &doc));
  std::optional<std::vector<Tag>> tags;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, "Tagging", [&](pugi::xml_node c) -> S3Status {
    if (LocalName(c) != "TagSet") return Unexpected(c, "Tagging");
    if (tags) return Malformed("<TagSet> appears more than once in <Tagging>");
    SOVAI_S3_ASSIGN_OR_RETURN(tags, ParseTagList(c, "Tagging/TagSet"));
    return std::nullopt;
  }));
  if (!tags) return Missing("TagSet", "Tagging");
  SOVAI_S3_RETURN_IF_ERROR(ValidateTags(*tags, for_bucket));
  return std::move(*tags);
}

S3Result<std::vector<Tag>> ParseTaggingHeader(std::string_view header, bool for_bucket) {
  std::vector<Tag> tags;
  for (std::string_view item : base::Split(header, '&', /*skip_empty=*/true)) {
    size_t eq = item.find('=');
    std::string_view raw_key = item.substr(0, eq);
    std::string_view raw_value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    base::Result<std::string> key = base::PercentDecode(raw_key, /*plus_as_space=*/true);
    base::Result<std::string> value = base::PercentDecode(raw_value, /*plus_as_space=*/true);
    if (!key.ok() || !value.ok()) {
      return S3Error(S3Code::kInvalidArgument,
                     "The x-amz-tagging header is not valid URL query encoding: " +
                         (key.ok() ? value.status() : key.status()).message())
          .With("ArgumentName", "x-amz-tagging");
    }
    tags.push_back(Tag{std::move(*key), std::move(*value)});
  }
  SOVAI_S3_RETURN_IF_ERROR(ValidateTags(tags, for_bucket));
  return tags;
}

std::string FormatTaggingHeader(const std::vector<Tag>& tags) {
  std::string out;
  for (const Tag& tag : tags) {
    if (!out.empty()) out.push_back('&');
    out += base::UriEncode(tag.key, /*encode_slash=*/true);
    out.push_back('=');
    out += base::UriEncode(tag.value, /*encode_slash=*/true);
  }
  return out;
}

std::string RenderTagging(const std::vector<Tag>& tags) {
  XmlWriter w;
  w.Open("Tagging", kS3Namespace);
  w.Open("TagSet");
  for (const Tag& tag : tags) {
    w.Open("Tag");
    w.Element("Key", tag.key);
    w.Element("Value", tag.value);
    w.Close();
  }
  w.Close();
  w.Close();
  return w.Finish();
}

// ================================================================================================
// CreateBucket.

S3Result<CreateBucketConfiguration> ParseCreateBucketConfiguration(std::string_view xml) {
  CreateBucketConfiguration config;
  if (xml.size() <= kMaxXmlBodyBytes && AllXmlSpace(xml)) return config;
  pugi::xml_document doc;
  constexpr std::string_view kPath = "CreateBucketConfiguration";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  std::optional<std::string> location;
  bool has_tags = false;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "LocationConstraint") return ReadOnce(c, kPath, &location);
    if (name == "Location" || name == "Bucket") {
      return S3Error(S3Code::kNotImplemented,
                     "Directory buckets (<" + std::string(name) +
                         "> in CreateBucketConfiguration) are not supported; create a general "
                         "purpose bucket.");
    }
    if (name == "Tags") {
      if (has_tags)
        return Malformed("<Tags> appears more than once in <" + std::string(kPath) + ">");
      has_tags = true;
      SOVAI_S3_ASSIGN_OR_RETURN(config.tags, ParseTagList(c, "CreateBucketConfiguration/Tags"));
      return std::nullopt;
    }
    return Unexpected(c, kPath);
  }));
  if (location) config.location_constraint = std::string(TrimXmlSpace(*location));
  SOVAI_S3_RETURN_IF_ERROR(ValidateTags(config.tags, /*for_bucket=*/true));
  return config;
}

// ================================================================================================
// DeleteObjects.

namespace {

S3Result<bool> ParseXmlBool(std::string_view text, std::string_view element) {
  text = TrimXmlSpace(text);
  if (base::EqualsIgnoreCase(text, "true") || text == "1") return true;
  if (base::EqualsIgnoreCase(text, "false") || text == "0") return false;
  return Malformed("<" + std::string(element) + "> must be true or false");
}

S3Result<ObjectToDelete> ParseObjectToDelete(pugi::xml_node node) {
  constexpr std::string_view kPath = "Delete/Object";
  std::optional<std::string> key, version_id, etag, last_modified, size;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "Key") return ReadOnce(c, kPath, &key);
    if (name == "VersionId") return ReadOnce(c, kPath, &version_id);
    if (name == "ETag") return ReadOnce(c, kPath, &etag);
    if (name == "LastModifiedTime") return ReadOnce(c, kPath, &last_modified);
    if (name == "Size") return ReadOnce(c, kPath, &size);
    return Unexpected(c, kPath);
  }));
  if (!key) return Missing("Key", kPath);
  if (key->empty()) return Malformed("<Key> in <Delete/Object> must not be empty");
  ObjectToDelete object;
  object.key = std::move(*key);
  if (version_id) object.version_id = std::string(TrimXmlSpace(*version_id));
  if (etag) object.etag = StripQuotes(*etag);
  if (last_modified) object.last_modified_time = std::string(TrimXmlSpace(*last_modified));
  if (size) {
    base::Result<uint64_t> n = base::ParseUint64(TrimXmlSpace(*size));
    if (!n.ok()) return Malformed("<Size> in <Delete/Object> must be a non-negative integer");
    object.size = *n;
  }
  return object;
}

}  // namespace

S3Result<DeleteRequest> ParseDelete(std::string_view xml) {
  pugi::xml_document doc;
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, "Delete", &doc));
  DeleteRequest request;
  std::optional<std::string> quiet;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, "Delete", [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "Quiet") return ReadOnce(c, "Delete", &quiet);
    if (name != "Object") return Unexpected(c, "Delete");
    if (request.objects.size() == kMaxDeleteObjects) {
      return Malformed("<Delete> lists more than 1000 objects; delete at most 1000 per request");
    }
    SOVAI_S3_ASSIGN_OR_RETURN(ObjectToDelete object, ParseObjectToDelete(c));
    request.objects.push_back(std::move(object));
    return std::nullopt;
  }));
  if (request.objects.empty()) return Malformed("<Delete> needs at least one <Object>");
  if (quiet) {
    SOVAI_S3_ASSIGN_OR_RETURN(request.quiet, ParseXmlBool(*quiet, "Quiet"));
  }
  return request;
}

// ================================================================================================
// CompleteMultipartUpload.

namespace {

S3Result<int> ParsePartNumber(std::string_view text) {
  text = TrimXmlSpace(text);
  std::string_view digits = text.starts_with('-') ? text.substr(1) : text;
  bool integer = !digits.empty() && std::all_of(digits.begin(), digits.end(),
                                                [](char c) { return c >= '0' && c <= '9'; });
  if (!integer) {
    return Malformed("<PartNumber> must be an integer, found \"" + std::string(text) + "\"");
  }
  base::Result<int64_t> n = base::ParseInt64(text);
  // Out of int64 range: only the sign matters.
  int64_t value = n.ok() ? *n : (text.starts_with('-') ? INT64_MIN : INT64_MAX);
  if (value < kMinPartNumber) {
    return S3Error(S3Code::kInvalidArgument,
                   "Part number must be an integer between 1 and 10000, inclusive (found " +
                       std::string(text) + ").")
        .With("ArgumentName", "PartNumber")
        .With("ArgumentValue", std::string(text));
  }
  if (value > kMaxPartNumber) {
    return S3Error(S3Code::kInvalidPart,
                   "One or more of the specified parts could not be found: part number " +
                       std::string(text) + " is above the limit of 10000.")
        .With("PartNumber", std::string(text));
  }
  return static_cast<int>(value);
}

S3Result<CompletedPart> ParseCompletedPart(pugi::xml_node node) {
  constexpr std::string_view kPath = "CompleteMultipartUpload/Part";
  std::optional<std::string> number, etag, crc32, crc32c, crc64nvme, sha1, sha256;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "PartNumber") return ReadOnce(c, kPath, &number);
    if (name == "ETag") return ReadOnce(c, kPath, &etag);
    if (name == "ChecksumCRC32") return ReadOnce(c, kPath, &crc32);
    if (name == "ChecksumCRC32C") return ReadOnce(c, kPath, &crc32c);
    if (name == "ChecksumCRC64NVME") return ReadOnce(c, kPath, &crc64nvme);
    if (name == "ChecksumSHA1") return ReadOnce(c, kPath, &sha1);
    if (name == "ChecksumSHA256") return ReadOnce(c, kPath, &sha256);
    if (name.starts_with("Checksum")) {
      return S3Error(S3Code::kNotImplemented,
                     "The checksum algorithm of <" + std::string(name) +
                         "> is not supported; use CRC32, CRC32C, CRC64NVME, SHA1 or SHA256.");
    }
    return Unexpected(c, kPath);
  }));
  if (!number) return Missing("PartNumber", kPath);
  if (!etag) return Missing("ETag", kPath);
  CompletedPart part;
  SOVAI_S3_ASSIGN_OR_RETURN(part.part_number, ParsePartNumber(*number));
  part.etag = StripQuotes(*etag);
  const auto trimmed = [](const std::optional<std::string>& s) -> std::optional<std::string> {
    if (!s) return std::nullopt;
    return std::string(TrimXmlSpace(*s));
  };
  part.checksum_crc32 = trimmed(crc32);
  part.checksum_crc32c = trimmed(crc32c);
  part.checksum_crc64nvme = trimmed(crc64nvme);
  part.checksum_sha1 = trimmed(sha1);
  part.checksum_sha256 = trimmed(sha256);
  return part;
}

}  // namespace

S3Result<CompleteMultipartUpload> ParseCompleteMultipartUpload(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "CompleteMultipartUpload";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  CompleteMultipartUpload upload;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    if (LocalName(c) != "Part") return Unexpected(c, kPath);
    SOVAI_S3_ASSIGN_OR_RETURN(CompletedPart part, ParseCompletedPart(c));
    if (!upload.parts.empty() && part.part_number <= upload.parts.back().part_number) {
      return S3Error(S3Code::kInvalidPartOrder,
                     "The list of parts was not in ascending order. Parts must be ordered by part "
                     "number (part " +
                         std::to_string(part.part_number) + " follows part " +
                         std::to_string(upload.parts.back().part_number) + ").");
    }
    upload.parts.push_back(std::move(part));
    return std::nullopt;
  }));
  if (upload.parts.empty()) return Malformed("<CompleteMultipartUpload> needs at least one <Part>");
  return upload;
}

// ================================================================================================
// Versioning.

S3Result<VersioningConfiguration> ParseVersioningConfiguration(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "VersioningConfiguration";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  std::optional<std::string> status, mfa_delete;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "Status") return ReadOnce(c, kPath, &status);
    if (name == "MfaDelete") return ReadOnce(c, kPath, &mfa_delete);
    return Unexpected(c, kPath);
  }));
  VersioningConfiguration config;
  if (mfa_delete) {
    std::string_view v = TrimXmlSpace(*mfa_delete);
    if (v == "Enabled") {
      return S3Error(S3Code::kNotImplemented,
                     "MFA delete is not supported; send MfaDelete "
                     "Disabled or leave it out.");
    }
    if (v != "Disabled") return Malformed("<MfaDelete> must be Enabled or Disabled");
  }
  if (!status)
    return Malformed("<VersioningConfiguration> needs a <Status> of Enabled or Suspended");
  std::string_view s = TrimXmlSpace(*status);
  if (s == "Enabled") {
    config.status = VersioningStatus::kEnabled;
  } else if (s == "Suspended") {
    config.status = VersioningStatus::kSuspended;
  } else {
    return Malformed("<Status> must be Enabled or Suspended, found \"" + std::string(s) + "\"");
  }
  return config;
}

std::string RenderVersioningConfiguration(const VersioningConfiguration& config) {
  XmlWriter w;
  w.Open("VersioningConfiguration", kS3Namespace);
  if (config.status != VersioningStatus::kUnversioned) {
    w.Element("Status", config.status == VersioningStatus::kEnabled ? "Enabled" : "Suspended");
  }
  if (config.mfa_delete) w.Element("MfaDelete", "Enabled");
  w.Close();
  return w.Finish();
}

// ================================================================================================
// CORS.

namespace {

S3Result<CorsRule> ParseCorsRule(pugi::xml_node node) {
  constexpr std::string_view kPath = "CORSConfiguration/CORSRule";
  CorsRule rule;
  std::optional<std::string> id, max_age;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(node, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = LocalName(c);
    if (name == "ID") return ReadOnce(c, kPath, &id);
    if (name == "MaxAgeSeconds") return ReadOnce(c, kPath, &max_age);
    std::vector<std::string>* list = nullptr;
    if (name == "AllowedMethod") list = &rule.allowed_methods;
    if (name == "AllowedOrigin") list = &rule.allowed_origins;
    if (name == "AllowedHeader") list = &rule.allowed_headers;
    if (name == "ExposeHeader") list = &rule.expose_headers;
    if (list == nullptr) return Unexpected(c, kPath);
    SOVAI_S3_ASSIGN_OR_RETURN(std::string text, LeafText(c));
    list->emplace_back(TrimXmlSpace(text));
    return std::nullopt;
  }));
  if (id) rule.id = std::string(TrimXmlSpace(*id));
  if (max_age) {
    std::string_view text = TrimXmlSpace(*max_age);
    base::Result<int64_t> n = base::ParseInt64(text);
    if (!n.ok() || *n > INT32_MAX) {
      return Malformed("<MaxAgeSeconds> must be an integer up to 2147483647, found \"" +
                       std::string(text) + "\"");
    }
    rule.max_age_seconds = *n;
  }
  return rule;
}

}  // namespace

S3Result<CorsConfiguration> ParseCorsConfiguration(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "CORSConfiguration";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, Load(xml, kPath, &doc));
  CorsConfiguration config;
  SOVAI_S3_RETURN_IF_ERROR(ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    if (LocalName(c) != "CORSRule") return Unexpected(c, kPath);
    if (config.rules.size() == kMaxCorsRules) {
      return S3Error(S3Code::kInvalidRequest,
                     "The CORS configuration has more than 100 rules; at most 100 are allowed.");
    }
    SOVAI_S3_ASSIGN_OR_RETURN(CorsRule rule, ParseCorsRule(c));
    config.rules.push_back(std::move(rule));
    return std::nullopt;
  }));
  SOVAI_S3_RETURN_IF_ERROR(ValidateCorsConfiguration(config));
  return config;
}

std::string RenderCorsConfiguration(const CorsConfiguration& config) {
  XmlWriter w;
  w.Open("CORSConfiguration", kS3Namespace);
  for (const CorsRule& rule : config.rules) {
    w.Open("CORSRule");
    if (!rule.id.empty()) w.Element("ID", rule.id);
    for (const std::string& h : rule.allowed_headers) w.Element("AllowedHeader", h);
    for (const std::string& m : rule.allowed_methods) w.Element("AllowedMethod", m);
    for (const std::string& o : rule.allowed_origins) w.Element("AllowedOrigin", o);
    for (const std::string& h : rule.expose_headers) w.Element("ExposeHeader", h);
    if (rule.max_age_seconds) w.Element("MaxAgeSeconds", *rule.max_age_seconds);
    w.Close();
  }
  w.Close();
  return w.Finish();
}

}  // namespace sovai::objstore

// ================================================================================================
// The DOM walk for parsers in other files (internal/xml_dom.h).

namespace sovai::objstore::xml_dom {

S3Error Malformed(std::string detail) { return objstore::Malformed(std::move(detail)); }
S3Result<pugi::xml_node> Load(std::string_view xml, std::string_view root_name,
                              pugi::xml_document* doc) {
  return objstore::Load(xml, root_name, doc);
}
std::string_view LocalName(pugi::xml_node node) { return objstore::LocalName(node); }
S3Status ForEachChild(pugi::xml_node parent, std::string_view path,
                      const std::function<S3Status(pugi::xml_node)>& f) {
  return objstore::ForEachChild(parent, path, f);
}
S3Error Unexpected(pugi::xml_node child, std::string_view path) {
  return objstore::Unexpected(child, path);
}
S3Error Missing(std::string_view element, std::string_view path) {
  return objstore::Missing(element, path);
}
S3Status ReadOnce(pugi::xml_node node, std::string_view path, std::optional<std::string>* slot) {
  return objstore::ReadOnce(node, path, slot);
}
S3Result<bool> ParseBool(std::string_view text, std::string_view element) {
  return objstore::ParseXmlBool(text, element);
}
std::string_view TrimXmlSpace(std::string_view s) { return objstore::TrimXmlSpace(s); }
S3Result<std::vector<Tag>> ParseTagList(pugi::xml_node node, std::string_view path) {
  return objstore::ParseTagList(node, path);
}
S3Result<Tag> ParseTagElement(pugi::xml_node node, std::string_view path) {
  return objstore::ParseTagElement(node, path);
}

}  // namespace sovai::objstore::xml_dom

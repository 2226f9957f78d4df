// Private to objstore: the checked XML parsing of s3_xml.cc (the linear gate, then a pugixml DOM
// walk with S3's MalformedXML messages), for the request bodies parsed in other files
// (object_lock.cc, lifecycle.cc). The same limits apply (s3_xml.h).
#pragma once

#include <functional>
#include <optional>
#include <pugixml.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/s3_error.h"
#include "objstore/s3_xml.h"

namespace sovai::objstore::xml_parse {

S3Error Malformed(std::string detail);
// Parses `xml` into `doc` through the gate, requiring the root element `root_name`.
S3Result<pugi::xml_node> Load(std::string_view xml, std::string_view root_name,
                              pugi::xml_document* doc);
std::string_view LocalName(pugi::xml_node node);
// f(child) for each child element; non-blank text between them is an error.
S3Status ForEachChild(pugi::xml_node parent, std::string_view path,
                      const std::function<S3Status(pugi::xml_node)>& f);
S3Error Unexpected(pugi::xml_node child, std::string_view path);
// A leaf element's text into `*slot`, which must not be set yet.
S3Status ReadOnce(pugi::xml_node node, std::string_view path, std::optional<std::string>* slot);
S3Error Missing(std::string_view element, std::string_view path);
std::string_view TrimXmlSpace(std::string_view s);
// <Tag><Key/><Value/></Tag> elements of `node`.
S3Result<std::vector<Tag>> ParseTagList(pugi::xml_node node, std::string_view path);
S3Result<Tag> ParseTagElement(pugi::xml_node node, std::string_view path);

}  // namespace sovai::objstore::xml_parse

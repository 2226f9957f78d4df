// Private to objstore: the checked DOM walk of s3_xml.cc (the linear gate, limits and messages
// described in s3_xml.h), for request-body parsers that live in their own files (acl.cc,
// bucket_access.cc, lifecycle.cc, object_lock.cc). Not included from other modules.
#pragma once

#include <functional>
#include <optional>
#include <pugixml.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "objstore/s3_error.h"
#include "objstore/s3_xml.h"

namespace sovai::objstore::xml_dom {

// MalformedXML with `detail`.
S3Error Malformed(std::string detail);
// Gates and parses `xml` into `doc`, requiring the root element `root_name` (by local name).
S3Result<pugi::xml_node> Load(std::string_view xml, std::string_view root_name,
                              pugi::xml_document* doc);
// The element's name without a namespace prefix.
std::string_view LocalName(pugi::xml_node node);
// f(child) for each child element; text other than whitespace between them is MalformedXML.
S3Status ForEachChild(pugi::xml_node parent, std::string_view path,
                      const std::function<S3Status(pugi::xml_node)>& f);
S3Error Unexpected(pugi::xml_node child, std::string_view path);
S3Error Missing(std::string_view element, std::string_view path);
// A leaf element's text, read once into `*slot` (MalformedXML when repeated or not a leaf).
S3Status ReadOnce(pugi::xml_node node, std::string_view path, std::optional<std::string>* slot);
// "true"/"false" (any case) or 1/0, trimmed.
S3Result<bool> ParseBool(std::string_view text, std::string_view element);
// `s` without the XML whitespace around it.
std::string_view TrimXmlSpace(std::string_view s);
// <Tag><Key/><Value/></Tag> elements of `node`.
S3Result<std::vector<Tag>> ParseTagList(pugi::xml_node node, std::string_view path);
S3Result<Tag> ParseTagElement(pugi::xml_node node, std::string_view path);

}  // namespace sovai::objstore::xml_dom

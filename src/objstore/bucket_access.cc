// Object Ownership and the Public Access Block (see bucket_access.h).
#include "objstore/bucket_access.h"

#include "base/strings.h"
#include "objstore/internal/xml_dom.h"
#include "objstore/s3_xml.h"

namespace sovai::objstore {

std::string_view ObjectOwnershipName(ObjectOwnership o) {
  switch (o) {
    case ObjectOwnership::kBucketOwnerEnforced:
      return "BucketOwnerEnforced";
    case ObjectOwnership::kBucketOwnerPreferred:
      return "BucketOwnerPreferred";
    case ObjectOwnership::kObjectWriter:
      return "ObjectWriter";
  }
  return "BucketOwnerEnforced";
}

S3Result<ObjectOwnership> ParseObjectOwnershipName(std::string_view name) {
  for (auto o : {ObjectOwnership::kBucketOwnerEnforced, ObjectOwnership::kBucketOwnerPreferred,
                 ObjectOwnership::kObjectWriter}) {
    if (ObjectOwnershipName(o) == name) return o;
  }
  return S3Error(S3Code::kInvalidArgument,
                 "Invalid x-amz-object-ownership '" + std::string(name) +
                     "' (BucketOwnerEnforced, BucketOwnerPreferred or ObjectWriter)")
      .With("ArgumentName", "x-amz-object-ownership")
      .With("ArgumentValue", std::string(name));
}

S3Result<ObjectOwnership> ParseOwnershipControls(std::string_view xml) {
  pugi::xml_document doc;
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, xml_dom::Load(xml, "OwnershipControls", &doc));
  std::optional<std::string> value;
  int rules = 0;
  SOVAI_S3_RETURN_IF_ERROR(
      xml_dom::ForEachChild(root, "OwnershipControls", [&](pugi::xml_node rule) -> S3Status {
        if (xml_dom::LocalName(rule) != "Rule")
          return xml_dom::Unexpected(rule, "OwnershipControls");
        ++rules;
        return xml_dom::ForEachChild(
            rule, "OwnershipControls/Rule", [&](pugi::xml_node c) -> S3Status {
              if (xml_dom::LocalName(c) != "ObjectOwnership") {
                return xml_dom::Unexpected(c, "OwnershipControls/Rule");
              }
              return xml_dom::ReadOnce(c, "OwnershipControls/Rule", &value);
            });
      }));
  if (rules != 1) {
    return xml_dom::Malformed("<OwnershipControls> needs exactly one <Rule>, found " +
                              std::to_string(rules));
  }
  if (!value) return xml_dom::Missing("ObjectOwnership", "OwnershipControls/Rule");
  auto o = ParseObjectOwnershipName(base::Trim(*value));
  if (!o.ok()) {
    return xml_dom::Malformed(
        "<ObjectOwnership> must be BucketOwnerEnforced, "
        "BucketOwnerPreferred or ObjectWriter");
  }
  return *o;
}

std::string RenderOwnershipControls(ObjectOwnership o) {
  XmlWriter w;
  w.Open("OwnershipControls", kS3Namespace);
  w.Open("Rule");
  w.Element("ObjectOwnership", ObjectOwnershipName(o));
  w.Close();
  w.Close();
  return w.Finish();
}

std::optional<ObjectOwnership> OwnershipFromStored(const std::optional<std::string>& stored) {
  if (!stored) return ObjectOwnership::kBucketOwnerEnforced;
  if (*stored == kOwnershipDeleted) return std::nullopt;
  auto o = ParseObjectOwnershipName(*stored);
  return o.ok() ? *o : ObjectOwnership::kBucketOwnerEnforced;
}

S3Result<PublicAccessBlock> ParsePublicAccessBlock(std::string_view xml) {
  pugi::xml_document doc;
  constexpr std::string_view kPath = "PublicAccessBlockConfiguration";
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, xml_dom::Load(xml, kPath, &doc));
  std::optional<std::string> flags[4];
  static constexpr std::string_view kNames[4] = {"BlockPublicAcls", "IgnorePublicAcls",
                                                 "BlockPublicPolicy", "RestrictPublicBuckets"};
  SOVAI_S3_RETURN_IF_ERROR(xml_dom::ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    for (int i = 0; i < 4; ++i) {
      if (xml_dom::LocalName(c) == kNames[i]) return xml_dom::ReadOnce(c, kPath, &flags[i]);
    }
    return xml_dom::Unexpected(c, kPath);
  }));
  bool values[4] = {};
  for (int i = 0; i < 4; ++i) {
    if (!flags[i]) continue;
    SOVAI_S3_ASSIGN_OR_RETURN(values[i], xml_dom::ParseBool(*flags[i], kNames[i]));
  }
  return PublicAccessBlock{values[0], values[1], values[2], values[3]};
}

std::string RenderPublicAccessBlock(const PublicAccessBlock& pab) {
  XmlWriter w;
  w.Open("PublicAccessBlockConfiguration", kS3Namespace);
  w.BoolElement("BlockPublicAcls", pab.block_public_acls);
  w.BoolElement("IgnorePublicAcls", pab.ignore_public_acls);
  w.BoolElement("BlockPublicPolicy", pab.block_public_policy);
  w.BoolElement("RestrictPublicBuckets", pab.restrict_public_buckets);
  w.Close();
  return w.Finish();
}

PublicAccessBlock PublicAccessBlockFromStored(const std::optional<std::string>& stored) {
  if (!stored) return {};
  auto pab = ParsePublicAccessBlock(*stored);
  // Unreadable (never written so by this file): the safe reading blocks everything.
  return pab.ok() ? *pab : PublicAccessBlock{true, true, true, true};
}

std::string RenderPolicyStatus(bool is_public) {
  XmlWriter w;
  w.Open("PolicyStatus", kS3Namespace);
  w.BoolElement("IsPublic", is_public);
  w.Close();
  return w.Finish();
}

}  // namespace sovai::objstore

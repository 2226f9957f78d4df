// Access control lists (see acl.h).
#include "objstore/acl.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "base/strings.h"
#include "objstore/internal/xml_dom.h"
#include "objstore/s3_xml.h"

namespace sovai::objstore {

using nlohmann::json;

namespace {

constexpr std::string_view kPermissions[] = {"FULL_CONTROL", "READ", "WRITE", "READ_ACP",
                                             "WRITE_ACP"};

bool KnownPermission(std::string_view p) {
  return std::find(std::begin(kPermissions), std::end(kPermissions), p) != std::end(kPermissions);
}

uint32_t PermissionBits(std::string_view p) {
  if (p == "FULL_CONTROL") return kAclFullControl;
  if (p == "READ") return kAclRead;
  if (p == "WRITE") return kAclWrite;
  if (p == "READ_ACP") return kAclReadAcp;
  if (p == "WRITE_ACP") return kAclWriteAcp;
  return 0;
}

bool KnownGroup(std::string_view uri) {
  return uri == kAllUsersGroup || uri == kAuthenticatedUsersGroup || uri == kLogDeliveryGroup;
}

S3Error InvalidArgument(std::string message, std::string name, std::string value) {
  return S3Error(S3Code::kInvalidArgument, std::move(message))
      .With("ArgumentName", std::move(name))
      .With("ArgumentValue", std::move(value));
}

// A grantee named by kind ("id", "uri", "emailAddress") and value, checked and resolved.
S3Result<AclGrant> ResolveGrantee(std::string_view kind, std::string_view value,
                                  std::string permission, const AclResolver& resolver) {
  AclGrant g;
  g.permission = std::move(permission);
  if (kind == "uri") {
    if (!KnownGroup(value)) {
      return InvalidArgument("Invalid group uri", "uri", std::string(value));
    }
    g.group = true;
    g.id = std::string(value);
    return g;
  }
  if (kind == "id") {
    if (value.empty() || !resolver.user_exists || !resolver.user_exists(value)) {
      return InvalidArgument("Invalid id", "CanonicalUser/ID", std::string(value));
    }
    g.id = std::string(value);
    return g;
  }
  if (kind == "emailAddress") {
    std::optional<std::string> user;
    if (resolver.user_by_email) user = resolver.user_by_email(value);
    if (!user) {
      return S3Error(S3Code::kUnresolvableGrantByEmailAddress,
                     "The e-mail address you provided does not match any account on record.")
          .With("EmailAddressProvided", std::string(value));
    }
    g.id = *user;
    return g;
  }
  return InvalidArgument(
      "Unknown grantee type '" + std::string(kind) + "' (id, uri or emailAddress)", "x-amz-grant",
      std::string(kind));
}

void AddGrant(Acl* acl, AclGrant g) {
  if (std::find(acl->grants.begin(), acl->grants.end(), g) == acl->grants.end()) {
    acl->grants.push_back(std::move(g));
  }
}

// <Grant><Grantee xsi:type=".."><ID/>|<URI/>|<EmailAddress/>[<DisplayName/>]</Grantee>
// <Permission/></Grant>
S3Result<AclGrant> ParseGrant(pugi::xml_node node, const AclResolver& resolver) {
  constexpr std::string_view kPath = "AccessControlPolicy/AccessControlList/Grant";
  constexpr std::string_view kGranteePath = "AccessControlPolicy/AccessControlList/Grant/Grantee";
  std::optional<std::string> permission, id, uri, email, display;
  pugi::xml_node grantee;
  SOVAI_S3_RETURN_IF_ERROR(xml_dom::ForEachChild(node, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = xml_dom::LocalName(c);
    if (name == "Permission") return xml_dom::ReadOnce(c, kPath, &permission);
    if (name == "Grantee") {
      if (grantee) return xml_dom::Malformed("<Grantee> appears more than once in <Grant>");
      grantee = c;
      return std::nullopt;
    }
    return xml_dom::Unexpected(c, kPath);
  }));
  if (!grantee) return xml_dom::Missing("Grantee", kPath);
  if (!permission) return xml_dom::Missing("Permission", kPath);
  std::string perm(base::Trim(*permission));
  if (!KnownPermission(perm)) {
    return S3Error(S3Code::kMalformedACLError,
                   "The XML you provided was not well-formed or did not validate against our "
                   "published schema: unknown Permission '" +
                       perm + "'");
  }
  std::string type;
  for (pugi::xml_attribute a : grantee.attributes()) {
    std::string_view n = a.name();
    if (n == "type" || n.ends_with(":type")) type = a.value();
  }
  if (size_t colon = type.find(':'); colon != std::string::npos) type = type.substr(colon + 1);
  SOVAI_S3_RETURN_IF_ERROR(
      xml_dom::ForEachChild(grantee, kGranteePath, [&](pugi::xml_node c) -> S3Status {
        std::string_view name = xml_dom::LocalName(c);
        if (name == "ID") return xml_dom::ReadOnce(c, kGranteePath, &id);
        if (name == "URI") return xml_dom::ReadOnce(c, kGranteePath, &uri);
        if (name == "EmailAddress") return xml_dom::ReadOnce(c, kGranteePath, &email);
        if (name == "DisplayName") return xml_dom::ReadOnce(c, kGranteePath, &display);
        return xml_dom::Unexpected(c, kGranteePath);
      }));
  if (type.empty())
    type = id ? "CanonicalUser" : uri ? "Group" : email ? "AmazonCustomerByEmail" : "";
  if (type == "CanonicalUser" && id) {
    return ResolveGrantee("id", base::Trim(*id), perm, resolver);
  }
  if (type == "Group" && uri) return ResolveGrantee("uri", base::Trim(*uri), perm, resolver);
  if (type == "AmazonCustomerByEmail" && email) {
    return ResolveGrantee("emailAddress", base::Trim(*email), perm, resolver);
  }
  return S3Error(S3Code::kMalformedACLError,
                 "The XML you provided was not well-formed or did not validate against our "
                 "published schema: a Grantee of type '" +
                     type + "' needs its ID, URI or EmailAddress");
}

}  // namespace

Acl PrivateAcl(const std::string& owner) {
  return Acl{owner, {AclGrant{false, owner, "FULL_CONTROL"}}};
}

S3Result<Acl> CannedAcl(std::string_view name, const std::string& owner,
                        const std::string& bucket_owner, bool for_object) {
  Acl acl = PrivateAcl(owner);
  auto group = [&](std::string_view uri, const char* permission) {
    acl.grants.push_back(AclGrant{true, std::string(uri), permission});
  };
  if (name == "private") return acl;
  if (name == "public-read") {
    group(kAllUsersGroup, "READ");
  } else if (name == "public-read-write") {
    group(kAllUsersGroup, "READ");
    group(kAllUsersGroup, "WRITE");
  } else if (name == "authenticated-read") {
    group(kAuthenticatedUsersGroup, "READ");
  } else if (name == "bucket-owner-read" || name == "bucket-owner-full-control") {
    // On a bucket these name its own owner: the same as private.
    if (for_object && bucket_owner != owner) {
      AddGrant(&acl, AclGrant{false, bucket_owner,
                              name == "bucket-owner-read" ? "READ" : "FULL_CONTROL"});
    }
  } else if (name == "log-delivery-write" && !for_object) {
    group(kLogDeliveryGroup, "WRITE");
    group(kLogDeliveryGroup, "READ_ACP");
  } else {
    return InvalidArgument("The canned ACL '" + std::string(name) + "' is not valid", "x-amz-acl",
                           std::string(name));
  }
  return acl;
}

S3Result<std::optional<Acl>> AclFromGrantHeaders(
    const std::function<std::optional<std::string_view>(std::string_view)>& header,
    const std::string& owner, const AclResolver& resolver) {
  static constexpr std::pair<std::string_view, std::string_view> kHeaders[] = {
      {"x-amz-grant-full-control", "FULL_CONTROL"},
      {"x-amz-grant-read", "READ"},
      {"x-amz-grant-write", "WRITE"},
      {"x-amz-grant-read-acp", "READ_ACP"},
      {"x-amz-grant-write-acp", "WRITE_ACP"},
  };
  Acl acl{owner, {}};
  bool any = false;
  for (const auto& [name, permission] : kHeaders) {
    std::optional<std::string_view> value = header(name);
    if (!value) continue;
    any = true;
    for (std::string_view item : base::Split(*value, ',', /*skip_empty=*/true)) {
      item = base::Trim(item);
      size_t eq = item.find('=');
      if (eq == std::string_view::npos) {
        return InvalidArgument("Grantees in " + std::string(name) +
                                   " are id=\"...\", uri=\"...\" or emailAddress=\"...\"",
                               std::string(name), std::string(item));
      }
      std::string_view kind = base::Trim(item.substr(0, eq));
      std::string_view v = base::Trim(item.substr(eq + 1));
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      SOVAI_S3_ASSIGN_OR_RETURN(AclGrant g,
                                ResolveGrantee(kind, v, std::string(permission), resolver));
      AddGrant(&acl, std::move(g));
      if (acl.grants.size() > kMaxAclGrants) {
        return InvalidArgument("An ACL has at most " + std::to_string(kMaxAclGrants) + " grants",
                               std::string(name), "");
      }
    }
  }
  if (!any) return std::optional<Acl>();
  return std::optional<Acl>(std::move(acl));
}

S3Result<Acl> ParseAccessControlPolicy(std::string_view xml, const std::string& owner,
                                       const AclResolver& resolver) {
  pugi::xml_document doc;
  SOVAI_S3_ASSIGN_OR_RETURN(pugi::xml_node root, xml_dom::Load(xml, "AccessControlPolicy", &doc));
  constexpr std::string_view kPath = "AccessControlPolicy";
  Acl acl{owner, {}};
  bool have_list = false;
  std::optional<std::string> owner_id;
  SOVAI_S3_RETURN_IF_ERROR(xml_dom::ForEachChild(root, kPath, [&](pugi::xml_node c) -> S3Status {
    std::string_view name = xml_dom::LocalName(c);
    if (name == "Owner") {
      return xml_dom::ForEachChild(c, "AccessControlPolicy/Owner", [&](pugi::xml_node o) {
        std::string_view n = xml_dom::LocalName(o);
        if (n == "ID") return xml_dom::ReadOnce(o, "AccessControlPolicy/Owner", &owner_id);
        if (n == "DisplayName") return S3Status();
        return S3Status(xml_dom::Unexpected(o, "AccessControlPolicy/Owner"));
      });
    }
    if (name == "AccessControlList") {
      if (have_list) return xml_dom::Malformed("<AccessControlList> appears more than once");
      have_list = true;
      return xml_dom::ForEachChild(
          c, "AccessControlPolicy/AccessControlList", [&](pugi::xml_node g) -> S3Status {
            if (xml_dom::LocalName(g) != "Grant") {
              return xml_dom::Unexpected(g, "AccessControlPolicy/AccessControlList");
            }
            SOVAI_S3_ASSIGN_OR_RETURN(AclGrant grant, ParseGrant(g, resolver));
            AddGrant(&acl, std::move(grant));
            if (acl.grants.size() > kMaxAclGrants) {
              return S3Error(S3Code::kMalformedACLError,
                             "An ACL has at most " + std::to_string(kMaxAclGrants) + " grants");
            }
            return std::nullopt;
          });
    }
    return xml_dom::Unexpected(c, kPath);
  }));
  if (owner_id && std::string(base::Trim(*owner_id)) != owner) {
    return S3Error(S3Code::kAccessDenied,
                   "Access Denied: the Owner of an ACL cannot be changed (it is " + owner + ")");
  }
  if (!have_list) {
    return S3Error(S3Code::kMalformedACLError,
                   "The XML you provided was not well-formed or did not validate against our "
                   "published schema: <AccessControlPolicy> needs an <AccessControlList>");
  }
  return acl;
}

std::string RenderAccessControlPolicy(const Acl& acl) {
  XmlWriter w;
  w.Open("AccessControlPolicy", kS3Namespace);
  w.Open("Owner");
  w.Element("ID", acl.owner);
  w.Element("DisplayName", acl.owner);
  w.Close();
  w.Open("AccessControlList");
  for (const AclGrant& g : acl.grants) {
    w.Open("Grant");
    w.Open("Grantee");
    if (g.group) {
      w.Element("URI", g.id);
    } else {
      w.Element("ID", g.id);
      w.Element("DisplayName", g.id);
    }
    w.Close();
    w.Element("Permission", g.permission);
    w.Close();
  }
  w.Close();
  w.Close();
  std::string doc = w.Finish();
  // S3 types every grantee with an attribute, and clients read it unconditionally (s3cmd's
  // ACL parser raises KeyError without xsi:type). XmlWriter writes no attributes; every text in
  // the document is escaped, so each "<Grantee>" in it is one the loop opened, in grant order.
  constexpr std::string_view kGrantee = "<Grantee>";
  size_t at = 0;
  for (const AclGrant& g : acl.grants) {
    at = doc.find(kGrantee, at);
    SOVAI_CHECK(at != std::string::npos);
    std::string typed = std::string(
                            "<Grantee xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
                            "xsi:type=\"") +
                        (g.group ? "Group" : "CanonicalUser") + "\">";
    doc.replace(at, kGrantee.size(), typed);
    at += typed.size();
  }
  return doc;
}

std::string AclToJson(const Acl& acl) {
  json grants = json::array();
  for (const AclGrant& g : acl.grants) {
    grants.push_back({{g.group ? "uri" : "id", g.id}, {"permission", g.permission}});
  }
  return json{{"owner", acl.owner}, {"grants", grants}}.dump();
}

std::optional<Acl> AclFromJson(std::string_view text) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("owner") || !j["owner"].is_string() || !j.contains("grants") ||
      !j["grants"].is_array()) {
    return std::nullopt;
  }
  Acl acl;
  acl.owner = j["owner"].get<std::string>();
  for (const auto& g : j["grants"]) {
    if (!g.is_object() || !g.contains("permission") || !g["permission"].is_string()) continue;
    AclGrant grant;
    grant.permission = g["permission"].get<std::string>();
    if (g.contains("uri") && g["uri"].is_string()) {
      grant.group = true;
      grant.id = g["uri"].get<std::string>();
    } else if (g.contains("id") && g["id"].is_string()) {
      grant.id = g["id"].get<std::string>();
    } else {
      continue;
    }
    acl.grants.push_back(std::move(grant));
  }
  return acl;
}

uint32_t AclPermissionsFor(const Acl& acl, const std::string& user, bool anonymous,
                           bool ignore_public) {
  uint32_t bits = 0;
  for (const AclGrant& g : acl.grants) {
    bool applies = false;
    if (g.group) {
      if (!ignore_public && g.id == kAllUsersGroup) applies = true;
      if (!ignore_public && g.id == kAuthenticatedUsersGroup && !anonymous) applies = true;
    } else {
      applies = !anonymous && !user.empty() && g.id == user;
    }
    if (applies) bits |= PermissionBits(g.permission);
  }
  return bits;
}

bool AclIsPublic(const Acl& acl) {
  return std::any_of(acl.grants.begin(), acl.grants.end(), [](const AclGrant& g) {
    return g.group && (g.id == kAllUsersGroup || g.id == kAuthenticatedUsersGroup);
  });
}

}  // namespace sovai::objstore

// `sovai registry login|gc` and `sovai image list|tags|delete`: clients of the server's OCI
// registry (docs/api/registry.md) with the logged-in API token. Private to src/cli/client.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/crypto.h"
#include "base/json.h"
#include "cli/client/command_util.h"
#include "cli/client/commands.h"
#include "cli/client/table.h"
#include "net/client.h"

namespace sovai::cli::client {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxAuthFileBytes = 1 << 20;

// The registry's URL: --registry, else $SOVAI_REGISTRY, else the API's host on port 5000.
base::Result<std::string> RegistryUrl(CommandLine& cmd, const std::string& flag) {
  std::string url = flag;
  if (url.empty()) {
    auto it = cmd.ctx().vars.find("SOVAI_REGISTRY");
    if (it != cmd.ctx().vars.end()) url = it->second;
  }
  if (url.empty()) {
    SOVAI_ASSIGN_OR_RETURN(ClientConfig config, cmd.Config());
    if (config.url.empty()) {
      return base::FailedPreconditionError("not logged in: run `sovai login` or give --registry");
    }
    SOVAI_ASSIGN_OR_RETURN(net::ClientOptions api, net::ClientOptionsFromUrl(config.url));
    url = std::string(api.tls ? "https://" : "http://") + api.host + ":5000";
  }
  if (url.find("://") == std::string::npos) url = "http://" + url;
  while (!url.empty() && url.back() == '/') url.pop_back();
  return url;
}

// "host:port" of a registry URL: how podman and skopeo name it in image references.
std::string HostOf(const std::string& url) { return url.substr(url.find("://") + 3); }

struct RegistryCall {
  int status = 0;
  Json body;
  std::string link;
};

base::Result<RegistryCall> CallRegistry(CommandLine& cmd, const std::string& url,
                                        std::string method, std::string target) {
  SOVAI_ASSIGN_OR_RETURN(ClientConfig config, cmd.Config());
  if (config.token.empty())
    return base::FailedPreconditionError("not logged in: run `sovai login`");
  SOVAI_ASSIGN_OR_RETURN(net::ClientOptions options, net::ClientOptionsFromUrl(url));
  options.ca_file = cmd.ctx().http.ca_file;
  options.verify_peer = cmd.ctx().http.verify_peer;
  net::HttpClient client(options);
  net::ClientRequest req;
  req.method = std::move(method);
  req.target = std::move(target);
  req.headers.Set("Authorization", "Bearer " + config.token);
  req.headers.Set("Accept",
                  "application/vnd.oci.image.manifest.v1+json, "
                  "application/vnd.oci.image.index.v1+json, "
                  "application/vnd.docker.distribution.manifest.v2+json, "
                  "application/vnd.docker.distribution.manifest.list.v2+json");
  SOVAI_ASSIGN_OR_RETURN(net::ClientResponse res, client.Send(req));
  RegistryCall out;
  out.status = res.status;
  out.link = std::string(res.headers.Get("Link").value_or(""));
  if (!res.body.empty()) {
    auto parsed = base::ParseJson(res.body);
    if (parsed.ok()) out.body = std::move(*parsed);
  }
  if (res.status >= 400) {
    std::string message = "registry answered " + std::to_string(res.status);
    const Json& errors = out.body.is_object() ? out.body.value("errors", Json::array()) : Json();
    if (errors.is_array() && !errors.empty()) {
      message += " " + errors[0].value("code", "") + ": " + errors[0].value("message", "");
    }
    return res.status == 404 ? base::NotFoundError(message) : base::UnavailableError(message);
  }
  if (auto digest = res.headers.Get("Docker-Content-Digest")) {
    out.body["__digest"] = std::string(*digest);
  }
  return out;
}

int RunRegistryLogin(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai registry login",
                  "Lets podman, skopeo and buildah push to and pull from the server's registry\n"
                  "with the logged-in API token: writes it to the containers auth file\n"
                  "($REGISTRY_AUTH_FILE, else $XDG_RUNTIME_DIR/containers/auth.json, else\n"
                  "~/.config/containers/auth.json), or prints the podman login command.\n\n"
                  "  sovai registry login --registry 127.0.0.1:5000");
  std::string registry;
  std::string auth_file;
  bool print = false;
  base::FlagSet& f = cmd.flags();
  f.String("registry", &registry, "the registry (default: the API's host, port 5000)", "HOST:PORT");
  f.String("authfile", &auth_file, "the auth file to write", "PATH");
  f.Bool("print", &print, "print the `podman login` command instead of writing a file");
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto url = RegistryUrl(cmd, registry);
  if (!url.ok()) return cmd.Fail(url.status());
  auto config = cmd.Config();
  if (!config.ok()) return cmd.Fail(config.status());
  if (config->token.empty()) return cmd.Fail(base::FailedPreconditionError("not logged in"));
  const std::string host = HostOf(*url);
  if (print) {
    ctx.console.Out("echo \"$SOVAI_TOKEN\" | podman login --username sovai --password-stdin " +
                    host + "\n");
    return kExitOk;
  }
  const EnvVars& vars = ctx.vars;
  auto var = [&](const char* name) {
    auto it = vars.find(name);
    return it == vars.end() ? std::string() : it->second;
  };
  if (auth_file.empty()) auth_file = var("REGISTRY_AUTH_FILE");
  if (auth_file.empty() && !var("XDG_RUNTIME_DIR").empty()) {
    auth_file = var("XDG_RUNTIME_DIR") + "/containers/auth.json";
  }
  if (auth_file.empty() && !var("HOME").empty()) {
    auth_file = var("HOME") + "/.config/containers/auth.json";
  }
  if (auth_file.empty()) return cmd.Usage("no HOME: give --authfile");
  Json doc = Json::object();
  if (auto existing = ctx.env.ReadFile(auth_file, kMaxAuthFileBytes); existing.ok()) {
    auto parsed = base::ParseJson(*existing);
    if (!parsed.ok() || !parsed->is_object()) {
      return cmd.Fail(
          base::InvalidArgumentError(auth_file + " is not a JSON object; fix or move it"));
    }
    doc = std::move(*parsed);
  }
  if (!doc.contains("auths") || !doc["auths"].is_object()) doc["auths"] = Json::object();
  doc["auths"][host] = {{"auth", base::Base64Encode("sovai:" + config->token)}};
  size_t slash = auth_file.rfind('/');
  if (slash != std::string::npos && slash > 0) {
    if (auto st = ctx.env.CreateDirs(auth_file.substr(0, slash)); !st.ok()) return cmd.Fail(st);
  }
  if (auto st = ctx.env.WriteFileAtomically(auth_file, base::DumpJson(doc, 2) + "\n"); !st.ok()) {
    return cmd.Fail(st);
  }
  ctx.console.Err("sovai registry login: " + host + " in " + auth_file + "\n");
  return kExitOk;
}

int RunRegistryGc(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai registry gc",
                  "Lists (by default) or removes (--apply) the blobs no manifest references:\n"
                  "the project's with an operator token, every project's as a platform admin.\n"
                  "Blobs younger than --min-age-s are kept (a push in progress).");
  std::string registry;
  std::string project;
  bool apply = false;
  int64_t min_age_s = 3600;
  base::FlagSet& f = cmd.flags();
  f.String("registry", &registry, "the registry (default: the API's host, port 5000)", "HOST:PORT");
  f.String("project", &project, "only this project (platform admins)", "NAME");
  f.Bool("apply", &apply, "remove them (without it: a dry run)");
  f.Int("min-age-s", &min_age_s, "keep blobs younger than this");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto url = RegistryUrl(cmd, registry);
  if (!url.ok()) return cmd.Fail(url.status());
  std::string target = "/sovai/registry/v1/gc?dry_run=" + std::string(apply ? "false" : "true") +
                       "&min_age_s=" + std::to_string(min_age_s);
  if (!project.empty()) target += "&project=" + net::PercentEncode(project);
  auto res = CallRegistry(cmd, *url, "POST", target);
  if (!res.ok()) return cmd.Fail(res.status());
  if (cmd.json()) {
    cmd.PrintJson(res->body);
    return kExitOk;
  }
  Table table({"PROJECT", "DIGEST", "SIZE"});
  for (const Json& r : res->body.value("removed", Json::array())) {
    std::string digest = Str(r, "digest");
    table.AddRow({Str(r, "project"), digest.empty() ? "(orphaned data)" : digest,
                  std::to_string(Int(r, "size"))});
  }
  ctx.console.Out(table.Render());
  ctx.console.Err(std::string(apply ? "removed " : "would remove ") +
                  std::to_string(res->body.value("removed", Json::array()).size()) + " blobs (" +
                  std::to_string(Int(res->body, "removed_bytes")) + " bytes); kept " +
                  std::to_string(Int(res->body, "kept_blobs")) +
                  (apply ? "\n" : "; run with --apply to remove them\n"));
  return kExitOk;
}

int RunImageList(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai image list",
                  "The repositories of the token's project (every project's for platform\n"
                  "admins) in the server's registry.");
  std::string registry;
  cmd.flags().String("registry", &registry, "the registry", "HOST:PORT");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  auto url = RegistryUrl(cmd, registry);
  if (!url.ok()) return cmd.Fail(url.status());
  std::vector<std::string> repos;
  std::string last;
  for (int page = 0; page < 1000; ++page) {
    auto res = CallRegistry(cmd, *url, "GET",
                            "/v2/_catalog?n=1000&last=" + net::PercentEncode(last, true));
    if (!res.ok()) return cmd.Fail(res.status());
    for (const Json& r : res->body.value("repositories", Json::array())) {
      repos.push_back(r.get<std::string>());
    }
    if (res->link.empty() || repos.empty()) break;
    last = repos.back();
  }
  if (cmd.json()) {
    cmd.PrintJson({{"repositories", repos}});
    return kExitOk;
  }
  Table table({"REPOSITORY", "REFERENCE"});
  for (const std::string& r : repos) table.AddRow({r, HostOf(*url) + "/" + r});
  ctx.console.Out(table.Render());
  return kExitOk;
}

int RunImageTags(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai image tags", "The tags of a repository, PROJECT/NAME.");
  std::string registry;
  cmd.flags().String("registry", &registry, "the registry", "HOST:PORT");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  const std::string repo = cmd.flags().positional()[0];
  auto url = RegistryUrl(cmd, registry);
  if (!url.ok()) return cmd.Fail(url.status());
  auto res = CallRegistry(cmd, *url, "GET", "/v2/" + repo + "/tags/list?n=1000");
  if (!res.ok()) return cmd.Fail(res.status());
  Json tags = res->body.value("tags", Json::array());
  if (cmd.json()) {
    cmd.PrintJson(res->body);
    return kExitOk;
  }
  Table table({"TAG", "DIGEST"});
  for (const Json& t : tags) {
    std::string tag = t.get<std::string>();
    auto head = CallRegistry(cmd, *url, "HEAD", "/v2/" + repo + "/manifests/" + tag);
    table.AddRow({tag, head.ok() ? Str(head->body, "__digest") : "?"});
  }
  ctx.console.Out(table.Render());
  return kExitOk;
}

int RunImageDelete(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai image delete",
                  "Deletes a tag (PROJECT/NAME:TAG) or a manifest and its tags\n"
                  "(PROJECT/NAME@sha256:...). The blobs go with `sovai registry gc`.");
  std::string registry;
  cmd.flags().String("registry", &registry, "the registry", "HOST:PORT");
  if (auto code = cmd.Parse(args, 1, 1)) return *code;
  const std::string ref = cmd.flags().positional()[0];
  size_t at = ref.find('@');
  size_t colon = ref.rfind(':');
  std::string repo, reference;
  if (at != std::string::npos) {
    repo = ref.substr(0, at);
    reference = ref.substr(at + 1);
  } else if (colon != std::string::npos && ref.find('/', colon) == std::string::npos) {
    repo = ref.substr(0, colon);
    reference = ref.substr(colon + 1);
  } else {
    return cmd.Usage("give PROJECT/NAME:TAG or PROJECT/NAME@DIGEST");
  }
  auto url = RegistryUrl(cmd, registry);
  if (!url.ok()) return cmd.Fail(url.status());
  auto res = CallRegistry(cmd, *url, "DELETE", "/v2/" + repo + "/manifests/" + reference);
  if (!res.ok()) return cmd.Fail(res.status());
  ctx.console.Err("deleted " + ref + "\n");
  return kExitOk;
}

int RunImageImmutable(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(ctx, "sovai image immutable",
                  "Shows, or turns on or off, tag immutability of a repository, PROJECT/NAME:\n"
                  "while on, a pushed tag is never moved to another manifest nor deleted\n"
                  "(pushes answer TAG_INVALID, deletes DENIED). Changing it needs an operator.");
  std::string registry;
  cmd.flags().Positional("PROJECT/NAME [on|off]");
  cmd.flags().String("registry", &registry, "the registry", "HOST:PORT");
  cmd.AddOutputFlag();
  if (auto code = cmd.Parse(args, 1, 2)) return *code;
  const std::vector<std::string>& positional = cmd.flags().positional();
  std::string target =
      "/sovai/registry/v1/settings?repository=" + net::PercentEncode(positional[0]);
  std::string method = "GET";
  if (positional.size() == 2) {
    if (positional[1] != "on" && positional[1] != "off") return cmd.Usage("give on or off");
    method = "PUT";
    target += std::string("&immutable_tags=") + (positional[1] == "on" ? "true" : "false");
  }
  auto url = RegistryUrl(cmd, registry);
  if (!url.ok()) return cmd.Fail(url.status());
  auto res = CallRegistry(cmd, *url, method, target);
  if (!res.ok()) return cmd.Fail(res.status());
  if (cmd.json()) {
    cmd.PrintJson(res->body);
    return kExitOk;
  }
  ctx.console.Out(positional[0] + ": tags " +
                  (res->body.value("immutable_tags", false) ? "immutable" : "mutable") + "\n");
  return kExitOk;
}

}  // namespace

int RunRegistryCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"login", "write the containers auth file for podman/skopeo (or --print)", &RunRegistryLogin},
      {"gc", "list (or --apply: remove) blobs no manifest references", &RunRegistryGc},
  };
  return RunGroup(ctx, "registry",
                  "The server's OCI registry (docs/api/registry.md): podman, skopeo and buildah\n"
                  "push and pull PROJECT/NAME:TAG with an API token.",
                  kSubcommands, args);
}

int RunImageCommand(CommandContext& ctx, const std::vector<std::string>& args) {
  static const std::vector<Subcommand> kSubcommands = {
      {"list", "the repositories of the registry", &RunImageList},
      {"tags", "the tags of a repository and their digests", &RunImageTags},
      {"delete", "delete a tag or a manifest", &RunImageDelete},
      {"immutable", "show or set (on|off) tag immutability of a repository", &RunImageImmutable},
  };
  return RunGroup(ctx, "image", "Images in the server's registry (PROJECT/NAME:TAG).", kSubcommands,
                  args);
}

}  // namespace sovai::cli::client

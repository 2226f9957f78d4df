// sovai s3 credentials: the config's S3 key as another client's configuration (s3_credentials.h).
#include "cli/client/command_util.h"
#include "cli/client/s3_credentials.h"

namespace sovai::cli::client {
namespace {

// A profile or remote name: one INI section name, nothing to escape.
bool IsSectionName(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '-' || c == '_' || c == '.';
    if (!ok) return false;
  }
  return true;
}

int RunS3Credentials(CommandContext& ctx, const std::vector<std::string>& args) {
  CommandLine cmd(
      ctx, "sovai s3 credentials",
      "Shows the S3 endpoint, region and access key that 'sovai login' set up, or, with\n"
      "--format, prints them (secret key included) as the configuration of another S3 client,\n"
      "on stdout only:\n"
      "  env     shell exports for aws-cli, boto3 and the AWS SDKs:\n"
      "          eval \"$(sovai s3 credentials --format env)\"\n"
      "  aws     a profile for ~/.aws/config (aws --profile sovai s3 ls)\n"
      "  rclone  a remote for rclone.conf (rclone lsd sovai:)\n"
      "  s3cmd   a ~/.s3cfg (s3cmd -c FILE ls)\n"
      "  boto3   Python that makes a boto3 S3 client\n"
      "Write it to a file only you can read: (umask 077; sovai s3 credentials --format s3cmd\n"
      "> ~/.s3cfg). docs/api/s3.md shows each format.");
  std::string format_name;
  std::string name = "sovai";
  std::string ca_bundle;
  cmd.flags().String("format", &format_name, "env, aws, rclone, s3cmd or boto3", "FORMAT");
  cmd.flags().String("name", &name, "the aws profile or rclone remote ('default': [default])",
                     "NAME");
  cmd.flags().String("ca-bundle", &ca_bundle,
                     "a CA certificate file for an https endpoint with a private CA", "FILE");
  if (auto code = cmd.Parse(args, 0, 0)) return *code;
  S3CredentialsFormat format = S3CredentialsFormat::kSummary;
  if (!format_name.empty()) {
    auto parsed = ParseS3CredentialsFormat(format_name);
    if (!parsed.ok()) return cmd.Usage(parsed.status().message());
    format = *parsed;
  }
  if (!IsSectionName(name)) {
    return cmd.Usage("--name must be 1 to 64 letters, digits, '-', '_' or '.', not '" + name + "'");
  }
  for (char c : ca_bundle) {
    if (static_cast<unsigned char>(c) < 0x20) return cmd.Usage("--ca-bundle holds a control byte");
  }
  auto config = cmd.Config();
  if (!config.ok()) return cmd.Fail(config.status());
  auto credentials = S3CredentialsOf(*config);
  if (!credentials.ok()) return cmd.Fail(credentials.status());
  ctx.console.Out(
      RenderS3Credentials(*credentials, format, {.name = name, .ca_bundle = ca_bundle}));
  return kExitOk;
}

}  // namespace

int RunS3Command(CommandContext& ctx, const std::vector<std::string>& args) {
  return RunGroup(ctx, "s3", "The S3 API of the server, for other S3 clients (docs/api/s3.md).",
                  {{"credentials", "the S3 endpoint and key, or a client's config (--format)",
                    &RunS3Credentials}},
                  args);
}

}  // namespace sovai::cli::client

#include "cli/client/s3_credentials.h"

#include "base/strings.h"
#include "cli/client/table.h"

namespace sovai::cli::client {
namespace {

struct FormatName {
  std::string_view name;
  S3CredentialsFormat format;
};
constexpr FormatName kFormats[] = {
    {"env", S3CredentialsFormat::kEnv},       {"aws", S3CredentialsFormat::kAws},
    {"rclone", S3CredentialsFormat::kRclone}, {"s3cmd", S3CredentialsFormat::kS3cmd},
    {"boto3", S3CredentialsFormat::kBoto3},
};

constexpr std::string_view kHttps = "https://";

bool HasControl(std::string_view s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c == 0x7f) return true;
  }
  return false;
}

// "http://127.0.0.1:9000/" → "127.0.0.1:9000" (s3cmd wants a host, not a URL).
std::string HostOf(std::string_view endpoint) {
  if (size_t scheme = endpoint.find("://"); scheme != std::string_view::npos) {
    endpoint.remove_prefix(scheme + 3);
  }
  while (endpoint.ends_with('/')) endpoint.remove_suffix(1);
  return std::string(endpoint);
}

std::string Env(const S3Credentials& c, const S3CredentialsOptions& o) {
  // AWS_ENDPOINT_URL_S3 is the S3-only endpoint (aws-cli >= 1.29 / 2.13, boto3 >= 1.28, the JS
  // SDK v3): unlike AWS_ENDPOINT_URL it leaves the other AWS services of a shell alone.
  std::string out = "export AWS_ACCESS_KEY_ID=" + base::ShellQuote(c.access_key_id) + "\n" +
                    "export AWS_SECRET_ACCESS_KEY=" + base::ShellQuote(c.secret_access_key) + "\n" +
                    "export AWS_DEFAULT_REGION=" + base::ShellQuote(c.region) + "\n" +
                    "export AWS_REGION=" + base::ShellQuote(c.region) + "\n" +
                    "export AWS_ENDPOINT_URL_S3=" + base::ShellQuote(c.endpoint) + "\n";
  if (!o.ca_bundle.empty()) out += "export AWS_CA_BUNDLE=" + base::ShellQuote(o.ca_bundle) + "\n";
  return out;
}

std::string Aws(const S3Credentials& c, const S3CredentialsOptions& o) {
  std::string out = o.name == "default" ? "[default]\n" : "[profile " + o.name + "]\n";
  out += "region = " + c.region + "\n";
  out += "endpoint_url = " + c.endpoint + "\n";
  out += "aws_access_key_id = " + c.access_key_id + "\n";
  out += "aws_secret_access_key = " + c.secret_access_key + "\n";
  if (!o.ca_bundle.empty()) out += "ca_bundle = " + o.ca_bundle + "\n";
  out += "s3 =\n    addressing_style = path\n";
  return out;
}

std::string Rclone(const S3Credentials& c, const S3CredentialsOptions& o) {
  std::string out;
  if (!o.ca_bundle.empty()) out += "# run rclone with --ca-cert " + o.ca_bundle + "\n";
  out += "[" + o.name + "]\n";
  out += "type = s3\n";
  out += "provider = Other\n";
  out += "access_key_id = " + c.access_key_id + "\n";
  out += "secret_access_key = " + c.secret_access_key + "\n";
  out += "endpoint = " + c.endpoint + "\n";
  out += "region = " + c.region + "\n";
  out += "location_constraint = " + c.region + "\n";
  out += "force_path_style = true\n";
  return out;
}

std::string S3cmd(const S3Credentials& c, const S3CredentialsOptions& o) {
  const std::string https = c.endpoint.starts_with(kHttps) ? "True" : "False";
  const std::string host = HostOf(c.endpoint);
  // host_bucket without %(bucket)s: s3cmd then addresses buckets path-style.
  std::string out = "[default]\n";
  out += "access_key = " + c.access_key_id + "\n";
  out += "secret_key = " + c.secret_access_key + "\n";
  out += "host_base = " + host + "\n";
  out += "host_bucket = " + host + "\n";
  out += "use_https = " + https + "\n";
  if (!o.ca_bundle.empty()) {
    out += "ca_certs_file = " + o.ca_bundle + "\n";
    out += "check_ssl_certificate = True\n";
  }
  out += "signature_v2 = False\n";
  out += "signurl_use_https = " + https + "\n";
  out += "bucket_location = " + c.region + "\n";
  return out;
}

std::string Boto3(const S3Credentials& c, const S3CredentialsOptions& o) {
  // JSON string literals are Python string literals too (the values are printable ASCII).
  std::string out =
      "import boto3\n"
      "from botocore.config import Config\n"
      "\n"
      "s3 = boto3.client(\n"
      "    \"s3\",\n";
  out += "    endpoint_url=" + base::JsonQuote(c.endpoint) + ",\n";
  out += "    region_name=" + base::JsonQuote(c.region) + ",\n";
  out += "    aws_access_key_id=" + base::JsonQuote(c.access_key_id) + ",\n";
  out += "    aws_secret_access_key=" + base::JsonQuote(c.secret_access_key) + ",\n";
  if (!o.ca_bundle.empty()) out += "    verify=" + base::JsonQuote(o.ca_bundle) + ",\n";
  out += "    config=Config(s3={\"addressing_style\": \"path\"}),\n";
  out += ")\n";
  return out;
}

std::string Summary(const S3Credentials& c) {
  return RenderKeyValues({
      {"Endpoint", c.endpoint},
      {"Region", c.region},
      {"Access key", c.access_key_id},
      {"Secret key",
       "not shown; --format env|aws|rclone|s3cmd|boto3 prints it in a client's "
       "configuration"},
  });
}

}  // namespace

base::Result<S3CredentialsFormat> ParseS3CredentialsFormat(std::string_view name) {
  for (const FormatName& f : kFormats) {
    if (f.name == name) return f.format;
  }
  return base::InvalidArgumentError("--format must be env, aws, rclone, s3cmd or boto3, not '" +
                                    std::string(name) + "'");
}

base::Result<S3Credentials> S3CredentialsOf(const ClientConfig& config) {
  if (!config.has_s3() || config.s3_secret_access_key.empty() || config.region.empty()) {
    return base::FailedPreconditionError(
        "the config holds no S3 key: run 'sovai login' (without --no-s3) to create one");
  }
  S3Credentials c{config.s3_url, base::AsciiToLower(config.region), config.s3_access_key_id,
                  config.s3_secret_access_key};
  // Each value goes on one line of a config file or one shell word.
  for (std::string_view value : {c.endpoint, c.region, c.access_key_id, c.secret_access_key}) {
    if (HasControl(value)) {
      return base::FailedPreconditionError(
          "the config's S3 settings hold a control character: run 'sovai login' again");
    }
  }
  return c;
}

std::string RenderS3Credentials(const S3Credentials& credentials, S3CredentialsFormat format,
                                const S3CredentialsOptions& options) {
  switch (format) {
    case S3CredentialsFormat::kSummary:
      return Summary(credentials);
    case S3CredentialsFormat::kEnv:
      return Env(credentials, options);
    case S3CredentialsFormat::kAws:
      return Aws(credentials, options);
    case S3CredentialsFormat::kRclone:
      return Rclone(credentials, options);
    case S3CredentialsFormat::kS3cmd:
      return S3cmd(credentials, options);
    case S3CredentialsFormat::kBoto3:
      return Boto3(credentials, options);
  }
  return "";
}

}  // namespace sovai::cli::client

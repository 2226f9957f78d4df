// `sovai s3 credentials`: the S3 endpoint, region and key of the config that `sovai login` wrote,
// as the configuration of another S3 client (docs/api/s3.md, "Client configuration"; the e2e
// suite configures aws-cli, rclone, s3cmd and boto3 with exactly these texts).
//
//   SOVAI_ASSIGN_OR_RETURN(S3CredentialsFormat format, ParseS3CredentialsFormat("rclone"));
//   console.Out(RenderS3Credentials(S3CredentialsOf(config), format, {.name = "sovai"}));
//
// Every format holds the secret key (a client needs it); the summary does not, and says how to
// get it. The region is written in lowercase, as SigV4 scopes and LocationConstraint want it.
// Addressing is path-style wherever a client can be told (/bucket/key works on every endpoint;
// virtual-hosted names need --s3-domain and DNS).
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"
#include "cli/client/config.h"

namespace sovai::cli::client {

enum class S3CredentialsFormat {
  kSummary,  // people: endpoint, region, access key; never the secret
  kEnv,      // POSIX shell: export AWS_...=... (aws-cli, boto3 and the AWS SDKs read them)
  kAws,      // a profile of ~/.aws/config
  kRclone,   // a remote of rclone.conf
  kS3cmd,    // ~/.s3cfg
  kBoto3,    // Python: a boto3 S3 client
};

// "env", "aws", "rclone", "s3cmd", "boto3" (the names --format takes). InvalidArgument naming
// the valid ones otherwise.
base::Result<S3CredentialsFormat> ParseS3CredentialsFormat(std::string_view name);

struct S3Credentials {
  std::string endpoint;  // "http://127.0.0.1:9000"
  std::string region;    // "eu-west-local"
  std::string access_key_id;
  std::string secret_access_key;
};

// The config's S3 members. FailedPrecondition (saying to run `sovai login`) when the config has
// no S3 endpoint, key or secret.
base::Result<S3Credentials> S3CredentialsOf(const ClientConfig& config);

struct S3CredentialsOptions {
  // The aws profile ("default" is the [default] section) or the rclone remote.
  std::string name = "sovai";
  // A CA bundle for an https endpoint with a private CA: ca_bundle (aws), AWS_CA_BUNDLE (env),
  // ca_certs_file (s3cmd), verify= (boto3); rclone takes it on its command line (--ca-cert),
  // which the text says in a comment. "" for none.
  std::string ca_bundle;
};

// The text to print, ending with a newline.
std::string RenderS3Credentials(const S3Credentials& credentials, S3CredentialsFormat format,
                                const S3CredentialsOptions& options = {});

}  // namespace sovai::cli::client

// net/s3_config: credentials, region and endpoint the way every S3 tool takes them.
//
// Environment first, then the profile (AWS_PROFILE, default "default") in the shared files
// (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, AWS_CONFIG_FILE or ~/.aws/config), as
// botocore orders them:
//   keys      AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN; or the profile's
//             aws_access_key_id, aws_secret_access_key, aws_session_token
//   region    AWS_REGION, AWS_DEFAULT_REGION, the profile's region; else us-east-1
//   endpoint  AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's endpoint_url; else AWS's
//             https://s3.REGION.amazonaws.com
//   style     STOKER_S3_ADDRESSING=path|virtual; default path for a custom endpoint (MinIO, Ceph,
//             s3rver), virtual-host for AWS
// No keys anywhere, or AWS_NO_SIGN_REQUEST=true: requests go unsigned (public buckets).
// The secret and the session token are never part of describe(), an error or a log line.
#pragma once

#include <string>

namespace stoker {

struct S3Config {
  std::string accessKeyId, secretAccessKey, sessionToken;
  std::string region = "us-east-1";
  std::string endpoint;  // scheme://host[:port], no trailing slash
  bool pathStyle = false;
  bool styleChosen = false;  // STOKER_S3_ADDRESSING named the style: kept even for dotted buckets
  std::string source;    // where the keys came from: "environment", "profile default in FILE", "none (unsigned)"

  bool anonymous() const { return accessKeyId.empty(); }
  // "key id AKIA… (environment), region us-east-1, endpoint http://127.0.0.1:9000, path-style"
  std::string describe() const;
  // The HTTP(S) URL of s3://bucket/key (key percent-encoded, '/' kept) and, for a listing,
  // of the bucket itself (key empty).
  std::string objectUrl(const std::string& bucket, const std::string& key) const;
};

// Reads the environment and the shared files now (each open reads them again: a rotated
// session token is picked up by the next open). Error(BadInput) for a profile named in
// AWS_PROFILE that neither file holds, or a key id without its secret.
S3Config loadS3Config();

}  // namespace stoker

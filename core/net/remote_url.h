// net/remote_url: where a dataset, shard or checkpoint lives when it is not a local path --
// `s3://BUCKET/KEY` (any S3-compatible store) or `http(s)://HOST/PATH`.
#pragma once

#include <string>
#include <string_view>

namespace stoker {

// True for s3://, http:// and https:// paths: the ones read through net/ instead of the file system.
bool isRemotePath(std::string_view path);

struct RemoteUrl {
  enum class Scheme { S3, Http, Https };
  Scheme scheme = Scheme::Http;
  std::string text;    // as written, for messages
  std::string bucket;  // s3: the bucket
  std::string key;     // s3: the key (may be empty or end in '/': a prefix)

  // Error(BadInput) naming `text` when it is not s3://BUCKET[/KEY] or http(s)://HOST[/PATH].
  static RemoteUrl parse(const std::string& text);
  bool isS3() const { return scheme == Scheme::S3; }
};

// `url` as errors and logs show it: a user:password@ before the host and the values of a
// presigned URL's X-Amz-Signature, X-Amz-Credential and X-Amz-Security-Token become "***" --
// in every URL of the text, so a dataset spec or a whole message can be passed too.
std::string redactedUrl(const std::string& url);
// Whether redactedUrl would hide something in `text` (such a text is never saved or sent).
bool holdsSecret(const std::string& text);

// `text` with every byte outside S3's unreserved set percent-encoded; '/' kept when `keepSlash`.
std::string percentEncode(std::string_view text, bool keepSlash);

}  // namespace stoker

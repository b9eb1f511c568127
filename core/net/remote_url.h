// net/remote_url: where a dataset, shard or checkpoint lives when it is not a local path --
// `s3://BUCKET/KEY` (any S3-compatible store) or `http(s)://HOST/PATH`.
#pragma once

#include <string>
#include <string_view>

#include "util/redacted_url.h"  // redactedUrl, holdsSecret: most callers here show URLs

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

// `text` with every byte outside S3's unreserved set percent-encoded; '/' kept when `keepSlash`.
std::string percentEncode(std::string_view text, bool keepSlash);

}  // namespace stoker

#include "net/remote_url.h"

#include <cctype>

#include "util/error.h"

namespace stoker {

bool isRemotePath(std::string_view p) {
  return p.rfind("s3://", 0) == 0 || p.rfind("http://", 0) == 0 || p.rfind("https://", 0) == 0;
}

RemoteUrl RemoteUrl::parse(const std::string& text) {
  RemoteUrl u;
  u.text = text;
  if (text.rfind("s3://", 0) == 0) {
    u.scheme = Scheme::S3;
    const std::string rest = text.substr(5);
    const std::size_t slash = rest.find('/');
    u.bucket = rest.substr(0, slash);
    if (slash != std::string::npos) u.key = rest.substr(slash + 1);
    // S3's bucket names: 3-63 of a-z 0-9 . -; anything else cannot be a bucket on any store.
    bool ok = u.bucket.size() >= 3 && u.bucket.size() <= 63;
    for (char c : u.bucket)
      if (!(std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == '-')) ok = false;
    if (!ok) throwBadInput(text, "not s3://BUCKET/KEY (a bucket is 3-63 characters of a-z, 0-9, '.', '-')");
    return u;
  }
  if (text.rfind("https://", 0) == 0) u.scheme = Scheme::Https;
  else if (text.rfind("http://", 0) == 0) u.scheme = Scheme::Http;
  else throwBadInput(text, "not a URL: s3://BUCKET/KEY, http://HOST/PATH or https://HOST/PATH");
  const std::size_t hostAt = text.find("://") + 3;
  if (hostAt >= text.size() || text[hostAt] == '/') throwBadInput(text, "the URL names no host");
  if (text.find_first_of(" \t\r\n", 0) != std::string::npos)
    throwBadInput(text, "a URL has no blanks (percent-encode them: %20)");
  return u;
}

std::string percentEncode(std::string_view text, bool keepSlash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keepSlash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

}  // namespace stoker

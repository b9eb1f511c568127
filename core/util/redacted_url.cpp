#include "util/redacted_url.h"

#include <cctype>

namespace stoker {
namespace {

// Where "user:pass" ends when the password holds a '/', '?' or '#' that its writer did not
// percent-encode ("https://ann:p/ss@host/x"): the URL's first such character is then inside the
// password, and the '@' comes later in the same word. "host:8080/a@b" is a port and a path, left as
// it is. npos when the word has no such userinfo.
std::size_t rawPasswordEnd(const std::string& s, std::size_t authority, std::size_t pathAt) {
  if (pathAt == std::string::npos || s[pathAt] == ',' || std::isspace(static_cast<unsigned char>(s[pathAt])) ||
      s[pathAt] == '"' || s[pathAt] == '\'')
    return std::string::npos;
  const std::size_t colon = s.find(':', authority);
  if (colon == std::string::npos || colon > pathAt) return std::string::npos;
  bool port = colon + 1 < pathAt && s[pathAt] == '/';
  for (std::size_t i = colon + 1; port && i < pathAt; ++i) port = std::isdigit(static_cast<unsigned char>(s[i]));
  if (port) return std::string::npos;
  const std::size_t wordEnd = s.find_first_of(", \t\n\"'", pathAt);
  const std::size_t at = s.rfind('@', wordEnd == std::string::npos ? std::string::npos : wordEnd);
  return at != std::string::npos && at > pathAt ? at : std::string::npos;
}

// A query parameter whose value is a credential by its name: the presigned schemes' (above) and
// the generic ones hubs and APIs use (?token=, ?access_token=, ?api_key=, ...). Exact names: a
// redacted URL also names the dataset (a resume's check, an export), and ?key=shard-000.tar or
// ?max_tokens= are not secrets.
bool secretParameter(std::string key) {
  for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* exact : {"token", "access_token", "auth_token", "id_token", "refresh_token", "session_token",
                            "api_key", "apikey", "x-api-key", "access_key", "secret_key", "auth", "pwd"})
    if (key == exact) return true;
  for (const char* part : {"secret", "password", "passwd"})
    if (key.find(part) != std::string::npos) return true;
  return false;
}

}  // namespace

std::string redactedUrl(const std::string& url) {
  if (url.find("://") == std::string::npos && url.find("X-Amz-") == std::string::npos &&
      url.find("X-Goog-") == std::string::npos)
    return url;  // most messages
  std::string out = url;
  // Every URL in the text: a dataset spec, an error message or a log line may hold several.
  for (std::size_t hostAt = out.find("://"); hostAt != std::string::npos; hostAt = out.find("://", hostAt + 3)) {
    const std::size_t pathAt = out.find_first_of("/?#, \t\n\"'", hostAt + 3);
    std::size_t at = out.rfind('@', pathAt == std::string::npos ? std::string::npos : pathAt);
    if (at == std::string::npos || at < hostAt + 3) at = rawPasswordEnd(out, hostAt + 3, pathAt);
    if (at != std::string::npos && at > hostAt + 3 && out.compare(hostAt + 3, at - hostAt - 3, "***") != 0)
      out.replace(hostAt + 3, at - hostAt - 3, "***");
  }
  // Presigned URLs: S3's SigV4, and (as query parameters, after '?' or '&') S3's older SigV2
  // (AWSAccessKeyId, Signature), GCS's (X-Goog-*) and Azure's SAS (sig).
  struct Key {
    const char* name;
    bool parameterOnly;  // only as a whole query parameter ("sig=" is also the end of "config=")
  };
  for (const Key key : {Key{"X-Amz-Signature=", false}, Key{"X-Amz-Credential=", false}, Key{"X-Amz-Security-Token=", false},
                        Key{"X-Goog-Signature=", false}, Key{"X-Goog-Credential=", false}, Key{"Signature=", true},
                        Key{"AWSAccessKeyId=", true}, Key{"sig=", true}}) {
    const std::size_t n = std::char_traits<char>::length(key.name);
    for (std::size_t k = out.find(key.name); k != std::string::npos; k = out.find(key.name, k + n)) {
      if (key.parameterOnly && (k == 0 || (out[k - 1] != '?' && out[k - 1] != '&'))) continue;
      const std::size_t v = k + n;
      const std::size_t end = out.find_first_of("&#, \t\n\"'", v);
      out.replace(v, (end == std::string::npos ? out.size() : end) - v, "***");
    }
  }
  // Any other parameter named like a credential, in a URL's query.
  for (std::size_t q = out.find_first_of("?&", out.find("://")); q != std::string::npos && out.find("://") != std::string::npos;
       q = out.find_first_of("?&", q + 1)) {
    const std::size_t eq = out.find('=', q + 1);
    const std::size_t stop = out.find_first_of("&#, \t\n\"'/?", q + 1);
    if (eq == std::string::npos || (stop != std::string::npos && stop < eq)) continue;
    if (!secretParameter(out.substr(q + 1, eq - q - 1))) continue;
    const std::size_t end = out.find_first_of("&#, \t\n\"'", eq + 1);
    const std::size_t n = (end == std::string::npos ? out.size() : end) - eq - 1;
    if (out.compare(eq + 1, n, "***") != 0) out.replace(eq + 1, n, "***");
  }
  return out;
}

bool holdsSecret(const std::string& text) { return redactedUrl(text) != text; }

}  // namespace stoker

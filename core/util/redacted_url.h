// util/redacted_url: the secrets a URL can carry -- a user:password@ before its host, a presigned
// URL's signature, credential and session token -- hidden wherever text leaves the process. Here
// in util (not net/) because util/error hides them in every Error it makes.
#pragma once

#include <string>

namespace stoker {

// `url` as errors and logs show it: a user:password@ before the host and the values of a
// presigned URL's X-Amz-Signature, X-Amz-Credential and X-Amz-Security-Token become "***" --
// in every URL of the text, so a dataset spec or a whole message can be passed too.
std::string redactedUrl(const std::string& url);
// Whether redactedUrl would hide something in `text` (such a text is never saved or sent).
bool holdsSecret(const std::string& text);

}  // namespace stoker

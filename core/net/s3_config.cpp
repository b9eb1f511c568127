#include "net/s3_config.h"

#include <ini.h>

#include <cstdlib>
#include <map>

#include "net/remote_url.h"
#include "util/error.h"

namespace stoker {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

using Sections = std::map<std::string, std::map<std::string, std::string>>;

// Every section of an INI file (inih: what configparser reads); a missing file is no sections.
Sections readIni(const std::string& path) {
  Sections out;
  if (path.empty()) return out;
  ini_parse(
      path.c_str(),
      [](void* user, const char* section, const char* name, const char* value) -> int {
        (*static_cast<Sections*>(user))[section][name] = value;
        return 1;
      },
      &out);
  return out;
}

std::string homeFile(const char* envName, const char* relative) {
  std::string p = env(envName);
  if (!p.empty()) return p;
  const std::string home = env("HOME");
  return home.empty() ? std::string() : home + "/" + relative;
}

}  // namespace

std::string S3Config::describe() const {
  std::string out = anonymous() ? "unsigned (no credentials)" : "key id " + accessKeyId + " (" + source + ")";
  out += ", region " + region + ", endpoint " + endpoint + (pathStyle ? ", path-style" : ", virtual-host style");
  return out;
}

std::string S3Config::objectUrl(const std::string& bucket, const std::string& key) const {
  const std::size_t hostAt = endpoint.find("://") + 3;
  // A bucket with dots (my.data) as a host name over TLS does not match the *.s3 wildcard
  // certificate: botocore falls back to path-style there, and so does this (the certificate error
  // advised STOKER_TLS_INSECURE=1, with signed requests and session tokens on the wire).
  const bool dottedOverTls = !styleChosen && bucket.find('.') != std::string::npos && endpoint.rfind("https://", 0) == 0;
  if (pathStyle || dottedOverTls) return endpoint + "/" + bucket + (key.empty() ? "" : "/" + percentEncode(key, true));
  return endpoint.substr(0, hostAt) + bucket + "." + endpoint.substr(hostAt) + "/" + percentEncode(key, true);
}

S3Config loadS3Config() {
  S3Config c;
  const std::string profile = env("AWS_PROFILE").empty() ? "default" : env("AWS_PROFILE");
  const std::string credsPath = homeFile("AWS_SHARED_CREDENTIALS_FILE", ".aws/credentials");
  const std::string configPath = homeFile("AWS_CONFIG_FILE", ".aws/config");
  const Sections creds = readIni(credsPath), config = readIni(configPath);
  const auto credsIt = creds.find(profile);
  const auto configIt = config.find(profile == "default" ? "default" : "profile " + profile);
  if (!env("AWS_PROFILE").empty() && credsIt == creds.end() && configIt == config.end())
    throwBadInput("AWS_PROFILE=" + profile, "no such profile in " + credsPath + " or " + configPath);
  auto fromProfile = [&](const char* key) {
    if (credsIt != creds.end() && credsIt->second.count(key)) return credsIt->second.at(key);
    if (configIt != config.end() && configIt->second.count(key)) return configIt->second.at(key);
    return std::string();
  };
  if (!env("AWS_ACCESS_KEY_ID").empty()) {
    c.accessKeyId = env("AWS_ACCESS_KEY_ID");
    c.secretAccessKey = env("AWS_SECRET_ACCESS_KEY");
    c.sessionToken = env("AWS_SESSION_TOKEN");
    c.source = "environment";
  } else if (!fromProfile("aws_access_key_id").empty()) {
    c.accessKeyId = fromProfile("aws_access_key_id");
    c.secretAccessKey = fromProfile("aws_secret_access_key");
    c.sessionToken = fromProfile("aws_session_token");
    c.source = "profile " + profile;
  }
  if (!c.accessKeyId.empty() && c.secretAccessKey.empty())
    throwBadInput("key id " + c.accessKeyId + " (" + c.source + ")", "has no secret access key (AWS_SECRET_ACCESS_KEY or aws_secret_access_key)");
  const std::string noSign = env("AWS_NO_SIGN_REQUEST");
  if (noSign == "true" || noSign == "1" || c.accessKeyId.empty()) {
    c.accessKeyId.clear();
    c.secretAccessKey.clear();
    c.sessionToken.clear();
    c.source = "none";
  }
  for (const std::string& r : {env("AWS_REGION"), env("AWS_DEFAULT_REGION"), fromProfile("region")})
    if (!r.empty()) {
      c.region = r;
      break;
    }
  for (const std::string& e : {env("AWS_ENDPOINT_URL_S3"), env("AWS_ENDPOINT_URL"), fromProfile("endpoint_url")})
    if (!e.empty()) {
      c.endpoint = e;
      break;
    }
  const bool custom = !c.endpoint.empty();
  if (!custom) c.endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (c.endpoint.rfind("http://", 0) != 0 && c.endpoint.rfind("https://", 0) != 0)
    throwBadInput("endpoint " + c.endpoint, "an S3 endpoint is http://HOST[:PORT] or https://HOST[:PORT]");
  const std::string style = env("STOKER_S3_ADDRESSING");
  c.styleChosen = !style.empty();
  if (style == "path") c.pathStyle = true;
  else if (style == "virtual") c.pathStyle = false;
  else if (!style.empty()) throwBadInput("STOKER_S3_ADDRESSING=" + style, "is path or virtual");
  else c.pathStyle = custom;
  return c;
}

}  // namespace stoker

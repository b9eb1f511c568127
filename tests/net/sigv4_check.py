"""Checks an S3 request's SigV4 signature as S3 does, for the fault proxy in front of s3rver (which
checks only that the key id exists).

The canonical request is rebuilt from what arrived on the wire -- the path and the query decoded
and encoded again by S3's rules, the headers the Authorization names -- and signed with botocore's
S3SigV4Auth (Debian's python3-botocore) under the secret the proxy was given for that key id. A
request whose signature, payload hash or date does not hold is answered 403 with S3's codes.
"""
import datetime
import hashlib
import hmac
from urllib.parse import quote, unquote, urlsplit

from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()


def parse_keys(text):
    """KEYID:SECRET[,KEYID:SECRET...] -> {key id: secret}"""
    return dict(pair.split(":", 1) for pair in text.split(",") if pair)


def _authorization(value):
    algorithm, _, rest = value.partition(" ")
    fields = {}
    for part in rest.split(","):
        name, _, v = part.strip().partition("=")
        fields[name] = v
    return algorithm, fields


def check(method, raw_path, headers, body, keys):
    """None when the request is signed right (or unsigned, or signed with a key id not given: S3
    itself answers those); else (code, message) for a 403."""
    value = headers.get("Authorization")
    if not value:
        return None
    algorithm, fields = _authorization(value)
    if algorithm != "AWS4-HMAC-SHA256":
        return "SignatureDoesNotMatch", f"unsupported algorithm {algorithm}"
    try:
        key_id, date, region, service, terminal = fields["Credential"].split("/")
        signed = fields["SignedHeaders"].split(";")
        signature = fields["Signature"]
    except (KeyError, ValueError):
        return "AuthorizationHeaderMalformed", "the Authorization header is malformed"
    if key_id not in keys:
        return None
    if service != "s3" or terminal != "aws4_request":
        return "AuthorizationHeaderMalformed", f"the credential scope names {service}/{terminal}"
    amz_date = headers.get("x-amz-date", "")
    if amz_date[:8] != date:
        return "SignatureDoesNotMatch", "x-amz-date is not the date of the credential scope"
    try:
        when = datetime.datetime.strptime(amz_date, "%Y%m%dT%H%M%SZ").replace(tzinfo=datetime.timezone.utc)
    except ValueError:
        return "AccessDenied", "x-amz-date is not a date"
    if abs((datetime.datetime.now(datetime.timezone.utc) - when).total_seconds()) > 900:
        return "RequestTimeTooSkewed", "the request time differs from the server's by more than 15 minutes"
    for name in ("host", "x-amz-date", "x-amz-content-sha256"):
        if name not in signed:
            return "SignatureDoesNotMatch", f"{name} is not among the signed headers"
    payload_hash = headers.get("x-amz-content-sha256", "")
    if payload_hash not in ("UNSIGNED-PAYLOAD", hashlib.sha256(body or b"").hexdigest()):
        return "XAmzContentSHA256Mismatch", "x-amz-content-sha256 is not the hash of the body"

    # S3's canonical URI and query: decoded, then each byte outside the unreserved set encoded.
    parts = urlsplit(raw_path)
    path = quote(unquote(parts.path), safe="/~")
    params = []
    if parts.query:
        for pair in parts.query.split("&"):
            name, _, v = pair.partition("=")
            params.append((unquote(name), unquote(v)))
    request = AWSRequest(method=method, url=f"http://{headers.get('host', '')}{path}",
                         headers={h: headers.get(h, "") for h in signed}, params=params)
    request.context["timestamp"] = amz_date
    auth = S3SigV4Auth(Credentials(key_id, keys[key_id]), "s3", region)
    canonical = auth.canonical_request(request)
    expected = auth.signature(auth.string_to_sign(request, canonical), request)
    if not hmac.compare_digest(expected, signature):
        return "SignatureDoesNotMatch", ("The request signature we calculated does not match the signature you provided. "
                                         "Check your key and signing method.")
    return None

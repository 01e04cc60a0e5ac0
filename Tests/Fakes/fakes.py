#!/usr/bin/env python3
"""Fake external servers for tests and the demo (Python 3 stdlib only, 127.0.0.1 only).

Usage:
    python3 Tests/Fakes/fakes.py [--apple] [--google] [--nominatim] [--subscription] [--smtp] [--all]
                                 [--host 127.0.0.1] [--fixtures DIR] [--exit-on-stdin-close] [--verbose]

Every fake listens on an OS-chosen port. When all are ready, one JSON line is printed to stdout, e.g.
    {"apple": 40001, "google": 40002, "nominatim": 40003, "subscription": 40004, "smtp": 40005, "smtp_admin": 40006}
The process then runs until SIGTERM/SIGINT, or until stdin closes when --exit-on-stdin-close is given
(the Swift test helper uses that so the fakes die with the test process).

Admin API (HTTP, JSON), on each HTTP fake's own port and on `smtp_admin` for SMTP:
    GET  /__admin/health                      {"ok": true, "service": NAME}
    POST /__admin/reset                       forget requests, scripts, config and service state; release hung requests
    POST /__admin/script                      queue scripted responses: one object or a list (see Script below)
    GET  /__admin/scripts                     scripts still queued
    GET  /__admin/requests[?path=P&prefix=P]  {"requests": [{method, path, query, headers, body, timestamp,
                                                            client_port}, ...]}
    GET  /__admin/stats[?path=P&prefix=P&window=1.0]
                                              {"count": N, "max_in_window": M, "window": W}: the most requests whose
                                              timestamps fall within any `window` seconds (Nominatim's 1 req/s rule)
    POST /__admin/config                      merge service options (see each service)
    SMTP only:  GET /__admin/messages         {"messages": [{mail_from, rcpt_to, data, subject, message_id,
                                                             headers, body, auth_user, timestamp, links}, ...]}
                                              (links: the http(s) URLs found in the body, in order)
    Apple:      POST /__admin/apple/receipts      {"receipt-data": R, "status": 0, "environment": "Sandbox",
                                                   "latest_receipt_info": [...], "pending_renewal_info": [...],
                                                   "in_app": [...] (default: latest_receipt_info),
                                                   "is-retryable": 1, "product_id": P, "transaction_id": T}
                POST /__admin/apple/transactions  {"transaction_id": T, "signedTransactionInfo": JWS} or
                                                  {"transaction_id": T, "status": 404}
                POST /__admin/apple/subscriptions {"transaction_id": T, "response": {...Get All Subscription
                                                  Statuses body...}}; ids never registered answer 404 4040010
                GET  /__admin/apple/jwt_refusals  {"refusals": [reason, ...]} why /inApps JWTs were refused
                POST /__admin/apple/app_receipt   {"bundle_id"?: B, "in_app": [{"transaction_id": T, "product_id"?: P,
                                                  "original_transaction_id"?: O}], "signer"?: "test"|"forged",
                                                  "signed_attributes"?: bool} -> {"receipt_data": base64 StoreKit 1
                                                  app receipt, PKCS #7 signed by that chain}; verifyReceipt decodes
                                                  the "test" ones (status 0) and refuses "forged" ones (21003)
                GET  /__admin/apple/receipt_roots {"test": base64 DER root, "forged": base64 DER root}
                POST /__admin/apple/notification_history {"signedPayload": JWS, "attemptDate": ms (default now),
                                                  "environment": "Production"|"Sandbox"}: a record Get Notification
                                                  History lists (config {"history_page_size": 20})
                config {"api_jwt": {"issuer": I, "key_id": K, "bundle_id": B, "public_key_pem": PEM}}: /inApps
                requests must carry an ES256 JWT with these claims, aud "appstoreconnect-v1", unexpired (else 401
                with an empty body, as Apple); the signature is checked (fakes.py needs the `cryptography` module
                and refuses to start without it).
                config {"rate_limited": N}: the next N /inApps requests answer 429 {"errorCode": 4290000, ...}.
    Google:     POST /__admin/google/subscriptions {"token": T, "subscriptionState": ..., "productId": ...,
                                                    "expiryTime": RFC3339, "acknowledgementState": ..., ...}
                GET  /__admin/google/acknowledgements  {"acknowledgements": {token: accepted count},
                                                        "attempts": {token: requests the handler answered}}
                GET  /__admin/google/cancellations     {"cancellations": {token: [cancellationType accepted, ...]},
                                                        "attempts": {token: cancel requests the handler answered}}
                GET  /__admin/google/tokens            {"issued": [access tokens], "rejected": [reasons]}
                POST /__admin/google/voided            {"purchaseToken", "orderId", "voidedTimeMillis" (default now),
                                                        "voidedSource", "voidedReason", "productType": "subscription"
                                                        (default) | "inapp"}: listed by voidedpurchases.list
                                                        (config {"voided_page_size": 1000})
                POST /__admin/google/expire_tokens     every access token issued so far is now expired (401)
                config {"service_account": {"client_email": E, "public_key_pem": PEM}}: the token endpoint
                checks the JWT bearer assertion: RS256, iss = E, scope androidpublisher, aud ending in /token,
                unexpired, lifetime <= 3600 s; the signature is always checked (no account configured: every
                assertion is refused with invalid_grant). Scripts may answer {"google_error": NAME} (invalidValue,
                invalidPurchaseState, notFound, concurrentUpdate, subscriptionPurchaseNoLongerAvailable,
                backendError, unavailable) with Google's own error body.
    Nominatim:  POST /__admin/nominatim/places     {"lat": x, "lon": y, "result": {...jsonv2...}} (exact match
                                                   on 4-decimal rounding) or {"lat":x,"lon":y,"error":"Unable to geocode"}
    Subscription: GET /__admin/subscription/credits  {"credited_by_key": {key: amount}, "applications_by_key":
                                                      {key: n}, "balances": {user: total}, "earn_requests": n, ...}
                  POST /__admin/subscription/hold {"key": K, "stage": "before_credit"|"after_credit"}, GET
                  /__admin/subscription/held, POST /__admin/subscription/release: stop the next request with key K
                  in flight (or after its credit) until released; GET/POST /__admin/subscription/clock {"advance": S}
                  moves the clock key expiry reads (see SubscriptionService)

Script (POST /__admin/script), all fields optional:
    match:   {"method": "POST", "path": "/exact", "prefix": "/pre", "contains": "substring of body"}
             (SMTP: {"stage": "connect|ehlo|auth|mail|rcpt|data|eom"})
    times:   how many requests it answers (default 1); -1 = forever (until reset)
    status:  HTTP status (SMTP: reply code), body: string, json: any JSON value, fixture: path relative to the
             Apple fixtures dir (e.g. "models/apiException.json"), headers: {name: value}
    delay:   seconds to wait before answering
    hang:    true = wait `delay` seconds (default 3600) or until reset/shutdown, then drop the connection
    close:   true = drop the connection without answering
    malformed_json: true = answer a truncated JSON document (status 200 unless given)
    passthrough: true = run the service's normal handler first (its side effects happen), then answer with the
             scripted status/body instead of the real one (a lost response after a commit)
    retry_after: shorthand for headers {"Retry-After": value}
Scripts are consumed first-in first-out among those whose `match` fits the request.

Service behaviours (defaults; see the handlers below):
    apple:        POST /verifyReceipt (production) and POST /sandbox/verifyReceipt (sandbox);
                  GET /inApps/v1/transactions/{id}, GET /inApps/v1/subscriptions/{id}
                  (also under /sandbox/inApps/...), Bearer token required (401, empty body); unknown ids 404 4040010.
                  Unregistered receipt-data: "sandbox..." => 21007 in production, 0 in sandbox; "status:NNNNN" =>
                  that status; anything else => 0 in production, 21008 in sandbox. config: {"shared_secret": S}
    google:       POST /token, GET /androidpublisher/v3/applications/{pkg}/purchases/subscriptionsv2/tokens/{t},
                  POST /androidpublisher/v3/applications/{pkg}/purchases/subscriptions/{sub}/tokens/{t}:acknowledge,
                  POST /androidpublisher/v3/applications/{pkg}/purchases/subscriptionsv2/tokens/{t}:cancel
                  Only registered tokens exist: unknown ones answer 404 notFound ("invalid..." => 400 invalidValue,
                  "gone..." => 410); acknowledging an acknowledged or ended purchase => 400 invalidPurchaseState.
                  config: {"require_issued_token": true}
    nominatim:    GET /reverse?lat&lon&format=jsonv2[&zoom][&accept-language]: the nearest of a few built-in places
                  within 30 km (country names translated for accept-language / Accept-Language), else HTTP 200
                  {"error":"Unable to geocode"}; zoom < 10 drops the settlement. A User-Agent without contact (e-mail
                  or URL), or a stock library one => 403 "Access blocked" page (usage policy).
                  config: {"rate_limit_per_second": 1 (default) | 0 (off) | N => 429 + Retry-After beyond N
                  answered requests in 1 s, "block_all": true => every request 403, as after an IP block}
    subscription: POST /subscription/v1/credits/earn {amount, source, reference_id | reference} with
                  `Idempotency-Key: "<sf-string>"` (400 when missing, unparsable or not a String) and `X-User-Id`;
                  keys scoped per user, expire after 7 days (config key_lifetime_seconds); replays keep the first
                  response; 409 while the same key is in flight; 422 for a key reused with another body, or a
                  source outside ad_reward|promo|purchase|unlock)
    smtp:         EHLO/HELO, AUTH PLAIN/LOGIN (any credentials unless config {"username","password"}), MAIL, RCPT,
                  DATA, RSET, NOOP, QUIT; no STARTTLS.
"""

import argparse
import base64
import hashlib
import json
import math
import os
import re
import signal
import socket
import socketserver
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

try:  # required: the Apple and Google fakes check JWT signatures as the real services do
    from cryptography.hazmat.primitives import hashes as _hashes
    from cryptography.hazmat.primitives.asymmetric import ec as _ec, padding as _padding
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature as _dss
    from cryptography.hazmat.primitives.serialization import load_pem_public_key as _load_pem_public_key
except ImportError as _missing:  # a fake that cannot check what the real service checks refuses to start
    print(f"fakes.py: the Python module 'cryptography' cannot be imported ({_missing}); the Apple and Google fakes "
          "must verify JWT signatures. Install it (Debian: apt-get install python3-cryptography; "
          "scripts/services install does) and start again.", file=sys.stderr, flush=True)
    sys.exit(3)


def b64url_decode(text):
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def check_jwt(token, alg, public_key_pem=None):
    """Splits a compact JWT, checks `alg` and (when possible) its signature. Returns (header, claims, error)."""
    try:
        h, c, sig = token.split(".")
        header = json.loads(b64url_decode(h))
        claims = json.loads(b64url_decode(c))
        signature = b64url_decode(sig)
    except (ValueError, TypeError):
        return None, None, "not a compact JWT"
    if header.get("alg") != alg:
        return header, claims, f"alg is {header.get('alg')}, expected {alg}"
    if public_key_pem:
        try:
            key = _load_pem_public_key(public_key_pem.encode())
            data = f"{h}.{c}".encode()
            if alg == "ES256":
                if len(signature) != 64:
                    return header, claims, "ES256 signature is not 64 bytes"
                der = _dss(int.from_bytes(signature[:32], "big"), int.from_bytes(signature[32:], "big"))
                key.verify(der, data, _ec.ECDSA(_hashes.SHA256()))
            else:
                key.verify(signature, data, _padding.PKCS1v15(), _hashes.SHA256())
        except Exception as e:  # noqa: BLE001
            return header, claims, f"signature does not verify ({type(e).__name__})"
    return header, claims, None

HOST = "127.0.0.1"
FIXTURES_DIR = None
VERBOSE = False
SHUTDOWN = threading.Event()


def log(*args):
    if VERBOSE:
        print("[fakes]", *args, file=sys.stderr, flush=True)


def load_fixture(rel):
    if not FIXTURES_DIR:
        return None
    path = os.path.join(FIXTURES_DIR, rel)
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        print(f"[fakes] missing fixture {path}", file=sys.stderr, flush=True)
        return None


def json_bytes(value):
    return json.dumps(value, separators=(",", ":")).encode()


class Response:
    def __init__(self, status=200, body=b"", headers=None, content_type="application/json"):
        self.status = status
        self.body = body if isinstance(body, bytes) else (body.encode() if isinstance(body, str) else json_bytes(body))
        self.headers = dict(headers or {})
        if content_type and not any(k.lower() == "content-type" for k in self.headers):
            self.headers["Content-Type"] = content_type


def jresp(value, status=200, headers=None):
    return Response(status, json_bytes(value), headers)


class Script:
    """One queued scripted behaviour. Guarded by the owning service's lock."""

    def __init__(self, spec):
        self.spec = spec
        self.match = spec.get("match") or {}
        self.times = int(spec.get("times", 1))

    def matches(self, method=None, path=None, body=b"", stage=None):
        m = self.match
        if "stage" in m and m["stage"] != stage:
            return False
        if stage is not None and "stage" not in m and ("method" in m or "path" in m or "prefix" in m):
            return False
        if "method" in m and method is not None and m["method"].upper() != method.upper():
            return False
        if "path" in m and m["path"] != path:
            return False
        if "prefix" in m and (path is None or not path.startswith(m["prefix"])):
            return False
        if "contains" in m and m["contains"].encode() not in (body or b""):
            return False
        return True


class Service:
    """State shared by every fake: recorded requests, script queue, config. All access under self.lock."""

    name = "service"

    def __init__(self):
        self.lock = threading.Lock()
        self.release = threading.Event()  # set on reset/shutdown to free hung requests
        self.reset_state()

    def reset_state(self):
        self.requests = []
        self.scripts = []
        self.config = self.default_config()
        self.reset_service()

    def default_config(self):
        return {}

    def reset_service(self):
        pass

    def reset(self):
        with self.lock:
            old = self.release
            self.release = threading.Event()
            self.reset_state()
        old.set()

    def add_scripts(self, specs):
        if isinstance(specs, dict):
            specs = [specs]
        with self.lock:
            for s in specs:
                self.scripts.append(Script(s))
        return len(specs)

    def take_script(self, **kw):
        with self.lock:
            for i, s in enumerate(self.scripts):
                if s.matches(**kw):
                    if s.times > 0:
                        s.times -= 1
                        if s.times == 0:
                            del self.scripts[i]
                    return s.spec, self.release
        return None, self.release

    def record(self, entry):
        with self.lock:
            self.requests.append(entry)

    def filtered_requests(self, query):
        path = query.get("path", [None])[0]
        prefix = query.get("prefix", [None])[0]
        with self.lock:
            reqs = list(self.requests)
        if path:
            reqs = [r for r in reqs if r.get("path") == path]
        if prefix:
            reqs = [r for r in reqs if r.get("path", "").startswith(prefix)]
        return reqs

    def admin_extra(self, method, path, query, body):
        """Service-specific admin routes; return a Response or None."""
        return None

    def handle(self, req):
        """The default behaviour: return a Response. `req` is a dict (method, path, query, headers, body)."""
        return jresp({"error": "not found"}, 404)

    def scripted_response(self, spec):
        """The answer of a script (services may add their own shorthands, e.g. Google's `google_error`)."""
        return scripted_response(spec)


def max_in_window(timestamps, window):
    ts = sorted(timestamps)
    best = 0
    j = 0
    for i, t in enumerate(ts):
        while ts[j] <= t - window:
            j += 1
        best = max(best, i - j + 1)
    return best


def scripted_response(spec):
    headers = dict(spec.get("headers") or {})
    if "retry_after" in spec:
        headers["Retry-After"] = str(spec["retry_after"])
    if spec.get("malformed_json"):
        return Response(spec.get("status", 200), b'{"status": 0, "latest_receipt_info": [{"product_id": ', headers)
    if "json" in spec:
        return Response(spec.get("status", 200), json_bytes(spec["json"]), headers)
    if "fixture" in spec:
        data = load_fixture(spec["fixture"]) or b"{}"
        return Response(spec.get("status", 200), data, headers)
    body = spec.get("body", "")
    ctype = "application/json" if body[:1] in ("{", "[") else "text/plain"
    return Response(spec.get("status", 200), body.encode(), headers, ctype)


class FakeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, so clients can reuse connections
    server_version = "Fake/1.0"
    sys_version = ""
    service: Service = None  # set per server subclass

    def log_message(self, fmt, *args):
        log(self.service.name, fmt % args)

    def _read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            return self.rfile.read(n)
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            data = b""
            while True:
                line = self.rfile.readline().strip()
                size = int(line.split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
            return data
        return b""

    def _send(self, resp):
        self.send_response(resp.status)
        for k, v in resp.headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(resp.body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(resp.body)
        self.wfile.flush()

    def _drop(self):
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _dispatch(self):
        parsed = urllib.parse.urlsplit(self.path)
        path = parsed.path
        query = urllib.parse.parse_qs(parsed.query, keep_blank_values=True)
        body = self._read_body()
        if path.startswith("/__admin/"):
            self._send(admin(self.service, self.command, path, query, body))
            return
        req = {
            "method": self.command,
            "path": path,
            "query": parsed.query,
            "params": {k: v[-1] for k, v in query.items()},
            "headers": {k: v for k, v in self.headers.items()},
            "body": body.decode("utf-8", "replace"),
            "raw_body": body,
            "timestamp": time.time(),
            "client_port": self.client_address[1],
        }
        record = {k: v for k, v in req.items() if k not in ("raw_body", "params")}
        self.service.record(record)
        spec, release = self.service.take_script(method=self.command, path=path, body=body)
        if spec is not None:
            if spec.get("hang"):
                release.wait(float(spec.get("delay", 3600)))
                self._drop()
                return
            if spec.get("delay"):
                release.wait(float(spec["delay"]))
            if spec.get("passthrough"):
                try:
                    self.service.handle(req)
                except Exception as e:  # noqa: BLE001
                    log("passthrough handler error", e)
            if spec.get("close"):
                self._drop()
                return
            self._send(self.service.scripted_response(spec))
            return
        try:
            resp = self.service.handle(req)
        except Exception as e:  # noqa: BLE001
            resp = jresp({"error": "fake crashed", "detail": repr(e)}, 500)
        self._send(resp)

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = lambda self: self._dispatch()


def admin(service, method, path, query, body):
    try:
        payload = json.loads(body) if body.strip() else {}
    except ValueError:
        return jresp({"error": "admin body is not JSON"}, 400)
    if path == "/__admin/health":
        return jresp({"ok": True, "service": service.name})
    if path == "/__admin/reset" and method == "POST":
        service.reset()
        return jresp({"ok": True})
    if path == "/__admin/script" and method == "POST":
        return jresp({"queued": service.add_scripts(payload)})
    if path == "/__admin/scripts":
        with service.lock:
            return jresp({"scripts": [dict(s.spec, remaining=s.times) for s in service.scripts]})
    if path == "/__admin/requests":
        return jresp({"requests": service.filtered_requests(query)})
    if path == "/__admin/stats":
        reqs = service.filtered_requests(query)
        window = float(query.get("window", ["1.0"])[0])
        ts = [r["timestamp"] for r in reqs]
        return jresp({"count": len(ts), "max_in_window": max_in_window(ts, window), "window": window})
    if path == "/__admin/config" and method == "POST":
        with service.lock:
            service.config.update(payload)
            return jresp({"config": service.config})
    if path == "/__admin/config":
        with service.lock:
            return jresp({"config": service.config})
    extra = service.admin_extra(method, path, query, payload)
    if extra is not None:
        return extra
    return jresp({"error": f"unknown admin route {method} {path}"}, 404)


# ---------------------------------------------------------------- Apple

# StoreKit 1 app receipts signed by the fake's own test CA (POST /__admin/apple/app_receipt).
#   [RCPT] Apple's receipt fields (developer.apple.com/library/archive/releasenotes/General/ValidateAppStoreReceipt/
#          Chapters/ReceiptFields.html, "App Receipt Fields" / "In-App Purchase Receipt Fields"; today's summary:
#          developer.apple.com/documentation/appstorereceipts): the receipt is a PKCS #7 SignedData whose content is
#          Payload ::= SET OF ReceiptAttribute, ReceiptAttribute ::= SEQUENCE {type INTEGER, version INTEGER, value
#          OCTET STRING}; type 2 bundle id (UTF8STRING), 12 receipt creation date (IA5STRING, RFC 3339), 17 one
#          in-app purchase receipt (again a SET OF ReceiptAttribute: 1701 quantity INTEGER, 1702 product id, 1703
#          transaction id, 1705 original transaction id (UTF8STRING), 1704 purchase date (IA5STRING)).
#   [RU]   apple/app-store-server-library-swift Sources/AppStoreServerLibrary/ReceiptUtility.swift: reads type 17,
#          then 1703/1705, from the SignedData's encapsulated content, exactly this layout.
#   [CHAIN] the receipt carries its chain: Apple Root CA -> Apple Worldwide Developer Relations CA (marker extension
#          1.2.840.113635.100.6.2.1) -> the receipt signing certificate (1.2.840.113635.100.6.11.1), RSA; no signed
#          attributes (as an Xcode StoreKit receipt, [RU]'s resources/xcode/xcode-app-receipt-*).
# The "test" chain's root is what tests configure as trusted (GET /__admin/apple/receipt_roots); "forged" is a
# look-alike chain (same names, other keys) that no test trusts.
from cryptography import x509 as _x509
from cryptography.x509.oid import NameOID as _NameOID
from cryptography.hazmat.primitives import serialization as _serialization
from cryptography.hazmat.primitives.asymmetric import rsa as _rsa
from cryptography.hazmat.primitives.serialization import pkcs7 as _pkcs7
import datetime as _datetime

_receipt_chains = {}
_receipt_chains_lock = threading.Lock()


def _receipt_chain(name):
    """(root, intermediate, leaf, leaf_key) of the "test" or "forged" receipt chain, made once per process."""
    with _receipt_chains_lock:
        if name in _receipt_chains:
            return _receipt_chains[name]
        now = _datetime.datetime.now(_datetime.timezone.utc)
        keys = [_rsa.generate_private_key(public_exponent=65537, key_size=2048) for _ in range(3)]

        def subject(cn):
            return _x509.Name([_x509.NameAttribute(_NameOID.COUNTRY_NAME, "US"),
                               _x509.NameAttribute(_NameOID.ORGANIZATION_NAME, "Fake Apple Inc."),
                               _x509.NameAttribute(_NameOID.COMMON_NAME, cn)])

        def cert(subj, issuer, key, issuer_key, ca, marker):
            b = (_x509.CertificateBuilder().subject_name(subj).issuer_name(issuer).public_key(key.public_key())
                 .serial_number(_x509.random_serial_number())
                 .not_valid_before(now - _datetime.timedelta(days=2))
                 .not_valid_after(now + _datetime.timedelta(days=365))
                 .add_extension(_x509.BasicConstraints(ca=ca, path_length=None), critical=True)
                 .add_extension(_x509.KeyUsage(digital_signature=not ca, content_commitment=False,
                                               key_encipherment=False, data_encipherment=False, key_agreement=False,
                                               key_cert_sign=ca, crl_sign=ca, encipher_only=False,
                                               decipher_only=False), critical=True))
            if marker:
                b = b.add_extension(_x509.UnrecognizedExtension(_x509.ObjectIdentifier(marker), b"\x05\x00"),
                                    critical=False)
            return b.sign(issuer_key, _hashes.SHA256())

        root_name = subject("Fake Apple Root CA")
        wwdr_name = subject("Fake Apple Worldwide Developer Relations Certification Authority")
        leaf_name = subject("Fake Mac App Store and iTunes Store Receipt Signing")
        root = cert(root_name, root_name, keys[0], keys[0], True, None)
        wwdr = cert(wwdr_name, root_name, keys[1], keys[0], True, "1.2.840.113635.100.6.2.1")      # [CHAIN]
        leaf = cert(leaf_name, wwdr_name, keys[2], keys[1], False, "1.2.840.113635.100.6.11.1")   # [CHAIN]
        _receipt_chains[name] = (root, wwdr, leaf, keys[2])
        return _receipt_chains[name]


def _der(tag, content):
    n = len(content)
    if n < 0x80:
        length = bytes([n])
    else:
        raw = n.to_bytes((n.bit_length() + 7) // 8, "big")
        length = bytes([0x80 | len(raw)]) + raw
    return bytes([tag]) + length + content


def _der_int(value):
    return _der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _receipt_attribute(kind, value):
    # [RCPT] ReceiptAttribute ::= SEQUENCE {type INTEGER, version INTEGER, value OCTET STRING}
    return _der(0x30, _der_int(kind) + _der_int(1) + _der(0x04, value))


def _receipt_set(attributes):
    return _der(0x31, b"".join(sorted(attributes)))   # DER SET OF: elements in ascending order


def _utf8(text):
    return _der(0x0C, text.encode())


def _ia5(text):
    return _der(0x16, text.encode())


def app_receipt(bundle_id, purchases, signer="test", creation_date=None, signed_attributes=False):
    """Base64 app receipt [RCPT] for `bundle_id` with one type-17 record per purchase {product_id, transaction_id,
    original_transaction_id?, purchase_date?}, signed by chain `signer` (SHA-256, RSA PKCS #1 v1.5)."""
    created = creation_date or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    attributes = [_receipt_attribute(2, _utf8(bundle_id)), _receipt_attribute(3, _utf8("1")),
                  _receipt_attribute(12, _ia5(created))]
    for p in purchases:
        tx = str(p["transaction_id"])
        fields = [_receipt_attribute(1701, _der_int(1)),
                  _receipt_attribute(1702, _utf8(p.get("product_id", AppleService.DEFAULT_PRODUCT))),
                  _receipt_attribute(1703, _utf8(tx)),
                  _receipt_attribute(1705, _utf8(str(p.get("original_transaction_id", tx)))),
                  _receipt_attribute(1704, _ia5(p.get("purchase_date", created)))]
        attributes.append(_receipt_attribute(17, _receipt_set(fields)))
    content = _receipt_set(attributes)
    root, wwdr, leaf, key = _receipt_chain(signer)
    options = [_pkcs7.PKCS7Options.Binary]
    if signed_attributes:
        options.append(_pkcs7.PKCS7Options.NoCapabilities)
    else:
        options.append(_pkcs7.PKCS7Options.NoAttributes)
    der = (_pkcs7.PKCS7SignatureBuilder().set_data(content)
           .add_signer(leaf, key, _hashes.SHA256(), rsa_padding=_padding.PKCS1v15())
           .add_certificate(wwdr).add_certificate(root)
           .sign(_serialization.Encoding.DER, options))
    return base64.b64encode(der).decode()


def bearer(req):
    auth = next((v for k, v in req["headers"].items() if k.lower() == "authorization"), "")
    if not auth.startswith("Bearer "):
        return None
    token = auth[len("Bearer "):].strip()
    return token or None


class AppleService(Service):
    """verifyReceipt and the App Store Server API, answering as Apple documents them.

    Sources cited below:
      [VR]   developer.apple.com/documentation/appstorereceipts/verifyreceipt (endpoints, request body; production
             first, 21007 -> sandbox)
      [VRS]  developer.apple.com/documentation/appstorereceipts/status (status codes) and .../responsebody
             (`status`, `environment`, `is-retryable`, `receipt`, `latest_receipt_info`, `pending_renewal_info`)
      [GTI]  developer.apple.com/documentation/appstoreserverapi/get_transaction_info (200 TransactionInfoResponse;
             400 InvalidTransactionIdError; 401; 404 TransactionIdNotFoundError; 429 RateLimitExceededError; 500)
      [GASS] developer.apple.com/documentation/appstoreserverapi/get_all_subscription_statuses (200 StatusResponse;
             same error list, 404 TransactionIdNotFoundError for an unknown id)
      [LIB]  apple/app-store-server-library-swift: Sources/AppStoreServerLibrary/AppStoreServerAPIClient.swift
             (`APIError`: invalidTransactionId = 4000006, transactionIdNotFound = 4040010, rateLimitExceeded =
             4290000; `makeRequest` reads `{errorCode, errorMessage}` only when the body has them, a 401 carries none),
             Tests/AppStoreServerLibraryTests/resources/models/transactionIdNotFoundError.json,
             .../apiTooManyRequestsException.json (copied in Tests/Fixtures/apple-app-store-server/models)
      [JWT]  developer.apple.com/documentation/appstoreserverapi/generating-json-web-tokens-for-api-requests
      [GNH]  developer.apple.com/documentation/appstoreserverapi/get-notification-history (POST
             /inApps/v1/notifications/history[?paginationToken], body NotificationHistoryRequest {startDate, endDate}
             required, epoch ms; history kept 180 days in production, 30 in sandbox), .../notificationhistoryresponse
             ({notificationHistory: [{signedPayload, sendAttemptResults}], hasMore, paginationToken}; "a maximum of 20
             notification history records per response"; "All responses include a paginationToken"), and [LIB]'s
             `APIError` (startDateTooFarInPast 4000012, startDateAfterEndDate 4000013, invalidPaginationToken 4000014)
    """
    name = "apple"
    DEFAULT_PRODUCT = "com.example.premium.monthly"
    # [LIB] transactionIdNotFoundError.json, byte for byte the error Apple documents in [GTI]/[GASS].
    TRANSACTION_NOT_FOUND = {"errorCode": 4040010, "errorMessage": "Transaction id not found."}
    # [LIB] invalidTransactionIdError.json ([GTI] 400 InvalidTransactionIdError).
    INVALID_TRANSACTION_ID = {"errorCode": 4000006, "errorMessage": "Invalid transaction id."}
    # [LIB] apiTooManyRequestsException.json ([GTI] 429 RateLimitExceededError).
    RATE_LIMIT_EXCEEDED = {"errorCode": 4290000, "errorMessage": "Rate limit exceeded."}

    def default_config(self):
        # rate_limited: how many of the next /inApps requests answer 429 RateLimitExceededError.
        return {"shared_secret": None, "bundle_id": "com.example", "product_id": self.DEFAULT_PRODUCT,
                "rate_limited": 0, "history_page_size": 20}

    def reset_service(self):
        self.receipts = {}
        self.app_receipts = {}   # receipts this fake signed (app_receipt): verifyReceipt decodes them as Apple would
        self.transactions = {}
        self.statuses = {}
        self.jwt_refusals = []
        self.history = []        # notification history records (notification_history)

    def admin_extra(self, method, path, query, payload):
        if path == "/__admin/apple/receipts" and method == "POST":
            with self.lock:
                self.receipts[payload["receipt-data"]] = payload
            return jresp({"ok": True})
        if path == "/__admin/apple/transactions" and method == "POST":
            with self.lock:
                self.transactions[str(payload["transaction_id"])] = payload
            return jresp({"ok": True})
        if path == "/__admin/apple/subscriptions" and method == "POST":
            with self.lock:
                self.statuses[str(payload["transaction_id"])] = payload["response"]
            return jresp({"ok": True})
        if path == "/__admin/apple/app_receipt" and method == "POST":
            with self.lock:
                bundle = payload.get("bundle_id", self.config.get("bundle_id"))
            signer = payload.get("signer", "test")
            receipt = app_receipt(bundle, payload.get("in_app", []), signer=signer,
                                  creation_date=payload.get("creation_date"),
                                  signed_attributes=bool(payload.get("signed_attributes")))
            with self.lock:
                self.app_receipts[receipt] = {"signer": signer, "bundle_id": bundle,
                                              "in_app": list(payload.get("in_app", []))}
            return jresp({"receipt_data": receipt})
        if path == "/__admin/apple/receipt_roots" and method == "GET":
            return jresp({name: base64.b64encode(_receipt_chain(name)[0].public_bytes(_serialization.Encoding.DER)).decode()
                          for name in ("test", "forged")})
        if path == "/__admin/apple/notification_history" and method == "POST":
            with self.lock:
                self.history.append({"signedPayload": payload["signedPayload"],
                                     "attemptDate": int(payload.get("attemptDate", time.time() * 1000)),
                                     "environment": payload.get("environment", "Production")})
            return jresp({"ok": True})
        if path == "/__admin/apple/jwt_refusals" and method == "GET":
            with self.lock:
                return jresp({"refusals": list(self.jwt_refusals)})
        return None

    def jwt_problem(self, req):
        """Why the /inApps bearer JWT is refused under config `api_jwt`, or None. The claims checked are those of
        [JWT]: header alg ES256 + kid; iss, iat, exp, aud "appstoreconnect-v1", bid; lifetime at most 60 minutes."""
        with self.lock:
            spec = self.config.get("api_jwt")
        if not spec:
            return None
        header, claims, error = check_jwt(bearer(req) or "", "ES256", spec.get("public_key_pem"))
        if error:
            return error
        now = time.time()
        if header.get("kid") != spec.get("key_id"):
            return "wrong kid"
        if claims.get("iss") != spec.get("issuer"):
            return "wrong issuer"
        if claims.get("aud") != "appstoreconnect-v1":
            return "wrong audience"
        if spec.get("bundle_id") and claims.get("bid") != spec["bundle_id"]:
            return "wrong bundle id"
        if not isinstance(claims.get("exp"), int) or claims["exp"] <= now:
            return "token expired"
        if not isinstance(claims.get("iat"), int) or claims["exp"] - claims["iat"] > 3600:
            return "token lifetime exceeds 60 minutes"
        return None

    def handle(self, req):
        path = req["path"]
        env = "Production"
        if path.startswith("/sandbox/"):
            env = "Sandbox"
            path = path[len("/sandbox"):]
        if path == "/verifyReceipt" and req["method"] == "POST":
            return self.verify_receipt(req, env)
        if path.startswith("/inApps/"):
            # [GTI]/[GASS] 401 Unauthorized: "The JSON Web Token (JWT) in the authorization header is invalid."
            # Apple documents no JSON body for it, and [LIB]'s client expects none: an empty 401. The reason is kept
            # for the tests (GET /__admin/apple/jwt_refusals), never sent.
            problem = "no bearer token" if not bearer(req) else self.jwt_problem(req)
            if problem:
                with self.lock:
                    self.jwt_refusals.append(problem)
                log("apple: JWT refused:", problem)
                return Response(401, b"", content_type=None)
            with self.lock:
                limited = self.config.get("rate_limited", 0) > 0
                if limited:
                    self.config["rate_limited"] -= 1
            if limited:
                # [GTI] 429 RateLimitExceededError, body as [LIB] apiTooManyRequestsException.json. Apple documents
                # no Retry-After header for it, so none is sent.
                return jresp(self.RATE_LIMIT_EXCEEDED, 429)
            parts = path.split("/")
            # ['', 'inApps', 'v1', 'transactions', id]
            if len(parts) == 5 and parts[2] == "v1" and parts[3] == "transactions" and req["method"] == "GET":
                return self.transaction_info(parts[4])
            if len(parts) == 5 and parts[2] == "v1" and parts[3] == "subscriptions" and req["method"] == "GET":
                return self.subscription_statuses(parts[4], env)
            if path == "/inApps/v1/notifications/history" and req["method"] == "POST":
                return self.notification_history(req, env)
        # A path outside the endpoints this fake serves. Apple documents no error body for it; no errorCode is
        # invented (there is no "4040000" in [LIB]'s APIError): a bare 404.
        return Response(404, b"", content_type=None)

    @staticmethod
    def _tx_id(receipt):
        return str(2000000000000000 + int(hashlib.sha256(receipt.encode()).hexdigest()[:10], 16) % 10**12)

    def verify_receipt(self, req, env):
        # [VR]/[VRS]: always HTTP 200; the verdict is the body's `status`.
        try:
            body = json.loads(req["raw_body"])
            receipt = body["receipt-data"]
            if not isinstance(receipt, str) or not receipt:
                raise ValueError
        except (ValueError, KeyError, TypeError):
            # [VRS] 21000: "The request to the App Store didn't use the HTTP POST request method" / was not readable.
            return jresp({"status": 21000})
        with self.lock:
            reg = self.receipts.get(receipt)
            signed = self.app_receipts.get(receipt)
            secret = self.config.get("shared_secret")
            product = self.config.get("product_id")
            bundle = self.config.get("bundle_id")
        if secret is not None and body.get("password") != secret:
            # [VRS] 21004: "The shared secret you provided doesn't match the shared secret on file for your account."
            return jresp({"status": 21004, "environment": env})
        if reg is None and signed is not None:
            if signed["signer"] != "test":
                # [VRS] 21003: "The receipt could not be authenticated." (not signed by the App Store's chain)
                return jresp({"status": 21003, "environment": env})
            now_ms = int(time.time() * 1000)
            # [VRS] the decoded receipt's purchases, each as a latest_receipt_info entry (a month from yesterday).
            reg = {"status": 0, "environment": "Production", "latest_receipt_info": [{
                "quantity": "1", "product_id": p.get("product_id", product), "transaction_id": str(p["transaction_id"]),
                "original_transaction_id": str(p.get("original_transaction_id", p["transaction_id"])),
                "purchase_date_ms": str(now_ms - 86400000), "original_purchase_date_ms": str(now_ms - 86400000),
                "expires_date_ms": str(now_ms + 29 * 86400000), "in_app_ownership_type": "PURCHASED",
            } for p in signed["in_app"]]}
            bundle = signed["bundle_id"]
        if reg is not None:
            reg_env = reg.get("environment", "Production")
            status = int(reg.get("status", 0))
            if status == 0 and reg_env != env:
                # [VRS] 21007: a sandbox receipt sent to production; 21008: a production receipt sent to sandbox.
                status = 21007 if reg_env == "Sandbox" else 21008
            product = reg.get("product_id", product)
            tx = str(reg.get("transaction_id", self._tx_id(receipt)))
        else:
            tx = self._tx_id(receipt)
            if receipt.startswith("status:"):
                status = int(receipt.split(":")[1])
            elif receipt.startswith("sandbox"):
                status = 0 if env == "Sandbox" else 21007
            else:
                status = 0 if env == "Production" else 21008
        if status != 0:
            out = {"status": status, "environment": env}
            if 21100 <= status <= 21199:
                # [VRS] `is-retryable`: only for 21100-21199; "1" = temporary, "0" = unresolvable.
                out["is-retryable"] = int((reg or {}).get("is-retryable", 1))
            return jresp(out)
        now_ms = int(time.time() * 1000)
        info = (reg or {}).get("latest_receipt_info")
        if info is None:
            # [VRS] responseBody.Latest_receipt_info: dates as strings, `_ms` fields as epoch-ms strings.
            info = [{
                "quantity": "1",
                "product_id": product,
                "transaction_id": tx,
                "original_transaction_id": tx,
                "purchase_date": time.strftime("%Y-%m-%d %H:%M:%S Etc/GMT", time.gmtime(now_ms / 1000 - 86400)),
                "purchase_date_ms": str(now_ms - 86400000),
                "original_purchase_date_ms": str(now_ms - 86400000),
                "expires_date": time.strftime("%Y-%m-%d %H:%M:%S Etc/GMT", time.gmtime(now_ms / 1000 + 29 * 86400)),
                "expires_date_ms": str(now_ms + 29 * 86400000),
                "web_order_line_item_id": str(int(tx) + 1),
                "is_trial_period": "false",
                "is_in_intro_offer_period": "false",
                "in_app_ownership_type": "PURCHASED",
                "subscription_group_identifier": "20000001",
            }]
        pending = (reg or {}).get("pending_renewal_info")
        if pending is None:
            # [VRS] responseBody.Pending_renewal_info.
            pending = [{"auto_renew_product_id": product, "product_id": product, "original_transaction_id": tx,
                        "auto_renew_status": "1"}]
        # [VRS] responseBody: status, environment, receipt (decoded), latest_receipt, latest_receipt_info,
        # pending_renewal_info.
        return jresp({
            "status": 0,
            "environment": env,
            # [VRS] responseBody.Receipt.request_date_ms: "The time the request to the verifyReceipt endpoint was
            # processed" (Apple's clock; a registration may set it to play a worker whose clock is off).
            "receipt": {"receipt_type": "ProductionSandbox" if env == "Sandbox" else "Production",
                        "bundle_id": bundle, "in_app": (reg or {}).get("in_app", info),
                        "request_date_ms": str((reg or {}).get("request_date_ms", int(time.time() * 1000)))},
            "latest_receipt": receipt,
            "latest_receipt_info": info,
            "pending_renewal_info": pending,
        })

    def transaction_info(self, tx):
        if not tx.isdigit():
            # [GTI] 400 InvalidTransactionIdError.
            return jresp(self.INVALID_TRANSACTION_ID, 400)
        with self.lock:
            reg = self.transactions.get(tx)
        if reg is None or int(reg.get("status", 200)) == 404 or "signedTransactionInfo" not in reg:
            # [GTI] 404 TransactionIdNotFoundError: an id this App Store does not know never answers 200.
            return jresp(self.TRANSACTION_NOT_FOUND, 404)
        # [GTI] 200 TransactionInfoResponse {signedTransactionInfo}.
        return jresp({"signedTransactionInfo": reg["signedTransactionInfo"]})

    def notification_history(self, req, env):
        """[GNH]: the records of `env` whose send attempt falls in [startDate, endDate], oldest first, page by page."""
        bad = {"errorCode": 4000000, "errorMessage": "Invalid request."}  # assumed: [GNH] names no error for a body
        try:                                                               # without dates
            body = json.loads(req["raw_body"] or b"{}")
            start, end = int(body["startDate"]), int(body["endDate"])
        except (ValueError, KeyError, TypeError):
            return jresp(bad, 400)
        now_ms = int(time.time() * 1000)
        if start >= end:
            return jresp({"errorCode": 4000013, "errorMessage": "Invalid request. The start date is after the end date."}, 400)
        if start < now_ms - (180 if env == "Production" else 30) * 86400000:
            return jresp({"errorCode": 4000012, "errorMessage": "Invalid request. The start date is too far in the past."}, 400)
        token = req["params"].get("paginationToken")
        offset = 0
        if token:
            # Apple's token is opaque; this fake's is "p<offset>" (assumed form, never read by the client).
            if not re.fullmatch(r"p[0-9]+", token):
                return jresp({"errorCode": 4000014, "errorMessage": "Invalid request. The pagination token is invalid."}, 400)
            offset = int(token[1:])
        with self.lock:
            size = int(self.config.get("history_page_size", 20))
            records = sorted((r for r in self.history if r["environment"] == env and start <= r["attemptDate"] <= end),
                             key=lambda r: r["attemptDate"])
        page = records[offset:offset + size]
        more = offset + size < len(records)
        return jresp({"notificationHistory": [
            {"signedPayload": r["signedPayload"],
             "sendAttemptResults": [{"attemptDate": r["attemptDate"], "sendAttemptResult": "NO_RESPONSE"}]}
            for r in page], "hasMore": more, "paginationToken": f"p{offset + size if more else offset + len(page)}"})

    def subscription_statuses(self, tx, env):
        if not tx.isdigit():
            # [GASS] 400 InvalidTransactionIdError.
            return jresp(self.INVALID_TRANSACTION_ID, 400)
        with self.lock:
            registered = self.statuses.get(tx)
        if registered is None:
            # [GASS] 404 TransactionIdNotFoundError: no placeholder StatusResponse for an unknown id.
            return jresp(self.TRANSACTION_NOT_FOUND, 404)
        # [GASS] 200 StatusResponse {environment, bundleId, appAppleId, data[{subscriptionGroupIdentifier,
        # lastTransactions[{originalTransactionId, status, signedTransactionInfo, signedRenewalInfo}]}]}.
        return jresp(registered)


# ---------------------------------------------------------------- Google
#
# Sources (each answer below names the one it follows):
#   [SUBV2]  developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2 (SubscriptionPurchaseV2,
#            SubscriptionState, AcknowledgementState, CanceledStateContext.replacementCancellation, linkedPurchaseToken,
#            lineItems[].expiryTime / latestSuccessfulOrderId)
#   [ACK]    developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptions/acknowledge
#            ("If successful, the response body is empty"; body {"developerPayload"} optional)
#   [ERRORS] the "Error codes" table of the androidpublisher REST reference pages
#            (developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptions): 400 invalidValue
#            ("often returned for a malformed or invalid purchase token"), 404 notFound ("Verify the identifiers (e.g.,
#            purchase token ...)"), 409 concurrentUpdate ("a purchase is getting acknowledged ... Retry"), 5xx
#            "Generic error in the Google Play server. Retry your request."
#   [INVALID_STATE] 400 reason invalidPurchaseState, "The purchase is not in a valid state to perform the desired
#            operation." as the API answers it (googleapis/google-api-dotnet-client#1987; aporat/store-receipt-
#            validator#110: acknowledging an already acknowledged purchase is refused)
#   [GONE]   410 subscriptionPurchaseNoLongerAvailable for purchases expired for too long (Google Play team notice,
#            May 2018, quoted at stackoverflow.com/questions/45688494)
#   [ENVELOPE] Google JSON error envelope {"error": {code, message, status, errors: [{message, domain, reason}]}}
#            (cloud.google.com/apis/design/errors, "HTTP mapping")
#   [OAUTH]  developers.google.com/identity/protocols/oauth2/service-account ("Making the access token request":
#            JWT bearer grant, RS256, iss/scope/aud/exp/iat, at most 1 h; errors invalid_grant)
#   [OOAP]   developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2, SubscriptionPurchaseV2
#            fields `outOfAppPurchaseContext` (OutOfAppPurchaseContext: `expiredExternalAccountIdentifiers`,
#            `expiredPurchaseToken`, "must only be used to help identify the user if the link between the
#            purchaseToken and user is stored in your database") and `externalAccountIdentifiers`
#            (ExternalAccountIdentifiers: `externalAccountId`, `obfuscatedExternalAccountId`,
#            `obfuscatedExternalProfileId`, as set by the app in BillingFlowParams)
#   [HOLD]   developer.android.com/google/play/billing/lifecycle/subscriptions ("Account hold": the subscription is
#            still renewing; the RTDN SUBSCRIPTION_ON_HOLD, then RECOVERED when the payment succeeds), so
#            lineItems[].autoRenewingPlan.autoRenewEnabled stays true in SUBSCRIPTION_STATE_ON_HOLD
#   [CANCEL] developers.google.com/android-publisher/api-ref/rest/v3/purchases.subscriptionsv2/cancel (POST
#            .../subscriptionsv2/tokens/{token}:cancel, body {"cancellationContext": {"cancellationType"}} required,
#            "If successful, the response body is empty"; CancellationType USER_REQUESTED_STOP_RENEWALS "the
#            subscription can be restored. It only stops the subscription's next renewal", DEVELOPER_REQUESTED_STOP_
#            PAYMENTS "the subscription cannot be restored. It stops the subscription's next payment"); the v1 page
#            (api-ref/purchases/subscriptions/cancel): "The subscription remains valid until its expiration time";
#            CanceledStateContext (purchases.subscriptionsv2): "Information specific to a subscription in the
#            SUBSCRIPTION_STATE_CANCELED or SUBSCRIPTION_STATE_EXPIRED state", developerInitiatedCancellation
#            "Subscription was canceled by the developer"
#   [RTDN]   developer.android.com/google/play/billing/rtdn-reference (DeveloperNotification: version, packageName,
#            eventTimeMillis, subscriptionNotification {version, notificationType, purchaseToken}); the Pub/Sub push
#            body {"message": {"data": base64, "messageId", "publishTime"}, "subscription"}
#            (cloud.google.com/pubsub/docs/push, "Receive messages"). The reference types eventTimeMillis `long`;
#            its examples write it as a string: `event_time_numeric` sends a number.
#   [VOID]   developers.google.com/android-publisher/api-ref/rest/v3/purchases.voidedpurchases/list (GET
#            .../applications/{pkg}/purchases/voidedpurchases; startTime/endTime epoch ms, at most 30 days back, "ignored
#            if a pagination token is set"; maxResults; token; type 0 = in-app products only (default), 1 = in-app and
#            subscriptions; VoidedPurchasesListResponse {voidedPurchases, tokenPagination {nextPageToken}, pageInfo}) and
#            developers.google.com/android-publisher/voided-purchases (maxResults default and maximum 1000; "only revoked
#            orders will be shown": a refund without revoke is never listed; the service account needs "View financial
#            data", else 403 — assumed body: Google's envelope, reason permissionDenied)

GOOGLE_PUBLISHER = "/androidpublisher/v3/applications/"

# Named error answers, for scripts ({"google_error": NAME}) and the handlers. [ERRORS] [INVALID_STATE] [GONE] [ENVELOPE]
GOOGLE_ERRORS = {
    "invalidValue": (400, "INVALID_ARGUMENT", "invalidValue", "Invalid Value"),
    "invalidPurchaseState": (400, "FAILED_PRECONDITION", "invalidPurchaseState",
                             "The purchase is not in a valid state to perform the desired operation."),
    "notFound": (404, "NOT_FOUND", "notFound", "The purchase token was not found."),
    "concurrentUpdate": (409, "ABORTED", "concurrentUpdate",
                         "There was an attempt to update an object that is being updated concurrently."),
    "subscriptionPurchaseNoLongerAvailable": (410, "GONE", "subscriptionPurchaseNoLongerAvailable",
                                              "The subscription purchase is no longer available for query because it "
                                              "has been expired for too long."),
    "backendError": (500, "INTERNAL", "backendError", "Backend Error"),
    # assumed: the reference documents no 403 body for purchases.subscriptionsv2.cancel; this is the envelope
    # [ENVELOPE] with the PERMISSION_DENIED status Google APIs use for a caller without the permission.
    "permissionDenied": (403, "PERMISSION_DENIED", "permissionDenied",
                         "The current user has insufficient permissions to perform the requested operation."),
    "unavailable": (503, "UNAVAILABLE", "backendError", "The service is currently unavailable."),
}


def google_error(code, status, message, reason=None):
    """Google's error envelope [ENVELOPE]."""
    return jresp({"error": {"code": code, "message": message, "status": status,
                            "errors": [{"message": message, "domain": "androidpublisher" if reason else "global",
                                        "reason": reason or status.lower()}]}}, code)


def google_named_error(name):
    code, status, reason, message = GOOGLE_ERRORS[name]
    return google_error(code, status, message, reason)


class GoogleService(Service):
    name = "google"

    def default_config(self):
        return {"require_issued_token": True, "expires_in": 3599, "voided_page_size": 1000}

    def reset_service(self):
        self.issued = []
        self.expired_tokens = set()
        self.rejected = []
        self.subscriptions = {}
        self.acks = {}          # token -> acknowledgements Google accepted (200)
        self.ack_attempts = {}  # token -> acknowledge requests answered by the handler (any status)
        self.cancels = {}       # token -> [cancellationType] Google accepted (200)
        self.cancel_attempts = {}  # token -> cancel requests answered by the handler (any status)
        self.voided = []        # voided purchases listed by voidedpurchases.list [VOID]

    def scripted_response(self, spec):
        if "google_error" in spec:
            resp = google_named_error(spec["google_error"])
            if "retry_after" in spec:
                resp.headers["Retry-After"] = str(spec["retry_after"])
            return resp
        return scripted_response(spec)

    def admin_extra(self, method, path, query, payload):
        if path == "/__admin/google/subscriptions" and method == "POST":
            with self.lock:
                self.subscriptions[payload["token"]] = {k: v for k, v in payload.items() if k != "token"}
            return jresp({"ok": True})
        if path == "/__admin/google/voided" and method == "POST":
            with self.lock:
                record = {"kind": "androidpublisher#voidedPurchase", "purchaseTimeMillis": str(int(time.time() * 1000) - 86400000),
                          "voidedTimeMillis": str(int(time.time() * 1000)), "voidedSource": 0, "voidedReason": 0,
                          "productType": "subscription"}
                record.update({k: (str(v) if k in ("voidedTimeMillis", "purchaseTimeMillis") else v) for k, v in payload.items()})
                self.voided.append(record)
            return jresp({"ok": True})
        if path == "/__admin/google/out_of_app" and method == "POST":
            return self.out_of_app(payload)
        if path == "/__admin/google/acknowledgements":
            with self.lock:
                return jresp({"acknowledgements": dict(self.acks), "attempts": dict(self.ack_attempts)})
        if path == "/__admin/google/cancellations":
            with self.lock:
                return jresp({"cancellations": {t: list(v) for t, v in self.cancels.items()},
                              "attempts": dict(self.cancel_attempts)})
        if path == "/__admin/google/tokens":
            with self.lock:
                return jresp({"issued": list(self.issued), "rejected": list(self.rejected)})
        if path == "/__admin/google/expire_tokens" and method == "POST":
            with self.lock:
                self.expired_tokens.update(self.issued)
            return jresp({"ok": True})
        return None

    def handle(self, req):
        path = req["path"]
        if path == "/token" and req["method"] == "POST":
            return self.token(req)
        if path.startswith(GOOGLE_PUBLISHER):
            token = bearer(req)
            with self.lock:
                ok = token is not None and (not self.config.get("require_issued_token") or token in self.issued)
                ok = ok and token not in self.expired_tokens
            if not ok:  # 401 with Google's envelope [ENVELOPE]
                return google_error(401, "UNAUTHENTICATED",
                                    "Request had invalid authentication credentials.")
            rest = path[len(GOOGLE_PUBLISHER):].split("/")
            # pkg/purchases/subscriptionsv2/tokens/TOKEN  [SUBV2]
            if len(rest) == 5 and rest[1] == "purchases" and rest[2] == "subscriptionsv2" and rest[3] == "tokens" \
                    and req["method"] == "GET":
                return self.subscription_v2(rest[0], urllib.parse.unquote(rest[4]))
            # pkg/purchases/subscriptionsv2/tokens/TOKEN:cancel  [CANCEL]
            if len(rest) == 5 and rest[1] == "purchases" and rest[2] == "subscriptionsv2" and rest[3] == "tokens" \
                    and rest[4].endswith(":cancel") and req["method"] == "POST":
                return self.cancel(rest[0], urllib.parse.unquote(rest[4][:-len(":cancel")]), req["body"])
            # pkg/purchases/voidedpurchases  [VOID]
            if len(rest) == 3 and rest[1] == "purchases" and rest[2] == "voidedpurchases" and req["method"] == "GET":
                return self.voided_purchases(req)
            # pkg/purchases/subscriptions/SUB/tokens/TOKEN:acknowledge  [ACK]
            if len(rest) == 6 and rest[1] == "purchases" and rest[2] == "subscriptions" and rest[4] == "tokens" \
                    and rest[5].endswith(":acknowledge") and req["method"] == "POST":
                return self.acknowledge(rest[0], rest[3], urllib.parse.unquote(rest[5][:-len(":acknowledge")]))
        return google_error(404, "NOT_FOUND", "Not found")  # a route the API does not have [ERRORS] [ENVELOPE]

    def voided_purchases(self, req):
        """[VOID]: voided purchases seen in [startTime, endTime] (this fake: their voidedTimeMillis), oldest first."""
        p = req["params"]
        now = int(time.time() * 1000)
        try:
            start = int(p.get("startTime", now - 30 * 86400000))
            end = int(p.get("endTime", now))
            size = min(int(p.get("maxResults", 1000)), 1000)
            kind = int(p.get("type", 0))
        except ValueError:
            return google_named_error("invalidValue")
        token = p.get("token")
        offset = 0
        if token:
            # Google's token is opaque; this fake's is "v<offset>.<start>.<end>" (assumed form): with a token the
            # request's times are ignored and the first page's are used.
            m = re.fullmatch(r"v([0-9]+)\.([0-9]+)\.([0-9]+)", token)
            if not m:
                return google_named_error("invalidValue")
            offset, start, end = int(m.group(1)), int(m.group(2)), int(m.group(3))
        elif start < now - 30 * 86400000 - 60000:
            return google_named_error("invalidValue")  # "cannot be older than 30 days" (error body assumed)
        with self.lock:
            size = min(size, int(self.config.get("voided_page_size", 1000)))
            records = sorted((r for r in self.voided
                              if (kind == 1 or r["productType"] == "inapp")
                              and start <= int(r["voidedTimeMillis"]) <= end),
                             key=lambda r: int(r["voidedTimeMillis"]))
        page = records[offset:offset + size]
        out = {"pageInfo": {"totalResults": len(records), "resultPerPage": size, "startIndex": offset},
               "voidedPurchases": [{k: v for k, v in r.items() if k != "productType"} for r in page]}
        if offset + size < len(records):
            out["tokenPagination"] = {"nextPageToken": f"v{offset + size}.{start}.{end}"}
        return jresp(out)

    def token(self, req):
        """OAuth 2.0 token endpoint, JWT bearer grant [OAUTH]."""
        form = urllib.parse.parse_qs(req["body"], keep_blank_values=True)
        grant = form.get("grant_type", [""])[0]
        assertion = form.get("assertion", [""])[0]
        if grant != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return jresp({"error": "unsupported_grant_type", "error_description": f"Invalid grant_type: {grant}"}, 400)
        if not assertion:
            return jresp({"error": "invalid_request", "error_description": "Missing required parameter: assertion"},
                         400)
        if assertion.count(".") != 2:
            return jresp({"error": "invalid_grant", "error_description": "Invalid JWT Signature."}, 400)
        with self.lock:
            account = self.config.get("service_account")
        # Google checks every assertion against the account's public key: without one configured, no assertion
        # can be verified, so none is accepted (never a silent pass).
        problem = self.assertion_problem(assertion, account) if account else \
            "Invalid JWT Signature. (the fake has no service_account public key configured)"
        if problem:
            with self.lock:
                self.rejected.append(problem)
            return jresp({"error": "invalid_grant", "error_description": problem}, 400)
        with self.lock:
            tok = f"ya29.fake-{len(self.issued) + 1}-{hashlib.sha256(assertion.encode()).hexdigest()[:12]}"
            self.issued.append(tok)
            expires = int(self.config.get("expires_in", 3599))
        return jresp({"access_token": tok, "expires_in": expires, "token_type": "Bearer"})

    @staticmethod
    def assertion_problem(assertion, account):
        """The checks of [OAUTH]; the RS256 signature is always verified against the configured public key."""
        if not account.get("public_key_pem"):
            return "Invalid JWT Signature. (no public_key_pem configured)"
        header, claims, error = check_jwt(assertion, "RS256", account.get("public_key_pem"))
        if error:
            return error
        now = time.time()
        if claims.get("iss") != account.get("client_email"):
            return "iss is not the service account's client_email"
        if "https://www.googleapis.com/auth/androidpublisher" not in str(claims.get("scope", "")).split():
            return "scope lacks androidpublisher"
        if not str(claims.get("aud", "")).endswith("/token"):
            return "aud is not the token endpoint"
        iat, exp = claims.get("iat"), claims.get("exp")
        if not isinstance(iat, int) or not isinstance(exp, int):
            return "iat/exp missing"
        if exp <= now:
            return "Invalid JWT: Token must be a short-lived token and in a reasonable timeframe"
        if exp - iat > 3600:
            return "Invalid JWT: lifetime over 3600 s"
        return None

    def unknown_token(self, token):
        """Google's answer for a token it does not know: 400 invalidValue for a malformed one ("invalid..."), 410 for
        one expired too long ago ("gone..."), else 404 notFound [ERRORS] [GONE]. Never a made-up ACTIVE purchase."""
        if token.startswith("invalid"):
            return google_named_error("invalidValue")
        if token.startswith("gone"):
            return google_named_error("subscriptionPurchaseNoLongerAvailable")
        return google_named_error("notFound")

    def subscription_v2(self, pkg, token):
        """SubscriptionPurchaseV2 of a registered token [SUBV2]. In SUBSCRIPTION_STATE_IN_GRACE_PERIOD the
        registered expiryTime stands for the end of the grace period, as Google reports it (the line item expires
        when grace ends); its length is the base plan's gracePeriodDuration."""
        with self.lock:
            known = token in self.subscriptions
            reg = dict(self.subscriptions.get(token, {}))
            acked = self.acks.get(token, 0) > 0
        if not known:
            return self.unknown_token(token)
        now = time.time()
        product = reg.pop("productId", "premium_monthly")
        expiry = reg.pop("expiryTime", time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now + 30 * 86400)))
        state = reg.pop("subscriptionState", "SUBSCRIPTION_STATE_ACTIVE")
        ack = reg.pop("acknowledgementState", "ACKNOWLEDGEMENT_STATE_PENDING")
        if acked:
            ack = "ACKNOWLEDGEMENT_STATE_ACKNOWLEDGED"
        order = reg.pop("latestSuccessfulOrderId", "GPA.3300-0000-0000-" + hashlib.sha256(token.encode()).hexdigest()[:5])
        line = {
            "productId": product,
            "expiryTime": expiry,
            # ON_HOLD is still renewing [HOLD]
            "autoRenewingPlan": {"autoRenewEnabled": state in ("SUBSCRIPTION_STATE_ACTIVE",
                                                               "SUBSCRIPTION_STATE_IN_GRACE_PERIOD",
                                                               "SUBSCRIPTION_STATE_ON_HOLD")},
            "offerDetails": {"basePlanId": reg.pop("basePlanId", "monthly"), "offerTags": []},
            "latestSuccessfulOrderId": order,
        }
        line.update(reg.pop("lineItem", {}))
        body = {
            "kind": "androidpublisher#subscriptionPurchaseV2",
            "regionCode": "FR",
            "startTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime(now - 86400)),
            "subscriptionState": state,
            "latestOrderId": order,
            "acknowledgementState": ack,
            "lineItems": [line],
        }
        if state == "SUBSCRIPTION_STATE_CANCELED":
            body["canceledStateContext"] = {"userInitiatedCancellation": {"cancelTime": body["startTime"]}}
        # Who bought it and what it follows [OOAP]: the registration's shortcuts become Google's objects.
        obfuscated = reg.pop("obfuscatedExternalAccountId", None)
        if obfuscated is not None:
            body["externalAccountIdentifiers"] = {"obfuscatedExternalAccountId": obfuscated}
        expired_token = reg.pop("expiredPurchaseToken", None)
        if expired_token is not None:
            body["outOfAppPurchaseContext"] = {"expiredPurchaseToken": expired_token}
        # [OOAP] expiredExternalAccountIdentifiers: "User account identifier from the last expired subscription for
        # this SKU" (the ids the app set on that purchase).
        expired_obfuscated = reg.pop("expiredObfuscatedExternalAccountId", None)
        if expired_obfuscated is not None:
            body.setdefault("outOfAppPurchaseContext", {})["expiredExternalAccountIdentifiers"] = {
                "obfuscatedExternalAccountId": expired_obfuscated}
        body.update(reg)  # any other override (testPurchase, linkedPurchaseToken, canceledStateContext, ...)
        return jresp(body)

    def out_of_app(self, payload):
        """A purchase the app never posted (a resubscribe in the Play Store, a promo code) [OOAP]: registers the
        purchase like /__admin/google/subscriptions (PENDING acknowledgement) and returns the Pub/Sub push body of the
        RTDN Google sends for it [RTDN] (notificationType 4 SUBSCRIPTION_PURCHASED unless given), for the test to
        deliver to PlayNotificationJob."""
        token = payload["token"]
        registration = {k: v for k, v in payload.items()
                        if k not in ("token", "notificationType", "message_id", "event_time_numeric", "packageName")}
        with self.lock:
            self.subscriptions[token] = registration
        millis = int(time.time() * 1000)
        notification = {
            "version": "1.0",
            "packageName": payload.get("packageName", "com.example.app"),
            "eventTimeMillis": millis if payload.get("event_time_numeric") else str(millis),
            "subscriptionNotification": {"version": "1.0", "notificationType": payload.get("notificationType", 4),
                                         "purchaseToken": token,
                                         "subscriptionId": registration.get("productId", "premium_monthly")},
        }
        data = base64.b64encode(json.dumps(notification).encode()).decode()
        message_id = payload.get("message_id") or "oop-" + hashlib.sha256(token.encode()).hexdigest()[:12]
        return jresp({"message": {"data": data, "messageId": message_id,
                                  "publishTime": time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())},
                      "subscription": "projects/demo/subscriptions/rtdn"})

    def cancel(self, pkg, token, body):
        """purchases.subscriptionsv2.cancel [CANCEL]: a registered purchase Google may still charge for (ACTIVE,
        IN_GRACE_PERIOD, ON_HOLD, PAUSED, PENDING), or a CANCELED one not replaced, answers 200 with an empty body and
        is then SUBSCRIPTION_STATE_CANCELED with canceledStateContext.developerInitiatedCancellation and
        autoRenewEnabled false, its expiryTime unchanged ("remains valid until its expiration time").
        # assumed: the reference does not say which CanceledStateContext a USER_REQUESTED_STOP_RENEWALS sent by the
        # developer produces; both types record developerInitiatedCancellation here (the API call is the developer's).
        # assumed: the reference documents no error for cancelling a purchase that has ended (EXPIRED,
        # PENDING_PURCHASE_CANCELED, replaced); it answers 400 invalidPurchaseState, as acknowledge does [INVALID_STATE].
        A missing or unknown cancellationType is 400 invalidValue (the field is Required); an unknown token as in
        subscriptionsv2.get [ERRORS]. 403, 5xx and timeouts come from scripts ({"google_error": "permissionDenied"},
        {"status": 503}, {"hang": true})."""
        with self.lock:
            self.cancel_attempts[token] = self.cancel_attempts.get(token, 0) + 1
            known = token in self.subscriptions
            reg = dict(self.subscriptions.get(token, {}))
        try:
            kind = json.loads(body or "{}").get("cancellationContext", {}).get("cancellationType")
        except (ValueError, AttributeError):
            kind = None
        if kind not in ("USER_REQUESTED_STOP_RENEWALS", "DEVELOPER_REQUESTED_STOP_PAYMENTS"):
            return google_named_error("invalidValue")
        if not known:
            return self.unknown_token(token)
        state = reg.get("subscriptionState", "SUBSCRIPTION_STATE_ACTIVE")
        replaced = "replacementCancellation" in (reg.get("canceledStateContext") or {})
        cancellable = state in ("SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD",
                                "SUBSCRIPTION_STATE_ON_HOLD", "SUBSCRIPTION_STATE_PAUSED", "SUBSCRIPTION_STATE_PENDING") \
            or (state == "SUBSCRIPTION_STATE_CANCELED" and not replaced)
        if not cancellable:
            return google_named_error("invalidPurchaseState")
        with self.lock:
            current = self.subscriptions[token]
            current["subscriptionState"] = "SUBSCRIPTION_STATE_CANCELED"
            current["canceledStateContext"] = {"developerInitiatedCancellation": {}}
            line = dict(current.get("lineItem", {}))
            line["autoRenewingPlan"] = {"autoRenewEnabled": False}
            current["lineItem"] = line
            self.cancels.setdefault(token, []).append(kind)
        return Response(200, b"{}")

    def acknowledge(self, pkg, sub, token):
        """purchases.subscriptions.acknowledge [ACK]: 200 with an empty body for a registered purchase whose
        acknowledgementState is PENDING (then ACKNOWLEDGED); 400 invalidPurchaseState when it is acknowledged
        already or no longer in a state that can be acknowledged [INVALID_STATE]; an unknown token as in
        subscriptionsv2.get [ERRORS]. 409 concurrentUpdate, 5xx and timeouts come from scripts
        ({"google_error": "concurrentUpdate"}, {"status": 503}, {"hang": true})."""
        with self.lock:
            self.ack_attempts[token] = self.ack_attempts.get(token, 0) + 1
            known = token in self.subscriptions
            reg = dict(self.subscriptions.get(token, {}))
            acked = self.acks.get(token, 0) > 0
        if not known:
            return self.unknown_token(token)
        state = reg.get("subscriptionState", "SUBSCRIPTION_STATE_ACTIVE")
        pending = reg.get("acknowledgementState", "ACKNOWLEDGEMENT_STATE_PENDING") == "ACKNOWLEDGEMENT_STATE_PENDING"
        acknowledgeable = state in ("SUBSCRIPTION_STATE_ACTIVE", "SUBSCRIPTION_STATE_IN_GRACE_PERIOD",
                                    "SUBSCRIPTION_STATE_CANCELED")
        if acked or not pending or not acknowledgeable:
            return google_named_error("invalidPurchaseState")
        with self.lock:
            self.acks[token] = self.acks.get(token, 0) + 1
        return Response(200, b"{}")


# ---------------------------------------------------------------- Nominatim
#
# Sources (cite next to each answer below):
#   [policy]  https://operations.osmfoundation.org/policies/nominatim/ : absolute maximum 1 request/second per
#             application; a valid User-Agent identifying the application, with contact details; stock library
#             User-Agents are refused; clients that break the policy are blocked (HTTP 403 "Access blocked" page,
#             or 429 when they go too fast).
#   [reverse] https://nominatim.org/release-docs/latest/api/Reverse/ : lat, lon, format, addressdetails,
#             accept-language (else the Accept-Language header, else local names), zoom 0-18 (default 18;
#             3 country, 5 state, 8 county, 10 city, 12 town/borough, 13 village/suburb, 14 neighbourhood,
#             15 any settlement, 16 major streets, 17 major and minor streets, 18 building).
#   [bdd]     osm-search/Nominatim test/bdd/features/api/reverse/v1_json.feature (HTTP 200
#             {"error":"Unable to geocode"} where nothing is found) and v1_params.feature (400 JSON errors).
#   [http]    RFC 6585 §4 (429 Too Many Requests) and RFC 9110 §10.2.3 (Retry-After, delay-seconds).

PLACES = [
    # (lat, lon, name, addresstype, address in local names, {language: {address key: translated name}})
    (48.8566, 2.3522, "Paris", "city",
     {"city": "Paris", "county": "Paris", "ISO3166-2-lvl6": "FR-75", "state": "Île-de-France",
      "ISO3166-2-lvl4": "FR-IDF", "country": "France", "postcode": "75004", "country_code": "fr"},
     {"de": {"country": "Frankreich"}}),
    (51.5074, -0.1278, "London", "city",
     {"city": "London", "state_district": "Greater London", "state": "England", "ISO3166-2-lvl4": "GB-ENG",
      "country": "United Kingdom", "postcode": "WC2N 5DU", "country_code": "gb"},
     {"de": {"country": "Vereinigtes Königreich", "city": "London"}, "fr": {"country": "Royaume-Uni",
                                                                          "city": "Londres"}}),
    (52.5200, 13.4050, "Berlin", "city",
     {"city": "Berlin", "state": "Berlin", "ISO3166-2-lvl4": "DE-BE", "country": "Deutschland",
      "postcode": "10178", "country_code": "de"},
     {"en": {"country": "Germany"}, "fr": {"country": "Allemagne"}}),
    (45.8992, 6.1294, "Annecy", "town",
     {"town": "Annecy", "county": "Haute-Savoie", "state": "Auvergne-Rhône-Alpes", "country": "France",
      "postcode": "74000", "country_code": "fr"},
     {"de": {"country": "Frankreich"}}),
    (47.0660, 9.5040, "Triesen", "village",
     {"village": "Triesen", "country": "Liechtenstein", "postcode": "9495", "country_code": "li"},
     {}),
    (-34.4400, -58.7000, "Ingeniero Maschwitz", "village",
     {"road": "Calle 3", "village": "Ingeniero Maschwitz", "state_district": "Partido de Escobar",
      "state": "Buenos Aires", "ISO3166-2-lvl4": "AR-B", "country": "Argentina", "country_code": "ar"},
     {"de": {"country": "Argentinien"}}),
]

# A built-in place answers only within this distance of its centre; farther away (open sea, other continents)
# the fake answers like the real server where no OSM object is near: "Unable to geocode" [bdd].
PLACE_RADIUS_KM = 30.0

# Stock HTTP-library User-Agents, which the policy says are not an identifying User-Agent [policy].
LIBRARY_USER_AGENTS = ("python-requests", "python-urllib", "curl/", "libcurl", "wget/", "go-http-client", "okhttp",
                       "java/", "axios", "node-fetch", "undici", "apache-httpclient", "guzzle", "ruby", "php")
CONTACT_PATTERN = re.compile(r"[^\s@()<>,;]+@[^\s@()<>,;]+\.[A-Za-z]{2,}|https?://[^\s()<>]+")

# The page nominatim.openstreetmap.org serves to a blocked client (HTTP 403, text/html) [policy].
ACCESS_BLOCKED_PAGE = (
    "<html><head><title>Access blocked</title></head><body><h1>Access blocked</h1>"
    "<p>You have been blocked because you have violated the "
    "<a href=\"https://operations.osmfoundation.org/policies/nominatim/\">usage policy</a> of OSM's Nominatim "
    "geocoding service. Please be aware that OSM's resources are limited and shared between many users. The usage "
    "policy is there to ensure that the service remains usable for everybody.</p>"
    "<p>Please review the terms and make sure that your software adheres to the terms. You should in particular "
    "verify that you have set a <b>custom HTTP referrer or HTTP user agent</b> that identifies your application, "
    "and that you are not overusing the service with massive bulk requests.</p></body></html>").encode()

# Address keys below the level a zoom asks for are dropped [reverse]: zoom < 10 answers the county, state or
# country that contains the point, without the settlement.
SETTLEMENT_KEYS = ("city", "town", "village", "municipality", "hamlet", "suburb", "road", "postcode")


def distance_km(lat1, lon1, lat2, lon2):
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 6371.0 * 2 * math.asin(math.sqrt(min(1.0, a)))


def requested_languages(params, headers):
    """accept-language parameter, else the Accept-Language header [reverse]: tags in order, each followed by its
    primary subtag (de-CH → de-CH, de)."""
    text = params.get("accept-language")
    if text is None:
        text = next((v for k, v in headers.items() if k.lower() == "accept-language"), "")
    tags = []
    for part in text.split(","):
        tag = part.split(";")[0].strip().lower()
        if not tag or tag == "*":
            continue
        for candidate in (tag, tag.split("-")[0]):
            if candidate not in tags:
                tags.append(candidate)
    return tags


def user_agent_problem(ua):
    """Why the policy would refuse this User-Agent, or None [policy]."""
    if not ua.strip():
        return "missing User-Agent"
    lowered = ua.lower()
    if any(lowered.startswith(lib) for lib in LIBRARY_USER_AGENTS):
        return "stock library User-Agent"
    if not CONTACT_PATTERN.search(ua):
        return "User-Agent without contact (e-mail or URL)"
    return None


class NominatimService(Service):
    """config: rate_limit_per_second (default 1 as the policy says; 0 = off), require_user_agent (default true:
    403 for a User-Agent without contact, or a stock library one), block_all (false; true = this client is
    blocked: every request gets the 403 page, as after an IP block)."""

    name = "nominatim"

    def default_config(self):
        return {"rate_limit_per_second": 1, "require_user_agent": True, "block_all": False}

    def reset_service(self):
        self.places = {}
        self.served = []  # timestamps of /reverse requests answered (not refused)

    def admin_extra(self, method, path, query, payload):
        if path == "/__admin/nominatim/places" and method == "POST":
            key = (round(float(payload["lat"]), 4), round(float(payload["lon"]), 4))
            with self.lock:
                self.places[key] = payload
            return jresp({"ok": True})
        return None

    def handle(self, req):
        if req["path"] not in ("/reverse", "/reverse.php") or req["method"] not in ("GET", "HEAD"):
            return jresp({"error": {"code": 404, "message": "Not found"}}, 404)
        ua = next((v for k, v in req["headers"].items() if k.lower() == "user-agent"), "")
        with self.lock:
            cfg = dict(self.config)
        # [policy] a blocked client, or one without an identifying User-Agent with contact: 403 "Access blocked".
        if cfg.get("block_all") or (cfg.get("require_user_agent") and user_agent_problem(ua)):
            return Response(403, ACCESS_BLOCKED_PAGE, content_type="text/html; charset=utf-8")
        with self.lock:
            now = time.time()
            limit = int(cfg.get("rate_limit_per_second") or 0)
            recent = [t for t in self.served if t > now - 1.0]
            if limit and len(recent) >= limit:
                # [policy] at most 1 request/s; [http] 429 with Retry-After in whole seconds.
                wait = max(1, math.ceil(min(recent) + 1.0 - now))
                return Response(429, b"Too Many Requests", {"Retry-After": str(wait)}, "text/plain")
            self.served.append(now)
        p = req["params"]
        if "lat" not in p or "lon" not in p:
            # [bdd] v1_params.feature
            return jresp({"error": {"code": 400, "message": "Need coordinates or OSM object to lookup."}}, 400)
        try:
            lat, lon = float(p["lat"]), float(p["lon"])
            zoom = int(p.get("zoom", "18"))
        except ValueError:
            return jresp({"error": {"code": 400, "message": "Invalid coordinates."}}, 400)
        if not (-90 <= lat <= 90 and -180 <= lon <= 180) or (lat == 0 and lon == 0):
            return jresp({"error": "Unable to geocode"})  # [bdd] v1_json.feature
        with self.lock:
            reg = self.places.get((round(lat, 4), round(lon, 4)))
        if reg is not None:
            if "error" in reg:
                return jresp({"error": reg["error"]})
            return jresp(reg["result"])
        best = min(PLACES, key=lambda pl: distance_km(pl[0], pl[1], lat, lon))
        plat, plon, name, kind, address, translations = best
        if distance_km(plat, plon, lat, lon) > PLACE_RADIUS_KM:
            return jresp({"error": "Unable to geocode"})  # open sea / nothing near [bdd]
        address = dict(address)
        for language in requested_languages(p, req["headers"]):  # [reverse] accept-language
            if language in translations:
                address.update(translations[language])
                break
        if zoom < 10:  # [reverse] zoom: coarser than a city: no settlement in the answer
            for key in SETTLEMENT_KEYS:
                address.pop(key, None)
            kind, name = ("country", address["country"]) if zoom <= 4 else ("state", address.get("state", name))
        display = ", ".join(v for k, v in address.items() if not k.startswith("ISO") and k != "country_code")
        pid = 100000 + PLACES.index(best)
        return jresp({
            "place_id": pid,
            "licence": "Data © OpenStreetMap contributors, ODbL 1.0. http://osm.org/copyright",
            "osm_type": "relation",
            "osm_id": 7444 + pid,
            "lat": f"{plat:.7f}",
            "lon": f"{plon:.7f}",
            "place_rank": 16 if kind == "city" else 18,
            "category": "boundary",
            "type": "administrative",
            "importance": 0.5,
            "addresstype": kind,
            "name": address.get(kind, name) if kind in ("city", "town", "village") else name,
            "display_name": display,
            "address": address,
            "boundingbox": [f"{plat - 0.1:.7f}", f"{plat + 0.1:.7f}", f"{plon - 0.1:.7f}", f"{plon + 0.1:.7f}"],
        })


# ---------------------------------------------------------------- Subscription Service
#
# An internal service with no public reference: the contract modelled here is the one docs/jobs-geo-ads.md states
# ("The reward contract"), built from these sources:
#   - seed 004 (shared/seeds/004_*.txt) UC-ADS-4.1 21c: POST /subscription/v1/credits/earn
#     { amount: 1, source: 'ad_reward', reference_id: ad_request_id }; UC-ADS-4.4 23c: POST /credits/earn
#     { amount: 10, source: 'promo', reference: campaign_id }. Neither names the user (not in the path, not in the
#     body): the contract names it in `X-User-Id`. The credits ledger's `source` vocabulary 'ad_reward', 'promo',
#     'purchase', 'unlock' (Sources/Storage/Migrations/0002_domain.sql, credit_transactions).
#   - IETF draft-ietf-httpapi-idempotency-key-header (github.com/ietf-wg-httpapi/idempotency,
#     draft-ietf-httpapi-idempotency-key-header.md):
#       * "Syntax": "`Idempotency-Key` is an Item Structured Header [RFC8941]. Its value MUST be a String." The
#         header is parsed as an RFC 8941 Item (§4.2 "Parsing Structured Fields", §4.2.3 Item, §4.2.5 String =
#         §3.3.3 sf-string, §4.2.6 Token); a field that fails parsing is ignored (§4.2: "the entire field" fails)
#         and is then a missing key, and a Token (an unquoted `ad_reward:…`) is not a String: both 400, the
#         draft's answer for a missing/incorrect key ("Error Scenarios").
#       * "Security Considerations": "implement a unique composite key as the idempotent cache lookup key …
#         combining the idempotency key sent by the client with other client specific attributes": the contract's
#         composite key is (user, key), the user of `X-User-Id` — NOT the credential, so the Ads Service's first
#         call and our worker's retry (two credentials) are one request.
#       * "Idempotency Fingerprint": "Field value match for each field in the request payload": the fingerprint is
#         the body's members and their values (key order and whitespace do not matter); another body under a
#         used key -> 422 ("Error Scenarios"). 409 Conflict while the original request is still being processed.
#       * "Idempotency Key Validity and Expiry": "The resource MAY enforce time based idempotency keys, thus, be
#         able to purge or delete a key upon its expiry": a key is forgotten `key_lifetime_seconds` after its first
#         use (default 7 days, the contract's figure); the fake's clock moves by admin call, never by sleeping.
#       * problem details (RFC 9457, application/problem+json) bodies as in the draft's examples.
#   - the first response is replayed for a repeated key, marked `Idempotent-Replayed: true` (Stripe's API
#     reference, "Idempotent requests", the header Stripe sends on a replay).

SUBSCRIPTION_SOURCES = ("ad_reward", "promo", "purchase", "unlock")
IDEMPOTENCY_DOC = "https://datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header/"
SUBSCRIPTION_KEY_LIFETIME = 7 * 24 * 3600  # docs/jobs-geo-ads.md, "The reward contract"


def problem(status, title, detail):
    """An RFC 9457 problem details answer, the shape of the Idempotency-Key draft's error examples."""
    return Response(status, json_bytes({"type": IDEMPOTENCY_DOC, "title": title, "detail": detail}),
                    content_type="application/problem+json")


class StructuredFieldError(ValueError):
    pass


def parse_sf_item(text):
    """RFC 8941 §4.2 for a field of type Item: returns (kind, value, params), kind one of "string", "token",
    "integer", "decimal", "boolean", "bytes"; raises StructuredFieldError where the RFC says "fail parsing"."""
    s = text.lstrip(" ")  # §4.2 step 2: discard leading SP (OWS around the value is not part of it, RFC 9110 §5.5)
    i = 0

    def bare(i):
        if i >= len(s):
            raise StructuredFieldError("empty item")
        c = s[i]
        if c == '"':  # §4.2.5 Parsing a String (sf-string, §3.3.3)
            out, i = [], i + 1
            while i < len(s):
                c = s[i]
                i += 1
                if c == "\\":
                    if i >= len(s) or s[i] not in ('"', "\\"):
                        raise StructuredFieldError("bad escape in string")
                    out.append(s[i])
                    i += 1
                elif c == '"':
                    return ("string", "".join(out)), i
                elif ord(c) < 0x20 or ord(c) > 0x7E:
                    raise StructuredFieldError("non-printable character in string")
                else:
                    out.append(c)
            raise StructuredFieldError("unterminated string")
        if c.isascii() and (c.isalpha() or c == "*"):  # §4.2.6 Parsing a Token
            j = i + 1
            while j < len(s) and (s[j].isascii() and (s[j].isalnum() or s[j] in "!#$%&'*+-.^_`|~:/")):
                j += 1
            return ("token", s[i:j]), j
        if c == "-" or c.isdigit():  # §4.2.4 Parsing an Integer or Decimal (the limits are not checked)
            m = re.match(r"-?[0-9]{1,15}(\.[0-9]{1,3})?", s[i:])
            if not m:
                raise StructuredFieldError("bad number")
            t = m.group(0)
            return (("decimal", float(t)) if "." in t else ("integer", int(t))), i + len(t)
        if c == "?":  # §4.2.8 Parsing a Boolean
            if s[i + 1:i + 2] in ("0", "1"):
                return ("boolean", s[i + 1] == "1"), i + 2
            raise StructuredFieldError("bad boolean")
        if c == ":":  # §4.2.7 Parsing a Byte Sequence
            j = s.find(":", i + 1)
            if j < 0:
                raise StructuredFieldError("unterminated byte sequence")
            try:
                return ("bytes", base64.b64decode(s[i + 1:j], validate=True)), j + 1
            except ValueError:
                raise StructuredFieldError("bad base64")
        raise StructuredFieldError(f"unexpected character {c!r}")

    (kind, value), i = bare(i)
    params = {}
    while i < len(s) and s[i] == ";":  # §4.2.3.2 Parsing Parameters
        i += 1
        while i < len(s) and s[i] == " ":
            i += 1
        m = re.match(r"[a-z*][a-z0-9_.*-]*", s[i:])
        if not m:
            raise StructuredFieldError("bad parameter key")
        key = m.group(0)
        i += len(key)
        if i < len(s) and s[i] == "=":
            (_, params[key]), i = bare(i + 1)
        else:
            params[key] = True
    if s[i:].strip(" "):  # §4.2 steps 6-7: anything left over fails parsing
        raise StructuredFieldError("trailing characters")
    return kind, value, params


class SubscriptionService(Service):
    """Admin (besides the common routes):
        GET  /__admin/subscription/credits   {"credited_by_key": {key: amount}, "applications_by_key": {key: n},
             "balances": {user: total}, "earn_requests": n, "clients_by_key": {key: [credential names that sent
             it]}, "expired_keys": n} (keys unquoted, summed over users)
        POST /__admin/subscription/hold {"key": K, "stage": "before_credit" | "after_credit"}
             the next earn request with key K stops at that stage until released: `before_credit` = in flight
             (a concurrent request with K gets 409), `after_credit` = credited and recorded, answer not sent yet
             (a client with a short timeout gives up: the "timed out after the service credited" case).
        GET  /__admin/subscription/held      {"held": [keys of requests stopped right now]}
        POST /__admin/subscription/release   lets every stopped request go on (reset does too)
        GET  /__admin/subscription/clock     {"now": unix seconds of the fake's clock}
        POST /__admin/subscription/clock     {"advance": S} or {"now": T}: moves the clock that key expiry reads
    config: {"api_key": K} one accepted Bearer token, or {"api_keys": {token: client name}} several (the worker's
            and the Ads Service's credentials); none configured = no Authorization check.
            {"key_lifetime_seconds": S} (default 7 days).
    """
    name = "subscription"

    def default_config(self):
        return {"api_key": None, "api_keys": None, "key_lifetime_seconds": SUBSCRIPTION_KEY_LIFETIME}

    def reset_service(self):
        self.idempotent = {}  # (user, key) -> (fingerprint, Response, first use on the fake clock)
        self.in_flight = set()  # (user, key) whose first request is being processed
        self.credited = {}  # key -> amount
        self.applications = {}  # key -> times the credit was applied (must stay 1)
        self.clients = {}  # key -> [credential names that sent it]
        self.balances = {}
        self.earn_requests = 0
        self.expired_keys = 0
        self.clock_offset = 0.0
        self.next_tx = 1
        self.holds = {}  # key -> stage, armed for the next request with that key
        self.held = {}  # key -> threading.Event, requests stopped now
        self.gate = threading.Event()  # set by release/reset: stopped requests go on

    def now(self):
        """The fake's clock (caller holds the lock): real time plus what the tests advanced it by."""
        return time.time() + self.clock_offset

    def reset(self):
        with self.lock:
            gate = getattr(self, "gate", None)
        super().reset()
        if gate is not None:
            gate.set()

    def admin_extra(self, method, path, query, payload):
        if path == "/__admin/subscription/credits":
            with self.lock:
                return jresp({"credited_by_key": dict(self.credited), "applications_by_key": dict(self.applications),
                              "balances": dict(self.balances), "earn_requests": self.earn_requests,
                              "clients_by_key": {k: list(v) for k, v in self.clients.items()},
                              "expired_keys": self.expired_keys})
        if path == "/__admin/subscription/clock":
            with self.lock:
                if method == "POST":
                    if "now" in payload:
                        self.clock_offset = float(payload["now"]) - time.time()
                    self.clock_offset += float(payload.get("advance", 0))
                return jresp({"now": self.now()})
        if path == "/__admin/subscription/hold" and method == "POST":
            stage = payload.get("stage", "before_credit")
            if stage not in ("before_credit", "after_credit") or not payload.get("key"):
                return jresp({"error": "hold needs a key and stage before_credit|after_credit"}, 400)
            with self.lock:
                self.holds[payload["key"]] = stage
            return jresp({"ok": True})
        if path == "/__admin/subscription/held":
            with self.lock:
                return jresp({"held": sorted(self.held)})
        if path == "/__admin/subscription/release" and method == "POST":
            with self.lock:
                gate, self.gate = self.gate, threading.Event()
            gate.set()
            return jresp({"ok": True})
        return None

    def _stop_if_held(self, key, stage):
        """Blocks this request while a hold for (key, stage) is armed, until release/reset/shutdown."""
        with self.lock:
            if self.holds.get(key) != stage:
                return
            del self.holds[key]
            gate = self.gate
            self.held[key] = gate
        try:
            while not gate.wait(0.1) and not SHUTDOWN.is_set():
                pass
        finally:
            with self.lock:
                self.held.pop(key, None)

    def _client(self, headers):
        """The credential's client name, "" when no check is configured, None when refused (401)."""
        with self.lock:
            keys = dict(self.config.get("api_keys") or {})
            if self.config.get("api_key"):
                keys[self.config["api_key"]] = "default"
        if not keys:
            return ""
        auth = headers.get("authorization", "")
        token = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        return keys.get(token)

    def handle(self, req):
        if req["path"] != "/subscription/v1/credits/earn" or req["method"] != "POST":
            return jresp({"error": "not_found"}, 404)
        headers = {k.lower(): v for k, v in req["headers"].items()}
        with self.lock:
            self.earn_requests += 1
        client = self._client(headers)
        if client is None:
            return jresp({"error": "unauthorized"}, 401)
        raw_key = headers.get("idempotency-key")
        if raw_key is None or not raw_key.strip():
            # Draft, "Error Scenarios": a missing key for an operation that requires one is a 400.
            return problem(400, "Idempotency-Key is missing",
                           "This operation is idempotent and it requires correct usage of Idempotency Key.")
        try:
            kind, key, _ = parse_sf_item(raw_key)
        except StructuredFieldError as e:
            # RFC 8941 §4.2: a field that fails parsing is ignored as a whole, so there is no key: 400 as above.
            return problem(400, "Idempotency-Key is not a Structured Field",
                           f"Idempotency-Key is an Item Structured Header (RFC 8941) whose value MUST be a String; "
                           f"parsing failed: {e}.")
        if kind != "string":
            # Draft, "Syntax": "Its value MUST be a String" (RFC 8941 §3.3.3 sf-string, i.e. quoted); an unquoted
            # value parses as a Token (§3.3.4), which a strict server refuses.
            return problem(400, "Idempotency-Key must be a String",
                           f"Idempotency-Key is an Item Structured Header whose value MUST be a String "
                           f"(RFC 8941 sf-string, quoted); got a {kind}.")
        if not key:
            return problem(400, "Idempotency-Key is missing", "The Idempotency-Key is an empty String.")
        user = headers.get("x-user-id", "").strip()
        if not user:
            return jresp({"error": "invalid_request", "message": "X-User-Id (the user to credit) is required"}, 400)
        try:
            body = json.loads(req["raw_body"])
            if not isinstance(body, dict):
                raise ValueError("body")
            amount = body["amount"]
            if not isinstance(amount, int) or isinstance(amount, bool) or amount <= 0:
                raise ValueError("amount")
            # Seed 004: the ad reward names it reference_id (21c), the campaign reward reference (23c).
            refs = [body[f] for f in ("reference_id", "reference") if f in body]
            if len(refs) != 1 or not isinstance(refs[0], str) or not refs[0]:
                raise ValueError("reference")
            reference = refs[0]
        except (ValueError, KeyError, TypeError):
            return jresp({"error": "invalid_request",
                          "message": "a positive integer amount and one of reference_id / reference are required"}, 422)
        source = body.get("source")
        if source not in SUBSCRIPTION_SOURCES:
            # The ledger knows these sources only (0002_domain.sql; seed 004 uses 'ad_reward' and 'promo').
            return jresp({"error": "invalid_source", "message": f"source must be one of {list(SUBSCRIPTION_SOURCES)}"},
                         422)
        # Draft, "Idempotency Fingerprint": field value match for each field of the payload (order-insensitive).
        fingerprint = json.dumps(body, sort_keys=True, separators=(",", ":"))
        scope = (user, key)  # the contract's composite key: per user, not per credential
        with self.lock:
            prior = self.idempotent.get(scope)
            lifetime = float(self.config.get("key_lifetime_seconds") or SUBSCRIPTION_KEY_LIFETIME)
            if prior is not None and self.now() - prior[2] >= lifetime:
                # Draft, "Idempotency Key Validity and Expiry": the key is purged; the request is a new one.
                del self.idempotent[scope]
                self.expired_keys += 1
                prior = None
            if prior is None and scope in self.in_flight:
                # Draft, "Error Scenarios": a retried request while the original is still being processed -> 409.
                return problem(409, "A request is outstanding for this Idempotency-Key",
                               "A request with the same Idempotency-Key for the same operation is being processed "
                               "or is outstanding.")
            if prior is not None:
                if prior[0] != fingerprint:
                    # Draft, "Error Scenarios": a key reused with a different payload -> 422.
                    return problem(422, "Idempotency-Key is already used",
                                   "This operation is idempotent and it requires correct usage of Idempotency Key. "
                                   "Idempotency Key MUST not be reused across different payloads of this operation.")
                resp = prior[1]
                self.clients.setdefault(key, []).append(client)
                # The first answer again, marked as a replay (Stripe: `Idempotent-Replayed: true`).
                return Response(resp.status, resp.body, dict(resp.headers, **{"Idempotent-Replayed": "true"}))
            self.in_flight.add(scope)
            first_use = self.now()
        try:
            self._stop_if_held(key, "before_credit")
            with self.lock:
                self.balances[user] = self.balances.get(user, 0) + amount
                self.credited[key] = self.credited.get(key, 0) + amount
                self.applications[key] = self.applications.get(key, 0) + 1
                self.clients.setdefault(key, []).append(client)
                tx = f"cr_{self.next_tx:06d}"
                self.next_tx += 1
                resp = jresp({"transaction_id": tx, "user_id": user, "amount": amount, "source": source,
                              "reference": reference, "balance": self.balances[user]}, 201)
                self.idempotent[scope] = (fingerprint, resp, first_use)
        finally:
            with self.lock:
                self.in_flight.discard(scope)
        self._stop_if_held(key, "after_credit")
        return resp


# ---------------------------------------------------------------- SMTP

class SMTPService(Service):
    name = "smtp"

    def default_config(self):
        return {"username": None, "password": None, "hostname": "fake-smtp.local"}

    def reset_service(self):
        self.messages = []
        self.sessions = 0

    def admin_extra(self, method, path, query, payload):
        if path == "/__admin/messages":
            with self.lock:
                return jresp({"messages": list(self.messages)})
        return None


def parse_message(data):
    text = data.decode("utf-8", "replace")
    head, _, body = text.partition("\r\n\r\n")
    headers = []
    for line in head.split("\r\n"):
        if line[:1] in (" ", "\t") and headers:
            headers[-1][1] += " " + line.strip()
        elif ":" in line:
            k, v = line.split(":", 1)
            headers.append([k.strip(), v.strip()])
    return headers, body


def extract_links(body, transfer_encoding):
    """http(s) URLs in a text body, in order (quoted-printable soft breaks and escapes undone first)."""
    text = body
    if transfer_encoding.strip().lower() == "quoted-printable":
        import quopri
        text = quopri.decodestring(body.encode("utf-8", "replace")).decode("utf-8", "replace")
    return re.findall(r"https?://[^\s<>\"]+", text)


class SMTPHandler(socketserver.StreamRequestHandler):
    service: SMTPService = None
    timeout = 60

    def reply(self, line):
        self.wfile.write((line + "\r\n").encode())
        self.wfile.flush()

    def script(self, stage):
        """Apply a scripted behaviour for `stage`; return True if the command was answered (or dropped)."""
        spec, release = self.service.take_script(stage=stage)
        if spec is None:
            return False
        if spec.get("hang"):
            release.wait(float(spec.get("delay", 3600)))
            raise ConnectionAbortedError
        if spec.get("delay"):
            release.wait(float(spec["delay"]))
        if spec.get("close"):
            raise ConnectionAbortedError
        self.reply(f"{int(spec.get('status', 451))} {spec.get('message', 'Scripted reply')}")
        return True

    def handle(self):
        svc = self.service
        with svc.lock:
            svc.sessions += 1
            cfg = dict(svc.config)
        try:
            if self.script("connect"):
                return
            self.reply(f"220 {cfg['hostname']} ESMTP fake ready")
            mail_from, rcpts, auth_user = None, [], None
            while True:
                raw = self.rfile.readline(65536)
                if not raw:
                    return
                line = raw.decode("utf-8", "replace").rstrip("\r\n")
                verb, _, arg = line.partition(" ")
                verb = verb.upper()
                if verb in ("EHLO", "HELO"):
                    if self.script("ehlo"):
                        continue
                    if verb == "HELO":
                        self.reply(f"250 {cfg['hostname']}")
                    else:
                        for ext in (cfg["hostname"], "8BITMIME", "SIZE 10485760", "AUTH PLAIN LOGIN"):
                            self.reply("250-" + ext)
                        self.reply("250 SMTPUTF8")
                elif verb == "AUTH":
                    if self.script("auth"):
                        continue
                    mech, _, initial = arg.partition(" ")
                    mech = mech.upper()
                    if mech == "PLAIN":
                        if not initial:
                            self.reply("334 ")
                            initial = self.rfile.readline().decode().strip()
                        try:
                            _, user, pw = base64.b64decode(initial).decode().split("\0")
                        except (ValueError, UnicodeDecodeError):
                            self.reply("501 malformed AUTH PLAIN")
                            continue
                    elif mech == "LOGIN":
                        if initial:
                            user = base64.b64decode(initial).decode()
                        else:
                            self.reply("334 VXNlcm5hbWU6")
                            user = base64.b64decode(self.rfile.readline().strip()).decode()
                        self.reply("334 UGFzc3dvcmQ6")
                        pw = base64.b64decode(self.rfile.readline().strip()).decode()
                    else:
                        self.reply("504 unrecognized authentication type")
                        continue
                    if cfg.get("username") is not None and (user, pw) != (cfg["username"], cfg["password"]):
                        self.reply("535 5.7.8 Authentication credentials invalid")
                        continue
                    auth_user = user
                    self.reply("235 2.7.0 Authentication successful")
                elif verb == "MAIL":
                    if self.script("mail"):
                        continue
                    mail_from = arg.partition(":")[2].strip().split(" ")[0].strip("<>")
                    rcpts = []
                    self.reply("250 2.1.0 OK")
                elif verb == "RCPT":
                    if mail_from is None:
                        self.reply("503 5.5.1 MAIL first")
                        continue
                    if self.script("rcpt"):
                        continue
                    rcpts.append(arg.partition(":")[2].strip().split(" ")[0].strip("<>"))
                    self.reply("250 2.1.5 OK")
                elif verb == "DATA":
                    if not rcpts:
                        self.reply("503 5.5.1 RCPT first")
                        continue
                    if self.script("data"):
                        continue
                    self.reply("354 End data with <CR><LF>.<CR><LF>")
                    lines = []
                    while True:
                        l = self.rfile.readline(1 << 20)
                        if not l:
                            return
                        if l in (b".\r\n", b".\n"):
                            break
                        if l.startswith(b"."):
                            l = l[1:]
                        lines.append(l)
                    data = b"".join(lines)
                    if self.script("eom"):
                        mail_from, rcpts = None, []
                        continue
                    headers, body = parse_message(data)
                    hmap = {k.lower(): v for k, v in headers}
                    msg = {
                        "mail_from": mail_from, "rcpt_to": rcpts, "data": data.decode("utf-8", "replace"),
                        "headers": headers, "subject": hmap.get("subject"), "message_id": hmap.get("message-id"),
                        "body": body, "auth_user": auth_user, "timestamp": time.time(),
                        "links": extract_links(body, hmap.get("content-transfer-encoding", "")),
                    }
                    with svc.lock:
                        svc.messages.append(msg)
                        qid = f"Q{len(svc.messages):05d}"
                    svc.record({"method": "DATA", "path": "smtp", "timestamp": msg["timestamp"]})
                    self.reply(f"250 2.0.0 OK queued as {qid}")
                    mail_from, rcpts = None, []
                elif verb == "RSET":
                    mail_from, rcpts = None, []
                    self.reply("250 2.0.0 OK")
                elif verb == "NOOP":
                    self.reply("250 2.0.0 OK")
                elif verb == "VRFY":
                    self.reply("252 2.0.0 Cannot VRFY")
                elif verb == "QUIT":
                    self.reply("221 2.0.0 Bye")
                    return
                else:
                    self.reply("502 5.5.2 Command not recognized")
        except (ConnectionError, OSError, socket.timeout):
            return


class ThreadingTCP(socketserver.ThreadingTCPServer):
    daemon_threads = True
    # Never wait for handler threads on close: a client that keeps a connection open (or a scripted hang)
    # would otherwise keep this process from exiting.
    block_on_close = False
    allow_reuse_address = True


class ThreadingHTTP(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128


def start_http(service):
    handler = type(f"{service.name.title()}Handler", (FakeHandler,), {"service": service})
    server = ThreadingHTTP((HOST, 0), handler)
    threading.Thread(target=server.serve_forever, name=service.name, daemon=True).start()
    return server


def main():
    global HOST, FIXTURES_DIR, VERBOSE
    here = os.path.dirname(os.path.abspath(__file__))
    default_fixtures = os.environ.get("FAKES_FIXTURES") or os.path.normpath(
        os.path.join(here, "..", "Fixtures", "apple-app-store-server"))
    ap = argparse.ArgumentParser(description="Fake external servers for tests (127.0.0.1 only).")
    for name in ("apple", "google", "nominatim", "subscription", "smtp", "all"):
        ap.add_argument(f"--{name}", action="store_true")
    ap.add_argument("--host", default="127.0.0.1", help="loopback address to bind (default 127.0.0.1)")
    ap.add_argument("--fixtures", default=default_fixtures, help="Apple fixtures dir (default %(default)s)")
    ap.add_argument("--exit-on-stdin-close", action="store_true", help="exit when stdin reaches EOF")
    ap.add_argument("--verbose", action="store_true", help="log requests to stderr")
    args = ap.parse_args()
    if not args.host.startswith("127.") and args.host not in ("::1", "localhost"):
        ap.error("fakes bind to loopback only")
    HOST, FIXTURES_DIR, VERBOSE = args.host, args.fixtures, args.verbose
    wanted = [n for n in ("apple", "google", "nominatim", "subscription", "smtp") if args.all or getattr(args, n)]
    if not wanted:
        ap.error("choose at least one fake (or --all)")

    services, servers, ports = {}, [], {}
    classes = {"apple": AppleService, "google": GoogleService, "nominatim": NominatimService,
               "subscription": SubscriptionService}
    for name in wanted:
        if name == "smtp":
            svc = SMTPService()
            handler = type("SMTPBound", (SMTPHandler,), {"service": svc})
            smtp = ThreadingTCP((HOST, 0), handler)
            threading.Thread(target=smtp.serve_forever, name="smtp", daemon=True).start()
            admin_server = start_http(svc)
            servers += [smtp, admin_server]
            ports["smtp"] = smtp.server_address[1]
            ports["smtp_admin"] = admin_server.server_address[1]
        else:
            svc = classes[name]()
            srv = start_http(svc)
            servers.append(srv)
            ports[name] = srv.server_address[1]
        services[name] = svc

    def stop(*_):
        SHUTDOWN.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if args.exit_on_stdin_close:
        def watch():
            try:
                while sys.stdin.buffer.read(4096):
                    pass
            except (OSError, ValueError):
                pass
            SHUTDOWN.set()
        threading.Thread(target=watch, name="stdin", daemon=True).start()

    print(json.dumps(ports), flush=True)
    while not SHUTDOWN.wait(0.5):
        pass
    for svc in services.values():
        svc.release.set()
    for s in servers:
        s.shutdown()
        s.server_close()
    # Handler threads still blocked in a read must not keep the process alive.
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()

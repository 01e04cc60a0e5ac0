#!/usr/bin/env python3
"""A local OTLP/HTTP trace receiver for the tracing tests (TracingTests), on 127.0.0.1.

Follows the OTLP specification, https://opentelemetry.io/docs/specs/otlp/ :
- "OTLP/HTTP Request": POST to /v1/traces; body an ExportTraceServiceRequest, Content-Type
  `application/x-protobuf` (binary) or `application/json` (the JSON Protobuf Encoding).
- "JSON Protobuf Encoding": trace_id / span_id / parent_span_id are hex strings (not base64), enum
  values are integers, field names lowerCamelCase; 64-bit integers may be strings or numbers.
- "OTLP/HTTP Response": success is 200 with an ExportTraceServiceResponse in the request's
  Content-Type (an empty message `{}` when nothing was rejected).
- "Failures": a body that cannot be decoded gets 400 Bad Request with a google.rpc.Status body.
  This receiver decodes only JSON: a protobuf body is answered 415 Unsupported Media Type (what the
  spec's "OTLP/HTTP" section allows a server that does not support a content type to answer), so a
  test fails loudly if the exporter ever switches encodings.

Test-only endpoints (not OTLP):
- GET /__admin/spans: every decoded span, flattened, as a JSON array; each has the span fields plus
  `serviceName` (the resource's `service.name`) and `attributes` as a {key: value} object.
- GET /__admin/exports: how many export requests arrived (decoded or not).
- Any other GET (e.g. /users/alice@example.com/profile): 200 "ok", recorded in /__admin/requests —
  the target of the probe job's HTTP call; GET /status/NNN answers with status NNN.

Usage: otlp_receiver.py PORT. Prints "ready PORT" on stdout once listening; runs until SIGTERM.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
SPANS = []
EXPORTS = []  # (content_type, status)
REQUESTS = []


def any_value(value):
    """AnyValue (common.proto) to a plain Python value."""
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [any_value(v) for v in value["arrayValue"].get("values", [])]
    return None


def flatten(request):
    spans = []
    for resource_spans in request["resourceSpans"]:
        resource = {a["key"]: any_value(a["value"]) for a in resource_spans.get("resource", {}).get("attributes", [])}
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                flat = dict(span)
                flat["serviceName"] = resource.get("service.name")
                flat["attributes"] = {a["key"]: any_value(a["value"]) for a in span.get("attributes", [])}
                spans.append(flat)
    return spans


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body, content_type="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        if self.path != "/v1/traces":
            return self.answer(404, json.dumps({"code": 5, "message": "not found"}))
        content_type = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        if content_type != "application/json":
            with LOCK:
                EXPORTS.append((content_type, 415))
            return self.answer(415, json.dumps({"code": 3, "message": "only application/json is decoded here"}))
        try:
            spans = flatten(json.loads(body))
            for span in spans:  # hex ids as the JSON encoding requires
                assert len(span["traceId"]) == 32 and len(span["spanId"]) == 16
                int(span["traceId"], 16), int(span["spanId"], 16)
        except Exception as error:  # noqa: BLE001 - any decoding failure is a 400 per the spec
            with LOCK:
                EXPORTS.append((content_type, 400))
            return self.answer(400, json.dumps({"code": 3, "message": "cannot decode: %s" % error}))
        with LOCK:
            EXPORTS.append((content_type, 200))
            SPANS.extend(spans)
        self.answer(200, "{}")

    def do_GET(self):
        with LOCK:
            if self.path == "/__admin/spans":
                return self.answer(200, json.dumps(SPANS))
            if self.path == "/__admin/exports":
                return self.answer(200, json.dumps([{"contentType": c, "status": s} for c, s in EXPORTS]))
            if self.path == "/__admin/requests":
                return self.answer(200, json.dumps(REQUESTS))
            REQUESTS.append({"method": "GET", "path": self.path})
        if self.path.startswith("/status/"):
            return self.answer(int(self.path.split("/")[2]), "status", "text/plain")
        self.answer(200, "ok", "text/plain")


def main():
    port = int(sys.argv[1])
    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready %d" % port, flush=True)
    threading.Event().wait()  # until the test sends SIGTERM


if __name__ == "__main__":
    main()

"""An OTLP/HTTP trace receiver for the telemetry tests.

Decodes every `POST /v1/traces` body with the official generated protobuf classes (PyPI
`opentelemetry-proto`), so a body that is not a valid `ExportTraceServiceRequest` fails the test,
and appends each span to a JSON-lines file. Prints `listening PORT` once it listens; answers 400
to a body it cannot decode and 415 to another content type.

usage: otlp_receiver.py OUT.jsonl
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf.json_format import MessageToDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = sys.argv[1]


def attributes(kvs):
    """KeyValue list -> plain dict (every value kept with its protobuf type name)."""
    out = {}
    for kv in kvs:
        which = kv.value.WhichOneof("value")
        out[kv.key] = {which: getattr(kv.value, which)} if which else None
    return out


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        if self.headers.get("content-type") != "application/x-protobuf":
            self.send_response(415)
            self.end_headers()
            return
        request = ExportTraceServiceRequest()
        try:
            request.ParseFromString(body)
        except Exception as e:  # a malformed body is the test's failure, said in the file
            with open(OUT, "a") as f:
                f.write(json.dumps({"decode_error": str(e)}) + "\n")
            self.send_response(400)
            self.end_headers()
            return
        with open(OUT, "a") as f:
            for rs in request.resource_spans:
                resource = attributes(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for span in ss.spans:
                        f.write(json.dumps({
                            "resource": resource,
                            "scope": {"name": ss.scope.name, "version": ss.scope.version},
                            "headers": {k.lower(): v for k, v in self.headers.items()},
                            "trace_id": span.trace_id.hex(),
                            "span_id": span.span_id.hex(),
                            "parent_span_id": span.parent_span_id.hex(),
                            "trace_state": span.trace_state,
                            "name": span.name,
                            "kind": span.kind,
                            "start": span.start_time_unix_nano,
                            "end": span.end_time_unix_nano,
                            "attributes": attributes(span.attributes),
                            "events": [
                                {"name": e.name, "time": e.time_unix_nano,
                                 "attributes": attributes(e.attributes)}
                                for e in span.events
                            ],
                            "status": {"code": span.status.code, "message": span.status.message},
                            # every field the official classes know, as a cross-check
                            "proto": MessageToDict(span),
                        }) + "\n")
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening {server.server_address[1]}", flush=True)
server.serve_forever()

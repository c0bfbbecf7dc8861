#!/usr/bin/env python3
"""kafka-python against a listener that enforces ACLs (tests/acl_enforcement.rs).

    acl_clients.py consume --bootstrap HOST:PORT --topic T --group G \\
            --username U --password PW --count N [--timeout S]

Logs in with SASL PLAIN, consumes T in group G (subscribe, auto commit
off, commits once at the end) until N records are read or the deadline.
Prints one JSON object: {"count": records read, "error": the exception's
class name and text (or the logged authorization error that ended the
polling), or null}. Exit status: 0 N read; 3 kafka-python
missing; 4 otherwise.
"""

import argparse
import json
import logging
import sys
import time


class AuthorizationErrors(logging.Handler):
    """kafka-python logs some authorization errors rather than raising them
    from poll (a Metadata answer's TOPIC_AUTHORIZATION_FAILED: "Topic T is
    not authorized for this client")."""

    def __init__(self, result):
        super().__init__(level=logging.DEBUG)
        self.result = result

    def emit(self, record):
        text = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            text += f" {type(record.exc_info[1]).__name__}: {record.exc_info[1]}"
        wanted = "AuthorizationFailed" in text or "is not authorized" in text
        if wanted and self.result["error"] is None:
            self.result["error"] = text


def main():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["consume"])
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--group", required=True)
    p.add_argument("--username", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--timeout", type=float, default=10)
    args = p.parse_args()
    try:
        from kafka import KafkaConsumer
    except ImportError:
        print("python module kafka missing: pip install kafka-python", file=sys.stderr)
        return 3
    result = {"count": 0, "error": None}
    log = logging.getLogger("kafka")
    log.addHandler(AuthorizationErrors(result))
    stderr = logging.StreamHandler(sys.stderr)
    stderr.setLevel(logging.WARNING)
    log.addHandler(stderr)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        consumer = KafkaConsumer(
            args.topic,
            bootstrap_servers=args.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN",
            sasl_plain_username=args.username,
            sasl_plain_password=args.password,
            group_id=args.group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=10000,
        )
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline and result["count"] < args.count and result["error"] is None:
            for records in consumer.poll(timeout_ms=200).values():
                result["count"] += len(records)
        if result["count"] >= args.count:
            consumer.commit()
        consumer.close()
    except Exception as e:  # what kafka-python raises is the finding
        result["error"] = f"{type(e).__name__}: {e}"
    print(json.dumps(result))
    return 0 if result["count"] >= args.count and result["error"] is None else 4


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Unchanged Python Kafka clients authenticating with SASL (SASL_PLAINTEXT)
at a Kafka-protocol listener, for ringmirror's SASL tests (tests/sasl.rs).

    sasl_clients.py kafka-python|confluent --bootstrap HOST:PORT --topic T \\
            --ends P:END[,P:END...] --mechanism M --username U --password PW \\
            [--timeout S]

kafka-python's KafkaConsumer (group_id=None) or confluent-kafka's Consumer
(librdkafka) authenticates with mechanism M (PLAIN, SCRAM-SHA-256,
SCRAM-SHA-512), assigns the partitions, starts at the beginning and polls
until every partition's position reaches its END. Prints one JSON object:
{"client", "version", "counts": {P: records read}, "errors": [what the
client reported], "auth_error": the authentication error, or null}.

Exit status: 0 every END reached; 2 usage; 3 a needed module is missing;
4 the deadline passed; 5 authentication failed (the error is printed).
"""

import argparse
import json
import logging
import os
import sys
import threading
import time


def parse_ends(text):
    ends = {}
    for item in text.split(","):
        partition, end = item.split(":")
        ends[int(partition)] = int(end)
    return ends


def need(module, package):
    try:
        return __import__(module)
    except ImportError:
        print(f"python module {module} missing: pip install {package}", file=sys.stderr)
        sys.exit(3)


def emit(result, status):
    print(json.dumps(result))
    sys.stdout.flush()
    return status


class AuthErrors(logging.Handler):
    """kafka-python logs a failed authentication and retries the bootstrap
    on and on: its log is where the error shows."""

    def __init__(self, result):
        super().__init__(level=logging.WARNING)
        self.result = result

    def emit(self, record):
        text = record.getMessage()
        if "SaslAuthenticationFailed" in text or "UnsupportedSaslMechanism" in text:
            self.result["errors"].append(text)
            if self.result["auth_error"] is None:
                self.result["auth_error"] = text


def kafka_python(args):
    kafka = need("kafka", "kafka-python")
    from kafka import KafkaConsumer, TopicPartition

    ends = parse_ends(args.ends)
    result = {"client": "kafka-python", "version": kafka.__version__, "counts": {}, "errors": [], "auth_error": None}
    logging.getLogger("kafka").addHandler(AuthErrors(result))
    logging.getLogger("kafka").setLevel(logging.WARNING)
    logging.getLogger("kafka").propagate = False

    def watch():
        # The consumer may block in its bootstrap: end the process with the
        # error once it is logged.
        while True:
            time.sleep(0.05)
            if result["auth_error"] is not None:
                emit(result, 5)
                os._exit(5)

    threading.Thread(target=watch, daemon=True).start()
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=args.bootstrap,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism=args.mechanism,
            sasl_plain_username=args.username,
            sasl_plain_password=args.password,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=10000,
        )
        tps = [TopicPartition(args.topic, p) for p in sorted(ends)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        counts = {p: 0 for p in ends}
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            if all(consumer.position(tp) >= ends[tp.partition] for tp in tps):
                result["counts"] = counts
                consumer.close()
                return emit(result, 0)
            for tp, records in consumer.poll(timeout_ms=200).items():
                counts[tp.partition] += len(records)
        result["counts"] = counts
        return emit(result, 4)
    except Exception as e:  # what kafka-python raises is the finding
        name = type(e).__name__
        result["errors"].append(f"{name}: {e}")
        if "Authentication" in name or "Sasl" in name or "authentication" in str(e).lower():
            result["auth_error"] = f"{name}: {e}"
            return emit(result, 5)
        return emit(result, 4)


def confluent(args):
    ck = need("confluent_kafka", "confluent-kafka")
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    ends = parse_ends(args.ends)
    result = {"client": "confluent-kafka", "version": ck.version()[0], "counts": {}, "errors": [], "auth_error": None}

    def on_error(err):
        result["errors"].append(f"{err.name()}: {err.str()}")
        if err.code() == KafkaError._AUTHENTICATION:
            result["auth_error"] = f"{err.name()}: {err.str()}"

    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": args.mechanism,
        "sasl.username": args.username,
        "sasl.password": args.password,
        "group.id": "sasl-clients-test",
        "enable.auto.commit": False,
        "error_cb": on_error,
    })
    consumer.assign([TopicPartition(args.topic, p, 0) for p in sorted(ends)])
    counts = {p: 0 for p in ends}
    positions = {p: 0 for p in ends}
    deadline = time.monotonic() + args.timeout
    while time.monotonic() < deadline:
        if result["auth_error"]:
            consumer.close()
            return emit(result, 5)
        if all(positions[p] >= ends[p] for p in ends):
            result["counts"] = counts
            consumer.close()
            return emit(result, 0)
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            on_error(msg.error())
            continue
        counts[msg.partition()] += 1
        positions[msg.partition()] = msg.offset() + 1
    result["counts"] = counts
    consumer.close()
    return emit(result, 4)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("client", choices=["kafka-python", "confluent"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--ends", required=True)
    parser.add_argument("--mechanism", required=True)
    parser.add_argument("--username", required=True)
    parser.add_argument("--password", required=True)
    parser.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv[1:])
    return kafka_python(args) if args.client == "kafka-python" else confluent(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv))

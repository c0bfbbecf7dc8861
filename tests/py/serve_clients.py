#!/usr/bin/env python3
"""Unchanged Python Kafka clients against a Kafka-protocol listener, for
ringmirror's serving tests (tests/serve_clients.rs).

Each subcommand drives one client exactly as an application would — no
consumer group (assign() only, no offset commits: the agent does not serve
groups yet) — and prints one JSON object on stdout. Bytes are hex strings,
null stays null, so the Rust side compares what each client saw byte for
byte.

    serve_clients.py kafka-python-consume --bootstrap HOST:PORT --topic T \\
            --ends P:END[,P:END...] [--isolation read_uncommitted|read_committed] [--timeout S] \\
            [--api-version X.Y]
    serve_clients.py confluent-consume (same arguments but --api-version)
        kafka-python's KafkaConsumer (group_id=None) or confluent-kafka's
        Consumer (librdkafka): assign the partitions, start at the
        beginning, poll until every partition's position reaches its END.
        Prints {"client", "version", "records": [{"partition", "offset",
        "key", "value", "headers": [[key hex, value hex|null]...],
        "timestamp", "timestamp_type"}...], "positions": {P: offset},
        "watermarks": {P: [low, high]} (as the client itself asks the
        broker, at its isolation level), "errors": [what the client reported
        on the way]}; confluent-consume adds "eof_at": {P: offset of the
        partition's last end-of-partition event}.

    serve_clients.py confluent-produce --bootstrap HOST:PORT --topic T --partition P \\
            [--count N] [--timeout S]
        confluent-kafka's Producer sends N records to one partition and
        waits for every delivery report. Prints {"client", "version",
        "reports": [{"error": null | {"code", "name", "str", "retriable",
        "fatal"}, "offset"}...], "in_queue": records never reported}.

Exit status: 0 done; 2 usage; 3 a needed module is missing (the message
names the pip package); 4 the deadline passed before the end offsets were
reached (what was read so far is still printed, for the failure message).
"""

import argparse
import json
import sys
import time


def hexb(b):
    return None if b is None else bytes(b).hex()


def headers_json(headers):
    # Header keys are strings in both clients; encode them back to bytes so
    # both sides of the comparison use one shape.
    return [[k.encode("utf-8").hex(), hexb(v)] for k, v in (headers or [])]


def parse_ends(text):
    ends = {}
    for item in text.split(","):
        partition, end = item.split(":")
        ends[int(partition)] = int(end)
    return ends


def need(module, package):
    """Imports `module`, or exits 3 with a message naming the pip package."""
    try:
        return __import__(module)
    except ImportError as e:
        sys.stderr.write("missing Python module %s: %s (pip install %s)\n" % (module, e, package))
        sys.exit(3)


def emit(result, timed_out):
    print(json.dumps(result))
    sys.stdout.flush()
    if timed_out:
        sys.stderr.write("deadline passed before the end offsets were reached\n")
        sys.exit(4)


def kafka_python_consume(args):
    kafka = need("kafka", "kafka-python")
    # kafka-python's codec modules: the mirrored batches may use any codec.
    need("lz4", "lz4")
    need("snappy", "python-snappy")
    need("zstandard", "zstandard")
    from kafka import KafkaConsumer, TopicPartition

    ends = parse_ends(args.ends)
    extra = {}
    if args.api_version:
        # Only for librdkafka's mock cluster (the test's source): it answers
        # ApiVersions v3+ with a reply kafka-python cannot parse, and a
        # configured broker version below 2.4 makes kafka-python ask with
        # v2. The agent is always read with the version negotiated.
        extra["api_version"] = tuple(int(x) for x in args.api_version.split("."))
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap.split(","),
        group_id=None,
        enable_auto_commit=False,
        isolation_level=args.isolation,
        auto_offset_reset="earliest",
        request_timeout_ms=10000,
        client_id="ringmirror-serve-test",
        **extra,
    )
    tps = {p: TopicPartition(args.topic, p) for p in ends}
    consumer.assign(list(tps.values()))
    consumer.seek_to_beginning()
    records = []
    deadline = time.monotonic() + args.timeout
    timed_out = False
    # position() advances past control batches and aborted batches too, so
    # "position >= end" is the end whatever the last batch was.
    while not all(consumer.position(tps[p]) >= end for p, end in ends.items()):
        if time.monotonic() > deadline:
            timed_out = True
            break
        for tp, batch in consumer.poll(timeout_ms=200).items():
            for r in batch:
                records.append({
                    "partition": tp.partition,
                    "offset": r.offset,
                    "key": hexb(r.key),
                    "value": hexb(r.value),
                    "headers": headers_json(r.headers),
                    "timestamp": r.timestamp,
                    "timestamp_type": {0: "create_time", 1: "log_append_time"}.get(r.timestamp_type, "none"),
                })
    positions = {p: consumer.position(tp) for p, tp in tps.items()}
    low = consumer.beginning_offsets(list(tps.values()))
    high = consumer.end_offsets(list(tps.values()))
    watermarks = {p: [low[tp], high[tp]] for p, tp in tps.items()}
    consumer.close(autocommit=False)
    emit({
        "client": "kafka-python",
        "version": kafka.__version__,
        "records": records,
        "positions": positions,
        "watermarks": watermarks,
        "errors": [],
    }, timed_out)


def confluent_consume(args):
    ck = need("confluent_kafka", "confluent-kafka")
    from confluent_kafka import Consumer, KafkaError, TopicPartition, OFFSET_BEGINNING

    ends = parse_ends(args.ends)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap,
        # librdkafka insists on a group id; with assign() and no commits the
        # group is never joined.
        "group.id": "ringmirror-serve-test",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "isolation.level": args.isolation,
        "auto.offset.reset": "earliest",
        "client.id": "ringmirror-serve-test",
    })
    consumer.assign([TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in ends])
    records = []
    errors = []
    # Where each partition's end-of-partition event said the fetch position was.
    eof_at = {}
    deadline = time.monotonic() + args.timeout
    timed_out = False

    def done():
        return all(end == 0 or eof_at.get(p, -1) >= end for p, end in ends.items())

    while not done():
        if time.monotonic() > deadline:
            timed_out = True
            break
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                eof_at[msg.partition()] = msg.offset()
            else:
                errors.append({"code": err.code(), "name": err.name(), "str": err.str()})
            continue
        ts_type, ts = msg.timestamp()
        records.append({
            "partition": msg.partition(),
            "offset": msg.offset(),
            "key": hexb(msg.key()),
            "value": hexb(msg.value()),
            "headers": headers_json(msg.headers()),
            "timestamp": ts,
            "timestamp_type": {1: "create_time", 2: "log_append_time"}.get(ts_type, "none"),
        })
    positions = {
        tp.partition: tp.offset
        for tp in consumer.position([TopicPartition(args.topic, p) for p in ends])
    }
    watermarks = {
        p: list(consumer.get_watermark_offsets(TopicPartition(args.topic, p), timeout=10, cached=False))
        for p in ends
    }
    consumer.close()
    emit({
        "client": "confluent-kafka",
        "version": "%s (librdkafka %s)" % (ck.__version__, ck.libversion()[0]),
        "records": records,
        "positions": positions,
        "watermarks": watermarks,
        "eof_at": eof_at,
        "errors": errors,
    }, timed_out)


def confluent_produce(args):
    ck = need("confluent_kafka", "confluent-kafka")
    from confluent_kafka import Producer

    producer = Producer({
        "bootstrap.servers": args.bootstrap,
        # Bounded: a refusal must come back as a delivery report, and even a
        # retried one must not outlive the test.
        "message.timeout.ms": int(args.timeout * 1000 / 2),
        "client.id": "ringmirror-serve-test",
    })
    reports = []

    def on_delivery(err, msg):
        reports.append({
            "error": None if err is None else {
                "code": err.code(),
                "name": err.name(),
                "str": err.str(),
                "retriable": err.retriable(),
                "fatal": err.fatal(),
            },
            "offset": msg.offset(),
        })

    for i in range(args.count):
        producer.produce(args.topic, key=b"k%d" % i, value=b"must not be written %d" % i,
                         partition=args.partition, on_delivery=on_delivery)
    in_queue = producer.flush(args.timeout)
    emit({
        "client": "confluent-kafka",
        "version": "%s (librdkafka %s)" % (ck.__version__, ck.libversion()[0]),
        "reports": reports,
        "in_queue": in_queue,
    }, in_queue > 0)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("kafka-python-consume", "confluent-consume"):
        p = sub.add_parser(name)
        p.add_argument("--bootstrap", required=True)
        p.add_argument("--topic", required=True)
        p.add_argument("--ends", required=True, help="P:END[,P:END...]")
        p.add_argument("--isolation", default="read_uncommitted",
                       choices=["read_uncommitted", "read_committed"])
        p.add_argument("--timeout", type=float, default=30.0)
        if name == "kafka-python-consume":
            p.add_argument("--api-version", help="broker version to assume, e.g. 2.3 (default: ask)")
    p = sub.add_parser("confluent-produce")
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--count", type=int, default=3)
    p.add_argument("--timeout", type=float, default=20.0)
    args = parser.parse_args(argv[1:])
    {
        "kafka-python-consume": kafka_python_consume,
        "confluent-consume": confluent_consume,
        "confluent-produce": confluent_produce,
    }[args.command](args)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

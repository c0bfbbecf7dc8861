#!/usr/bin/env python3
"""Kafka record batches built and read by kafka-python, for ringmirror's interop tests.

Code we did not write on both ends: batches come from kafka-python's
`kafka.record` builder (the one its producer uses), and ringmirror's segment
files are read back with kafka-python's `kafka.record` reader (the one its
consumer uses).

    kafka_record_batches.py build OUT_DIR
        Writes OUT_DIR/batches.bin (concatenated v2 record batches with
        increasing base offsets, one codec per batch: none, gzip, snappy, lz4,
        zstd; idempotent and transactional batches; COMMIT and ABORT control
        batches; an open transaction at the end) and OUT_DIR/expected.json
        (every batch and record, bytes as hex, plus the transaction state a
        broker must derive from them).

    kafka_record_batches.py read LOG_FILE
        Reads a segment .log file with kafka-python's MemoryRecords /
        DefaultRecordBatch and prints JSON of every batch and every record
        (control batches included and reported as such). Exits non-zero if
        the file holds anything but whole, CRC-valid v2 batches.

Only the standard library and kafka-python (plus its codec modules python-snappy,
lz4 and zstandard) are used. Exit status 3 means a needed module is missing.
"""

import json
import os
import struct
import sys

try:
    import kafka
    from kafka.record import MemoryRecords
    from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder, calc_crc32c
    import lz4  # noqa: F401  (kafka-python's lz4 codec)
    import snappy  # noqa: F401  (kafka-python's snappy codec)
    import zstandard  # noqa: F401  (kafka-python's zstd codec)
except ImportError as e:  # pragma: no cover - reported to the Rust test
    sys.stderr.write(
        "missing Python module: %s (pip install kafka-python lz4 python-snappy zstandard)\n" % e
    )
    sys.exit(3)

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
CODEC_NAMES = {v: k for k, v in CODECS.items()}

# Byte positions in the v2 batch header (see DESIGN.md "Facts we rely on").
OFF_BASE_OFFSET = 0
OFF_LEADER_EPOCH = 12
OFF_CRC = 17
OFF_ATTRIBUTES = 21
ATTR_CONTROL = 0x20

CONTROL_ABORT = 0
CONTROL_COMMIT = 1


def hexb(b):
    return None if b is None else bytes(b).hex()


def finish(builder, base_offset, leader_epoch, control=False):
    """Builds the batch, then sets what a broker sets: the base offset and the
    partition leader epoch (both outside the CRC). For a control batch the
    control attribute is set too, which kafka-python's builder (a producer's
    builder) never does, so the CRC is recomputed with kafka-python's CRC32C."""
    buf = bytearray(builder.build())
    struct.pack_into(">q", buf, OFF_BASE_OFFSET, base_offset)
    struct.pack_into(">i", buf, OFF_LEADER_EPOCH, leader_epoch)
    if control:
        (attrs,) = struct.unpack_from(">h", buf, OFF_ATTRIBUTES)
        struct.pack_into(">h", buf, OFF_ATTRIBUTES, attrs | ATTR_CONTROL)
        struct.pack_into(">I", buf, OFF_CRC, calc_crc32c(memoryview(buf)[OFF_ATTRIBUTES:]))
    check = DefaultRecordBatch(bytes(buf))
    assert check.validate_crc(), "kafka-python built a batch with a bad CRC"
    return bytes(buf)


def compressible(seed, n):
    """Text that compresses well (kafka-python sends a batch uncompressed when
    compression does not make it smaller) but is not all one byte."""
    words = [b"mirror", b"kafka", b"segment", b"offset", b"epoch", b"batch", b"record"]
    out = bytearray()
    i = seed
    while len(out) < n:
        out += words[i % len(words)] + b" %d " % (i % 97)
        i += 7
    return bytes(out[:n])


class Scenario:
    def __init__(self):
        self.batches = []  # (bytes, description)
        self.next_offset = 0

    def add(self, codec, records, base_offset=None, producer=None, transactional=False,
            leader_epoch=0, control=None):
        """records: list of (offset_delta, timestamp, key, value, headers).
        producer: (producer_id, producer_epoch, base_sequence) or None.
        control: (control_type, coordinator_epoch) for a control batch."""
        base = self.next_offset if base_offset is None else base_offset
        assert base >= self.next_offset
        pid, pepoch, seq = producer if producer else (-1, -1, -1)
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=CODECS[codec], is_transactional=transactional,
            producer_id=pid, producer_epoch=pepoch, base_sequence=seq, batch_size=16 * 1024 * 1024)
        if control is not None:
            ctype, coordinator_epoch = control
            records = [(0, records[0][1], struct.pack(">hh", 0, ctype),
                        struct.pack(">hi", 0, coordinator_epoch), [])]
        for delta, ts, key, value, headers in records:
            meta = builder.append(delta, timestamp=ts, key=key, value=value, headers=headers)
            assert meta is not None, "record did not fit the batch"
        raw = finish(builder, base, leader_epoch, control=control is not None)
        (attrs,) = struct.unpack_from(">h", raw, OFF_ATTRIBUTES)
        actual_codec = CODEC_NAMES[attrs & 0x07]
        assert actual_codec == codec, "kafka-python wrote %s, wanted %s" % (actual_codec, codec)
        last_delta = records[-1][0]
        desc = {
            "base_offset": base,
            "last_offset": base + last_delta,
            "leader_epoch": leader_epoch,
            "compression": codec,
            "is_transactional": transactional,
            "is_control": control is not None,
            "producer_id": pid,
            "producer_epoch": pepoch,
            "base_sequence": seq,
            "records_count": len(records),
            "size_bytes": len(raw),
            "control_type": None if control is None else control[0],
            "coordinator_epoch": None if control is None else control[1],
            "records": [
                {
                    "offset": base + delta,
                    "timestamp": ts,
                    "key": hexb(key),
                    "value": hexb(value),
                    "headers": [[k.encode("utf-8").hex(), hexb(v)] for k, v in headers],
                }
                for delta, ts, key, value, headers in records
            ],
        }
        self.batches.append((raw, desc))
        self.next_offset = base + last_delta + 1
        return desc


def plain_records(seed, count, ts0, big=False):
    recs = []
    for i in range(count):
        size = 40_000 if big and i == 0 else 200 + 13 * i
        recs.append((
            i,
            ts0 + 10 * i,
            b"key-%d-%d" % (seed, i),
            compressible(seed + i, size),
            [("trace-id", b"%08x" % (seed * 1000 + i)), ("codec-\u00e9", b"\x00\x01\xff")],
        ))
    return recs


def build(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    s = Scenario()
    t0 = 1_700_000_000_000

    # One batch per codec, plain producer. Snappy's first value is larger than
    # kafka-python's 32 KiB xerial block so the xerial framing has several blocks.
    for n, codec in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        s.add(codec, plain_records(n, 5, t0 + n * 1000, big=(codec in ("snappy", "lz4", "zstd"))))

    # Odd records: null key, null value (tombstone), empty key and value,
    # binary bytes, a null header value, several headers, no headers, and a
    # timestamp below the batch's first (negative delta), in a gzip batch.
    odd = [
        (0, t0 + 9000, None, compressible(50, 300), []),
        (1, t0 + 9001, b"tombstone", None, [("h", None)]),
        (2, t0 + 8000, b"", b"", [("a", b""), ("b", b"x"), ("a", b"dup-key")]),
        (3, t0 + 9500, bytes(range(256)), bytes(range(255, -1, -1)) * 4, [("bin", bytes(range(256)))]),
    ]
    s.add("gzip", odd)

    # Compacted-looking batch: offset gaps inside (deltas 0, 2, 5), and a gap
    # of 10 offsets before it.
    s.add("none", [
        (0, t0 + 10_000, b"c0", b"v0", []),
        (2, t0 + 10_002, b"c2", b"v2", []),
        (5, t0 + 10_005, b"c5", b"v5", [("k", b"v")]),
    ], base_offset=s.next_offset + 10, leader_epoch=1)

    # Idempotent producer 500, epoch 0: two batches, sequences 0-2 and 3-4.
    idem1 = s.add("lz4", plain_records(60, 3, t0 + 11_000), producer=(500, 0, 0), leader_epoch=1)
    idem2 = s.add("snappy", plain_records(61, 2, t0 + 11_100), producer=(500, 0, 3), leader_epoch=1)

    # Transactions, interleaved: producer 1000 (epoch 3) commits, producer
    # 2000 (epoch 0) aborts.
    a1 = s.add("gzip", plain_records(70, 3, t0 + 12_000), producer=(1000, 3, 0), transactional=True,
               leader_epoch=2)
    b1 = s.add("zstd", plain_records(71, 2, t0 + 12_100), producer=(2000, 0, 0), transactional=True,
               leader_epoch=2)
    s.add("none", plain_records(72, 2, t0 + 12_200), producer=(1000, 3, 3), transactional=True,
          leader_epoch=2)
    commit_a = s.add("none", [(0, t0 + 12_300, None, None, [])], producer=(1000, 3, -1),
                     transactional=True, leader_epoch=2, control=(CONTROL_COMMIT, 7))
    s.add("snappy", plain_records(73, 2, t0 + 12_400), producer=(2000, 0, 2), transactional=True,
          leader_epoch=2)
    abort_b = s.add("none", [(0, t0 + 12_500, None, None, [])], producer=(2000, 0, -1),
                    transactional=True, leader_epoch=2, control=(CONTROL_ABORT, 7))
    # A non-transactional batch after the markers, then a transaction left open
    # (producer 3000): the last stable offset must stop at its first offset.
    s.add("zstd", plain_records(74, 2, t0 + 12_600), leader_epoch=2)
    open_c = s.add("lz4", plain_records(75, 2, t0 + 12_700), producer=(3000, 1, 0), transactional=True,
                   leader_epoch=2)

    data = b"".join(raw for raw, _ in s.batches)
    with open(os.path.join(out_dir, "batches.bin"), "wb") as f:
        f.write(data)
    expected = {
        "kafka_python_version": kafka.__version__,
        "batches": [d for _, d in s.batches],
        "log_end_offset": s.next_offset,
        # What a broker derives from these batches (stated, not computed from
        # the batch list, so the Rust side checks against an independent answer).
        "transactions": {
            "aborted": [{
                "producer_id": 2000,
                "first_offset": b1["base_offset"],
                "last_offset": abort_b["base_offset"],
                # Nothing else is open right after the ABORT marker.
                "last_stable_offset": abort_b["base_offset"] + 1,
            }],
            "committed": [{
                "producer_id": 1000,
                "first_offset": a1["base_offset"],
                "last_offset": commit_a["base_offset"],
            }],
            "open": [{"producer_id": 3000, "first_offset": open_c["base_offset"]}],
            "last_stable_offset": open_c["base_offset"],
        },
        "producers": [
            {"producer_id": 500, "producer_epoch": 0, "last_sequence": 4,
             "last_offset": idem2["last_offset"]},
            {"producer_id": 3000, "producer_epoch": 1, "last_sequence": 1,
             "last_offset": open_c["last_offset"]},
        ],
    }
    assert idem1["base_sequence"] == 0
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(json.dumps({"batches": len(s.batches), "bytes": len(data), "log_end_offset": s.next_offset}))


def read(log_file):
    with open(log_file, "rb") as f:
        data = f.read()
    records = MemoryRecords(data)
    batches = []
    while records.has_next():
        batch = records.next_batch()
        if not isinstance(batch, DefaultRecordBatch):
            raise SystemExit("not a v2 batch at offset %s" % batch.base_offset)
        crc_valid = batch.validate_crc()
        out = {
            "base_offset": batch.base_offset,
            "last_offset": batch.last_offset,
            "leader_epoch": batch.leader_epoch,
            "compression": CODEC_NAMES.get(batch.compression_type, "unknown"),
            "is_transactional": batch.is_transactional,
            "is_control": batch.is_control_batch,
            "producer_id": batch.producer_id,
            "producer_epoch": batch.producer_epoch,
            "base_sequence": batch.base_sequence,
            "records_count": batch.records_count,
            "size_bytes": batch.size_in_bytes,
            "crc_valid": crc_valid,
            "control_type": None,
            "coordinator_epoch": None,
            "records": [],
        }
        for rec in batch:
            out["records"].append({
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "key": hexb(rec.key),
                "value": hexb(rec.value),
                "headers": [[k.encode("utf-8").hex(), hexb(v)] for k, v in rec.headers],
            })
            if batch.is_control_batch:
                # kafka-python's ControlRecord parsed the key (version, type).
                out["control_type"] = rec.type
                if rec.value is not None and len(rec.value) >= 6:
                    out["coordinator_epoch"] = struct.unpack_from(">hi", rec.value)[1]
        batches.append(out)
    valid = records.valid_bytes()
    result = {"file_bytes": len(data), "valid_bytes": valid, "batches": batches}
    print(json.dumps(result))
    if valid != len(data):
        sys.stderr.write("%d bytes after the last whole batch\n" % (len(data) - valid))
        sys.exit(1)
    if not all(b["crc_valid"] for b in batches):
        sys.stderr.write("a batch has a bad CRC\n")
        sys.exit(1)


def main(argv):
    if len(argv) != 3 or argv[1] not in ("build", "read"):
        sys.stderr.write(__doc__)
        return 2
    if argv[1] == "build":
        build(argv[2])
    else:
        read(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

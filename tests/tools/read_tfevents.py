#!/usr/bin/env python3
"""Reads TensorBoard event files by the format's published spec, independently of Kiln's writer
(app/tensorboard_events.cpp): TFRecord frames whose length and record CRC-32C (masked) must match,
each record an Event protobuf decoded field by field. Standard library only.

    read_tfevents.py FILE [--expect TAG ...]   prints "tag: n points, first -> last" per tag;
                                               exit 1 on a bad frame or a missing expected tag
"""
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf, i):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, i
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a protobuf message; value is bytes for wire type 2."""
    i = 0
    while i < len(buf):
        k, i = varint(buf, i)
        num, wt = k >> 3, k & 7
        if wt == 0:
            v, i = varint(buf, i)
        elif wt == 1:
            v, i = buf[i:i + 8], i + 8
        elif wt == 5:
            v, i = buf[i:i + 4], i + 4
        elif wt == 2:
            n, i = varint(buf, i)
            v, i = buf[i:i + n], i + n
        else:
            raise ValueError("unsupported wire type %d" % wt)
        yield num, wt, v


def read(path):
    """[(wall_time, step, file_version or None, [(tag, value)])]; raises on a bad frame."""
    events = []
    with open(path, "rb") as f:
        data = f.read()
    i = 0
    while i < len(data):
        if i + 12 > len(data):
            raise ValueError("%s: truncated frame header at byte %d" % (path, i))
        header = data[i:i + 8]
        (n,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[i + 8:i + 12])
        if hcrc != masked(header):
            raise ValueError("%s: length CRC mismatch at byte %d" % (path, i))
        record = data[i + 12:i + 12 + n]
        (rcrc,) = struct.unpack("<I", data[i + 12 + n:i + 16 + n])
        if len(record) != n or rcrc != masked(record):
            raise ValueError("%s: record CRC mismatch at byte %d" % (path, i))
        i += 16 + n
        wall, step, version, values = 0.0, 0, None, []
        for num, wt, v in fields(record):
            if num == 1 and wt == 1:
                (wall,) = struct.unpack("<d", v)
            elif num == 2 and wt == 0:
                step = v
            elif num == 3 and wt == 2:
                version = v.decode()
            elif num == 5 and wt == 2:
                for snum, _, sv in fields(v):
                    if snum != 1:
                        continue
                    tag, value = None, None
                    for vnum, vwt, vv in fields(sv):
                        if vnum == 1:
                            tag = vv.decode()
                        elif vnum == 2 and vwt == 5:
                            (value,) = struct.unpack("<f", vv)
                    values.append((tag, value))
        events.append((wall, step, version, values))
    return events


def main(argv):
    if not argv:
        print(__doc__)
        return 2
    path, expect = argv[0], []
    if "--expect" in argv:
        expect = argv[argv.index("--expect") + 1:]
    try:
        events = read(path)
    except (ValueError, IndexError, struct.error) as e:
        print("bad event file: %s" % e)
        return 1
    if not events or events[0][2] != "brain.Event:2":
        print("bad event file: the first record is not the file version")
        return 1
    series = {}
    for _, step, _, values in events:
        for tag, value in values:
            series.setdefault(tag, []).append((step, value))
    for tag in sorted(series):
        pts = series[tag]
        print("%s: %d points, %g -> %g" % (tag, len(pts), pts[0][1], pts[-1][1]))
    missing = [t for t in expect if t not in series]
    if missing:
        print("missing tags: %s" % ", ".join(missing))
        return 1
    print("%d records, %d tags" % (len(events), len(series)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

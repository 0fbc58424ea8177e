#!/usr/bin/env python3
"""Reads TensorBoard event files (tfevents) with the standard library only.

An independent check of recipes/trainer/tensorboard/event_writer: its own
CRC-32C, TFRecord framing and protobuf decoding, nothing shared with the C++.

  read_events.py PATH...                 # files, or directories of *tfevents* files
      prints one line per scalar: "<step> <tag> <value>" (value: float32, %.9g),
      and per text value (the text plugin's): "<step> <tag> text: <n> lines"
  read_events.py --json PATH...          # one JSON object per scalar or text
      {"file": ..., "step": ..., "wall_time": ..., "tag": ..., "value": ...} / ... "text": ...}
  read_events.py --tensorboard DIR       # the same through TensorBoard's own
      EventAccumulator (needs the tensorboard package): tags, then values

Exit codes: 0 read; 1 a damaged file (bad CRC, truncated record, bad
protobuf: one line naming the file and the record's offset); 2 usage, or
--tensorboard without the tensorboard package.
"""

import json
import os
import struct
import sys


class Damaged(Exception):
    pass


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked_crc32c(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob, name):
    """Yields (offset, payload) of each TFRecord, checking both CRCs."""
    at = 0
    while at < len(blob):
        if at + 12 > len(blob):
            raise Damaged("%s: truncated record header at byte %d" % (name, at))
        header = blob[at:at + 8]
        (n,) = struct.unpack("<Q", header)
        (crc,) = struct.unpack("<I", blob[at + 8:at + 12])
        if crc != masked_crc32c(header):
            raise Damaged("%s: length CRC mismatch at byte %d" % (name, at))
        if at + 16 + n > len(blob):
            raise Damaged("%s: truncated record at byte %d (length %d)" % (name, at, n))
        payload = blob[at + 12:at + 12 + n]
        (crc,) = struct.unpack("<I", blob[at + 12 + n:at + 16 + n])
        if crc != masked_crc32c(payload):
            raise Damaged("%s: data CRC mismatch in the record at byte %d" % (name, at))
        yield at, payload
        at += 16 + n


def fields(buf):
    """Yields (field number, wire type, value) of a protobuf message; value:
    int for varints, bytes for fixed32/fixed64/length-delimited."""
    i = 0

    def varint():
        nonlocal i
        shift = v = 0
        while True:
            if i >= len(buf) or shift > 63:
                raise ValueError("bad varint")
            b = buf[i]
            i += 1
            v |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return v

    while i < len(buf):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n = varint()
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError("wire type %d" % wire)
        if i > len(buf):
            raise ValueError("field %d runs past the message" % number)
        yield number, wire, value


def decode_event(payload):
    """Event {wall_time=1, step=2, file_version=3, summary=5} -> dict."""
    ev = {"wall_time": 0.0, "step": 0, "file_version": None, "values": [], "texts": []}
    for number, wire, value in fields(payload):
        if number == 1 and wire == 1:
            ev["wall_time"] = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            ev["step"] = value - (1 << 64) if value >= 1 << 63 else value
        elif number == 3 and wire == 2:
            ev["file_version"] = value.decode("utf-8")
        elif number == 5 and wire == 2:
            for vn, vw, v in fields(value):  # Summary.value = 1
                if vn != 1 or vw != 2:
                    continue
                tag, simple, text, plugin = None, None, None, None
                # Value {tag = 1, simple_value = 2, tensor = 8, metadata = 9}
                for fn, fw, f in fields(v):
                    if fn == 1 and fw == 2:
                        tag = f.decode("utf-8")
                    elif fn == 2 and fw == 5:
                        simple = struct.unpack("<f", f)[0]
                    elif fn == 8 and fw == 2:  # TensorProto {dtype = 1, string_val = 8}
                        dtype = None
                        for tn, tw, t in fields(f):
                            if tn == 1 and tw == 0:
                                dtype = t
                            elif tn == 8 and tw == 2:
                                text = t.decode("utf-8")
                        if dtype != 7:  # DT_STRING
                            raise ValueError("tensor of dtype %s, not a string" % dtype)
                    elif fn == 9 and fw == 2:  # SummaryMetadata {plugin_data = 1 {plugin_name = 1}}
                        for pn, pw, pd in fields(f):
                            if pn == 1 and pw == 2:
                                for nn, nw, name in fields(pd):
                                    if nn == 1 and nw == 2:
                                        plugin = name.decode("utf-8")
                if tag is not None and simple is not None:
                    ev["values"].append((tag, simple))
                elif tag is not None and text is not None and plugin == "text":
                    ev["texts"].append((tag, text))
    return ev


def event_files(paths):
    out = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(os.path.join(p, f) for f in os.listdir(p) if "tfevents" in f)
        else:
            out.append(p)
    return out


def read_file(path):
    """Yields the decoded events of one file; Damaged on any fault."""
    with open(path, "rb") as f:
        blob = f.read()
    first = True
    for at, payload in records(blob, path):
        try:
            ev = decode_event(payload)
        except (ValueError, UnicodeDecodeError, struct.error) as e:
            raise Damaged("%s: bad Event in the record at byte %d: %s" % (path, at, e))
        if first and ev["file_version"] != "brain.Event:2":
            raise Damaged("%s: first record is not file_version brain.Event:2" % path)
        first = False
        yield ev


def with_tensorboard(paths):
    try:
        from tensorboard.backend.event_processing import event_accumulator
    except ImportError:
        print("read_events.py: --tensorboard needs the tensorboard package (pip install tensorboard)",
              file=sys.stderr)
        return 2
    for d in paths:
        acc = event_accumulator.EventAccumulator(d, size_guidance={event_accumulator.SCALARS: 0})
        acc.Reload()
        tags = acc.Tags().get("scalars", [])
        print("%s: %d scalar tags: %s" % (d, len(tags), " ".join(sorted(tags))))
        for tag in sorted(tags):
            for s in acc.Scalars(tag):
                print("%d %s %.9g" % (s.step, tag, s.value))
    return 0


def main(argv):
    args = argv[1:]
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip(), file=sys.stderr)
        return 2
    mode = "text"
    if args[0] in ("--json", "--tensorboard"):
        mode, args = args[0][2:], args[1:]
    if not args or any(a.startswith("--") for a in args):
        print("usage: read_events.py [--json | --tensorboard] PATH...", file=sys.stderr)
        return 2
    if mode == "tensorboard":
        return with_tensorboard(args)
    files = event_files(args)
    if not files:
        print("read_events.py: no event files in %s" % " ".join(args), file=sys.stderr)
        return 1
    try:
        for path in files:
            for ev in read_file(path):
                for tag, text in ev["texts"]:
                    if mode == "json":
                        print(json.dumps({"file": path, "step": ev["step"], "wall_time": ev["wall_time"],
                                          "tag": tag, "text": text}))
                    else:
                        print("%d %s text: %d lines" % (ev["step"], tag, text.count("\n")))
                for tag, value in ev["values"]:
                    if mode == "json":
                        print(json.dumps({"file": path, "step": ev["step"], "wall_time": ev["wall_time"],
                                          "tag": tag, "value": value}))
                    else:
                        print("%d %s %.9g" % (ev["step"], tag, value))
    except Damaged as e:
        print("read_events.py: %s" % e, file=sys.stderr)
        return 1
    except OSError as e:
        print("read_events.py: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

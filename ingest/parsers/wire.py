"""Binary framings and the protobuf wire format, read without TensorFlow, wandb or protobuf.

Used by the TensorBoard event-file and W&B transaction-log parsers to turn a binary file into
records; the formats are public (TFRecord: TensorFlow's ``tf.io.TFRecordWriter`` framing;
LevelDB's log format with W&B's 7-byte file header; protobuf's wire format).

Rules
-----
* **TFRecord** (:func:`tfrecords`): each record is ``uint64 length``, ``uint32 masked
  CRC-32C of the length``, ``data``, ``uint32 masked CRC-32C of the data``, little-endian.
  A length whose CRC does not match, or a record cut short, is a :class:`WireError` naming
  the record (1-based); the data CRC is checked by :func:`check_tfrecord` for the records a
  parser keeps (scalar events are tiny; images and graphs are not checked, nor read).
* **LevelDB log** (:func:`leveldb_records`): the W&B header ``:W&B``, magic ``0xBEE1``, version
  0; then 32 KiB blocks of chunks ``uint32 CRC``, ``uint16 length``, ``uint8 type`` (1 full, 2
  first, 3 middle, 4 last) with the CRC (zlib's CRC-32, seeded with the type byte's) checked
  for every chunk; a block's tail shorter than a chunk header is padding. A bad CRC, an unknown
  type or chunks out of order is a :class:`WireError` at the record number; a file cut inside
  a record ends the records (``truncated``).
* **Protobuf** (:func:`fields`): tag varints, wire types 0 (varint), 1 (64-bit), 2 (length
  delimited), 5 (32-bit); groups (3, 4) and varints longer than 10 bytes are errors.
  :func:`message` gathers a message's fields by number (repeated fields in order).
* **Decoded records**: the parsers' ``decode`` writes one JSON object a record;
  :func:`first_decoded` reads the first one back for their ``sniff``.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from typing import Any

from ingest.events import ParseError

MAX_RECORD_BYTES = 1 << 31  # a TFRecord length beyond this is corruption, not data
LEVELDB_BLOCK = 32768
LEVELDB_CHUNK_HEADER = 7
WANDB_HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)


class WireError(ParseError):
    """Bytes that do not follow the framing: ``record`` is the 1-based record number (also its
    ``line``: a binary log's parser reports records as lines). A :class:`ParseError` whose
    message is the reason alone (the parsers add the file and the record)."""

    def __init__(self, reason: str, record: int | None = None):
        super().__init__(reason, line=record)
        self.record = record

    def __str__(self) -> str:
        return self.reason


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``."""
    crc = 0xFFFFFFFF
    table = _CRC32C
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data: bytes) -> int:
    """TFRecord's masked CRC-32C."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(data: bytes) -> Iterator[tuple[int, int, int]]:
    """``(record number, start, end)`` of each TFRecord's data in ``data`` (rules above)."""
    pos, number, size = 0, 0, len(data)
    while pos < size:
        number += 1
        if size - pos < 12:
            raise WireError(f"record {number} cut short (file ends inside its header)", number)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked_crc32c(header) != length_crc:
            raise WireError(f"record {number}: length checksum does not match (corrupt)", number)
        if length > MAX_RECORD_BYTES:
            raise WireError(f"record {number}: length {length} bytes is not plausible", number)
        start, end = pos + 12, pos + 12 + length
        if end + 4 > size:
            raise WireError(f"record {number} cut short (file ends inside its data)", number)
        yield number, start, end
        pos = end + 4


def check_tfrecord(data: bytes, start: int, end: int, number: int) -> None:
    """:class:`WireError` unless the data CRC of the record at ``start:end`` matches."""
    (stored,) = struct.unpack("<I", data[end:end + 4])
    if masked_crc32c(data[start:end]) != stored:
        raise WireError(f"record {number}: data checksum does not match (corrupt)", number)


_TYPE_SEED = {t: zlib.crc32(bytes([t])) for t in (1, 2, 3, 4)}


def leveldb_records(data: bytes) -> tuple[list[bytes], bool]:
    """The records of a W&B transaction log and whether it ends inside one (rules above)."""
    if not data.startswith(WANDB_HEADER[:4]):
        raise WireError("not a W&B transaction log (no ':W&B' header)", 1)
    if data[:len(WANDB_HEADER)] != WANDB_HEADER:
        raise WireError("W&B transaction log of an unknown version (header "
                        f"{data[4:7].hex()}, this reader knows e1be00)", 1)
    records: list[bytes] = []
    pending: list[bytes] | None = None
    pos, size = len(WANDB_HEADER), len(data)
    while pos < size:
        left = LEVELDB_BLOCK - pos % LEVELDB_BLOCK
        if left < LEVELDB_CHUNK_HEADER:
            pos += left  # block trailer padding
            continue
        if size - pos < LEVELDB_CHUNK_HEADER:
            return records, True
        crc, length, kind = struct.unpack("<IHB", data[pos:pos + LEVELDB_CHUNK_HEADER])
        number = len(records) + 1
        if crc == 0 and length == 0 and kind == 0:
            pos += left  # zero-filled rest of a block
            continue
        start = pos + LEVELDB_CHUNK_HEADER
        end = start + length
        if kind not in _TYPE_SEED:
            raise WireError(f"record {number}: unknown chunk type {kind}", number)
        if end > size:
            return records, True
        if length > left - LEVELDB_CHUNK_HEADER:
            raise WireError(f"record {number}: chunk runs past its block", number)
        chunk = data[start:end]
        if zlib.crc32(chunk, _TYPE_SEED[kind]) & 0xFFFFFFFF != crc:
            raise WireError(f"record {number}: checksum does not match (corrupt)", number)
        pos = end
        if kind == 1:
            if pending is not None:
                raise WireError(f"record {number}: a full record inside a split one", number)
            records.append(chunk)
        elif kind == 2:
            if pending is not None:
                raise WireError(f"record {number}: a split record starts inside another",
                                number)
            pending = [chunk]
        else:
            if pending is None:
                raise WireError(f"record {number}: the middle or end of a record without its "
                                "start", number)
            pending.append(chunk)
            if kind == 4:
                records.append(b"".join(pending))
                pending = None
    return records, pending is not None


def _varint(data: bytes, pos: int, end: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise WireError("malformed varint")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def fields(data: bytes, start: int = 0,
           end: int | None = None) -> Iterator[tuple[int, int, Any]]:
    """``(field number, wire type, value)`` of a message: an int for wire types 0, 1 and 5
    (the raw 64/32-bit pattern for 1 and 5), ``(start, end)`` into ``data`` for type 2."""
    end = len(data) if end is None else end
    pos = start
    while pos < end:
        tag, pos = _varint(data, pos, end)
        number, wire = tag >> 3, tag & 7
        if number == 0:
            raise WireError("field number 0")
        if wire == 0:
            value, pos = _varint(data, pos, end)
            yield number, wire, value
        elif wire == 1:
            if pos + 8 > end:
                raise WireError("64-bit field cut short")
            yield number, wire, struct.unpack_from("<Q", data, pos)[0]
            pos += 8
        elif wire == 5:
            if pos + 4 > end:
                raise WireError("32-bit field cut short")
            yield number, wire, struct.unpack_from("<I", data, pos)[0]
            pos += 4
        elif wire == 2:
            length, pos = _varint(data, pos, end)
            if pos + length > end:
                raise WireError("length-delimited field runs past its message")
            yield number, wire, (pos, pos + length)
            pos += length
        else:
            raise WireError(f"unsupported wire type {wire}")


def message(data: bytes, start: int = 0, end: int | None = None) -> dict[int, list[Any]]:
    """A message's fields by number (see :func:`fields`)."""
    out: dict[int, list[Any]] = {}
    for number, _, value in fields(data, start, end):
        out.setdefault(number, []).append(value)
    return out


def as_double(raw: int) -> float:
    """A 64-bit field as an IEEE double."""
    return float(struct.unpack("<d", struct.pack("<Q", raw))[0])


def as_float(raw: int) -> float:
    """A 32-bit field as an IEEE float."""
    return float(struct.unpack("<f", struct.pack("<I", raw))[0])


def as_signed(raw: int) -> int:
    """A varint as a two's-complement int64."""
    return raw - (1 << 64) if raw >= 1 << 63 else raw


def text(data: bytes, span: tuple[int, int]) -> str:
    """A length-delimited field as UTF-8 text (invalid bytes replaced)."""
    start, end = span
    return data[start:end].decode("utf-8", errors="replace")


def packed(data: bytes, span: tuple[int, int], size: int) -> list[int]:
    """A packed repeated fixed-width field (``size`` 4 or 8 bytes) as raw ints."""
    start, end = span
    if (end - start) % size:
        raise WireError("packed field of a length that is not a multiple of its width")
    fmt = f"<{(end - start) // size}{'I' if size == 4 else 'Q'}"
    return list(struct.unpack_from(fmt, data, start))


def first_decoded(head: list[str]) -> dict | None:
    """The first line a parser's ``decode`` wrote (one JSON object a record) as a dict, else
    None: what the binary formats' ``sniff`` looks at."""
    if not head:
        return None
    try:
        first = json.loads(head[0])
    except ValueError:
        return None
    return first if isinstance(first, dict) else None

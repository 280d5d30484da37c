"""The keys under which TF stores the slices of a partitioned variable.

A variable saved in parts (``tf.get_variable(..., partitioner=...)``) has a full entry
under its name, whose ``slices`` list the parts' extents, and one entry per part under
``EncodeTensorNameSlice(name, slice)`` (``tensorflow/core/util/saved_tensor_slice_util.cc``),
in TF's OrderedCode (``tensorflow/core/lib/strings/ordered_code.cc``)::

    NumIncreasing(0) | String(name) | NumIncreasing(ndims) |
    per dim: SignedNumIncreasing(start), SignedNumIncreasing(length, -1 = whole dim)

- NumIncreasing(n): one length byte, then n's big-endian bytes (0 is ``\\x00``).
- String(s): ``\\x00`` → ``\\x00\\xff``, ``\\xff`` → ``\\xff\\x00``, ended by ``\\x00\\x01``.
- SignedNumIncreasing(v), n bytes: v's two's complement in n bytes whose first n+1 bits
  are XORed with n ones and a zero (``0x80 ^ v`` for -64 ≤ v < 64).

:func:`decode_slice_key` reads such a key; anything else raises ``ValueError``.
"""

from __future__ import annotations

__all__ = ["decode_slice_key"]


def _num(key: bytes, pos: int) -> tuple[int, int]:
    n = key[pos]
    if n > 8 or pos + 1 + n > len(key):
        raise ValueError("bad length-prefixed number")
    return int.from_bytes(key[pos + 1:pos + 1 + n], "big"), pos + 1 + n


def _string(key: bytes, pos: int) -> tuple[bytes, int]:
    out = bytearray()
    while pos + 1 < len(key):
        b, nxt = key[pos], key[pos + 1]
        if b == 0 and nxt == 1:
            return bytes(out), pos + 2
        if b == 0 and nxt == 0xFF:
            out.append(0)
        elif b == 0xFF and nxt == 0:
            out.append(0xFF)
        elif b in (0, 0xFF):
            raise ValueError("bad string escape")
        else:
            out.append(b)
            pos += 1
            continue
        pos += 2
    raise ValueError("unterminated string")


def _signed(key: bytes, pos: int) -> tuple[int, int]:
    if pos >= len(key):
        raise ValueError("truncated signed number")
    first = key[pos]
    lead = first if first & 0x80 else first ^ 0xFF  # count the header's leading ones
    n = 1
    while n < 8 and lead & (0x80 >> n):
        n += 1
    if n >= 8 or pos + n > len(key):  # 8+ byte extents (≥ 2**48) do not occur here
        raise ValueError("signed number too long")
    raw = bytearray(key[pos:pos + n])
    raw[0] ^= (0xFF << (8 - n)) & 0xFF
    return int.from_bytes(raw, "big", signed=True), pos + n


def decode_slice_key(key: bytes) -> tuple[str, tuple[tuple[int, int], ...]]:
    """``(name, ((start, length), ...))`` of a slice key; length -1 means the whole dim.

    Raises:
        ValueError: not a well-formed slice key.
    """
    try:
        zero, pos = _num(key, 0)
        if zero != 0:
            raise ValueError("does not start with 0")
        name, pos = _string(key, pos)
        ndims, pos = _num(key, pos)
        extents = []
        for _ in range(ndims):
            start, pos = _signed(key, pos)
            length, pos = _signed(key, pos)
            extents.append((start, length))
    except IndexError as e:
        raise ValueError("truncated") from e
    if pos != len(key):
        raise ValueError("trailing bytes")
    return name.decode("utf-8"), tuple(extents)

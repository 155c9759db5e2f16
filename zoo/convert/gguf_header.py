"""Reading a GGUF file's header and tensors with every count budgeted before it is used.

The ``gguf`` library's ``GGUFReader`` memory-maps the whole file and then trusts it: an array count
past the end of the file makes it loop, appending one element at a time (+7 GB from a 60-byte
file), a tensor count of 2**60 is a loop too, and a file that shrinks while it is converted kills the
process with ``SIGBUS`` (a page of the map has no file behind it any more).  zoo reads GGUF files
with this reader instead, which follows the format (``gguf/constants.py`` of the library and
llama.cpp's ``gguf.cpp``):

    magic "GGUF", version (u32, 2 or 3), tensor count (u64), metadata count (u64),
    metadata: key (string), value type (u32), value   -- a string is a u64 length and UTF-8 bytes,
                                                         an array an item type, a u64 count, items
    tensor infos: name (string), n_dims (u32), dims (u64 x n_dims, innermost first), type (u32),
                  offset (u64, from the start of the data section)
    padding to ``general.alignment`` (default 32), then the data section.

and holds each number against what the file can hold *before* allocating or looping on it:

- every count (metadata entries, tensors, array items, string bytes) against the bytes left in the
  file: an entry needs at least 13 bytes, a tensor info 24, an item its own size (a string 8) --
  so a 60-byte file can claim at most four entries, whatever its header says;
- string arrays at most :data:`MAX_ITEMS` items (a vocabulary has up to ~260k), arrays nested at
  most one level, dimensions at most four (``GGML_MAX_DIMS``), the element count of a tensor below
  2**62;
- every tensor's byte range (its storage type's block size times its shape) inside the data
  section, and the data section inside the file, at parse time;
- tensor bytes are read with ``preadv`` into a fresh buffer, never mapped: a file truncated
  after the header was read is a short read, a :class:`~zoo.convert.core.ConvertError` naming the
  tensor -- not a ``SIGBUS``.

A damaged or hostile header is a ``ConvertError`` with ``where`` the offset or the key, never a raw
``ValueError`` from numpy, and the message never quotes the file's raw bytes.
"""
from __future__ import annotations

import os
import struct
from typing import Any

import numpy as np

from ..guard.files import short
from .core import ConvertError

#: Item types of GGUF metadata (``GGUFValueType``): code -> (name, struct format or None).
VALUE_TYPES = {0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"),
               4: ("UINT32", "<I"), 5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<?"),
               8: ("STRING", None), 9: ("ARRAY", None), 10: ("UINT64", "<Q"), 11: ("INT64", "<q"),
               12: ("FLOAT64", "<d")}
#: The numpy dtype of each fixed-size item type (arrays of numbers are read in one piece).
_NP = {0: "<u1", 1: "<i1", 2: "<u2", 3: "<i2", 4: "<u4", 5: "<i4", 6: "<f4", 7: "<u1", 10: "<u8",
       11: "<i8", 12: "<f8"}
#: Storage types read as plain numbers (the rest, BF16 included, as uint8 rows of blocks).
_PLAIN = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "I8": "<i1", "I16": "<i2", "I32": "<i4",
          "I64": "<i8"}
#: At most this many items in one metadata array (a real vocabulary has up to ~260k tokens).
MAX_ITEMS = 4_000_000
#: At most this many bytes in one metadata string (a chat template is a few KB, the largest real
#: ones ~30 KB; a token a few dozen bytes).
MAX_STRING = 16 << 20
#: ggml's GGML_MAX_DIMS.
MAX_DIMS = 4
#: The fewest bytes a metadata entry (key length, type, one byte) and a tensor info (name length,
#: n_dims, type, offset) take: a count larger than the bytes left divided by these is a lie.
MIN_ENTRY, MIN_TENSOR = 8 + 4 + 1, 8 + 4 + 4 + 8
VERSIONS = (2, 3)


def _quant_sizes() -> dict[int, tuple[str, int, int]]:
    """Storage type code -> (name, values per block, bytes per block), from the gguf library."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    return {int(q): (q.name, *GGML_QUANT_SIZES[q]) for q in GGMLQuantizationType if q in GGML_QUANT_SIZES}


class Tensor:
    """One tensor of the table: ``name``, ``tensor_type`` (``GGMLQuantizationType``), ``shape``
    (ggml order, innermost dimension first, as the library's ``ReaderTensor``), ``n_elements``,
    ``n_bytes``, ``data_offset`` (from the start of the file).  ``data`` reads it: float32 /
    float16 / ... tensors as that dtype in torch order, block types as ``uint8`` rows of blocks
    (the library's layout), freshly read from the file each time."""

    def __init__(self, owner: "Header", name, qtype, shape, n_bytes, offset):
        self._owner, self.name, self.tensor_type = owner, name, qtype
        self.shape = np.array(shape, dtype=np.uint64)
        self.n_elements = int(np.prod(shape, dtype=object)) if shape else 1
        self.n_bytes, self.data_offset = n_bytes, offset

    @property
    def data(self) -> np.ndarray:
        raw = self._owner.read_at(self.data_offset, self.n_bytes, where=f"gguf:{self.name}")
        name, block, size = self._owner.sizes[int(self.tensor_type)]
        dims = [int(d) for d in reversed(self.shape.tolist())] or [1]
        if name in _PLAIN:  # the library's layout: plain numbers in their own dtype
            return raw.view(_PLAIN[name]).reshape(dims)
        return raw.reshape(*dims[:-1], dims[-1] // block * size)


class Header:
    """The parsed header of an open GGUF file: ``fields`` (key -> Python value: numbers, bools,
    strings, lists), ``tensors`` (a list of :class:`Tensor` in file order), ``version``,
    ``alignment``, ``data_start``.  The file stays open (``close()``) for :meth:`read_at`."""

    def __init__(self, fh, *, where: str):
        self._fh, self.where = fh, where
        self._fd = fh.fileno()
        self.size = os.fstat(self._fd).st_size
        self.pos = 0
        self.sizes = _quant_sizes()
        self._parse()

    # ------------------------------------------------------------------ bounded reading
    def _bad(self, what: str, key: str | None = None) -> ConvertError:
        return ConvertError(f"the GGUF header is damaged: {what}", where=f"gguf:{key}" if key else
                            f"{self.where} (byte {self.pos:,})",
                            fix="download the file again (compare its size / checksum)")

    def _left(self) -> int:
        return self.size - self.pos

    def _take(self, n: int, what: str, key: str | None = None) -> bytes:
        if n < 0 or n > self._left():
            raise self._bad(f"{what} needs {n:,} bytes, but only {self._left():,} are left in the "
                            f"file of {self.size:,} bytes", key)
        data = self._fh.read(n)
        if len(data) != n:  # the file shrank under us
            raise self._bad(f"the file ended while reading {what} (was it truncated?)", key)
        self.pos += n
        return data

    def _u(self, fmt: str, what: str, key: str | None = None):
        return struct.unpack(fmt, self._take(struct.calcsize(fmt), what, key))[0]

    def _string(self, what: str, key: str | None = None) -> str:
        n = self._u("<Q", f"the length of {what}", key)
        if n > MAX_STRING:
            raise self._bad(f"{what} claims {n:,} bytes (at most {MAX_STRING:,})", key)
        data = self._take(n, what, key)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise self._bad(f"{what} is not UTF-8", key) from None

    def _value(self, vtype: int, key: str, depth: int = 0) -> Any:
        if vtype not in VALUE_TYPES:
            raise self._bad(f"value type {vtype} is not a GGUF type", key)
        name, fmt = VALUE_TYPES[vtype]
        if fmt is not None:
            return self._u(fmt, f"a {name}", key)
        if name == "STRING":
            return self._string("a string", key)
        item = self._u("<I", "an array's item type", key)
        count = self._u("<Q", "an array's length", key)
        if item not in VALUE_TYPES:
            raise self._bad(f"array item type {item} is not a GGUF type", key)
        if item == 9 and depth >= 1:
            raise self._bad("arrays nested more than one level", key)
        each = {8: 8, 9: 12}.get(item) or struct.calcsize(VALUE_TYPES[item][1])
        if count > self._left() // each:
            raise self._bad(f"an array claims {count:,} items of {each} or more bytes, more than the "
                            f"{self._left():,} bytes left in the file", key)
        if item in _NP:  # numbers in one piece
            arr = np.frombuffer(self._take(count * each, "an array", key), dtype=_NP[item])
            return (arr != 0).tolist() if item == 7 else arr.tolist()
        if count > MAX_ITEMS:
            raise self._bad(f"an array claims {count:,} items (at most {MAX_ITEMS:,})", key)
        return [self._value(item, key, depth + 1) for _ in range(count)]

    # ------------------------------------------------------------------ the header
    def _parse(self) -> None:
        if self._take(4, "the magic number") != b"GGUF":  # checked by the caller too
            raise self._bad("the file does not start with GGUF")
        self.version = self._u("<I", "the version")
        if self.version not in VERSIONS:
            raise ConvertError(f"GGUF version {short(self.version)} is not read (versions "
                               f"{', '.join(map(str, VERSIONS))} are)", where=self.where,
                               options=[str(v) for v in VERSIONS], fix="convert the model again with a current llama.cpp")
        n_tensors = self._u("<Q", "the tensor count")
        n_kv = self._u("<Q", "the metadata count")
        if n_kv > self._left() // MIN_ENTRY:
            raise self._bad(f"it claims {n_kv:,} metadata entries; the {self._left():,} bytes left hold "
                            f"at most {self._left() // MIN_ENTRY:,}")
        if n_tensors > self._left() // MIN_TENSOR:
            raise self._bad(f"it claims {n_tensors:,} tensors; the {self._left():,} bytes left hold at "
                            f"most {self._left() // MIN_TENSOR:,}")
        self.fields: dict[str, Any] = {}
        for _ in range(n_kv):
            key = self._string("a metadata key")
            if key in self.fields:
                raise self._bad(f"metadata key {short(key)} appears twice", key)
            self.fields[key] = self._value(self._u("<I", "a value type", key), key)
        self.alignment = self.fields.get("general.alignment", 32)
        if not isinstance(self.alignment, int) or isinstance(self.alignment, bool) \
                or not 0 < self.alignment <= 1 << 20 or self.alignment & (self.alignment - 1):
            raise self._bad(f"general.alignment={short(self.alignment)} is not a power of two up to 2**20",
                            "general.alignment")
        infos = []
        for _ in range(n_tensors):
            name = self._string("a tensor name")
            n_dims = self._u("<I", f"the dimension count of {short(name)}", name)
            if not 0 < n_dims <= MAX_DIMS:
                raise self._bad(f"tensor {short(name)} has {n_dims} dimensions (1 to {MAX_DIMS})", name)
            dims = [self._u("<Q", f"a dimension of {short(name)}", name) for _ in range(n_dims)]
            qtype = self._u("<I", f"the storage type of {short(name)}", name)
            offset = self._u("<Q", f"the data offset of {short(name)}", name)
            infos.append((name, dims, qtype, offset))
        self.data_start = -(-self.pos // self.alignment) * self.alignment
        room = self.size - self.data_start
        self.tensors: list[Tensor] = []
        seen = set()
        from gguf import GGMLQuantizationType

        for name, dims, qtype, offset in infos:
            if name in seen:
                raise self._bad(f"tensor {short(name)} appears twice", name)
            seen.add(name)
            if qtype not in self.sizes:
                raise ConvertError(f"tensor {short(name)} has storage type {qtype}, which is not a GGML "
                                   "type", where=f"gguf:{name}", fix="download the file again")
            tname, block, size = self.sizes[qtype]
            n = 1
            for d in dims:
                n *= d
            if any(d == 0 for d in dims) or n >= 1 << 62:
                raise self._bad(f"tensor {short(name)} has the shape {short(dims)}", name)
            if dims[0] % block:
                raise self._bad(f"tensor {short(name)}'s rows of {dims[0]} values are not whole "
                                f"{tname} blocks of {block}", name)
            n_bytes = n // block * size
            if offset % self.alignment or offset > room or n_bytes > room - offset:
                raise self._bad(f"tensor {short(name)} ({n_bytes:,} bytes at offset {offset:,}) lies "
                                f"outside the data section of {max(room, 0):,} bytes: the file is "
                                "truncated or damaged", name)
            self.tensors.append(Tensor(self, name, GGMLQuantizationType(qtype), dims, n_bytes,
                                       self.data_start + offset))

    # ------------------------------------------------------------------ the data
    def read_at(self, offset: int, n: int, *, where: str) -> np.ndarray:
        """``n`` bytes at ``offset`` as a fresh ``uint8`` array (``preadv``: no memory map, so a file
        truncated meanwhile is a short read and a ConvertError, not a SIGBUS)."""
        out = np.empty(n, dtype=np.uint8)
        view, done = memoryview(out), 0
        while done < n:
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got == 0:
                raise ConvertError(f"the file ended {n - done:,} bytes before the end of this tensor: it "
                                   "was truncated or is being written", where=where,
                                   fix="wait until the file is complete, or download it again")
            done += got
        return out

    def close(self) -> None:
        self._fh.close()

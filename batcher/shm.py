"""Shared-memory slots: an infer request's rows and answers without the
bytes going through a socket (docs/protocol.md, "Shared-memory infer").

A client on the batcher's machine writes a round's rows into a file it owns
in a directory both sides name (`--shm-dir`, usually under /dev/shm) and
sends a small header naming the file and where in it the rows are and the
answers go. The batcher maps the file once, stages the rows from the map,
writes the answers into it and replies with a header only. Over a Unix or
TCP socket the same bytes cost a kernel copy on each side and most of
ZeroMQ's I/O thread.

A slot is one file: a 64-byte header whose first 8 bytes hold the slot's
sequence number (little-endian uint64), then the payload. The client bumps
the number before it writes a request into the slot; the batcher answers
only if the number still matches the request's, so a late duplicate of an
old request (a resend) can never write into a slot that moved on.
"""
import math
import mmap
import os
import re
import stat

import numpy as np

HEADER_BYTES = 64
NAME_PREFIX = "dcfr-"
_NAME = re.compile(r"^dcfr-[A-Za-z0-9_.-]{1,120}$")
_MIN_SLOT = 1 << 16


class ShmError(ValueError):
    """A shared-memory slot could not be used; the message says why."""


def check_dir(path):
    """The directory as an absolute path, or ShmError naming what is wrong."""
    path = os.path.abspath(path)
    if not os.path.isdir(path):
        raise ShmError(f"shared-memory directory {path} does not exist")
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise ShmError(f"shared-memory directory {path} is not readable and writable by this process")
    return path


def default_parent():
    """Where a fresh slot directory goes: /dev/shm (memory, never written
    back to a disk) where there is one, else the system's temporary directory."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK | os.X_OK):
        return "/dev/shm"
    import tempfile
    return tempfile.gettempdir()


class Slot:
    """One client-owned file, mapped: `buf` is its bytes as a uint8 array."""
    __slots__ = ("name", "path", "size", "mm", "buf", "seq")

    def __init__(self, directory, name, size):
        self.name = name
        self.path = os.path.join(directory, name)
        self.size = size
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        except OSError as e:
            raise ShmError(f"cannot create shared-memory slot {self.path}: {e.strerror}") from None
        try:
            os.ftruncate(fd, size)
            # the pages are reserved now: a full tmpfs fails here with ENOSPC,
            # not later with SIGBUS on the first write into the map
            if hasattr(os, "posix_fallocate"):
                os.posix_fallocate(fd, 0, size)
            self.mm = mmap.mmap(fd, size)
        except OSError as e:
            os.close(fd)
            os.unlink(self.path)
            raise ShmError(f"cannot reserve {size} bytes for shared-memory slot {self.path}: {e.strerror}") from None
        os.close(fd)
        self.buf = np.frombuffer(self.mm, dtype=np.uint8)
        self.seq = 0

    def bump(self):
        """A new request takes the slot: its sequence number, written in the header."""
        self.seq += 1
        self.buf[:8].view(np.uint64)[0] = self.seq
        return self.seq

    def view(self, offset, dtype, shape):
        dtype = np.dtype(dtype)
        n = math.prod(shape)            # np.prod costs ~10 us a call: a tenth of a worker's round
        return self.buf[offset:offset + n * dtype.itemsize].view(dtype).reshape(shape)

    def close(self):
        """Unmap and remove the file."""
        self.buf = None
        try:
            self.mm.close()
        except BufferError:
            pass                 # a view handed out is still alive; the map goes with it
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class ClientSlots:
    """A client's slots in `directory`: acquire(nbytes) hands out a free slot
    of at least nbytes (a new file when none fits, sized to a power of two),
    release(slot) takes it back; close() removes the files."""

    def __init__(self, directory):
        self.directory = check_dir(directory)
        self._tag = f"{NAME_PREFIX}{os.getpid()}-{os.urandom(6).hex()}"
        self._count = 0
        self.free = []
        self.all = []

    def acquire(self, nbytes):
        need = HEADER_BYTES + nbytes
        best = None
        for slot in self.free:
            if slot.size >= need and (best is None or slot.size < best.size):
                best = slot
        if best is not None:
            self.free.remove(best)
            return best
        size = max(_MIN_SLOT, 1 << (need - 1).bit_length())
        self._count += 1
        slot = Slot(self.directory, f"{self._tag}-{self._count}", size)
        self.all.append(slot)
        return slot

    def release(self, slot):
        self.free.append(slot)

    def close(self):
        for slot in self.all:
            slot.close()
        self.all, self.free = [], []


def align(n, to=64):
    return (n + to - 1) // to * to


def layout(rows_bytes, adv_bytes):
    """Where a request's parts go in a slot: each segment's rows, then each
    segment's answers, every part 64-byte aligned after the header. Returns
    (rows offsets, answer offsets, payload bytes the slot needs)."""
    off, rows_at, adv_at = HEADER_BYTES, [], []
    for at, sizes in ((rows_at, rows_bytes), (adv_at, adv_bytes)):
        for n in sizes:
            at.append(off)
            off = align(off + n)
    return rows_at, adv_at, off - HEADER_BYTES


class ServerMaps:
    """The batcher's side: client files in `directory` mapped once each, by
    name. A name must be a plain file name with the client prefix (no path,
    no link); `get` raises ShmError naming the problem. `sweep` drops the maps
    of files that are gone (their clients closed or died)."""

    def __init__(self, directory, max_maps=4096):
        self.directory = check_dir(directory)
        self.max_maps = max_maps
        self.maps = {}           # name -> (mmap, uint8 array, uint64 view of the sequence number)

    def get(self, name):
        if not isinstance(name, str):
            raise ShmError(f"shared-memory name must be a string, got {type(name).__name__}")
        entry = self.maps.get(name)
        if entry is not None:
            return entry
        if not _NAME.match(name):
            raise ShmError(f"shared-memory name {name!r} is not a slot name ({NAME_PREFIX}..., letters, "
                           f"digits, '_', '.', '-')")
        if len(self.maps) >= self.max_maps:
            self.sweep()
            if len(self.maps) >= self.max_maps:
                raise ShmError(f"{self.max_maps} shared-memory slots are mapped already")
        path = os.path.join(self.directory, name)
        try:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
        except OSError as e:
            raise ShmError(f"cannot open shared-memory slot {name} in {self.directory}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size < HEADER_BYTES:
                raise ShmError(f"shared-memory slot {name} is not a regular file of at least {HEADER_BYTES} bytes")
            mm = mmap.mmap(fd, st.st_size)
        finally:
            os.close(fd)
        buf = np.frombuffer(mm, dtype=np.uint8)
        entry = (mm, buf, buf[:8].view(np.uint64))
        self.maps[name] = entry
        return entry

    def sweep(self):
        """Unmap slots whose files are gone; returns how many were dropped."""
        dropped = 0
        for name in list(self.maps):
            if os.path.exists(os.path.join(self.directory, name)):
                continue
            mm = self.maps.pop(name)[0]
            try:
                mm.close()
            except BufferError:
                pass             # rows of a queued request still point into it; freed with them
            dropped += 1
        return dropped

    def close(self):
        while self.maps:
            mm = self.maps.popitem()[1][0]
            try:
                mm.close()
            except BufferError:
                pass

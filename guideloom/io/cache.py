"""An opt-in cache of shard and index bytes on local disk, for epochs that read a bucket again.

Off by default: nothing is written anywhere unless a storage is opened with ``cache_dir=``
(`block_cache` builds the configuration; `guideloom.storage.Storage` takes both options).

What is kept: fixed-size, aligned blocks (`DEFAULT_BLOCK_BYTES`, 1 MiB) of the files a
`guideloom.types.ShardReader` reads, one block file each, under
``<cache_dir>/guideloom-blocks/``. A read asks the cache for each block its byte ranges touch;
the blocks it lacks are fetched from the store in one round of the wrapped reader (whole
blocks, so the next read of a neighbouring range is a hit), stored, and served. A second epoch
over a dataset that fits sends no data requests at all.

Shared by the processes of a node: the cache is files and a lock file, nothing in memory is
shared, so worker processes, thread workers and separate training processes on one machine use
one directory together. The bound (``cache_bytes``) covers every file the cache keeps, blocks
being written included: a writer reserves its block's bytes under the lock (``flock``) before it
writes, evicting the least recently used blocks (by access time, which a hit sets) when the
reservation would pass the bound.

Never wrong bytes:

* Each block is written to a temporary file and renamed into place (the rename under the lock,
  so a count of the files taken under it is exact), so its name never shows a half-written block; a writer that crashes leaves a temporary file that the next eviction
  removes (it counts against the bound until then).
* A block file starts with a header: a magic number, the payload's length and its 64-bit
  xxh3 digest. Before a process first uses a block it checks the file's size against the size
  the manifest's file table implies for that block, and the digest against the payload; where
  the block is the whole file, the digest must also equal the manifest's recorded checksum.
  A block that fails is deleted and fetched again (``cache_rejected`` counts them). Verified
  blocks are remembered per process by inode, size and modification time, so later hits read
  only the bytes asked for.
* A failed write (a full disk, ``ENOSPC``, or any other ``OSError``) removes its temporary file
  and releases its reservation; the bytes fetched from the store are served as they are.
  ``cache_write_errors`` counts them.

Blocks are named by a digest of the dataset's URL, endpoint, the file's path, its size and its
recorded checksum: a rewritten file under the same name is a new entry, never the old bytes.

`guideloom.io.stats` counts the cache per directory (store ``"cache <dir>"``): ``cache_hits``
(block reads served from disk), ``cache_misses`` (blocks fetched from the store),
``cache_bytes_read`` (bytes served from disk), ``cache_bytes_written``, ``cache_evictions``,
``cache_rejected`` and ``cache_write_errors``.
"""

from __future__ import annotations

import errno
import fcntl
import operator
import os
import shutil
import struct
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import xxhash

import guideloom.layout as layout
from guideloom.io import stats
from guideloom.types import FileTable, ShardReader

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "DEFAULT_CACHE_BYTES",
    "BlockCache",
    "CachedShardReader",
    "block_cache",
]

DEFAULT_BLOCK_BYTES = 1 << 20  # bytes per cached block (blocks are aligned to multiples of it)
DEFAULT_CACHE_BYTES = 16 << 30  # the bound when only cache_dir is given (or half the free space)
_FOLDER = "guideloom-blocks"
_MAGIC = b"GLBLOCK1"
_HEADER = struct.Struct("<8sQQ")  # magic, payload length, xxh3_64 of the payload
_LOCK_NAME = ".lock"  # holds the bytes in use, as fixed-width text
_LOCK_BYTES = 21  # the lock file's size (20 digits and a newline), counted against the bound
_LOW_WATER = 0.9  # an eviction frees the cache down to this fraction of its bound
_STALE_TEMP_S = 600.0  # a temporary file this old is a crashed writer's
_VERIFIED_MAX = 1 << 16  # verified blocks a process remembers (then it starts over)


def block_cache(cache_dir: str | os.PathLike[str] | None, cache_bytes: int | None) -> BlockCache | None:
    """The cache the options ask for, or None (no ``cache_dir``: no cache, nothing on disk).

    ``cache_bytes`` defaults to the smaller of `DEFAULT_CACHE_BYTES` and half the free space of
    ``cache_dir``'s filesystem now.

    Raises:
        ValueError: ``cache_bytes`` without ``cache_dir``, a ``cache_bytes`` that is not a
            non-negative integer, or a ``cache_dir`` that is a file or cannot be created.
    """
    if cache_dir is None:
        if cache_bytes is not None:
            raise ValueError(
                f"cache_bytes={cache_bytes!r} bounds the local block cache, which is off without "
                "cache_dir=: pass cache_dir= too (a folder on local disk, e.g. "
                "cache_dir='/tmp/guideloom-cache'), or leave cache_bytes out"
            )
        return None
    directory = os.path.abspath(os.fspath(cache_dir))
    if cache_bytes is not None and not isinstance(cache_bytes, bool):
        try:
            cache_bytes = operator.index(cache_bytes)  # an int, or a NumPy integer
        except TypeError:
            pass
    if cache_bytes is not None and (
        isinstance(cache_bytes, bool) or not isinstance(cache_bytes, int) or cache_bytes < 0
    ):
        raise ValueError(
            f"cache_bytes must be a non-negative number of bytes (an int), got {cache_bytes!r}; "
            "e.g. cache_bytes=50 * 2**30 for 50 GiB, or leave it out for the default (the smaller "
            "of 16 GiB and half the free space of cache_dir)"
        )
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise ValueError(
            f"cache_dir={directory!r} is a file, not a folder: pass a folder for the block cache "
            "(it is created if missing), e.g. a new one beside it"
        )
    try:
        os.makedirs(os.path.join(directory, _FOLDER, "tmp"), exist_ok=True)
    except OSError as err:
        raise ValueError(
            f"cache_dir={directory!r} cannot be used for the block cache: creating "
            f"{os.path.join(directory, _FOLDER)} failed ({err.strerror or err}); pass a folder on "
            "local disk that this process may write"
        ) from None
    if cache_bytes is None:
        free = shutil.disk_usage(directory).free
        cache_bytes = min(DEFAULT_CACHE_BYTES, free // 2)
    return BlockCache(directory, cache_bytes, DEFAULT_BLOCK_BYTES)


class BlockCache:
    """Blocks of files on local disk, bounded in bytes, shared by the processes of a node.

    Picklable: a copy (a worker process, a thread worker's private view) keeps the directory
    and the bound and starts with nothing remembered. See the module's documentation.

    Args:
        directory: The cache's folder (``cache_dir``); blocks go under its ``guideloom-blocks``.
        capacity: The most bytes the cache's files may take (``cache_bytes``).
        block_bytes: Bytes per block.
    """

    def __init__(self, directory: str, capacity: int, block_bytes: int = DEFAULT_BLOCK_BYTES) -> None:
        self.directory = directory
        self.capacity = int(capacity)
        self.block_bytes = int(block_bytes)
        self.root = os.path.join(directory, _FOLDER)
        self.store = f"cache {directory}"  # its entry in `guideloom.io.stats`
        self._verified: dict[str, tuple[int, int, int]] = {}
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("_verified", "_lock")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._verified = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"BlockCache({self.directory!r}, capacity={self.capacity})"

    # -- names --------------------------------------------------------------------------------

    def block_path(self, key: str, index: int) -> str:
        """The file of block ``index`` of the file named by ``key`` (`CachedShardReader.key`)."""
        return os.path.join(self.root, key[:2], f"{key}-{index}.blk")

    # -- reading ------------------------------------------------------------------------------

    def read(self, key: str, index: int, length: int, a: int, b: int, digest: int | None) -> bytes | None:
        """Bytes ``[a, b)`` of block ``index`` (``length`` payload bytes), or None when the cache
        lacks it or its file fails the checks (then the file is removed). ``digest``: the
        manifest's checksum of the whole file, for a block that is the whole file."""
        path = self.block_path(key, index)
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if st.st_size != _HEADER.size + length:
                self._reject(path)
                return None
            mark = (st.st_ino, st.st_size, st.st_mtime_ns)
            if self._verified.get(path) != mark:
                whole = os.pread(fd, _HEADER.size + length, 0)
                if not _valid(whole, length, digest):
                    self._reject(path)
                    return None
                if len(self._verified) >= _VERIFIED_MAX:
                    self._verified.clear()
                self._verified[path] = mark
                data = whole[_HEADER.size + a : _HEADER.size + b]
            else:
                data = os.pread(fd, b - a, _HEADER.size + a)
                if len(data) != b - a:
                    self._reject(path)
                    return None
            try:  # least recently used: a hit sets the access time (the eviction order)
                os.utime(fd, ns=(time.time_ns(), st.st_mtime_ns))
            except OSError:
                pass
        except OSError:
            return None
        finally:
            os.close(fd)
        return data

    def _reject(self, path: str) -> None:
        """A block file that failed its checks: removed (its bytes released), never served."""
        self._verified.pop(path, None)
        stats.record_cache(self.store, cache_rejected=1)
        try:
            with self._locked() as usage:
                try:
                    size = os.stat(path).st_size
                    os.unlink(path)
                except OSError:
                    return None
                usage[0] = max(0, usage[0] - size)
        except OSError:
            pass
        return None

    # -- writing ------------------------------------------------------------------------------

    def put(self, key: str, index: int, payload: bytes, digest: int | None = None) -> bool:
        """Keep ``payload`` as block ``index`` of ``key``'s file; True if it was written. A block
        larger than the bound, or one whose whole-file ``digest`` does not match, is not kept;
        a write that fails (a full disk) keeps nothing and is counted, never raised."""
        size = _HEADER.size + len(payload)
        if size + _LOCK_BYTES > self.capacity:
            return False
        hashed = xxhash.xxh3_64_intdigest(payload)
        if digest is not None and hashed != digest:
            return False  # the store's bytes are not the manifest's: served, not kept
        path = self.block_path(key, index)
        if os.path.exists(path):
            return False
        tmp = None
        try:
            tmp = self._reserve(size)
            if tmp is None:
                return False
            fd = os.open(tmp, os.O_WRONLY)
            try:
                _write_all(fd, _HEADER.pack(_MAGIC, len(payload), hashed))
                _write_all(fd, payload)
            finally:
                os.close(fd)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with self._locked():  # under the lock, so that a count of the files is exact
                os.replace(tmp, path)
            tmp = None
        except OSError:
            stats.record_cache(self.store, cache_write_errors=1)
            if tmp is not None:
                self._release(tmp, size)
            return False
        stats.record_cache(self.store, cache_bytes_written=size)
        return True

    def _reserve(self, size: int) -> str | None:
        """Take ``size`` bytes of the bound for a new block (evicting the least recently used
        blocks if needed) and create its temporary file, under the lock; its path, or None if
        the room cannot be made."""
        with self._locked() as usage:
            if usage[0] + size + _LOCK_BYTES > self.capacity:
                usage[0] = self._evict(size)
                if usage[0] + size + _LOCK_BYTES > self.capacity:
                    return None
            tmp = os.path.join(self.root, "tmp", f"{uuid.uuid4().hex}-{size}.tmp")
            os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
            usage[0] += size
        return tmp

    def _release(self, tmp: str, size: int) -> None:
        try:
            with self._locked() as usage:
                try:
                    os.unlink(tmp)
                except FileNotFoundError:
                    return
                usage[0] = max(0, usage[0] - size)
        except OSError:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    def _evict(self, incoming: int) -> int:
        """Under the lock: remove the least recently used blocks (and crashed writers'
        temporary files) until the files take at most the low-water mark of the bound with
        ``incoming`` bytes more; the bytes in use afterwards, counted from the disk."""
        blocks: list[tuple[int, int, str]] = []  # (access time, size, path)
        used = 0
        now = time.time()
        tmp_dir = os.path.join(self.root, "tmp")
        for entry in _scan(tmp_dir):
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:  # renamed into place meanwhile: listed below with the blocks
                continue
            if now - st.st_mtime > _STALE_TEMP_S:
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass
                continue
            used += max(st.st_size, _reserved_size(entry.name))  # a block being written
        for sub in _scan(self.root):
            if not sub.is_dir(follow_symlinks=False) or sub.name == "tmp":
                continue
            for entry in _scan(sub.path):
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                blocks.append((st.st_atime_ns, st.st_size, entry.path))
                used += st.st_size
        target = int(self.capacity * _LOW_WATER) - incoming - _LOCK_BYTES
        evicted = 0
        for _, size, path in sorted(blocks):
            if used <= target:
                break
            try:
                os.unlink(path)
            except OSError:
                continue
            self._verified.pop(path, None)
            used -= size
            evicted += 1
        if evicted:
            stats.record_cache(self.store, cache_evictions=evicted)
        return used

    def _locked(self) -> _Locked:
        return _Locked(os.path.join(self.root, _LOCK_NAME), self._lock)

    def used_bytes(self) -> int:
        """Bytes the cache's files take now (blocks, temporary files and the lock file)."""
        total = 0
        for base, _, files in os.walk(self.root):
            for name in files:
                try:
                    total += os.stat(os.path.join(base, name)).st_size
                except OSError:
                    pass
        return total


class _Locked:
    """The cache's lock (``flock`` on its lock file, and a thread lock beside it) with the bytes
    in use it records: ``with ... as usage``, read and set ``usage[0]``."""

    def __init__(self, path: str, thread_lock: threading.Lock) -> None:
        self.path = path
        self.thread_lock = thread_lock
        self.fd = -1
        self.usage = [0]

    def __enter__(self) -> list[int]:
        self.thread_lock.acquire()
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            text = os.pread(self.fd, _LOCK_BYTES, 0).strip()
            self.usage = [int(text) if text.isdigit() else 0]
            self.before = self.usage[0]
        except BaseException:
            if self.fd >= 0:
                os.close(self.fd)
            self.thread_lock.release()
            raise
        return self.usage

    def __exit__(self, *exc: Any) -> None:
        try:
            if self.usage[0] != self.before:
                os.pwrite(self.fd, f"{self.usage[0]:020d}\n".encode(), 0)
        except OSError:
            pass  # a usage that could not be saved is recounted by the next eviction
        finally:
            os.close(self.fd)  # closing releases the flock
            self.thread_lock.release()


def _scan(path: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as it:
            return list(it)
    except OSError:
        return []


def _reserved_size(name: str) -> int:
    try:
        return int(name.rsplit("-", 1)[1].split(".", 1)[0])
    except (IndexError, ValueError):
        return 0


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until all of ``data`` is written (a short write is retried; an error such as
    ``ENOSPC`` is raised)."""
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "a write wrote nothing")
        view = view[n:]


def _valid(whole: bytes, length: int, digest: int | None) -> bool:
    """Whether a block file's bytes are a whole, undamaged block of ``length`` payload bytes
    (and, for a whole file, the one whose checksum is ``digest``)."""
    if len(whole) != _HEADER.size + length:
        return False
    magic, n, recorded = _HEADER.unpack_from(whole)
    if magic != _MAGIC or n != length:
        return False
    hashed = xxhash.xxh3_64_intdigest(memoryview(whole)[_HEADER.size :])
    return hashed == recorded and (digest is None or hashed == digest)


def _recorded_checksum(table: FileTable, shard: int, file: str) -> int | None:
    """The manifest's checksum of a file as an int, where the table records one."""
    files = getattr(table, "files", None)
    try:
        return layout.parse_checksum(files[file].checksum[shard]) if files is not None else None
    except (KeyError, IndexError, AttributeError, ValueError):
        return None


class CachedShardReader:
    """A `guideloom.types.ShardReader` that serves blocks from a `BlockCache` and fetches the
    blocks it lacks through ``inner`` (one round per call), keeping them for later reads.

    Every byte it serves is the file's as the manifest records it: the inner reader checks what
    it fetches (lengths, sizes) and the cache checks what it kept (sizes, digests). It reports
    ``local`` False, so callers read through it rather than around it.

    Args:
        inner: The reader of the store (`guideloom.io.shards.open_shard_reader`).
        cache: The block cache.
        namespace: What tells this dataset's files from other datasets' of the same paths (its
            URL and endpoint).
    """

    def __init__(self, inner: ShardReader, cache: BlockCache, namespace: str) -> None:
        self.inner = inner
        self.cache = cache
        self.namespace = namespace
        self._keys: dict[tuple[int, str], tuple[str, int | None]] = {}

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_keys"] = {}
        return state

    @property
    def local(self) -> bool:
        return False

    def map_file(self, shard: int, file: str) -> memoryview | None:
        return None  # read through the cache, never around it

    @property
    def table(self) -> FileTable:
        return self.inner.table

    def close(self) -> None:
        self.inner.close()

    def key(self, shard: int, file: str) -> tuple[str, int | None]:
        """The cache's name of a file (a digest of the dataset, its path, size and checksum) and
        its recorded checksum as an int (None where the table has none)."""
        found = self._keys.get((shard, file))
        if found is None:
            table = self.inner.table
            digest = _recorded_checksum(table, shard, file)
            text = f"{self.namespace}\0{table.path(shard, file)}\0{table.size(shard, file)}\0{digest}"
            found = (xxhash.xxh3_128_hexdigest(text.encode()), digest)
            self._keys[(shard, file)] = found
        return found

    def read(self, requests: Sequence[tuple[int, str, int, int]]) -> list[bytes]:
        """Each request's bytes: its blocks from the cache, the missing ones fetched (whole) in
        one round of the inner reader and kept."""
        table = self.inner.table
        size_of = table.size
        for shard, file, start, stop in requests:
            if not 0 <= start <= stop <= size_of(shard, file):
                return self.inner.read(requests)  # the inner reader names what is wrong
        cache, step = self.cache, self.cache.block_bytes
        pieces: list[list[Any]] = []
        wanted: dict[tuple[int, str, int], list[tuple[int, int, int, int]]] = {}
        hits = served = 0
        for k, (shard, file, start, stop) in enumerate(requests):
            parts: list[Any] = []
            pieces.append(parts)
            if stop == start:
                continue
            size = size_of(shard, file)
            key, digest = self.key(shard, file)
            for block in range(start // step, (stop - 1) // step + 1):
                lo = block * step
                length = min(step, size - lo)
                a, b = max(start, lo) - lo, min(stop, lo + length) - lo
                whole = digest if lo == 0 and length == size else None
                data = cache.read(key, block, length, a, b, whole)
                if data is None:
                    wanted.setdefault((shard, file, block), []).append((k, len(parts), a, b))
                    parts.append(None)
                else:
                    parts.append(data)
                    hits += 1
                    served += b - a
        if wanted:
            order = list(wanted)
            fetched = self.inner.read(
                [(s, f, blk * step, min(size_of(s, f), (blk + 1) * step)) for s, f, blk in order]
            )
            for (shard, file, block), blob in zip(order, fetched):
                key, digest = self.key(shard, file)
                whole = digest if block == 0 and len(blob) == size_of(shard, file) else None
                cache.put(key, block, blob, whole)
                view = memoryview(blob)
                for k, j, a, b in wanted[(shard, file, block)]:
                    pieces[k][j] = view[a:b]
        if hits or wanted:
            stats.record_cache(
                cache.store, cache_hits=hits, cache_misses=len(wanted), cache_bytes_read=served
            )
        return [
            b"" if not parts else (bytes(parts[0]) if len(parts) == 1 else b"".join(parts))
            for parts in pieces
        ]

    def read_iter(self, requests: Sequence[tuple[int, str, int, int]]) -> Iterator[bytes]:
        """`read` (the whole round first), handed out one request at a time."""
        return iter(self.read(requests))

    def read_into(
        self, requests: Sequence[tuple[int, str, int, int]], buffers: Sequence[Sequence[memoryview]]
    ) -> None:
        """`read`, then each request's bytes copied into its buffers in order."""
        if len(requests) != len(buffers):
            raise ValueError(f"{len(requests)} requests but {len(buffers)} lists of buffers")
        for blob, bufs in zip(self.read(requests), buffers):
            view, pos = memoryview(blob), 0
            for buf in bufs:
                end = pos + buf.nbytes
                buf[:] = view[pos:end]
                pos = end

    def __repr__(self) -> str:
        return f"CachedShardReader({self.inner!r}, {self.cache!r})"

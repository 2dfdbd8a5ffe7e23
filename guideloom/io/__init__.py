"""Files and bytes: the only layer that opens files or talks to fsspec.

`Location` (a dataset root on any fsspec filesystem: reads, writes, listings, retries under a
deadline, error translation; its concerns in `guideloom.io.requests`, `reads` and `writes`), the
shard readers every view reads through (`open_shard_reader`: positioned reads on local disk,
merged concurrent range requests elsewhere; io alone decides which), and the one rule for showing
URLs (`redact_url`). What differs by store is one object per store in `guideloom.io.backends`
(S3, GCS, Azure, local disk, memory, read-only HTTP), found once by protocol. Range planning lives
in `guideloom.io.ranges`, the S3 client pieces in `guideloom.io.s3`, what backend errors mean in
`guideloom.io.failures`, the requests and bytes sent to each store in `guideloom.io.stats`
(`io_stats`), and the opt-in local block cache (``cache_dir=``) in `guideloom.io.cache`.
"""

from guideloom.io.location import Location
from guideloom.io.shards import open_shard_reader
from guideloom.io.stats import io_stats
from guideloom.io.urls import redact_text, redact_url

__all__ = ["Location", "io_stats", "open_shard_reader", "redact_text", "redact_url"]

"""URLs and byte ranges over fsspec: the only layer that touches files."""

from guideloom.io.location import Location, redact_url

__all__ = ["Location", "redact_url"]

"""URLs and byte ranges over fsspec: the only layer that touches files."""

from guideloom.io.location import Location
from guideloom.io.urls import redact_text, redact_url

__all__ = ["Location", "redact_text", "redact_url"]

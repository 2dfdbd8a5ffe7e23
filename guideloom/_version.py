"""The GuideLoom version: one place, imported by the package root and by what records it
(manifests name the version that committed them), without importing the package root."""

__version__ = "0.1.0"

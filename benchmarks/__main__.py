"""``python -m benchmarks`` (``make bench``): see :mod:`benchmarks.cli`."""

from benchmarks.cli import main

if __name__ == "__main__":
    raise SystemExit(main())

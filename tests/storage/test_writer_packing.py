"""The writer's packed path (one-field records of exactly the field's dtype, copied into one
buffer per shard; in `append_batch`, joined with one concatenate) writes the same shards, byte
for byte, as the checked path that casts each record, in any mix with other records and
batches; a caller may reuse its array at once."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage

FMT = StreamNumpyFormat({"tokens": np.uint16})


def _write(url, ops, shard_size, exact):
    """Append ``ops`` (("one", array) or ("batch", [arrays])): records of the field's dtype when
    ``exact``, else the same values as int64 (which the checked path casts)."""
    storage = StreamStorage(url, FMT)
    with storage.writer(shard_size=shard_size) as w:
        for kind, value in ops:
            if kind == "one":
                w.append({"tokens": value if exact else value.astype(np.int64)})
            else:
                w.append_batch([{"tokens": v if exact else v.astype(np.int64)} for v in value])
    return StreamStorage(url, FMT)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("one"), st.integers(0, 300)),
            st.tuples(st.just("batch"), st.lists(st.integers(0, 120), min_size=1, max_size=5)),
        ),
        min_size=1,
        max_size=40,
    ),
    shard_size=st.integers(1, 2000),
)
def test_packed_and_checked_records_write_the_same_shards(tmp_path_factory, ops, shard_size):
    rng = np.random.default_rng(len(ops) * 7919 + shard_size)
    made = []
    for kind, n in ops:
        if kind == "one":
            made.append(("one", rng.integers(0, 65535, n, dtype=np.uint16)))
        else:
            made.append(("batch", [rng.integers(0, 65535, k, dtype=np.uint16) for k in n]))
    root = tmp_path_factory.mktemp("w")
    packed = _write(root / "packed", made, shard_size, exact=True)
    checked = _write(root / "checked", made, shard_size, exact=False)
    a, b = packed.manifest.shard_table, checked.manifest.shard_table
    assert a.records == b.records and a.tokens == b.tokens
    assert a.files["data"].checksum == b.files["data"].checksum
    assert a.files["starts"].checksum == b.files["starts"].checksum
    joined = np.concatenate([v for kind, x in made for v in ([x] if kind == "one" else x)])
    if len(joined):
        assert StreamDataset(packed, len(joined))[0]["tokens"].tolist() == joined.tolist()


def test_an_array_reused_after_append_does_not_change_what_was_written(tmp_path):
    storage = StreamStorage(tmp_path / "s", FMT)
    buffer = np.zeros(50, np.uint16)
    with storage.writer(shard_size=1 << 20) as w:
        for k in range(10):
            buffer[:] = k  # one array, refilled for every record
            w.append({"tokens": buffer})
    view = StreamDataset(StreamStorage(tmp_path / "s", FMT), 50)
    assert [int(view[k]["tokens"][0]) for k in range(10)] == list(range(10))


def test_strided_and_sliced_arrays_are_packed_as_their_values(tmp_path):
    storage = StreamStorage(tmp_path / "s", FMT)
    base = np.arange(100, dtype=np.uint16)
    with storage.writer(shard_size=64) as w:  # several shards
        w.append({"tokens": base[::3]})
        w.append({"tokens": base[10:20]})
        w.append({"tokens": base[::-1][:7]})
        w.append_batch([{"tokens": base[::5]}, {"tokens": base[::-2][:4]}])
    want = np.concatenate([base[::3], base[10:20], base[::-1][:7], base[::5], base[::-2][:4]])
    view = StreamDataset(StreamStorage(tmp_path / "s", FMT), len(want))
    assert view[0]["tokens"].tolist() == want.tolist()
    assert len(StreamStorage(tmp_path / "s", FMT).manifest.shard_table) > 1


def test_a_flat_batch_is_written_uncopied_yet_the_caller_may_reuse_its_array_at_once(tmp_path):
    """`append_batch` of flat arrays writes the pieces that fill a shard straight from the
    caller's array and copies only the piece left buffered: refilling the array after each call
    changes nothing written, whether a batch spans several shards or stays in the buffer."""
    storage = StreamStorage(tmp_path / "s", FMT)
    flat = np.empty(250, np.uint16)
    want = []
    with storage.writer(shard_size=160) as w:  # 80 tokens a shard: batches span and stay
        for k, n in enumerate([250, 30, 7, 250, 100]):
            flat[:n] = np.arange(n, dtype=np.uint16) + 1000 * k
            want.append(flat[:n].copy())
            w.append_batch({"tokens": flat[:n]}, np.array([n // 2, n - n // 2]))
            flat[:] = 7  # reused at once
    joined = np.concatenate(want)
    stored = StreamStorage(tmp_path / "s", FMT)
    assert sum(stored.manifest.shard_table.records) == 10 and len(stored.manifest.shard_table) >= 4
    assert StreamDataset(stored, len(joined))[0]["tokens"].tolist() == joined.tolist()

"""boundaries= and labels= on a Mixture: every row's position_ids, labels and the batch's
cu_seqlens equal a per-token brute force over the row's own source, for random records, window
lengths, shuffle modes and worker modes; resume keeps them; each source is checked."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guideloom import Mixture, StatefulDataLoader
from tests.loading.test_boundaries import EOS, _brute_force, _write


def _sources(root, lengths_a, lengths_b):
    a = _write(root / "a", lengths_a, seed=1)
    b = _write(root / "b", lengths_b, seed=2)
    ext = []
    for _, tokens, masks, flags in (a, b):  # a token past the end, never a label of a last token
        ext.append(
            (np.concatenate([tokens, [1]]), np.concatenate([masks, [1]]), np.concatenate([flags, [True]]))
        )
    return (a[0], b[0]), ext


def _check(batches, length, ext):
    for batch in batches:
        rows = list(zip(batch["source"].tolist(), batch["source_index"].tolist()))
        flat_positions = []
        for r, (src, window) in enumerate(rows):
            pos, lab, _, _ = _brute_force([window], length, *ext[src])
            assert batch["position_ids"][r].tolist() == pos[0]
            assert batch["labels"][r].tolist() == lab[0]
            tokens = ext[src][0]
            assert batch["tokens"][r].tolist() == tokens[window * length : (window + 1) * length].tolist()
            flat_positions += pos[0]
        cu = [i for i, p in enumerate(flat_positions) if p == 0] + [len(flat_positions)]
        assert batch["cu_seqlens"].tolist() == cu
        assert batch["max_seqlen"] == max(b - a for a, b in zip(cu[:-1], cu[1:]))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths_a=st.lists(st.integers(1, 30), min_size=3, max_size=25),
    lengths_b=st.lists(st.integers(1, 30), min_size=3, max_size=25),
    length=st.integers(2, 12),
    shuffle=st.sampled_from([False, "full", "block"]),
    boundaries=st.sampled_from(["records", "eos", "doc_index"]),
)
def test_mixture_batches_equal_a_brute_force_over_each_rows_source(
    tmp_path_factory, lengths_a, lengths_b, length, shuffle, boundaries
):
    (a, b), ext = _sources(tmp_path_factory.mktemp("m"), lengths_a, lengths_b)
    if min(len(e[0]) - 1 for e in ext) < length:
        return
    loader = StatefulDataLoader.from_storage(
        Mixture({"a": (a, 0.6), "b": (b, 0.4)}),
        sequence_length=length,
        batch_size=3,
        shuffle=shuffle,
        seed=4,
        boundaries=boundaries,
        eos_id=EOS if boundaries == "eos" else None,
        labels=True,
        sources=True,
        **({"shuffle_block_size": 2} if shuffle == "block" else {}),
    )
    _check(list(loader), length, ext)


@pytest.mark.parametrize(("workers", "method"), [(2, "process"), (2, "thread")])
def test_mixture_boundaries_in_every_worker_mode_and_after_a_resume(tmp_path, workers, method):
    lengths = [5, 1, 12, 7, 3, 30, 2, 9, 4, 11, 6, 8, 1, 1, 20]
    (a, b), ext = _sources(tmp_path, lengths, lengths[::-1] + [3, 3])

    def loader(**kw):
        return StatefulDataLoader.from_storage(
            Mixture({"a": (a, 0.5), "b": (b, 0.5)}), sequence_length=6, batch_size=2, shuffle="full",
            seed=1, boundaries="records", labels=True, sources=True, **kw,
        )  # fmt: skip

    reference = list(loader())
    _check(reference, 6, ext)
    run = loader(num_workers=workers, parallel_method=method)
    it = iter(run)
    first = [next(it) for _ in range(3)]
    resumed = loader(num_workers=workers, parallel_method=method, read_ahead=2)
    resumed.load_state_dict(run.state_dict())
    rest = list(resumed)
    assert [b["position_ids"].tolist() for b in first + rest] == [
        b["position_ids"].tolist() for b in reference
    ]
    assert [b["labels"].tolist() for b in first + rest] == [b["labels"].tolist() for b in reference]


def test_a_mixture_without_sources_keys_still_gets_boundaries(tmp_path):
    (a, b), _ = _sources(tmp_path, [4, 9, 2, 7], [3, 3, 8, 1, 6])
    batch = next(
        iter(
            StatefulDataLoader.from_storage(
                Mixture({"a": (a, 0.5), "b": (b, 0.5)}), sequence_length=4, batch_size=2, boundaries="records"
            )
        )
    )
    assert set(batch) >= {"position_ids", "cu_seqlens", "max_seqlen"} and "labels" not in batch


def test_each_source_is_checked_and_named(tmp_path):
    (a, b), _ = _sources(tmp_path, [4, 9, 2, 7], [3, 3, 8, 1, 6])
    mix = Mixture({"a": (a, 0.5), "b": (b, 0.5)})
    with pytest.raises(
        ValueError, match=r"source 'a' of the mixture: boundaries='eos': .* records no end-of-document id"
    ):
        StatefulDataLoader.from_storage(mix, sequence_length=4, boundaries="eos")
    with pytest.raises(ValueError, match=r"source 'a' of the mixture: boundaries='nope'"):
        StatefulDataLoader.from_storage(mix, sequence_length=4, boundaries="nope")

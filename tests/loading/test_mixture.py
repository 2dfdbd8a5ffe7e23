"""Mixtures through the loader: batches, exact and elastic resume, curriculum, S3, bad input."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from guideloom import (
    DocumentJsonFormat,
    DocumentStorage,
    Mixture,
    StatefulDataLoader,
    StreamDataset,
    StreamNumpyFormat,
    StreamStorage,
)
from guideloom.errors import MixtureError, ResumeStateError
from guideloom.loading.mixture import MixtureOrder
from guideloom.testing import assert_exact_resume

L = 4  # tokens per window


def _fmt(dtype: Any = np.uint32) -> StreamNumpyFormat:
    return StreamNumpyFormat({"tokens": dtype})


def write_stream(
    url: str, windows: int, base: int, options: dict[str, Any] | None = None, dtype: Any = np.uint32
) -> Any:
    """``windows`` windows of L tokens; token ids start at ``base``, so every source differs."""
    storage = StreamStorage(url, _fmt(dtype), storage_options=options or {})
    with storage.writer(shard_size=256) as writer:
        tokens = np.arange(base, base + windows * L, dtype=np.int64)
        for chunk in np.array_split(tokens, max(1, windows // 3)):
            writer.append({"tokens": chunk})
    return StreamStorage(url, _fmt(dtype), storage_options=options or {})


def source_of(window: Any) -> tuple[int, int]:
    """(source number, window index in it) from a window's first token (bases are 10**6 apart)."""
    first = int(window[0])
    return first // 10**6, (first % 10**6) // L


@pytest.fixture
def three(tmp_path: Any) -> dict[str, Any]:
    return {
        "web": write_stream(str(tmp_path / "web"), 40, 0),
        "code": write_stream(str(tmp_path / "code"), 9, 10**6),
        "books": write_stream(str(tmp_path / "books"), 3, 2 * 10**6),
    }


def _mix(sources: dict[str, Any], weights: dict[str, float], **kwargs: Any) -> Mixture:
    return Mixture({k: (sources[k], weights[k]) for k in weights}, **kwargs)


def _windows(loader: Any) -> list[tuple[int, int]]:
    return [source_of(row) for batch in loader for row in batch["tokens"].tolist()]


def test_a_mixture_epoch_has_the_planned_shares_and_per_source_orders(three: dict[str, Any]) -> None:
    mix = _mix(three, {"web": 0.5, "code": 0.3, "books": 0.2})
    loader = StatefulDataLoader.from_storage(mix, sequence_length=L, batch_size=4, shuffle=True, seed=1)
    plan = loader.view.plan
    got = _windows(loader)
    assert len(got) == plan.epoch_length
    counts = np.bincount([s for s, _ in got], minlength=3)
    assert counts.tolist() == list(plan.draws)
    # every prefix is within one sample of its share (three sources: the proven bound)
    running = np.zeros(3)
    for p, (s, _) in enumerate(got, start=1):
        running[s] += 1
        assert np.abs(running - p * np.array(plan.shares)).max() < 1
    # web (the largest by size / weight) is read once; books repeat, each repeat a new order
    web = [i for s, i in got if s == 0]
    assert sorted(web) == list(range(40))
    books = [i for s, i in got if s == 2]
    for e in range(len(books) // 3):
        assert sorted(books[3 * e : 3 * e + 3]) == [0, 1, 2]


def test_exact_resume_of_a_mixture(three: dict[str, Any]) -> None:
    mix = _mix(three, {"web": 0.6, "code": 0.3, "books": 0.1})

    def make_loader(**kwargs: Any) -> Any:
        return StatefulDataLoader.from_storage(
            mix, sequence_length=L, batch_size=3, shuffle=True, seed=5, **kwargs
        )

    assert_exact_resume(make_loader, worker_counts=(0,), world_sizes=(1, 3), elastic=((4, 2), (2, 5)))


def test_five_sources_by_quota_stay_within_one_and_resume_exactly(tmp_path: Any) -> None:
    """Weights for which no tree of splits proves within one: "auto" deals them by the quota
    period; every prefix of the delivered order is within one sample of its share, the state
    records the schedule, and resuming is exact, also into other world sizes."""
    weights = [2, 2, 2, 1, 3]
    five = {f"s{i}": write_stream(str(tmp_path / f"s{i}"), 4 + 3 * i, i * 10**6) for i in range(5)}
    mix = Mixture({k: (v, w) for (k, v), w in zip(five.items(), weights)})
    loader = StatefulDataLoader.from_storage(mix, sequence_length=L, batch_size=4, shuffle=True, seed=2)
    plan = loader.view.plan
    assert plan.interleave.schedule == "quota" and plan.interleave.max_deviation < 1
    got = _windows(loader)
    assert len(got) == plan.epoch_length
    running = np.zeros(5)
    for p, (src, _) in enumerate(got, start=1):
        running[src] += 1
        assert np.abs(running - p * np.array(plan.shares)).max() < 1
    for i in range(5):  # each source: whole passes in its own order, no repeat within one
        mine = [w for s_, w in got if s_ == i]
        n = 4 + 3 * i
        for e in range(len(mine) // n):
            assert sorted(mine[e * n : (e + 1) * n]) == list(range(n))
    state = loader.state_dict()
    assert state["guideloom_loader"]["mixture"]["schedule"] == "quota"

    def make_loader(**kwargs: Any) -> Any:
        return StatefulDataLoader.from_storage(
            mix, sequence_length=L, batch_size=3, shuffle=True, seed=5, **kwargs
        )

    assert_exact_resume(make_loader, worker_counts=(0,), world_sizes=(1, 2), elastic=((3, 2),))

    # a state saved with the tree (as every state before the quota schedule) says how to continue it
    tree = Mixture({k: (v, w) for (k, v), w in zip(five.items(), weights)}, schedule="tree")
    tree_loader = StatefulDataLoader.from_storage(tree, sequence_length=L, batch_size=4, shuffle=True, seed=2)
    it = iter(tree_loader)
    for _ in range(3):
        next(it)
    saved = json.loads(json.dumps(tree_loader.state_dict()))
    assert "schedule" not in saved["guideloom_loader"]["mixture"]
    expected = [source_of(row) for b in it for row in b["tokens"].tolist()]
    with pytest.raises(ResumeStateError, match="saved with the 'tree' schedule.*schedule='tree'"):
        StatefulDataLoader.from_storage(
            mix, sequence_length=L, batch_size=4, shuffle=True, seed=2
        ).load_state_dict(saved)
    again = StatefulDataLoader.from_storage(
        Mixture({k: (v, w) for (k, v), w in zip(five.items(), weights)}, schedule="tree"),
        sequence_length=L,
        batch_size=4,
        shuffle=True,
        seed=2,
    )
    again.load_state_dict(saved)
    assert _windows(again) == expected
    with pytest.raises(MixtureError, match="schedule must be 'auto'"):
        Mixture({"s0": (five["s0"], 1)}, schedule="fair")  # type: ignore[arg-type]
    with pytest.raises(MixtureError, match="quota schedule tabulates .*sources: s0, s1"):
        Mixture({"s0": (five["s0"], 1e-6), "s1": (five["s1"], 1)}, schedule="quota")


def test_block_shuffle_and_first_exhausted_resume(three: dict[str, Any]) -> None:
    mix = _mix(three, {"web": 1, "code": 1, "books": 1}, stopping_strategy="first_exhausted")

    def make_loader(**kwargs: Any) -> Any:
        return StatefulDataLoader.from_storage(
            mix, sequence_length=L, batch_size=2, shuffle="block", shuffle_block_size=4, seed=2, **kwargs
        )

    loader = make_loader(num_workers=0, rank=0, world_size=1)
    got = _windows(loader)
    assert len(got) == 9 and sorted(s for s, _ in got) == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # the next mixture epoch continues web and code where they stopped (no repeats yet)
    nxt = _windows(loader)
    assert not {w for w in nxt if w[0] == 0} & {w for w in got if w[0] == 0}
    assert_exact_resume(make_loader, worker_counts=(0,), world_sizes=(2,), elastic=((3, 2),))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    weights=st.lists(st.floats(0.05, 1.0), min_size=3, max_size=3),
    batch=st.integers(1, 4),
    old_world=st.integers(1, 4),
    new_world=st.integers(1, 5),
    fraction=st.floats(0, 0.99),
)
def test_resume_at_random_positions_into_other_world_sizes(
    three: dict[str, Any], weights: list[float], batch: int, old_world: int, new_world: int, fraction: float
) -> None:
    mix = _mix(three, dict(zip(["web", "code", "books"], weights)))

    def loader(rank: int, world: int, batch_size: int = batch) -> Any:
        return StatefulDataLoader.from_storage(
            mix, sequence_length=L, batch_size=batch_size, shuffle=True, seed=9, rank=rank, world_size=world
        )

    one = loader(0, 1, 1)
    reference = _windows(one)  # the global order, one sample per step
    next_epoch = _windows(one)
    old = [loader(r, old_world) for r in range(old_world)]
    steps = int(fraction * len(old[0]))
    iters = [iter(x) for x in old]
    for _ in range(steps):
        for it in iters:
            next(it)
    state = json.loads(json.dumps(old[0].state_dict()))
    position = state["guideloom_loader"]["position"]
    new = [loader(r, new_world, batch + 1) for r in range(new_world)]
    for x in new:
        x.load_state_dict(state)
    per_rank = [[[source_of(row) for row in b["tokens"].tolist()] for b in x] for x in new]
    rest = [w for step in zip(*per_rank) for rank_batch in step for w in rank_batch]
    if len(reference) - position < new_world:
        # fewer samples left than ranks: none can be handed out evenly, so the epoch is complete
        # under the new world size (docs: up to world_size - 1 are dropped). The saved pass was
        # unfinished: its rest is an empty pass (as a state at an epoch's last batch gives,
        # test_end_of_epoch.py), and the pass after it is the next epoch.
        assert rest == []
        following = [[[source_of(row) for row in b["tokens"].tolist()] for b in x] for x in new]
        rest = [w for step in zip(*following) for rank_batch in step for w in rank_batch]
        assert rest == next_epoch[: len(rest)] and len(rest) > 0
        return
    assert rest == reference[position : position + len(rest)]
    assert len(reference) - position - len(rest) < new_world * (batch + 1)


def test_the_state_is_small_and_names_what_differs(tmp_path: Any, three: dict[str, Any]) -> None:
    eight = {f"s{i}": write_stream(str(tmp_path / f"s{i}"), 3 + i, i * 10**6) for i in range(8)}
    mix = Mixture({k: (v, 1 / (i + 1.7)) for i, (k, v) in enumerate(eight.items())})
    loader = StatefulDataLoader.from_storage(mix, sequence_length=L, batch_size=2, shuffle=True)
    next(iter(loader))
    state = loader.state_dict()
    assert len(json.dumps(state["guideloom_loader"])) < 1024  # the order's part
    assert len(json.dumps(state["metrics"])) < 256  # loader.metrics() totals (this rank's)

    base = {"web": 0.5, "code": 0.3, "books": 0.2}
    saved = StatefulDataLoader.from_storage(_mix(three, base), sequence_length=L).state_dict()
    cases = [
        (
            _mix(three, {**base, "code": 0.4}),
            "weights differ: .* source 'code' 0.3, .* source 'code' 0.363636",
        ),
        (_mix(three, base, stopping_strategy="first_exhausted"), "stopping_strategy"),
        (_mix(three, {"web": 0.5, "code": 0.3}), "mixture of 3 sources"),
        (
            Mixture(
                {"web": (three["web"], 0.5), "code": (three["books"], 0.3), "books": (three["code"], 0.2)}
            ),
            "source 'code' holds other data",
        ),
    ]
    for other, match in cases:
        with pytest.raises(ResumeStateError, match=match):
            StatefulDataLoader.from_storage(other, sequence_length=L).load_state_dict(saved)
    with pytest.raises(ResumeStateError, match="single dataset"):
        StatefulDataLoader.from_storage(three["web"], sequence_length=L).load_state_dict(saved)
    single = StatefulDataLoader.from_storage(three["web"], sequence_length=L).state_dict()
    assert "mixture" not in single["guideloom_loader"]
    with pytest.raises(ResumeStateError, match="single dataset"):
        StatefulDataLoader.from_storage(_mix(three, base), sequence_length=L).load_state_dict(single)


def test_curriculum_changes_weights_going_forward(three: dict[str, Any]) -> None:
    first = _mix(three, {"web": 0.8, "code": 0.1, "books": 0.1})
    loader = StatefulDataLoader.from_storage(first, sequence_length=L, batch_size=2, shuffle=True, seed=4)
    it = iter(loader)
    delivered = [source_of(row) for _ in range(7) for row in next(it)["tokens"].tolist()]
    state = loader.state_dict()
    second = _mix(three, {"web": 0.2, "code": 0.4, "books": 0.4}, after=state)
    later = StatefulDataLoader.from_storage(second, sequence_length=L, batch_size=2, shuffle=True, seed=4)
    rest = _windows(later)
    code = [i for s, i in delivered + rest if s == 1]
    for e in range(len(code) // 9):  # every code epoch complete, nothing twice
        assert sorted(code[9 * e : 9 * e + 9]) == list(range(9))
    web = [i for s, i in delivered + rest if s == 0]
    assert len(set(web[:40])) == len(web[:40])  # web's first epoch continues without repeats
    # the new run resumes exactly when rebuilt with the same after= state
    mid = StatefulDataLoader.from_storage(second, sequence_length=L, batch_size=2, shuffle=True, seed=4)
    it2 = iter(mid)
    head = [source_of(r) for _ in range(3) for r in next(it2)["tokens"].tolist()]
    again = StatefulDataLoader.from_storage(
        _mix(three, {"web": 0.2, "code": 0.4, "books": 0.4}, after=state),
        sequence_length=L,
        batch_size=2,
        shuffle=True,
        seed=4,
    )
    again.load_state_dict(mid.state_dict())
    assert head + _windows(again) == rest
    with pytest.raises(ResumeStateError, match="started at draw"):
        StatefulDataLoader.from_storage(
            _mix(three, {"web": 0.2, "code": 0.4, "books": 0.4}), sequence_length=L
        ).load_state_dict(mid.state_dict())


def test_extreme_weights_and_a_one_sample_source(tmp_path: Any, three: dict[str, Any]) -> None:
    one = write_stream(str(tmp_path / "one"), 1, 5 * 10**6)
    mix = Mixture({"web": (three["web"], 1.0), "one": (one, 1e-6)}, stopping_strategy="first_exhausted")
    loader = StatefulDataLoader.from_storage(mix, sequence_length=L, batch_size=8)
    assert loader.view.plan.epoch_length == 40 and loader.view.plan.draws == (40, 0)
    assert sorted(_windows(loader)) == [(0, i) for i in range(40)]
    mix = Mixture({"web": (three["web"], 1.0), "one": (one, 1.0)})  # the one window every other step
    loader = StatefulDataLoader.from_storage(mix, sequence_length=L, batch_size=8)
    got = _windows(loader)
    assert got.count((5, 0)) == loader.view.plan.draws[1] == len(got) - 40 >= 39
    mix = Mixture({"web": (three["web"], 1.0), "one": (one, 1e-6)})  # all_exhausted: one draw of one
    loader = StatefulDataLoader.from_storage(mix, sequence_length=L, batch_size=1000, shuffle=True)
    order = MixtureOrder(loader.view.plan, shuffle="full", seed=0, epoch=0)
    assert loader.view.plan.epoch_length == 500_001
    src, _ = order.locate(np.arange(500_001))
    assert (src == 1).sum() == 1
    assert order(np.flatnonzero(src == 1)).tolist() == [40]  # the one window, index 40 of the mixture


def test_documents_and_views_mix(tmp_path: Any) -> None:
    docs = []
    for k, n in enumerate([5, 2]):
        storage = DocumentStorage(str(tmp_path / f"d{k}"), DocumentJsonFormat())
        with storage.writer() as writer:
            for i in range(n):
                writer.append({"src": k, "i": i})
        docs.append(DocumentStorage(str(tmp_path / f"d{k}"), DocumentJsonFormat()))
    mix = Mixture([(docs[0], 2), (docs[1], 1)])
    batches = list(StatefulDataLoader.from_storage(mix, batch_size=2, shuffle=True))
    records = [r for b in batches for r in b]
    assert sorted((r["src"], r["i"]) for r in records if r["src"] == 0) == [(0, i) for i in range(5)]
    assert mix.names == (docs[0].url, docs[1].url)
    with pytest.raises(MixtureError, match="no meaning for a mixture of document"):
        StatefulDataLoader.from_storage(mix, sequence_length=8)
    view_mix = Mixture({"a": (StreamDataset(write_stream(str(tmp_path / "v"), 4, 0), L), 1)})
    assert len(list(StatefulDataLoader.from_storage(view_mix, sequence_length=L))) == 4


def test_bad_input_names_the_source(tmp_path: Any, three: dict[str, Any]) -> None:
    web = three["web"]
    for weight, match in [
        (-1, "weight -1"),
        (0, "weight 0"),
        (float("nan"), "weight nan"),
        ("1", "weight '1'"),
    ]:
        with pytest.raises(MixtureError, match=f"source 'code' has {match}"):
            Mixture({"web": (web, 1), "code": (three["code"], weight)})
    with pytest.raises(MixtureError, match="at least one source"):
        Mixture({})
    docs = DocumentStorage(str(tmp_path / "docs"), DocumentJsonFormat())
    with docs.writer() as writer:
        writer.append({"x": 1})
    with pytest.raises(MixtureError, match="source 'docs' .* is a DocumentStorage"):
        Mixture({"web": (web, 1), "docs": (DocumentStorage(str(tmp_path / "docs"), DocumentJsonFormat()), 1)})
    narrow = write_stream(str(tmp_path / "narrow"), 3, 0, dtype=np.uint16)
    with pytest.raises(MixtureError, match="source 'narrow' .* schema"):
        Mixture({"web": (web, 1), "narrow": (narrow, 1)})
    with pytest.raises(MixtureError, match="source 'code' is a view with sequence_length=8"):
        StatefulDataLoader.from_storage(
            Mixture({"web": (web, 1), "code": (StreamDataset(three["code"], 8), 1)}), sequence_length=L
        )
    with pytest.raises(MixtureError, match="different sequence lengths"):
        Mixture({"web": (StreamDataset(web, 4), 1), "code": (StreamDataset(three["code"], 8), 1)}).dataset()
    short = StreamStorage(str(tmp_path / "short"), _fmt())
    with short.writer() as writer:
        writer.append({"tokens": np.arange(L - 1)})
    with pytest.raises(MixtureError, match="source 'short' .* has no complete windows"):
        StatefulDataLoader.from_storage(
            Mixture({"web": (web, 1), "short": (StreamStorage(str(tmp_path / "short"), _fmt()), 1)}),
            sequence_length=L,
        )
    with pytest.raises(MixtureError, match="sequence_length is required to mix the stream source 'web'"):
        StatefulDataLoader.from_storage(Mixture({"web": (web, 1)}))
    with pytest.raises(MixtureError, match="source 'x': expected a GuideLoom storage"):
        Mixture({"x": ("s3://bucket/ds", 1)})


@pytest.mark.s3
def test_remote_sources_on_s3(s3_bucket: str, s3_options: dict[str, Any], tmp_path: Any) -> None:
    remote = write_stream(f"s3://{s3_bucket}/code", 9, 10**6, s3_options)
    local = write_stream(str(tmp_path / "web"), 20, 0)
    mix = Mixture({"web": (local, 0.7), "code": (remote, 0.3)})

    def make_loader(**kwargs: Any) -> Any:
        return StatefulDataLoader.from_storage(
            mix, sequence_length=L, batch_size=4, shuffle=True, seed=3, **kwargs
        )

    got = _windows(make_loader(num_workers=0))
    assert sorted(i for s, i in got if s == 1) == list(range(9))  # every remote window once
    assert len(got) == make_loader().view.plan.epoch_length
    assert_exact_resume(make_loader, worker_counts=(0,), world_sizes=(1,), elastic=((2, 3),))
    # one process-worker run (each DataLoader start costs seconds): save with 2, resume with 0
    workers = make_loader(num_workers=2)
    it = iter(workers)
    head = [source_of(r) for _ in range(3) for r in next(it)["tokens"].tolist()]
    state = json.loads(json.dumps(workers.state_dict()))
    del it, workers
    resumed = make_loader(num_workers=0)
    resumed.load_state_dict(state)
    assert head + _windows(resumed) == got


def test_cli_mix_previews_shares_epoch_and_repeats(three: dict[str, Any]) -> None:
    from typer.testing import CliRunner

    from guideloom.cli import app

    urls = {k: v.url for k, v in three.items()}
    args = ["mix", f"{urls['web']}=0.5", f"{urls['code']}=0.3", f"{urls['books']}=0.2", "-L", str(L)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    plan = _mix(three, {"web": 0.5, "code": 0.3, "books": 0.2}).plan(L)
    assert f"mixture epoch  {plan.epoch_length:,} samples (all_exhausted)" in result.output
    for name, draws, rep in zip(["web", "code", "books"], plan.draws, plan.repeats):
        assert any(
            urls[name] in line and f"{draws:,d}" in line and f"{rep:.3f}x" in line
            for line in result.output.splitlines()
        )
    bad = CliRunner().invoke(app, ["mix", f"{urls['web']}=0", "-L", str(L)])
    assert bad.exit_code != 0 and "weight '0' is not a positive" in bad.output
    missing = CliRunner().invoke(app, ["mix", f"{urls['web']}=1"])
    assert missing.exit_code != 0 and "--sequence-length" in missing.output
    assert "(tree schedule)" in result.output
    quota = CliRunner().invoke(app, [*args, "--schedule", "quota"])
    assert quota.exit_code == 0 and "(quota schedule)" in quota.output
    schedule = _mix(three, {"web": 0.5, "code": 0.3, "books": 0.2}, schedule="quota").plan(L).interleave
    assert f"max deviation  {schedule.max_deviation:.3f}" in quota.output
    wrong = CliRunner().invoke(app, [*args, "--schedule", "fair"])
    assert wrong.exit_code == 2 and "schedule must be 'auto'" in wrong.output


def _crosses_shards(view: Any) -> bool:
    """Whether some window of a stream view spans two shards."""
    first = np.arange(len(view)) * view.sequence_length
    last = first + view.sequence_length - 1
    return bool(
        (np.searchsorted(view._starts, first, "right") != np.searchsorted(view._starts, last, "right")).any()
    )


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from([3, 4]), st.lists(st.integers(0, 10**6), max_size=70))
def test_a_local_batch_read_matches_each_sources_own_reads(
    three: dict[str, Any], length: int, draws: list[int]
) -> None:
    # The local fast path reads every source's windows into one array (runs of back-to-back
    # windows of one shard in one preadv; windows that cross a shard boundary, as 3-token
    # windows do in these 64-token shards, piece by piece): it must give exactly what each
    # source's own view reads, in batch order, repeats included.
    mix = _mix(three, {"web": 0.5, "code": 0.3, "books": 0.2})
    ds = mix.dataset(sequence_length=length)
    assert ds._windows is not None
    views = {k: StreamDataset(three[k], sequence_length=length) for k in ("web", "code", "books")}
    assert any(_crosses_shards(v) for v in views.values()) == (length == 3)
    indexes = [d % len(ds) for d in draws]
    expected = [views[name][j]["tokens"] for name, j in map(ds.source_of, indexes)]
    got = ds.read_windows(indexes)["tokens"]
    assert got.shape == (len(indexes), length)
    assert [row.tolist() for row in got] == [row.tolist() for row in expected]


def _documents(url: str, lengths: list[int], src: int, record_tokens: bool = True) -> DocumentStorage:
    """Documents ``{"src", "i", "tokens": [..]}`` of the given token lengths; the manifest
    records their total tokens (as a writer's metadata) unless ``record_tokens`` is False."""
    storage = DocumentStorage(url, DocumentJsonFormat())
    meta = {"tokens": sum(lengths)} if record_tokens else None
    with storage.writer(metadata=meta) as writer:
        for i, n in enumerate(lengths):
            writer.append({"src": src, "i": i, "tokens": list(range(n))})
    return DocumentStorage(url, DocumentJsonFormat())


def test_token_weights_for_documents(tmp_path: Any) -> None:
    # short: 120 documents of 5-15 tokens (mean 10); long: 10 documents of 50-150 (mean 100)
    rng = np.random.default_rng(0)
    short_lengths = (10 + rng.integers(-5, 6, 120)).tolist()
    long_lengths = (100 + rng.integers(-50, 51, 10)).tolist()
    short = _documents(str(tmp_path / "short"), short_lengths, 0)
    long = _documents(str(tmp_path / "long"), long_lengths, 1)
    mean = [sum(short_lengths) / 120, sum(long_lengths) / 10]
    mix = Mixture({"short": (short, 1), "long": (long, 1)}, weight_by="tokens")
    assert mix.mean_tokens == pytest.approx(mean)
    plan = mix.plan()
    # equal token shares: documents in inverse proportion to their mean length
    assert plan.shares[0] / plan.shares[1] == pytest.approx(mean[1] / mean[0], rel=1e-9)
    assert plan.token_shares == pytest.approx([0.5, 0.5], rel=1e-9)
    assert "token share" in "\n".join(plan.lines())
    loader = StatefulDataLoader.from_storage(mix, batch_size=7, shuffle=True, seed=2)
    records = [r for b in loader for r in b]
    tokens = np.zeros(2)
    running_docs = np.zeros(2)
    for p, r in enumerate(records, start=1):
        running_docs[r["src"]] += 1
        tokens[r["src"]] += len(r["tokens"])
        # the documents of each source keep within one of their share (two sources: < 1)
        assert np.abs(running_docs - p * np.array(plan.shares)).max() < 1
    # the epoch (all_exhausted: until the 120 short documents are read) repeats long (each pass
    # a whole number of its epochs plus a part); its tokens are the complete passes exactly
    draws = plan.draws
    assert draws[0] == 120 and len(records) == plan.epoch_length
    full_passes, rest = divmod(draws[1], 10)
    long_docs = [r for r in records if r["src"] == 1]
    assert sum(len(r["tokens"]) for r in long_docs[: 10 * full_passes]) == full_passes * sum(long_lengths)
    assert tokens[0] == sum(short_lengths)
    # the token share over the epoch: within one mean document of each source's expected tokens
    expected = np.array(draws) * np.array(mean)
    assert np.abs(tokens - expected).max() <= max(long_lengths) * max(rest, 1)
    # sample weights, as before, unchanged by the option's default
    assert Mixture({"short": (short, 1), "long": (long, 1)}).plan().shares == (0.5, 0.5)
    # guideloom mix shows the same plan, with each source's token share
    from typer.testing import CliRunner

    from guideloom.cli import app

    result = CliRunner().invoke(app, ["mix", f"{short.url}=1", f"{long.url}=1", "--weight-by", "tokens"])
    assert result.exit_code == 0, result.output
    assert f"mixture epoch  {plan.epoch_length:,} samples" in result.output
    rows = [line for line in result.output.splitlines() if short.url in line or long.url in line]
    assert len(rows) == 2 and all(line.rstrip().endswith("50.0000%") for line in rows)


def test_token_weights_need_token_counts(tmp_path: Any, three: dict[str, Any]) -> None:
    known = _documents(str(tmp_path / "known"), [3, 4], 0)
    unknown = _documents(str(tmp_path / "unknown"), [30, 40], 1, record_tokens=False)
    with pytest.raises(MixtureError, match=r"source 'unknown' .*records none.*metadata=\{'tokens': N\}"):
        Mixture({"known": (known, 1), "unknown": (unknown, 1)}, weight_by="tokens")
    # given explicitly instead: the same conversion
    mix = Mixture(
        {"known": (known, 1), "unknown": (unknown, 1)}, weight_by="tokens", source_tokens={"unknown": 70}
    )
    assert mix.mean_tokens == (3.5, 35.0)
    assert mix.weights == (10, 1)
    with pytest.raises(MixtureError, match=r"source_tokens names \['nope'\]"):
        Mixture({"known": (known, 1)}, weight_by="tokens", source_tokens={"nope": 3})
    with pytest.raises(MixtureError, match="has 0 tokens"):
        Mixture({"known": (known, 1)}, weight_by="tokens", source_tokens={"known": 0})
    with pytest.raises(MixtureError, match="weight_by must be"):
        Mixture({"known": (known, 1)}, weight_by="bytes")  # type: ignore[arg-type]
    # streams: every window has sequence_length tokens, so token and sample shares agree
    streams = _mix(three, {"web": 0.5, "code": 0.3, "books": 0.2})
    by_tokens = Mixture(
        {k: (three[k], w) for k, w in [("web", 0.5), ("code", 0.3), ("books", 0.2)]}, weight_by="tokens"
    )
    assert by_tokens.weights == streams.weights
    with pytest.raises(MixtureError, match="source_tokens is only read"):
        Mixture({"web": (three["web"], 1)}, source_tokens={"web": 5})

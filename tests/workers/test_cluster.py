"""The cluster path on a real two-node Ray cluster on this machine (no Docker here): the `ray
start` commands of docker-compose.yml for the head and the worker, the compose `ingest` service's
`ray job submit` against the head's Jobs API, output on the session's S3 endpoint, credentials
and endpoint from the standard AWS variables only. Compared byte for byte (shard table and
checksums) with the same command on a local Ray. Then `ray job stop` and a lost worker node.

One cluster (a head and a worker, 1 CPU each, 256 MiB object stores) serves every test; the test
that kills the worker node runs last. The cluster and the local reference run live for the test
process (session scope), not the module: under pytest-xdist a worker may run other tests between
this module's, and a module fixture would then start the cluster again (25-60 s each time).
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ingest_hooks import hooks_env
from raycluster import REPO, LocalCluster, compose_job

from guideloom.storage.checks import read_manifest

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.s3]

JOB_TIMEOUT_S = 240
_ATTEMPT = re.compile(r"/a-[^/]+/")


def _shards(manifest) -> list[tuple]:
    return [
        (
            s.part,
            s.index,
            s.records,
            s.tokens,
            # Every writer attempt has a prefix of its own (a-<attempt>): two runs of one job share
            # the run prefix and every byte, not the attempt names.
            sorted((n, _ATTEMPT.sub("/a-*/", f.path), f.size, f.checksum) for n, f in s.files.items()),
        )
        for s in manifest.shards
    ]


@pytest.fixture(scope="session")
def compose():
    return yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]


@pytest.fixture(scope="session")
def cluster(compose, s3_endpoint):
    import os

    env = {
        **os.environ,
        "AWS_ENDPOINT_URL": s3_endpoint.url,  # what compose gives every node, nothing else
        "AWS_ACCESS_KEY_ID": s3_endpoint.key,
        "AWS_SECRET_ACCESS_KEY": s3_endpoint.secret,
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    env.pop("GUIDELOOM_TEST_S3_ENDPOINT", None)
    c = LocalCluster(compose["ray-head"]["command"], compose["ray-worker"]["command"], env)
    try:
        yield c.start()
    finally:
        c.stop()


def _job_argv(compose, cluster, output: str) -> tuple[list[str], list[str]]:
    """Compose's `ray job submit ... -- guideloom ingest ...`, pointed at this cluster and output."""
    submit, argv = compose_job(compose)
    submit = [str(Path(sys.executable).parent / "ray"), *submit[1:]]
    submit[submit.index("--address") + 1] = cluster.dashboard_url
    argv = [a.replace("/app/", f"{REPO}/") for a in argv]
    argv[argv.index("--output") + 1] = output
    return submit, argv


@pytest.fixture(scope="session")
def local_reference(compose, cluster, ray_local, tmp_path_factory):
    """The compose job's command on the session's local Ray (in this process), and its time."""
    _, argv = _job_argv(compose, cluster, str(tmp_path_factory.mktemp("local") / "kjv"))
    from typer.testing import CliRunner

    from guideloom.cli import app

    started = time.monotonic()
    result = CliRunner().invoke(app, argv[1:])
    seconds = time.monotonic() - started
    assert result.exit_code == 0, result.output
    manifest = read_manifest(argv[argv.index("--output") + 1], {})[1]
    return argv, manifest, seconds


def test_compose_job_submitted_to_a_two_node_cluster_matches_a_local_run(
    compose, cluster, local_reference, s3_bucket, s3_options
):
    output = f"s3://{s3_bucket}/kjv-bytes"
    submit, argv = _job_argv(compose, cluster, output)
    started = time.monotonic()
    done = subprocess.run(
        [*submit, "--", *argv], env=cluster.env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S
    )
    seconds = time.monotonic() - started
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "running on the Ray cluster at" in log and "(RAY_ADDRESS; 2 CPUs)" in log
    manifest = read_manifest(output, s3_options)[1]
    _, reference, local_seconds = local_reference
    assert _shards(manifest) == _shards(reference)  # same shard files, sizes and checksums
    assert manifest.metadata == reference.metadata
    print(f"\n[timing] ray job submit on 2 nodes: {seconds:.1f} s; local run: {local_seconds:.1f} s")


def test_no_address_starts_its_own_ray_beside_a_running_cluster(cluster, tmp_path):
    """A bare ray.init() would attach to the cluster (its session file is found); guideloom
    ingest without an address starts a local Ray instead, and --num-workers is fine there."""
    env = {**cluster.env, "RAY_TMPDIR": str(cluster.tmp)}
    # with RAY_TMPDIR there, a bare ray.init() reads this session file and attaches to the cluster
    session_file = cluster.tmp / "ray" / "ray_current_cluster"
    assert session_file.read_text().strip().endswith(f":{cluster.gcs_port}")
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(20)))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "guideloom.cli",
            "ingest",
            str(data),
            "--output",
            str(tmp_path / "o"),
            "--num-workers",
            "2",
            "--runner",
            "ray",  # a job this small would run inline: the point here is which Ray it starts
            "--quiet",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "started a local Ray (2 CPUs)" in run.stderr
    assert "Ray cluster at" not in run.stderr and "ValueError" not in run.stderr


def _wait_for_part(fs, output: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not fs.glob(f"{output.removeprefix('s3://')}/parts/r-*/part-*.json"):  # a part's record
        assert time.monotonic() < deadline, "no part completed in time"
        time.sleep(0.3)


def _wait_for_job(client, job_id: str) -> str:
    from ray.job_submission import JobStatus

    deadline = time.monotonic() + JOB_TIMEOUT_S
    while (status := client.get_job_status(job_id)) not in {
        JobStatus.SUCCEEDED,
        JobStatus.FAILED,
        JobStatus.STOPPED,
    }:
        assert time.monotonic() < deadline, client.get_job_logs(job_id)[-3000:]
        time.sleep(0.5)
    return str(status)


def _slow_job(compose, cluster, output: str) -> str:
    _, argv = _job_argv(compose, cluster, output)
    return shlex.join([*argv, "--num-workers", "2"])


def test_ray_job_stop_cancels_and_a_resubmit_finishes_the_rest(
    compose, cluster, local_reference, s3_bucket, s3_options
):
    import s3fs
    from ray.job_submission import JobSubmissionClient

    fs = s3fs.S3FileSystem(**s3_options, skip_instance_cache=True)
    client = JobSubmissionClient(cluster.dashboard_url)
    output = f"s3://{s3_bucket}/stopped"
    job = client.submit_job(
        entrypoint=_slow_job(compose, cluster, output),
        runtime_env={"env_vars": hooks_env(part_delay_s=2)},
    )
    _wait_for_part(fs, output)
    client.stop_job(job)
    assert _wait_for_job(client, job) == "STOPPED"
    logs = client.get_job_logs(job)
    assert "interrupted: " in logs and "run the same command again" in logs, logs[-3000:]
    for crash in ("task_manager", "bug in Ray", "Traceback"):
        assert crash not in logs, logs[-3000:]
    assert not fs.exists(f"{output.removeprefix('s3://')}/manifest.json")
    again = client.submit_job(entrypoint=_slow_job(compose, cluster, output))
    assert _wait_for_job(client, again) == "SUCCEEDED", client.get_job_logs(again)[-3000:]
    assert "reused " in client.get_job_logs(again)
    manifest = read_manifest(output, s3_options)[1]
    assert _shards(manifest) == _shards(local_reference[1])


def test_auto_does_not_find_a_temp_dir_cluster_and_the_named_fix_joins_it(cluster, tmp_path):
    """The cluster was started with --temp-dir: `--ray-address auto` reads only Ray's default temp
    dir (empty here), says so, and the address it suggests (`$(cat DIR/ray_current_cluster)`)
    joins this cluster."""
    data = tmp_path / "in.jsonl"
    data.write_text("".join(json.dumps({"text": f"doc {i}"}) + "\n" for i in range(5)))
    env = {**cluster.env, "RAY_TMPDIR": str(tmp_path / "default")}
    base = f"{shlex.quote(sys.executable)} -m guideloom.cli ingest {data} --quiet --output "
    run = subprocess.run(
        ["bash", "-c", base + f"{tmp_path / 'a'} --ray-address auto"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 1
    assert "--ray-address auto: no running cluster recorded in" in run.stderr
    fix = re.search(r'--ray-address "\$\(cat DIR/ray_current_cluster\)"', run.stderr)
    assert fix is not None
    joined = fix.group(0).replace("DIR", str(cluster.temp_dir))
    run = subprocess.run(
        ["bash", "-c", base + f"{tmp_path / 'b'} {joined}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert f":{cluster.gcs_port} (--ray-address; 2 CPUs)" in run.stderr  # this cluster, joined


FOLLOWER = """
import json, sys, time
from pathlib import Path
from guideloom import StatefulDataLoader, StreamStorage, StreamNumpyFormat
url, options, done = sys.argv[1], json.loads(sys.argv[2]), Path(sys.argv[3])
storage = StreamStorage(url, StreamNumpyFormat({"tokens": "uint16"}), storage_options=options)
deadline = time.monotonic() + 240
while not storage.exists():
    assert time.monotonic() < deadline, "no snapshot committed in time"
    time.sleep(0.2)
loader = StatefulDataLoader.from_storage(storage, sequence_length=512, batch_size=8, follow=True)
while time.monotonic() < deadline:
    windows = [int(x) for b in loader for x in b["tokens"][:, 0]]
    state = loader.state_dict()["guideloom_loader"]
    print(json.dumps([state["snapshot"], state["num_samples"], windows]), flush=True)
    if done.exists() and json.loads(done.read_text()) == state["snapshot"]:
        break
    time.sleep(0.2)
"""


def test_a_loader_in_another_process_follows_a_commit_every_job_on_the_cluster(
    compose, cluster, local_reference, s3_bucket, s3_options, tmp_path
):
    """`ray job submit` of the compose job with `--commit-every 1` while a `follow=True` loader in
    another process trains on the bucket: every epoch it reads is exactly its snapshot's windows,
    it moves to later snapshots at epoch boundaries, and the last one is the one-shot dataset."""
    from ray.job_submission import JobSubmissionClient

    from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage

    client = JobSubmissionClient(cluster.dashboard_url)
    output = f"s3://{s3_bucket}/followed"
    job = client.submit_job(
        entrypoint=_slow_job(compose, cluster, output) + " --commit-every 1",
        runtime_env={"env_vars": hooks_env(part_delay_s=1.5)},
    )
    done = tmp_path / "done.json"
    follower = subprocess.Popen(
        [sys.executable, "-c", FOLLOWER, output, json.dumps(s3_options), str(done)],
        env={**cluster.env, "PYTHONPATH": str(REPO)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert _wait_for_job(client, job) == "SUCCEEDED", client.get_job_logs(job)[-3000:]
        storage = StreamStorage(output, StreamNumpyFormat({"tokens": "uint16"}), storage_options=s3_options)
        done.write_text(json.dumps(storage.current_snapshot.id))
        out, err = follower.communicate(timeout=240)
    finally:
        follower.kill()
    assert follower.returncode == 0, err[-3000:]
    epochs = [json.loads(line) for line in out.splitlines()]
    assert len({snap for snap, _, _ in epochs}) >= 2, epochs  # it moved to later snapshots
    assert epochs[-1][0] == storage.current_snapshot.id
    for snap, num_samples, windows in epochs:  # each epoch: its snapshot's windows, exactly once
        pinned = storage.at_snapshot(snap)
        expected = [int(w["tokens"][0]) for w in StreamDataset(pinned, 512)]
        assert len(windows) == num_samples and windows == expected
    assert _shards(read_manifest(output, s3_options)[1]) == _shards(local_reference[1])
    assert 2 <= len(storage.snapshots()) <= local_reference[1].num_parts  # a commit per finished step


def test_credentials_given_only_in_the_jobs_runtime_env_reach_the_driver_and_every_part(
    compose, cluster, local_reference, s3_endpoint, s3_bucket, s3_options
):
    """ "Credentials on a cluster": a job's `runtime_env` `env_vars` are the S3 settings of its
    driver and of every task on both nodes, over the nodes' own. Here they point the job at a
    counting proxy: with a wrong secret the job fails before any part, naming the proxy's
    endpoint and the refused secret; with the right one every shard is written through it."""
    from ray.job_submission import JobSubmissionClient
    from s3proxy import CountingProxy

    client = JobSubmissionClient(cluster.dashboard_url)
    output = f"s3://{s3_bucket}/by-runtime-env"
    with CountingProxy(s3_endpoint.url) as proxy:
        env = {"AWS_ENDPOINT_URL": proxy.url, "AWS_ACCESS_KEY_ID": s3_endpoint.key}
        job = client.submit_job(
            entrypoint=_slow_job(compose, cluster, output),
            runtime_env={"env_vars": {**env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}},
        )
        assert _wait_for_job(client, job) == "FAILED"
        logs = client.get_job_logs(job)
        assert f"access denied by the storage endpoint {proxy.url} (SignatureDoesNotMatch)" in logs, logs[
            -3000:
        ]
        assert "AWS_SECRET_ACCESS_KEY" in logs  # the fix names the variable
        assert proxy.request_count >= 1 and not any("/parts/" in r.path for r in proxy.log)
        proxy.reset()
        job = client.submit_job(
            entrypoint=_slow_job(compose, cluster, output),
            runtime_env={"env_vars": {**env, "AWS_SECRET_ACCESS_KEY": s3_endpoint.secret}},
        )
        assert _wait_for_job(client, job) == "SUCCEEDED", client.get_job_logs(job)[-3000:]
        manifest = read_manifest(output, s3_options)[1]
        written = {r.path.split("?")[0] for r in proxy.log if r.method == "PUT" and r.status == 200}
        for shard in manifest.shards:  # the tasks on both nodes wrote through the job's endpoint
            assert all(any(p.endswith(f.path) for p in written) for f in shard.files.values())
        assert _shards(manifest) == _shards(local_reference[1])


def test_exact_dedup_on_two_nodes_keeps_the_first_occurrences_as_a_local_run_does(
    cluster, ray_local, s3_bucket, s3_options, tmp_path
):
    """#36: duplicates within a file, across files and across parts (spread over both nodes'
    tasks) leave exactly the first occurrence, with the shards of the same job on a local Ray."""
    from ray.job_submission import JobSubmissionClient

    from guideloom import StreamDataset, StreamNumpyFormat, StreamStorage
    from guideloom.workers.ingest import ingest_dataset

    texts_a = [f"page {i % 7} of the crawl, padded with words" for i in range(20)]
    texts_b = [f"page {i % 9} of the crawl, padded with words" for i in range(12)]
    inputs = []
    for name, texts in (("a.jsonl", texts_a), ("b.jsonl", texts_b)):
        path = tmp_path / name
        path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
        inputs.append(str(path))
    output = f"s3://{s3_bucket}/dedup-two-nodes"
    flags = ["--dedup", "exact", "--part-size", "300", "--num-workers", "2"]
    client = JobSubmissionClient(cluster.dashboard_url)
    job = client.submit_job(
        entrypoint=shlex.join(["guideloom", "ingest", *inputs, "--output", output, *flags])
    )
    assert _wait_for_job(client, job) == "SUCCEEDED", client.get_job_logs(job)[-3000:]
    local = ingest_dataset(inputs, str(tmp_path / "local"), dedup="exact", part_size=300, num_workers=2)
    manifest = read_manifest(output, s3_options)[1]
    assert manifest.num_parts >= 4 and _shards(manifest) == _shards(local.manifest)
    kept = list(dict.fromkeys(texts_a + texts_b))
    expected = [t for text in kept for t in [*text.encode(), 256]]
    storage = StreamStorage(output, StreamNumpyFormat({"tokens": "uint16"}), storage_options=s3_options)
    assert StreamDataset(storage, len(expected))[0]["tokens"].tolist() == expected
    assert manifest.metadata["ingest"]["dedup"]["duplicates"] == len(texts_a + texts_b) - len(kept)


def test_worker_node_killed_mid_job_still_commits_the_same_dataset(
    compose, cluster, local_reference, s3_bucket, s3_options
):
    """Runs last: it leaves the cluster with its head only."""
    import s3fs
    from ray.job_submission import JobSubmissionClient

    fs = s3fs.S3FileSystem(**s3_options, skip_instance_cache=True)
    client = JobSubmissionClient(cluster.dashboard_url)
    output = f"s3://{s3_bucket}/lost-node"
    job = client.submit_job(
        entrypoint=_slow_job(compose, cluster, output),
        runtime_env={"env_vars": hooks_env(part_delay_s=2)},
    )
    _wait_for_part(fs, output)
    cluster.kill_worker(0)  # its raylet and the task running there die at once
    status = _wait_for_job(client, job)
    if status != "SUCCEEDED":  # the documented fallback: a re-submit redoes only missing parts
        again = client.submit_job(entrypoint=_slow_job(compose, cluster, output))
        assert _wait_for_job(client, again) == "SUCCEEDED", client.get_job_logs(again)[-3000:]
    manifest = read_manifest(output, s3_options)[1]
    assert _shards(manifest) == _shards(local_reference[1])
    print(f"\n[lost node] first submission: {status}")

"""Test infrastructure shared by every test: the S3 endpoint, fresh dataset locations, a counting
proxy and a local Ray. Fixtures for one area belong in that sub-directory's conftest.py.

Fixtures:
    s3_endpoint   session   the running endpoint (`tests/infra/s3server.py` says which one and why)
    s3_options    session   s3fs storage options for it: {"key", "secret", "client_kwargs"}
    s3_bucket     function  a fresh, empty bucket's name (removed afterwards, best effort)
    gcs_endpoint  session   the GCS emulator (`tests/infra/objectstores.py`); skips when not installed
    azure_endpoint session  azurite (Azure Blob); skips with one line saying how to get it
    gs_bucket     function  a fresh bucket on the GCS emulator
    az_container  function  a fresh container on azurite
    object_store  function  (root URL of a fresh bucket, storage_options), for s3, gs and az
    dataset_url   function  (url, storage_options) of a fresh empty location; runs for file, memory,
                            s3, gs and az (marked `s3`, `gcs`, `azure`)
    counting_s3   function  a counting reverse proxy in front of the endpoint (`tests/infra/s3proxy.py`)
    fault_s3      function  a fault-injecting proxy in front of the endpoint (`tests/infra/faultproxy.py`)
    ray_local     session   a local Ray (2 CPUs) whose workers see the S3 endpoint's env vars

Set-up writes through raw fsspec/s3fs, never through guideloom.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The shared helpers (S3 endpoint, proxies, formats used by several areas) live in tests/infra;
# import them by name whatever pytest's import mode is.
sys.path.insert(0, str(Path(__file__).resolve().parent / "infra"))

import objectstores  # noqa: E402  (sets GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT before gcsfs loads)
import s3server  # noqa: E402
from s3proxy import CountingProxy  # noqa: E402

_S3_STASH = pytest.StashKey[dict[str, Any]]()

# Warnings are errors (pyproject.toml). botocore 1.43, s3fs 2026.9, moto 5.2.5 and Ray 2.60 emitted
# none in a full run against RGW and against moto, so no ignore is needed here. Add one only for a
# warning you have seen, with a comment saying where it comes from:
#   config.addinivalue_line("filterwarnings", "ignore:<message regex>:<Category>")  # why


def pytest_configure(config: pytest.Config) -> None:
    # The region comes from the environment, not from client_kwargs["region_name"]: moto refuses
    # bucket creation when the client names a region. us-east-1 needs no LocationConstraint.
    if not os.environ.get(s3server.ENDPOINT_ENV):
        os.environ["AWS_DEFAULT_REGION"] = s3server.DEFAULT_REGION
    else:
        os.environ.setdefault("AWS_DEFAULT_REGION", s3server.DEFAULT_REGION)
    # Keep Ray from writing an auth token into the home directory (and from warning about it).
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    config.stash[_S3_STASH] = {"planned": s3server.choose_backend(), "endpoint": None, "note": None}
    if not config.pluginmanager.hasplugin("xdist"):  # `-p no:xdist`: the groups below are only marks
        config.addinivalue_line("markers", "xdist_group(name): tests that pytest-xdist runs in one worker")
    elif config.pluginmanager.hasplugin("xdist.remote") or os.environ.get("PYTEST_XDIST_WORKER"):
        config.pluginmanager.register(_GroupSuffix(), "guideloom-xdist-group-suffix")
    if _is_xdist_controller(config) and config.stash[_S3_STASH]["planned"] != "external":
        _start_shared_s3(config)


def _is_xdist_controller(config: pytest.Config) -> bool:
    """True in the process that hands tests to pytest-xdist workers (`-n N`, N > 0)."""
    workers = getattr(config.option, "numprocesses", None)
    return bool(workers) and not hasattr(config, "workerinput") and config.option.dist != "no"


def _start_shared_s3(config: pytest.Config) -> None:
    """Under xdist: one S3 endpoint for every worker, started by the controller in a thread (RGW
    takes ~12 s, so it starts while the workers import and collect). Workers find it through the
    file named by `s3server.SHARED_ENV` (`s3_endpoint` waits for it); the controller stops it
    when the session ends."""
    workdir = Path(tempfile.mkdtemp(prefix="guideloom-rgw-"))  # short: Ceph's sockets live inside
    shared = workdir / "endpoint.json"
    os.environ[s3server.SHARED_ENV] = str(shared)
    info = config.stash[_S3_STASH]

    def start() -> None:
        try:
            endpoint, note = s3server.start(workdir / "cluster")
        except Exception as err:  # noqa: BLE001 - reported to every worker that needs S3
            shared.with_suffix(".failed").write_text(f"{type(err).__name__}: {err}")
            return
        info.update(endpoint=endpoint, note=note)
        tmp = shared.with_suffix(".tmp")
        tmp.write_text(endpoint.to_json())
        tmp.rename(shared)

    thread = threading.Thread(target=start, name="shared-s3", daemon=True)
    thread.start()
    info["shared"] = (thread, workdir)


def pytest_unconfigure(config: pytest.Config) -> None:
    info = config.stash.get(_S3_STASH, None)
    if not info or "shared" not in info:
        return
    thread, workdir = info.pop("shared")
    thread.join(timeout=s3server.SHARED_WAIT_S)
    if info["endpoint"] is not None:
        info["endpoint"].stop()
    shutil.rmtree(workdir, ignore_errors=True)


# Under pytest-xdist (`--dist loadgroup`), tests that share an expensive process or fixture run
# in one worker, so it starts once: a module-scoped fixture would otherwise start once in every
# worker that gets one of the module's tests. The rest spread over the workers.
_GROUP_BY_MODULE = {
    # a two-node Ray cluster per module (and the documented cluster steps beside it)
    "test_cluster.py": "cluster",
    "test_cluster_docs.py": "cluster",
    # trainers forking 2 gloo processes each (Lightning DDP, accelerate): one pair at a time
    "test_lightning_ddp.py": "trainers",
    "test_accelerate_ranks.py": "trainers",
    "test_metrics_callbacks.py": "trainers",  # real Lightning and transformers Trainers (#35)
}
_GROUP_BY_FIXTURE = {
    "ray_local": "ray",  # one local Ray, not one per worker
    "built_site": "site",  # the documentation site, built once
    "browser": "site",  # one Chromium at a time
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        group = _GROUP_BY_MODULE.get(item.path.name)
        names = getattr(item, "fixturenames", ())
        for fixture, name in _GROUP_BY_FIXTURE.items():
            if group is None and fixture in names:
                group = name
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


class _GroupSuffix:
    """The group suffix xdist's scheduler reads (``nodeid@group``), set where pytest >= 9 keeps it.

    pytest-xdist 3.8 marks an item's group by assigning ``item._nodeid``; pytest 9 builds
    ``nodeid`` from ``item._id`` and ignores that attribute, so every group silently fell apart
    (four local Rays, clusters started side by side, module fixtures made once per worker). This
    runs after xdist's own hook and sets the suffix only where it is missing.
    """

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if not config.getvalue("loadgroup"):
            return
        from _pytest.nodeid import coerce_node_id

        for item in items:
            names = sorted(
                {
                    str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")
                }
            )
            suffix = "@" + "_".join(names)
            if names and not item.nodeid.endswith(suffix):
                item._id = coerce_node_id(item.nodeid + suffix)


def pytest_report_header(config: pytest.Config) -> list[str]:
    planned = config.stash[_S3_STASH]["planned"]
    what = {
        "external": f"external endpoint {os.environ.get(s3server.ENDPOINT_ENV)}",
        "rgw": "Ceph RGW (started on first use, ~12 s)",
        "moto": "moto ThreadedMotoServer (started on first use)",
    }[planned]
    return [f"S3 backend: {what}  [{s3server.ENDPOINT_ENV} / {s3server.BACKEND_ENV}=moto|rgw]"]


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    info = config.stash.get(_S3_STASH, None)
    if info is None:
        return
    endpoint = info["endpoint"]
    ran = endpoint.description if endpoint else "not started (no selected test needed S3)"
    terminalreporter.write_sep("-", "S3")
    terminalreporter.write_line(f"S3 backend that ran: {ran}")
    if info["note"]:
        terminalreporter.write_line(f"WARNING: {info['note']}", yellow=True, bold=True)


@pytest.fixture(scope="session")
def s3_endpoint(
    pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[s3server.S3Endpoint]:
    """The session's S3 endpoint; its env vars (endpoint, keys, region) are exported for
    subprocesses while it runs. RGW's cluster and logs live in pytest's base temp (the last few
    runs are kept)."""
    shared = os.environ.get(s3server.SHARED_ENV)
    if shared and hasattr(pytestconfig, "workerinput"):
        # An xdist worker: the controller started the endpoint (and stops it).
        endpoint, note = s3server.wait_shared(Path(shared)), None
    else:
        workdir = tmp_path_factory.mktemp("rgw")
        if len(str(workdir)) > 60:  # Ceph's admin sockets live inside; a Unix socket path is < 108 bytes
            workdir = Path(tempfile.mkdtemp(prefix="guideloom-rgw-"))
        endpoint, note = s3server.start(workdir)
    pytestconfig.stash[_S3_STASH].update(endpoint=endpoint, note=note)
    with pytest.MonkeyPatch.context() as mp:
        for name, value in endpoint.env().items():
            mp.setenv(name, value)
        try:
            yield endpoint
        finally:
            endpoint.stop()


@pytest.fixture(scope="session")
def s3_options(s3_endpoint: s3server.S3Endpoint) -> dict[str, Any]:
    """s3fs storage options for the session's endpoint. Returns a fresh copy each session."""
    return s3_endpoint.storage_options()


@pytest.fixture
def s3_bucket(s3_options: dict[str, Any]) -> Iterator[str]:
    """A fresh bucket (lowercase, 3+ characters, unique) created through s3fs; removed afterwards."""
    with s3server.fresh_bucket(s3_options) as name:
        yield name


def _store_endpoint(store: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[objectstores.Endpoint]:
    try:
        endpoint = objectstores.STARTERS[store](tmp_path_factory.mktemp(store))
    except objectstores.Unavailable as err:
        pytest.skip(str(err))
    with pytest.MonkeyPatch.context() as mp:
        for name, value in endpoint.env().items():
            mp.setenv(name, value)
        try:
            yield endpoint
        finally:
            endpoint.stop()


@pytest.fixture(scope="session")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[objectstores.Endpoint]:
    """The GCS emulator for the session (skipped, saying how to get it, when not installed)."""
    yield from _store_endpoint("gcs", tmp_path_factory)


@pytest.fixture(scope="session")
def azure_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[objectstores.Endpoint]:
    """azurite for the session (skipped, saying how to get it, when not installed)."""
    yield from _store_endpoint("azure", tmp_path_factory)


@pytest.fixture
def gs_bucket(gcs_endpoint: objectstores.Endpoint) -> Iterator[str]:
    with objectstores.fresh_bucket(gcs_endpoint) as name:
        yield name


@pytest.fixture
def az_container(azure_endpoint: objectstores.Endpoint) -> Iterator[str]:
    with objectstores.fresh_bucket(azure_endpoint) as name:
        yield name


STORES = [
    pytest.param("s3", marks=pytest.mark.s3),
    pytest.param("gs", marks=pytest.mark.gcs),
    pytest.param("az", marks=pytest.mark.azure),
]


@pytest.fixture(params=STORES)
def object_store(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """``(root URL of a fresh bucket, storage_options)`` on S3, GCS and Azure in turn."""
    return _remote_root(request, request.param)


def _remote_root(request: pytest.FixtureRequest, store: str) -> tuple[str, dict[str, Any]]:
    if store == "s3":
        return f"s3://{request.getfixturevalue('s3_bucket')}", dict(request.getfixturevalue("s3_options"))
    if store == "gs":
        endpoint = request.getfixturevalue("gcs_endpoint")
        return f"gs://{request.getfixturevalue('gs_bucket')}", endpoint.storage_options()
    endpoint = request.getfixturevalue("azure_endpoint")
    return f"az://{request.getfixturevalue('az_container')}", endpoint.storage_options()


@pytest.fixture(params=["file", "memory", *STORES])
def dataset_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """`(url, storage_options)` of a fresh location that does not exist yet: a local path under
    tmp_path, `memory://<unique>`, or `s3://`, `gs://`, `az://<fresh bucket>/ds`."""
    backend = request.param
    if backend == "file":
        yield str(tmp_path / "ds"), {}
    elif backend == "memory":
        import fsspec

        root = f"gl-test-{uuid.uuid4().hex[:16]}"
        try:
            yield f"memory://{root}", {}
        finally:
            fs = fsspec.filesystem("memory")
            prefix = f"/{root}"
            for key in [k for k in fs.store if k == prefix or k.startswith(prefix + "/")]:
                fs.store.pop(key, None)
            fs.pseudo_dirs[:] = [d for d in fs.pseudo_dirs if not (d == prefix or d.startswith(prefix + "/"))]
    else:
        root, options = _remote_root(request, backend)
        yield f"{root}/ds", options


@pytest.fixture
def counting_s3(s3_endpoint: s3server.S3Endpoint) -> Iterator[CountingProxy]:
    """A counting reverse proxy in front of the endpoint. Read through `.storage_options`, then
    check `.requests["GET"]`, `.request_count`, `.bytes_out` (response body bytes) and `.log`
    (method, path, range, status, bytes per request); `.reset()` after set-up."""
    with CountingProxy(s3_endpoint.url) as proxy:
        # A fresh s3fs instance: a later test's proxy may get the same port, and a cached
        # instance would keep connections (and listings) from this one.
        proxy.storage_options = {
            **s3_endpoint.storage_options(proxy.url),
            "skip_instance_cache": True,
        }
        yield proxy


@pytest.fixture
def fault_s3(s3_endpoint):
    """A fault-injecting proxy (`tests/infra/faultproxy.py`) in front of the session's S3 endpoint.

    Add rules with `.add(Fault(...))`; `.storage_options` point at the proxy with short client
    timeouts, no botocore retries beyond two attempts, and an 8 s GuideLoom deadline, so every
    fault test ends in seconds."""
    from faultproxy import FaultProxy

    with FaultProxy(s3_endpoint.url) as proxy:
        proxy.storage_options = {
            **s3_endpoint.storage_options(proxy.url),
            "skip_instance_cache": True,
            "config_kwargs": {"read_timeout": 0.5, "connect_timeout": 0.5, "retries": {"max_attempts": 2}},
            "guideloom_deadline_s": 8,
        }
        yield proxy


@pytest.fixture(scope="session")
def ray_local(s3_endpoint: s3server.S3Endpoint) -> Iterator[Any]:
    """A local Ray (num_cpus=2, no dashboard, 512 MiB object store). Its workers get the S3
    endpoint's env vars (GUIDELOOM_TEST_S3_ENDPOINT, AWS_*), so a task can reach the endpoint."""
    import ray  # lazily: only Ray tests pay for it

    env = {**s3_endpoint.env(), "RAY_AUTH_MODE": "disabled"}
    # address="local": always a new Ray of our own, even when another cluster (one a test or a user
    # started with `ray start`) runs on this machine; a bare ray.init() would attach to that one.
    context = ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=512 * 2**20,
        runtime_env={"env_vars": env},
        configure_logging=False,
    )
    try:
        yield context
    finally:
        ray.shutdown()

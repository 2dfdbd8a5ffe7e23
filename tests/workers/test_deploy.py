"""The deploy files cannot run here (no Docker engine): check that they parse, that names, ports
and environment agree, and that every command they run is one the CLI's own parser accepts."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
from pathlib import Path

import pytest
import typer
import yaml
from raycluster import compose_job

from guideloom.workers.cli import register

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> dict:
    return yaml.safe_load((ROOT / name).read_text())


def _parse_ingest(argv: list[str]) -> dict:
    """Parse `guideloom ingest ...` with the real command (nothing runs)."""
    assert argv[:2] == ["guideloom", "ingest"], argv
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """GuideLoom."""

    register(app)
    group = typer.main.get_command(app)
    ctx = group.commands["ingest"].make_context("ingest", list(argv[2:]))
    assert ctx.params["output"], "the command names no --output"
    return ctx.params


def test_compose_services_agree():
    compose = _load("docker-compose.yml")
    services = compose["services"]
    assert set(services) == {"minio", "create-bucket", "ray-head", "ray-worker", "ingest"}
    # Ray nodes and the job share the image built from deploy/Dockerfile
    head = services["ray-head"]
    assert head["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (ROOT / head["build"]["context"] / head["build"]["dockerfile"]).is_file()
    image = head["image"]
    assert services["ray-worker"]["image"] == services["ingest"]["image"] == image
    # the worker joins the head's GCS port
    port = re.search(r"--port=(\d+)", " ".join(head["command"])).group(1)
    assert f"--address=ray-head:{port}" in services["ray-worker"]["command"]
    # the driver runs where a raylet is: the job is submitted to the head's Jobs API
    submit, argv = compose_job(services)
    assert submit[:3] == ["ray", "job", "submit"]
    dashboard = re.search(r"--dashboard-port=(\d+)", " ".join(head["command"])).group(1)
    assert submit[submit.index("--address") + 1] == f"http://ray-head:{dashboard}"
    assert f"{dashboard}:{dashboard}" in head["ports"]
    params = _parse_ingest(argv)
    assert params["ray_address"] is None  # RAY_ADDRESS is set under the job
    # health checks gate the order
    deps = services["ingest"]["depends_on"]
    assert deps["ray-head"]["condition"] == deps["ray-worker"]["condition"] == "service_healthy"
    assert deps["create-bucket"]["condition"] == "service_completed_successfully"
    assert services["ray-worker"]["depends_on"]["ray-head"]["condition"] == "service_healthy"
    assert services["create-bucket"]["depends_on"]["minio"]["condition"] == "service_healthy"
    for name in ("minio", "ray-head", "ray-worker"):
        assert services[name]["healthcheck"]["test"], name
    assert f"127.0.0.1:{dashboard}/api/gcs_healthz" in " ".join(head["healthcheck"]["test"])
    # the job writes to the bucket that create-bucket makes, through MinIO's API port, with the
    # standard AWS SDK variables on every Ray node
    bucket = re.search(r"mc mb --ignore-existing local/(\S+)", services["create-bucket"]["command"][0]).group(
        1
    )
    assert params["output"].startswith(f"s3://{bucket}/")
    minio = services["minio"]
    api_port = re.search(r"--address\s+:(\d+)", " ".join(minio["command"])).group(1)
    assert f"{api_port}:{api_port}" in minio["ports"]
    for name in ("ray-head", "ray-worker", "ingest"):
        env = services[name]["environment"]
        assert env["AWS_ENDPOINT_URL"] == f"http://minio:{api_port}"
        assert env["AWS_ACCESS_KEY_ID"] == minio["environment"]["MINIO_ROOT_USER"]
        assert env["AWS_SECRET_ACCESS_KEY"] == minio["environment"]["MINIO_ROOT_PASSWORD"]
        assert "FSSPEC_S3_ENDPOINT_URL" not in env
    for name in ("ray-head", "ray-worker"):
        assert services[name]["shm_size"]
    # the input is in the image: the Dockerfile copies workers/ into its WORKDIR
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    workdir = re.search(r"^WORKDIR (\S+)", dockerfile, re.M).group(1)
    assert "COPY workers ./workers" in dockerfile
    (path,) = params["inputs"]
    assert path.startswith(workdir + "/") and (ROOT / path[len(workdir) + 1 :]).is_file()


def _pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if "==" in line and not line.startswith("#"):
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def test_image_has_the_cluster_dependencies_pinned_like_make_venv():
    """ray[default] (dashboard, Jobs API) in the extra; the image installs it from
    constraints.txt, whose Ray is the RayJob's rayVersion; what KubeRay's probes run is there."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (ray_req,) = [r for r in project["optional-dependencies"]["ray"] if r.startswith("ray[")]
    assert "default" in ray_req.split("[")[1].split("]")[0].split(",")
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    assert re.search(r"^COPY constraints\.txt ", dockerfile, re.M)
    install = re.search(r"^RUN pip install (.*)$", dockerfile, re.M).group(1)
    assert "-c constraints.txt" in install and "ray" in install
    assert re.search(r"^FROM python:3\.11", dockerfile, re.M)  # the Python constraints.txt is for
    assert "wget" in dockerfile  # KubeRay's probes and compose's health checks call it
    pins = _pins()
    job = _load("deploy/rayjob.yaml")
    assert pins["ray"] == job["spec"]["rayClusterSpec"]["rayVersion"]
    # the dashboard's own dependencies are pinned too (what ray[default] adds to ray[data])
    for name in ("aiohttp-cors", "opencensus", "prometheus-client", "py-spy", "grpcio"):
        assert name in pins, name


def _containers(job: dict) -> list[tuple[dict, dict]]:
    """(pod spec, container) for the head and every worker group of a RayJob."""
    spec = job["spec"]["rayClusterSpec"]
    pods = [spec["headGroupSpec"]["template"]["spec"]]
    pods += [group["template"]["spec"] for group in spec["workerGroupSpecs"]]
    return [(pod, c) for pod in pods for c in pod["containers"]]


def test_rayjob_manifest():
    job = _load("deploy/rayjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    _parse_ingest(shlex.split(job["spec"]["entrypoint"]))
    spec = job["spec"]["rayClusterSpec"]
    assert spec["rayVersion"] == importlib.metadata.version("ray")
    for group in spec["workerGroupSpecs"]:
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    containers = _containers(job)
    assert len({c["image"] for _, c in containers}) == 1
    for pod, c in containers:
        # every node that runs parts (and the head, which runs the driver) has the S3 credentials
        assert {"secretRef": {"name": "guideloom-s3"}} in c["envFrom"], c["name"]
        # Ray's object store: /dev/shm from a memory-backed volume
        (mount,) = [m for m in c["volumeMounts"] if m["mountPath"] == "/dev/shm"]
        (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
        assert volume["emptyDir"]["medium"] == "Memory"
    header = (ROOT / "deploy/rayjob.yaml").read_text().split("\napiVersion")[0]
    minimum = re.search(r"KubeRay (\d+)\.(\d+)\.(\d+) or later", header)
    assert minimum and tuple(map(int, minimum.groups())) >= (1, 2, 0)  # RayJob backoffLimit


def test_cluster_launcher_config():
    cluster = _load("deploy/cluster.yaml")
    assert cluster["head_node_type"] in cluster["available_node_types"]
    workers = sum(t.get("max_workers", 0) for t in cluster["available_node_types"].values())
    assert workers <= cluster["max_workers"]
    # every node type (the head drives, the workers write shards) may reach S3
    for name, node_type in cluster["available_node_types"].items():
        assert node_type["node_config"]["IamInstanceProfile"]["Arn"], name
    assert any(o.startswith("--shm-size=") for o in cluster["docker"]["run_options"])
    assert (
        cluster["docker"]["image"]
        == _load("deploy/rayjob.yaml")["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"][
            "containers"
        ][0]["image"]
    )
    # the submit command in the header comment is a real invocation
    header = (ROOT / "deploy/cluster.yaml").read_text().split("\ncluster_name")[0]
    submit = " ".join(
        line.lstrip("# ").rstrip("\\ ")
        for line in header.splitlines()
        if "ray job submit" in line or line.startswith("#     guideloom")
    )
    argv = shlex.split(submit.split(" -- ", 1)[1])
    _parse_ingest(argv)


@pytest.mark.parametrize(
    "bad",
    [
        ["guideloom", "ingest", "x", "--output", "o", "--num-workers", "two"],
        ["guideloom", "ingest", "--no-such-flag"],
    ],
)
def test_parser_rejects_bad_commands(bad):
    with pytest.raises(Exception, match="(?i)no such option|valid integer"):
        _parse_ingest(bad)

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
    # the worker joins the head's GCS port; the job connects to it
    port = re.search(r"--port=(\d+)", " ".join(head["command"])).group(1)
    assert f"--address=ray-head:{port}" in services["ray-worker"]["command"]
    params = _parse_ingest(services["ingest"]["command"])
    assert params["ray_address"] == f"ray-head:{port}"
    # the job writes to the bucket that create-bucket makes, through MinIO's API port
    bucket = re.search(r"mc mb --ignore-existing local/(\S+)", services["create-bucket"]["command"][0]).group(
        1
    )
    assert params["output"].startswith(f"s3://{bucket}/")
    env = services["ingest"]["environment"]
    minio = services["minio"]
    api_port = re.search(r"--address\s+:(\d+)", " ".join(minio["command"])).group(1)
    assert env["FSSPEC_S3_ENDPOINT_URL"] == f"http://minio:{api_port}"
    assert f"{api_port}:{api_port}" in minio["ports"]
    assert env["AWS_ACCESS_KEY_ID"] == minio["environment"]["MINIO_ROOT_USER"]
    assert env["AWS_SECRET_ACCESS_KEY"] == minio["environment"]["MINIO_ROOT_PASSWORD"]
    # the input is in the image: the Dockerfile copies workers/ into its WORKDIR
    dockerfile = (ROOT / "deploy/Dockerfile").read_text()
    workdir = re.search(r"^WORKDIR (\S+)", dockerfile, re.M).group(1)
    assert "COPY workers ./workers" in dockerfile
    (path,) = params["inputs"]
    assert path.startswith(workdir + "/") and (ROOT / path[len(workdir) + 1 :]).is_file()


def test_rayjob_manifest():
    job = _load("deploy/rayjob.yaml")
    assert (job["apiVersion"], job["kind"]) == ("ray.io/v1", "RayJob")
    _parse_ingest(shlex.split(job["spec"]["entrypoint"]))
    spec = job["spec"]["rayClusterSpec"]
    assert spec["rayVersion"] == importlib.metadata.version("ray")
    images = {c["image"] for c in spec["headGroupSpec"]["template"]["spec"]["containers"]}
    for group in spec["workerGroupSpecs"]:
        images |= {c["image"] for c in group["template"]["spec"]["containers"]}
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
    assert len(images) == 1


def test_cluster_launcher_config():
    cluster = _load("deploy/cluster.yaml")
    assert cluster["head_node_type"] in cluster["available_node_types"]
    workers = sum(t.get("max_workers", 0) for t in cluster["available_node_types"].values())
    assert workers <= cluster["max_workers"]
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

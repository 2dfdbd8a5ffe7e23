"""The job description (pydantic, YAML job files) and the typer command's parsing."""

from __future__ import annotations

import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from guideloom.errors import IngestError
from guideloom.workers.cli import parse_size, register
from guideloom.workers.config import IngestConfig, MiB, load_job_file, validate_config


def _app() -> typer.Typer:
    app = typer.Typer()

    @app.callback()
    def main() -> None:
        """GuideLoom (the lead's app registers more commands)."""

    register(app)
    return app


def test_defaults_and_identity():
    config = IngestConfig(inputs=["a.jsonl"], output="out")
    assert (config.layout, config.tokenizer, config.eos, config.part_size) == (
        "stream",
        "bytes",
        True,
        32 * MiB,
    )
    identity = config.identity()
    assert "ray_address" not in identity and "storage_options" not in identity
    assert IngestConfig(inputs=["a"], output="o", layout="document").eos is False


@pytest.mark.parametrize(
    "options, message",
    [
        ({"tokenizer": "sentencepiece:x"}, "unknown tokenizer"),
        ({"passthrough": ["id"]}, "passthrough fields need --layout document"),
        ({"layout": "document", "doc_index": True}, "--doc-index needs --layout stream"),
        ({"format": "msgpack"}, "needs --layout document"),
        ({"on_bad_record": "ignore"}, "on_bad_record"),
        ({"colour": "blue"}, "colour: unknown option"),
        ({"text_feild": "body"}, "text_feild: unknown option .did you mean .text_field.?"),
    ],
)
def test_invalid_options_are_named(options, message):
    with pytest.raises(IngestError, match=message):
        validate_config({"inputs": ["a.jsonl"], "output": "o", **options})


def test_job_file_with_overrides(tmp_path):
    job = tmp_path / "job.yaml"
    job.write_text("inputs: [a.jsonl]\noutput: out\nlayout: document\nformat: msgpack\n")
    config = load_job_file(job, {"output": "elsewhere"})
    assert (config.output, config.format) == ("elsewhere", "msgpack")
    job.write_text("inputs: [a.jsonl]\nshard_size: -1\n")
    with pytest.raises(
        IngestError,
        match=r"job file .*job\.yaml:\n  output: Field required\n"
        r"  shard_size: Input should be greater than 0",
    ):
        load_job_file(job)
    with pytest.raises(IngestError, match="does not exist"):
        load_job_file(tmp_path / "missing.yaml")


def test_sizes():
    assert parse_size("64MiB") == 64 * MiB and parse_size("1000") == 1000
    with pytest.raises(typer.BadParameter):
        parse_size("lots")


def test_cli_reports_errors_without_a_traceback(tmp_path):
    result = CliRunner().invoke(
        _app(), ["ingest", str(tmp_path / "none*.jsonl"), "--output", str(tmp_path / "o")]
    )
    assert result.exit_code == 1
    assert "error: input glob" in result.output and "Traceback" not in result.output
    # usage errors exit 2 with a plain message: a missing --output, a job-file typo
    result = CliRunner().invoke(_app(), ["ingest", "a.jsonl"])
    assert result.exit_code == 2 and "missing --output URL" in result.output
    assert "Field required" not in result.output
    job = tmp_path / "job.yaml"
    job.write_text("inputs: [a.jsonl]\noutput: out\ntext_feild: body\n")
    result = CliRunner().invoke(_app(), ["ingest", "--config", str(job)])
    assert result.exit_code == 2
    assert "text_feild: unknown option (did you mean 'text_field'?)" in result.output


def test_importing_the_cli_does_not_import_ray():
    code = (
        "import sys, guideloom, guideloom.workers.cli; assert 'ray' not in sys.modules; "
        "assert 'torch' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_progress_line_has_no_eta_before_any_input_is_read() -> None:
    from guideloom.workers.progress import Progress

    progress = Progress(total_parts=4, total_bytes=1000)
    assert progress.line().endswith("ETA -")  # no rate yet: no number, never "nan"
    progress.bytes = 500
    assert progress.line().rsplit("ETA ", 1)[1].endswith("s")

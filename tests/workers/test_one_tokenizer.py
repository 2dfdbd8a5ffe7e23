"""One tokenizer per dataset: an append or a Mixture with another tokenizer is refused naming
both, the override allows it, and a dataset that records no tokenizer is never refused."""

from __future__ import annotations

import numpy as np
import pytest

from guideloom import Mixture, StreamNumpyFormat, StreamStorage
from guideloom.errors import IngestError, MixtureError
from guideloom.workers.ingest import ingest_dataset


@pytest.mark.ray
def test_append_and_mixture_with_another_tokenizer_are_refused_naming_both(
    ray_local, write_jsonl, doc_rows, hf_tokenizer_json, tmp_path
):
    rows = str(write_jsonl("a.jsonl", doc_rows(4)))
    more = str(write_jsonl("b.jsonl", doc_rows(3, start=50)))
    bytes_ds, hf_ds = str(tmp_path / "bytes"), str(tmp_path / "hf")
    ingest_dataset([rows], bytes_ds)
    hf = f"hf:{hf_tokenizer_json}"
    ingest_dataset([rows], hf_ds, tokenizer=hf)
    with pytest.raises(IngestError) as info:
        ingest_dataset([more], bytes_ds, tokenizer=hf, append=True)
    message = str(info.value)
    assert "tokenizer bytes (sha256" in message and f"{hf} (sha256" in message
    assert "--allow-other-tokenizer" in message and "nothing was committed" in message
    assert len(StreamStorage(bytes_ds, StreamNumpyFormat({"tokens": "uint16"})).snapshots()) == 1
    fmt = StreamNumpyFormat({"tokens": "uint16"})
    a, b = StreamStorage(bytes_ds, fmt), StreamStorage(hf_ds, fmt)
    with pytest.raises(MixtureError) as mixed:
        Mixture({"web": (a, 1.0), "code": (b, 1.0)})
    assert "'web' was tokenized by bytes" in str(mixed.value) and f"'code' by {hf}" in str(mixed.value)
    assert Mixture({"web": (a, 1.0), "code": (b, 1.0)}, allow_other_tokenizer=True).names == ("web", "code")

    plain = StreamStorage(str(tmp_path / "plain"), fmt)  # written directly: no tokenizer recorded
    with plain.writer() as w:
        w.append({"tokens": np.arange(10, dtype=np.uint16)})
    assert Mixture({"web": (a, 1.0), "plain": (plain, 1.0)}).names == ("web", "plain")

    same = ingest_dataset([more], bytes_ds, append=True)  # the dataset's own tokenizer: fine
    assert same.documents == 7
    allowed = ingest_dataset([more], hf_ds, append=True, allow_other_tokenizer=True)
    assert allowed.documents == 7

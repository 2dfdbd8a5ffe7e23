"""Documents with a custom DocumentStorageFormat.

Each record is one tokenized document: an id, its token ids and a per-token label array. The
shipped JSON and MessagePack formats would store the arrays as lists of numbers; this format
stores them as raw little-endian binary arrays behind a small MessagePack header, which is compact
and decodes without copying the arrays.

Run: python examples/documents.py [DATASET_URL]   (default: a temporary directory)
"""

from __future__ import annotations

import struct
import sys
import tempfile
from typing import Any

import msgpack
import numpy as np

from guideloom import DocumentDataset, DocumentJsonFormat, DocumentStorage, DocumentStorageFormat

_HEADER = struct.Struct("<I")  # length of the MessagePack header, in bytes


class TokenizedDocumentFormat(DocumentStorageFormat):
    """``{"id": str, "tokens": 1-D int array, "labels": 1-D int array}`` as binary arrays.

    Layout of one record: ``u32 header length | MessagePack header | tokens | labels``, where the
    header holds the id and the array lengths. ``token_dtype`` is part of the format's
    configuration, so the manifest records it and reopening with another dtype is refused.
    """

    def __init__(self, token_dtype: str = "<u4") -> None:
        self.token_dtype = np.dtype(token_dtype)

    def config(self) -> dict[str, Any]:
        return {"token_dtype": self.token_dtype.str}

    def encode(self, record: dict[str, Any]) -> bytes:
        tokens = np.asarray(record["tokens"])
        labels = np.asarray(record["labels"], dtype="<i1")
        if tokens.ndim != 1 or labels.shape != tokens.shape:
            raise ValueError(f"document {record.get('id')!r}: tokens and labels must be 1-D and equal length")
        if tokens.size and (tokens.min() < 0 or tokens.max() > np.iinfo(self.token_dtype).max):
            raise ValueError(f"document {record['id']!r}: a token id does not fit {self.token_dtype}")
        header = msgpack.packb({"id": record["id"], "n": int(tokens.size)})
        return b"".join(
            [_HEADER.pack(len(header)), header, tokens.astype(self.token_dtype).tobytes(), labels.tobytes()]
        )

    def decode(self, data: bytes | memoryview) -> dict[str, Any]:
        data = memoryview(data)
        (size,) = _HEADER.unpack_from(data)
        header = msgpack.unpackb(data[_HEADER.size : _HEADER.size + size])
        offset = _HEADER.size + size
        n = header["n"]
        # .copy(): the bytes may belong to a reused buffer; the record must own its arrays.
        tokens = np.frombuffer(data, dtype=self.token_dtype, count=n, offset=offset).copy()
        labels = np.frombuffer(data, dtype="<i1", count=n, offset=offset + tokens.nbytes).copy()
        return {"id": header["id"], "tokens": tokens, "labels": labels}


def main(root: str) -> None:
    documents = [
        {"id": "doc-0", "tokens": np.array([101, 7592, 2088, 102]), "labels": np.array([0, 1, 1, 0])},
        {
            "id": "doc-1",
            "tokens": np.array([101, 2129, 2024, 2017, 1029, 102]),
            "labels": np.array([0, 1, 1, 1, 1, 0]),
        },
        {"id": "doc-2", "tokens": np.array([101, 102]), "labels": np.array([0, 0])},
    ]

    storage = DocumentStorage(f"{root}/binary", TokenizedDocumentFormat())
    with storage.writer() as writer:
        for doc in documents:
            writer.append(doc)

    ds = DocumentDataset(DocumentStorage(f"{root}/binary", TokenizedDocumentFormat()))
    print(f"{len(ds)} documents, {storage.manifest.total_bytes} bytes")
    for i in range(len(ds)):
        doc = ds[i]
        print(doc["id"], doc["tokens"].tolist(), doc["labels"].tolist())
        assert doc["id"] == documents[i]["id"]
        assert doc["tokens"].tolist() == documents[i]["tokens"].tolist()
        assert doc["labels"].tolist() == documents[i]["labels"].tolist()
    # Documents keep their own lengths: nothing is joined or padded.
    assert [len(d["tokens"]) for d in ds.__getitems__([0, 1, 2])] == [4, 6, 2]

    # The same records as JSON: readable anywhere, but bigger and slower for arrays.
    as_json = DocumentStorage(f"{root}/json", DocumentJsonFormat())
    with as_json.writer() as writer:
        for doc in documents:
            writer.append(
                {"id": doc["id"], "tokens": doc["tokens"].tolist(), "labels": doc["labels"].tolist()}
            )
    print(f"JSON: {as_json.manifest.total_bytes} bytes")
    assert DocumentDataset(as_json)[1]["tokens"] == documents[1]["tokens"].tolist()


if __name__ == "__main__":
    if len(sys.argv) > 1:
        main(sys.argv[1])
    else:
        with tempfile.TemporaryDirectory() as tmp:
            main(tmp)

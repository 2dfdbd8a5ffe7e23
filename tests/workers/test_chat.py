"""Chat ingestion: conversations rendered with a chat template, tokens plus a uint8 loss_mask.

The expected text and spans are written out by hand here (ChatML's layout), not taken from the
code under test; the BPE tokenizer is trained in the test, with a chat template (without
generation markers) in its tokenizer_config.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guideloom import StreamDataset
from guideloom.errors import IngestError
from guideloom.workers.config import validate_config
from guideloom.workers.ingest import ingest_dataset
from guideloom.workers.part import part_spec, write_part
from guideloom.workers.planning import plan_parts
from guideloom.workers.sources import expand_inputs
from guideloom.workers.tokenizer import load_tokenizer

CONVERSATIONS = [
    [
        {"role": "system", "content": "You answer briefly."},
        {"role": "user", "content": "Héllo, what is 2+2?", "name": "ana"},
        {"role": "assistant", "content": "4."},
        {"role": "user", "content": "And 3+3?"},
        {"role": "assistant", "content": "6, ünïcode ✓."},
    ],
    [
        {"role": "user", "content": [{"type": "text", "text": "Split "}, "content"]},
        {"role": "assistant", "content": "Joined."},
    ],
]


def _chatml(messages: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int]], list[tuple[int, int]]]:
    """ChatML text by hand; (assistant spans, last-assistant span) as character ranges."""
    text, spans = "", []
    for m in messages:
        content = (
            m["content"]
            if isinstance(m["content"], str)
            else "".join(p if isinstance(p, str) else p["text"] for p in m["content"])
        )
        name = f" name={m['name']}" if m.get("name") else ""
        text += f"<|im_start|>{m['role']}{name}\n"
        if m["role"] == "assistant":
            spans.append((len(text), len(text) + len(content) + len("<|im_end|>")))
        text += f"{content}<|im_end|>\n"
    return text, spans, spans[-1:]


def _write(tmp_path: Path, rows: list[Any], name: str = "chat.jsonl") -> Path:
    path = tmp_path / "in" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


def _read_all(result: Any) -> dict[str, np.ndarray]:
    ds = StreamDataset(result.storage, sequence_length=result.tokens)
    return ds[0]


@pytest.mark.parametrize("train_on", ["assistant", "all", "last"])
def test_bytes_chatml_tokens_decode_to_the_rendering_and_the_mask_is_the_assistant_spans(
    ray_local, tmp_path, train_on
):
    path = _write(tmp_path, [{"messages": m, "id": i} for i, m in enumerate(CONVERSATIONS)])
    result = ingest_dataset(
        [str(path)], str(tmp_path / "ds"), input_format="chat", chat_template="chatml", train_on=train_on
    )
    fmt = result.storage.format
    assert [name for name, _ in fmt.config()["fields"]] == ["tokens", "loss_mask"]
    assert dict(fmt.config()["fields"])["loss_mask"] == "|u1"
    data = _read_all(result)
    tok = load_tokenizer("bytes")
    tokens, mask = data["tokens"].tolist(), data["loss_mask"].tolist()
    pos = 0
    for messages in CONVERSATIONS:
        text, spans, last = _chatml(messages)
        n = len(text.encode())
        assert tok.decode(tokens[pos : pos + n]) == text and tokens[pos + n] == tok.eos_id
        want = np.zeros(n + 1, np.uint8)
        chosen = {"assistant": spans, "last": last, "all": [(0, len(text))]}[train_on]
        for a, b in chosen:  # characters -> bytes
            want[len(text[:a].encode()) : len(text[:b].encode())] = 1
        if train_on == "all":
            want[n] = 1  # under all, the end-of-document token is trained on too
        assert mask[pos : pos + n + 1] == want.tolist()
        pos += n + 1
    assert pos == len(tokens) == result.tokens and result.documents == 2


ZEPHYR_LIKE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@pytest.fixture(scope="module")
def chat_tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE trained here, with special tokens and a chat template (no generation
    markers: assistant text is found by rendering prefixes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<s>", "</s>", "<|im_end|>", "<|user|>", "<|assistant|>", "<|system|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=500,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = [m["content"] for conv in CONVERSATIONS for m in conv if isinstance(m["content"], str)]
    tok.train_from_iterator(corpus * 30, trainer)
    folder = tmp_path_factory.mktemp("chat-tokenizer")
    tok.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": {"content": "</s>"}, "chat_template": ZEPHYR_LIKE})
    )
    return folder


def test_hf_folder_template_masks_decode_to_assistant_contents_and_end_of_turn(
    ray_local, tmp_path, chat_tokenizer_dir
):
    path = _write(tmp_path, [{"messages": m} for m in CONVERSATIONS])
    spec = f"hf:{chat_tokenizer_dir}"
    result = ingest_dataset([str(path)], str(tmp_path / "ds"), input_format="chat", tokenizer=spec, bos=True)
    tok = load_tokenizer(spec)
    assert tok.eos_id == tok.special_tokens["</s>"] and tok.bos_id == tok.special_tokens["<s>"]
    data = _read_all(result)
    tokens, mask = data["tokens"], data["loss_mask"]
    bos, eos, im_end = tok.bos_id, tok.eos_id, tok.special_tokens["<|im_end|>"]
    starts = [0, *(np.flatnonzero(tokens == eos) + 1)[:-1]]
    assert len(starts) == 2
    for start, messages in zip(starts, CONVERSATIONS):
        assert tokens[start] == bos and tokens[start + 1] != bos  # the template's bos, not doubled
        stop = int(np.flatnonzero(tokens[start:] == eos)[0]) + start
        doc, doc_mask = tokens[start:stop], mask[start:stop]
        # the masked runs, one per assistant turn, each ending with the end-of-turn token
        runs, run = [], []
        for t, m in zip(doc.tolist(), doc_mask.tolist()):
            if m:
                run.append(t)
            elif run:
                runs.append(run)
                run = []
        assert [r[-1] for r in runs] == [im_end] * len(runs)
        contents = [m["content"] for m in messages if m["role"] == "assistant"]
        assert [tok.decode(r[:-1]) for r in runs] == contents
        assert mask[stop] == 0  # the end-of-document token is not trained on


def _one_part(config: Any) -> dict[str, Any]:
    files = expand_inputs(config.inputs, config.reader_format, {})
    plan = plan_parts(files, part_size=10**6, text_per_line=False)
    return write_part(config, part_spec(plan, 0), "d" * 64)


GOOD = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}
BAD_CHATS = [
    ({"messages": []}, "no_messages", "has no messages"),
    (
        {"text": "x"},
        "missing_field",
        "no messages field 'messages' (fields: text); choose it with --messages-field",
    ),
    ({"messages": "hi"}, "not_list", "is str, not a list of messages"),
    ({"messages": [{"content": "hi"}]}, "missing_role", "message 0 has no 'role'"),
    ({"messages": [{"role": "user"}]}, "missing_content", "message 0 has no 'content'"),
    (
        {"messages": [{"role": "wizard", "content": "x"}]},
        "unknown_role",
        "unknown role 'wizard'; known: system",
    ),
    (
        {"messages": [{"role": "user", "content": 3}]},
        "bad_content",
        "content is int: give a string or a list of text parts",
    ),
    ({"messages": [{"role": "user", "content": [{"type": "image"}]}]}, "bad_content", "not a text part"),
    ({"messages": [{"role": "user", "content": "no reply"}]}, "no_assistant", "has no assistant turn"),
    (
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]}]},
        "bad_tool_calls",
        "tool call 0 has no function name",
    ),
]

TOOL_CHAT = {
    "messages": [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "18C"},
        {"role": "assistant", "content": "18C in Paris."},
    ]
}


def test_openai_tool_calls_with_null_content_are_rendered_and_trained_on(tmp_path):
    from guideloom.workers.chat import check_conversation

    messages = check_conversation(TOOL_CHAT, "messages", "assistant")
    call = '<tool_call>\n{"name": "weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    assert messages[1] == {"role": "assistant", "content": call}
    path = _write(tmp_path, [TOOL_CHAT, GOOD])
    config = validate_config(
        {
            "inputs": [str(path)],
            "output": str(tmp_path / "ds"),
            "input_format": "chat",
            "chat_template": "chatml",
        }
    )
    result = _one_part(config)
    assert result["documents"] == 2 and result["bad_records"] == {}
    from guideloom import StreamStorage
    from guideloom.workers.output import make_format

    storage = StreamStorage(str(tmp_path / "ds"), make_format(config, load_tokenizer("bytes")))
    storage.commit(num_parts=1, run="d" * 64)
    whole = StreamDataset(storage, sequence_length=storage.manifest.total_tokens)[0]
    trained = bytes(t for t in whole["tokens"][whole["loss_mask"] == 1].tolist() if t < 256).decode()
    assert call + "<|im_end|>" in trained and "weather in Paris?" not in trained


@pytest.mark.parametrize(("row", "reason", "detail"), BAD_CHATS)
def test_bad_conversations_are_named_by_file_and_line_or_counted(tmp_path, row, reason, detail):
    path = _write(tmp_path, [GOOD, row, GOOD])
    config = validate_config(
        {
            "inputs": [str(path)],
            "output": str(tmp_path / "ds"),
            "input_format": "chat",
            "chat_template": "chatml",
        }
    )
    with pytest.raises(IngestError) as err:
        _one_part(config)
    assert f"{path} line 2: " in str(err.value) and detail in str(err.value)
    assert str(err.value).count("--on-bad-record skip") == 1  # the advice once, not twice
    assert "on_bad_record='skip' in Python" in str(err.value)
    skip = config.model_copy(update={"on_bad_record": "skip", "output": str(tmp_path / "ds2")})
    result = _one_part(skip)
    assert result["documents"] == 2 and result["bad_records"] == {str(path): {reason: 1}}


def test_a_template_that_fails_to_render_and_injected_specials(tmp_path, chat_tokenizer_dir):
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "tokenizer.json").write_bytes((chat_tokenizer_dir / "tokenizer.json").read_bytes())
    (folder / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "chat_template": "{% if messages[0]['role'] != 'system' %}{{ raise_exception('needs a system turn') }}"
                "{% endif %}{% for m in messages %}{{ m['content'] }}{% endfor %}"
            }
        )
    )
    path = _write(tmp_path, [GOOD])
    config = validate_config(
        {
            "inputs": [str(path)],
            "output": str(tmp_path / "ds"),
            "input_format": "chat",
            "tokenizer": f"hf:{folder}",
        }
    )
    with pytest.raises(
        IngestError,
        match=rf"{path} line 1: chat template of hf:.* fails to render: TemplateError: needs a system turn",
    ):
        _one_part(config)
    injected = {
        "messages": [{"role": "user", "content": "a<|im_end|>b"}, {"role": "assistant", "content": "c"}]
    }
    path = _write(tmp_path, [injected], "inj.jsonl")
    config = validate_config(
        {
            "inputs": [str(path)],
            "output": str(tmp_path / "ds3"),
            "input_format": "chat",
            "tokenizer": f"hf:{chat_tokenizer_dir}",
        }
    )
    with pytest.raises(
        IngestError, match=r"line 1: message 0 content holds the special token '<\|im_end\|>'"
    ):
        _one_part(config)


def test_auto_template_without_one_names_the_alternatives(tmp_path, hf_tokenizer_json):
    path = _write(tmp_path, [GOOD])
    for spec in ("bytes", f"hf:{hf_tokenizer_json}"):
        with pytest.raises(IngestError, match=r"has no chat template.*use --chat-template chatml") as err:
            ingest_dataset([str(path)], str(tmp_path / "ds"), input_format="chat", tokenizer=spec)
        assert "tokenizer_config.json" in str(err.value)
        assert "chat_template='chatml' in Python" in str(err.value)
    # the fix, as the message gives it for Python
    fixed = validate_config(
        {
            "inputs": [str(path)],
            "output": str(tmp_path / "ok"),
            "input_format": "chat",
            "chat_template": "chatml",
        }
    )
    assert _one_part(fixed)["documents"] == 1


def test_chat_options_are_checked(tmp_path):
    base = {"inputs": ["x.jsonl"], "output": str(tmp_path / "ds"), "input_format": "chat"}
    with pytest.raises(IngestError, match="train_on"):
        validate_config({**base, "train_on": "users"})
    with pytest.raises(IngestError, match="chat writes a stream"):
        validate_config({**base, "layout": "document"})
    with pytest.raises(IngestError, match="chat_template"):
        validate_config({**base, "chat_template": "llama"})
    text = tmp_path / "a.txt"
    text.write_text("plain")
    with pytest.raises(IngestError, match=r"a\.txt: --input-format chat reads JSON Lines or Parquet"):
        ingest_dataset([str(text)], str(tmp_path / "ds"), input_format="chat", chat_template="chatml")
    with pytest.raises(IngestError, match="has no beginning-of-sequence token, so --bos cannot add one"):
        ingest_dataset([str(text)], str(tmp_path / "ds"), bos=True)


def test_parquet_chat(ray_local, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "c.parquet"
    conversation = [{"role": "user", "content": "Parquet?"}, {"role": "assistant", "content": "Joined."}]
    pq.write_table(pa.Table.from_pylist([{"messages": conversation, "other": 1}]), path)
    result = ingest_dataset([str(path)], str(tmp_path / "ds"), input_format="chat", chat_template="chatml")
    text, spans, _ = _chatml(conversation)
    data = _read_all(result)
    assert load_tokenizer("bytes").decode(data["tokens"][:-1]) == text
    assert bytes(data["tokens"][data["loss_mask"] == 1].astype(np.uint8)).decode() == "Joined.<|im_end|>"


MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.text(st.characters(exclude_characters="\ue000\ue001"), max_size=20),
    },
    optional={"name": st.text(st.characters(exclude_characters="\ue000\ue001"), max_size=5)},
)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(MESSAGE, min_size=1, max_size=6))
def test_the_python_chatml_renders_what_the_jinja_template_renders(messages):
    from guideloom.workers.chat import CHATML_TEMPLATE, ChatRenderer, _render_chatml

    jinja = ChatRenderer(CHATML_TEMPLATE + "{# compiled, not the fast path #}", "chatml-jinja")
    assert jinja.uses_generation
    text, spans = _render_chatml(messages)
    if any(m["role"] == "assistant" for m in messages):
        rendered = jinja.render(messages, "assistant")
        assert (rendered.text, rendered.spans) == (text, spans)

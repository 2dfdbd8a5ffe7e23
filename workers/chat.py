"""Chat data: conversations checked, rendered with a chat template, tokenized with a loss mask.

A record holds a list of messages (``messages_field``, default ``"messages"``), each
``{"role": ..., "content": ..., "name": ...}`` (``name`` optional). ``content`` is a string, or a
list of text parts (``{"type": "text", "text": ...}`` or plain strings), which are joined.

Rendering (`ChatRenderer.render`) turns a conversation into its text and the character spans
that are trained on:

- With generation markers: a template that wraps what the model generates in
  ``{% generation %} ... {% endgeneration %}`` (the shipped ``chatml`` does, as do many Hugging
  Face templates) marks exactly those characters; each marked block is one assistant span.
- Without them, the spans are found by rendering prefixes. For assistant message ``i``:
  ``A`` = the conversation up to message ``i`` (excluded) rendered with
  ``add_generation_prompt=True``, ``B`` = the conversation up to message ``i`` (included). The
  span is ``B[len(A):]`` with trailing whitespace removed: the message's content and the
  template's end-of-turn marker. This needs ``B`` to start with ``A`` and the whole rendering to
  start with ``B``; a template that rewrites earlier turns (one that drops the reasoning of
  earlier assistant turns, say) breaks that, and the record is a bad record that says to add
  generation markers.

Tokenizing (`tokenize_chat`): the rendered text is cut at the span boundaries and each piece is
tokenized on its own, so that no token straddles a boundary: the mask is exact, and
``decode(tokens) == rendered text``. Inside a piece the tokenizer's special tokens (``<|im_end|>``
of an ``hf:`` tokenizer's ``added_tokens``) become their ids: the tokenizer's own
``encode_batch_with_specials`` when it has one (``hf:``, ``tiktoken:``), else the piece is cut
around each special token's text. A message whose content holds the text of a special token is
a bad record (data must not inject template markers).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from guideloom.errors import IngestError
from guideloom.types import Tokenizer

__all__ = [
    "CHATML_TEMPLATE",
    "ROLES",
    "ChatRenderer",
    "ChatRecord",
    "chat_renderer",
    "check_conversation",
    "special_tokens_of",
    "tokenize_chat",
]

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
"""The roles a message may have (OpenAI / Hugging Face names)."""

CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] }}"
    "{% if message.get('name') %}{{ ' name=' + message['name'] }}{% endif %}"
    "{{ '\\n' }}"
    "{% if message['role'] == 'assistant' %}"
    "{% generation %}{{ message['content'] + '<|im_end|>' }}{% endgeneration %}"
    "{% else %}"
    "{{ message['content'] + '<|im_end|>' }}"
    "{% endif %}"
    "{{ '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
"""The shipped ``chatml`` template: ``<|im_start|>ROLE[ name=NAME]\\nCONTENT<|im_end|>\\n`` per
message; an assistant turn's content and its ``<|im_end|>`` are inside generation markers."""

# Private-use code points around generated text while rendering; content holding them is refused.
_GEN_START = "\ue000gl:gen\ue001"
_GEN_END = "\ue000gl:end\ue001"
_SENTINEL = re.compile("[\ue000\ue001]")


@dataclass(frozen=True)
class ChatRecord:
    """A rendered conversation: its text and the ``[start, stop)`` character spans trained on."""

    text: str
    spans: list[tuple[int, int]]


class ChatError(ValueError):
    """A conversation that cannot be used: ``reason`` is the short key counted under skip."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


def _text_of(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for k, part in enumerate(content):
            if isinstance(part, str):
                parts.append(part)
            elif (
                isinstance(part, dict)
                and part.get("type", "text") == "text"
                and isinstance(part.get("text"), str)
            ):
                parts.append(part["text"])
            else:
                raise ChatError(
                    "bad_content",
                    f"{where} content part {k} is not a text part (a string or "
                    '{"type": "text", "text": "..."}); only text is supported',
                )
        return "".join(parts)
    raise ChatError(
        "bad_content",
        f"{where} content is {type(content).__name__}: give a string or a list of text parts",
    )


def _with_tool_calls(content: str, calls: Any, where: str) -> str:
    """An assistant turn's text with its OpenAI-format ``tool_calls`` written after its content,
    one ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` block each (the form Qwen's and
    Hermes' templates use), so the calls are part of the turn (and trained on with it)."""
    if not isinstance(calls, list):
        raise ChatError("bad_tool_calls", f"{where} tool_calls is {type(calls).__name__}, not a list")
    blocks = []
    for k, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise ChatError(
                "bad_tool_calls",
                f"{where} tool call {k} has no function name: give "
                '{"type": "function", "function": {"name": ..., "arguments": ...}}',
            )
        arguments = function.get("arguments", {})
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                pass  # kept as the string it is
        body = json.dumps({"name": function["name"], "arguments": arguments}, ensure_ascii=False)
        blocks.append(f"<tool_call>\n{body}\n</tool_call>")
    return "\n".join([content, *blocks] if content else blocks)


def check_conversation(record: dict[str, Any], messages_field: str, train_on: str) -> list[dict[str, Any]]:
    """The record's messages as ``{"role", "content"[, "name"]}`` dicts with string contents.

    Raises:
        ChatError: No messages field, not a list, an empty list, a message that is not an
            object or lacks ``role`` / ``content``, an unknown role, content that is not text,
            or no assistant turn while ``train_on`` is ``assistant`` or ``last``.
    """
    if messages_field not in record:
        fields = ", ".join(sorted(map(str, record))[:8]) or "none"
        raise ChatError(
            "missing_field",
            f"no messages field {messages_field!r} (fields: {fields}); choose it with --messages-field",
        )
    messages = record[messages_field]
    if not isinstance(messages, (list, tuple)):
        raise ChatError(
            "not_list",
            f"messages field {messages_field!r} is {type(messages).__name__}, not a list of messages",
        )
    if not messages:
        raise ChatError("no_messages", f"the conversation in {messages_field!r} has no messages")
    out: list[dict[str, Any]] = []
    for i, message in enumerate(messages):
        where = f"message {i}"
        if not isinstance(message, dict):
            raise ChatError(
                "bad_message", f"{where} is {type(message).__name__}, not an object with role and content"
            )
        calls = message.get("tool_calls")
        for key in ("role", "content"):
            if key == "content" and calls:  # OpenAI format: a tool-calling turn's content is null
                continue
            if key not in message or message[key] is None:
                raise ChatError(
                    f"missing_{key}",
                    f"{where} has no {key!r} (every message needs role and content; an assistant "
                    "turn with tool_calls may have none)",
                )
        role = message["role"]
        if role not in ROLES:
            raise ChatError(
                "unknown_role", f"{where} has the unknown role {role!r}; known: {', '.join(ROLES)}"
            )
        content = "" if message.get("content") is None else _text_of(message["content"], where)
        if calls:
            content = _with_tool_calls(content, calls, where)
        if _SENTINEL.search(content):
            raise ChatError("bad_content", f"{where} content holds U+E000/U+E001 (reserved while rendering)")
        clean: dict[str, Any] = {"role": role, "content": content}
        name = message.get("name")
        if name is not None:
            if not isinstance(name, str):
                raise ChatError("bad_message", f"{where} name is {type(name).__name__}, not a string")
            clean["name"] = name
        out.append(clean)
    if train_on != "all" and not any(m["role"] == "assistant" for m in out):
        raise ChatError(
            "no_assistant",
            f"the conversation has no assistant turn, so --train-on {train_on} would train on "
            "nothing; to train on every token use --train-on all (train_on='all' in Python or a job file)",
        )
    return out


class ChatRenderer:
    """One chat template, compiled in a sandboxed Jinja environment (picklable: it recompiles)."""

    def __init__(self, source: str, name: str, variables: dict[str, Any] | None = None) -> None:
        self.source = source
        self.name = name
        self.variables = dict(variables or {})
        self.uses_generation = "generation" in re.findall(r"{%-?\s*(\w+)", source)
        self._template: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_template": None}

    def _compiled(self) -> Any:
        if self._template is None:
            self._template = _environment().from_string(self.source)
        return self._template

    def _render(self, messages: list[dict[str, Any]], add_generation_prompt: bool) -> str:
        import jinja2

        try:
            return str(
                self._compiled().render(
                    messages=messages, add_generation_prompt=add_generation_prompt, **self.variables
                )
            )
        except jinja2.TemplateError as err:
            raise ChatError(
                "template_error", f"chat template {self.name} fails to render: {type(err).__name__}: {err}"
            ) from err
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as err:
            raise ChatError(
                "template_error", f"chat template {self.name} fails to render: {type(err).__name__}: {err}"
            ) from err

    def render(self, messages: list[dict[str, Any]], train_on: str) -> ChatRecord:
        """The conversation's text and the spans trained on under ``train_on``."""
        if self.source == CHATML_TEMPLATE:  # the shipped template, in plain Python (same output)
            text, spans = _render_chatml(messages)
        elif self.uses_generation:
            text, spans = _strip_markers(self._render(messages, False))
        else:
            text = self._render(messages, False)
            spans = self._prefix_spans(messages, text)
        if train_on == "all":
            spans = [(0, len(text))] if text else []
        elif train_on == "last":
            spans = spans[-1:]
        if train_on != "all" and not spans:
            raise ChatError(
                "no_assistant",
                f"chat template {self.name} marks no assistant text in this conversation "
                "(nothing to train on); check the template, or use --train-on all",
            )
        return ChatRecord(text, spans)

    def _prefix_spans(self, messages: list[dict[str, Any]], full: str) -> list[tuple[int, int]]:
        spans = []
        for i, message in enumerate(messages):
            if message["role"] != "assistant":
                continue
            before = self._render(messages[:i], True)
            upto = self._render(messages[: i + 1], False)
            if not (upto.startswith(before) and full.startswith(upto)):
                raise ChatError(
                    "template_error",
                    f"chat template {self.name} renders earlier turns differently once later ones "
                    f"follow (assistant message {i}), so its assistant text cannot be found by "
                    "rendering prefixes: add {% generation %}...{% endgeneration %} around the "
                    "assistant content and end-of-turn marker in the template",
                )
            end = len(upto.rstrip())
            if end > len(before):
                spans.append((len(before), end))
        return spans


def _render_chatml(messages: list[dict[str, Any]]) -> tuple[str, list[tuple[int, int]]]:
    """What `CHATML_TEMPLATE` renders, and its generation spans, without Jinja (a test checks
    that both agree)."""
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    length = 0
    for m in messages:
        name = m.get("name")
        head = f"<|im_start|>{m['role']}{' name=' + name if name else ''}\n"
        body = f"{m['content']}<|im_end|>"
        parts += (head, body, "\n")
        length += len(head)
        if m["role"] == "assistant" and body:
            spans.append((length, length + len(body)))
        length += len(body) + 1
    return "".join(parts), spans


def _strip_markers(marked: str) -> tuple[str, list[tuple[int, int]]]:
    out: list[str] = []
    spans: list[tuple[int, int]] = []
    pos = 0
    length = 0
    while True:
        a = marked.find(_GEN_START, pos)
        if a < 0:
            out.append(marked[pos:])
            break
        b = marked.find(_GEN_END, a)
        out.append(marked[pos:a])
        length += a - pos
        inner = marked[a + len(_GEN_START) : b]
        out.append(inner)
        if inner:
            spans.append((length, length + len(inner)))
        length += len(inner)
        pos = b + len(_GEN_END)
    return "".join(out), spans


def _environment() -> Any:
    import jinja2
    from jinja2 import nodes
    from jinja2.ext import Extension
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(Extension):
        """``{% generation %}...{% endgeneration %}``: the text the model generates."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_mark"), [], [], body).set_lineno(lineno)

        def _mark(self, caller: Any) -> str:
            return f"{_GEN_START}{caller()}{_GEN_END}"

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[Generation, "jinja2.ext.loopcontrols"]
    )
    env.globals["raise_exception"] = raise_exception
    return env


def chat_renderer(chat_template: str, tokenizer: Tokenizer) -> ChatRenderer:
    """The renderer of ``chat_template`` (``"auto"``: the tokenizer's own; ``"chatml"``).

    Raises:
        IngestError: ``auto`` with a tokenizer that has no chat template (the alternatives are
            named), or a template that does not compile.
    """
    import jinja2

    variables = dict(getattr(tokenizer, "template_variables", None) or {})
    if chat_template == "chatml":
        source, name = CHATML_TEMPLATE, "chatml"
    else:
        own = getattr(tokenizer, "chat_template", None)
        if not own:
            raise IngestError(
                f"tokenizer {tokenizer.spec} has no chat template, so --chat-template auto cannot "
                "render conversations: use --chat-template chatml (chat_template='chatml' in "
                "Python or a job file; shipped, works with every tokenizer), or give an hf: "
                "tokenizer folder whose tokenizer_config.json has a chat_template "
                "(--tokenizer hf:PATH/FOLDER)"
            )
        source, name = str(own), f"of {tokenizer.spec}"
    renderer = ChatRenderer(source, name, variables)
    try:
        renderer._compiled()
    except jinja2.TemplateSyntaxError as err:
        raise IngestError(f"chat template {name} is not valid Jinja: {err} (line {err.lineno})") from err
    return renderer


def special_tokens_of(tokenizer: Tokenizer) -> dict[str, int]:
    """The tokenizer's special tokens by text (``special_tokens`` when it has it, else none)."""
    specials = getattr(tokenizer, "special_tokens", None)
    return dict(specials) if specials else {}


def _pieces(text: str, pattern: re.Pattern[str] | None) -> list[str]:
    """``text`` cut around the special tokens' texts (each one a piece of its own)."""
    if pattern is None:
        return [text] if text else []
    out: list[str] = []
    pos = 0
    for m in pattern.finditer(text):
        if m.start() > pos:
            out.append(text[pos : m.start()])
        out.append(m.group())
        pos = m.end()
    if pos < len(text):
        out.append(text[pos:])
    return out


def special_pattern(specials: dict[str, int]) -> re.Pattern[str] | None:
    """A regex of the special tokens' texts, longest first; None when there are none."""
    if not specials:
        return None
    return re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True)))


def check_no_specials(messages: list[dict[str, Any]], pattern: re.Pattern[str] | None) -> None:
    """Refuse content that holds a special token's text (it would become a template marker)."""
    if pattern is None:
        return
    for i, message in enumerate(messages):
        m = pattern.search(message["content"])
        if m:
            raise ChatError(
                "special_token_in_content",
                f"message {i} content holds the special token {m.group()!r}, which the data must "
                "not inject into the template's markers: remove it from the data (a transform can)",
            )


SHORT_PIECE = 24  # characters: template text such as "user\n" is encoded once and remembered
_CACHE_LIMIT = 4096


def tokenize_chat(
    tokenizer: Tokenizer,
    chats: Sequence[ChatRecord],
    specials: dict[str, int],
    pattern: re.Pattern[str] | None,
    cache: dict[str, np.ndarray] | None = None,
) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(tokens, loss_mask)`` of each rendered conversation, tokenized piece by piece.

    ``cache`` (text -> ids) remembers the ids of short pieces across calls: a template's own
    text repeats in every conversation, and a piece's ids depend on the piece alone.
    """
    cache = {} if cache is None else cache
    native = getattr(tokenizer, "encode_batch_with_specials", None)
    encode = native if callable(native) else tokenizer.encode_batch
    if callable(native):  # the tokenizer splits out its special tokens itself, the same way
        pattern = None
    for text, i in specials.items():
        cache.setdefault(text, np.asarray([i], dtype=np.int64))
    layout: list[list[tuple[str, int]]] = []  # per chat: (piece, mask)
    todo: dict[str, None] = {}
    for chat in chats:
        pieces: list[tuple[str, int]] = []
        pos = 0
        for a, b in chat.spans:  # outside (0), inside (1), ... in text order
            if a > pos:
                pieces += [(p, 0) for p in _pieces(chat.text[pos:a], pattern)]
            pieces += [(p, 1) for p in _pieces(chat.text[a:b], pattern)]
            pos = b
        if pos < len(chat.text):
            pieces += [(p, 0) for p in _pieces(chat.text[pos:], pattern)]
        for p, _ in pieces:
            if p not in cache:
                todo[p] = None
        layout.append(pieces)
    texts = list(todo)
    fresh = dict(zip(texts, encode(texts))) if texts else {}
    if len(cache) > _CACHE_LIMIT:
        cache.clear()
        for text, i in specials.items():
            cache[text] = np.asarray([i], dtype=np.int64)
    cache.update((t, ids) for t, ids in fresh.items() if len(t) <= SHORT_PIECE)
    out = []
    for pieces in layout:
        if not pieces:
            out.append((np.zeros(0, np.int64), np.zeros(0, np.uint8)))
            continue
        arrays = [fresh[p] if p in fresh else cache[p] for p, _ in pieces]
        ids = np.concatenate(arrays).astype(np.int64, copy=False)
        mask = np.repeat(np.asarray([m for _, m in pieces], dtype=np.uint8), [len(x) for x in arrays])
        out.append((ids, mask))
    return out

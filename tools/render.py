"""Rendering a conversation with tools into the model's prompt (docs/design.md section 5,
"Rendering"): OpenAI messages to plain `{"role","content"}` turns (`render_messages`), then the
model's own chat template (`render_prompt`, `render_request`), so a conversation renders the way
it was generated and the model sees its earlier calls in the form it must produce.
"""

from __future__ import annotations

import json
import re
import uuid

from corral.model.chat import render_chat
from corral.model.errors import ChatTemplateError
from corral.model.tokenizer import PromptText
from corral.tools.errors import invalid
from corral.tools.messages import check_messages, message_calls, message_text
from corral.tools.parser import CLOSER, OPENER, SEPARATOR
from corral.tools.request import Tool, ToolRequest

TOOLS_PROMPT = """\
# Tools

You may call one or more functions to assist with the user query.

You are provided with function signatures within <tools></tools> XML tags:
<tools>
{tools}
</tools>

For each function call, return a json object with function name and arguments within \
<tool_call></tool_call> XML tags:
<tool_call>{{"name":<function-name>,"arguments":<args-json-object>}}</tool_call>"""


def tools_prompt(tools) -> str:
    """The tools' description for the system message. `tools` are `Tool`s or OpenAI tool dicts
    (`{"type":"function","function":{...}}`); each is written as one line of compact JSON."""
    lines = [
        json.dumps(_tool_json(tool), ensure_ascii=False, separators=(",", ":")) for tool in tools
    ]
    return TOOLS_PROMPT.format(tools="\n".join(lines))


def call_text(name: str, arguments: str) -> str:
    """One call as the model writes it: `<tool_call>{"name":NAME,"arguments":ARGS}</tool_call>`.
    `arguments` is JSON text, inserted verbatim."""
    return (
        f'{OPENER}{{"name":{json.dumps(name, ensure_ascii=False)},"arguments":{arguments}}}{CLOSER}'
    )


def render_messages(messages, tools=()) -> list[dict]:
    """OpenAI chat messages (and the tools, when calls are allowed) -> `[{"role","content"}]`
    turns with roles system, user and assistant, which every chat template understands:

    - the tools are described in a system message, in the Hermes/Qwen style small instruct
      models are trained on (a `<tools>` block with one function JSON per line, and the
      instruction to answer with `<tool_call>{"name":...,"arguments":...}</tool_call>`); it is
      appended to the first system message if there is one, else it becomes a system message
      of its own at the start;
    - `developer` turns are system turns;
    - an assistant turn's `tool_calls` are written back as `<tool_call>` blocks exactly as the
      grammar generates them (`corral.tools.grammar`): the content text, then the calls joined
      by `\\n`, arguments verbatim when given as a JSON string, compact JSON when given as an
      object;
    - `tool` messages become a user turn wrapping each result in `<tool_response>\\n...\\n
      </tool_response>` (consecutive tool messages share one user turn, joined by `\\n`);
    - an assistant turn's `reasoning_content` (a string) stays its `reasoning_content`, for
      the template to write or leave out as its family does.

    Raises ToolError (400) for malformed messages, naming the message index (arguments that are
    not JSON: `messages[i].tool_calls[j].function.arguments`).
    """
    return _turns(check_messages(messages), tools)


def _turns(messages, tools) -> list[dict]:
    """`render_messages` for messages already checked (`check_messages`)."""
    turns: list[dict] = []
    for i, message in enumerate(messages):
        role = message["role"]
        text = message_text(message, i)
        if role in ("system", "developer"):
            turns.append({"role": "system", "content": text})
        elif role == "user":
            turns.append({"role": "user", "content": text})
        elif role == "assistant":
            calls = [call_text(name, arguments) for name, arguments in message_calls(message, i)]
            turns.append({"role": "assistant", "content": text + SEPARATOR.join(calls)})
            if isinstance(message.get("reasoning_content"), str):
                turns[-1]["reasoning_content"] = message["reasoning_content"]
        else:  # tool: a run of tool messages is one user turn (joined below, in O(its size))
            response = f"<tool_response>\n{text}\n</tool_response>"
            previous = messages[i - 1]["role"] if i > 0 else None
            if previous == "tool":
                turns[-1]["content"].append(response)
            else:
                turns.append({"role": "user", "content": [response]})
    for turn in turns:
        if isinstance(turn["content"], list):
            turn["content"] = "\n".join(turn["content"])
    tools = list(tools or ())
    if tools:
        description = tools_prompt(tools)
        for turn in turns:
            if turn["role"] == "system":
                turn["content"] = (
                    f"{turn['content']}\n\n{description}" if turn["content"] else description
                )
                break
        else:
            turns.insert(0, {"role": "system", "content": description})
    return turns


def render_prompt(template, messages, tools=(), add_generation_prompt: bool = True, **extra) -> str:
    """The prompt text: `render_messages(messages, tools)` through a chat template.

    `template` is the jinja2 template text (rendered by `corral.model.chat.render_chat`, as
    transformers does; `extra` may carry `special_tokens={...}`), or an object with a
    `render_chat(turns, add_generation_prompt=...)` method (a `corral.model.Model`), or such a
    callable. The tools are never passed to the template: they are already in the system turn.

    The prompt is a `PromptText` that knows where each turn's content lies (`literal_spans`):
    the tokenizer then tokenizes a special token's text inside content
    (`<|im_end|>\\n<|im_start|>system` typed by a user) as text, so content cannot forge a
    turn. When the template does not copy contents verbatim, the prompt carries no spans.

    Raises ToolError: 400 for malformed messages, and 400 (param `messages`) when the template
    refuses the conversation.
    """
    return _render(template, render_messages(messages, tools), add_generation_prompt, extra)


def render_request(
    template,
    request: ToolRequest,
    add_generation_prompt: bool = True,
    *,
    turn_format=None,
    thinking: bool = False,
    **extra,
) -> str:
    """The prompt for a parsed request (its messages were checked by `parse_tool_request`): its
    messages, and its tools when calls are allowed (`ToolRequest.calls_allowed`: not under
    tool_choice `none`).

    With a `turn_format` (`corral.tools.formats.TurnFormat`) whose template renders the tools
    (`renders_tools`: every format but Hermes), the template is given the tools, the assistant
    turns' `tool_calls` (arguments as objects) and the `tool` turns as they are
    (`template_turns`), and, for a format that thinks, `enable_thinking=thinking` (off: the
    template writes its empty block). Otherwise the tools are described in the system turn
    (`render_messages`). Raises ToolError as `render_prompt` does."""
    tools = request.tools if request.calls_allowed else ()
    if turn_format is None or not turn_format.renders_tools:
        return _render(template, _turns(request.messages, tools), add_generation_prompt, extra)
    if turn_format.thinking is not None:
        extra = {**extra, "enable_thinking": thinking}
    if tools:
        extra = {**extra, "tools": [_tool_json(tool) for tool in tools]}
    thought_key = turn_format.thinking.history_key if turn_format.thinking else None
    turns = template_turns(request.messages, turn_format.history_id, thought_key)
    if turn_format.max_calls == 1:
        turns = one_call_per_turn(turns)
    return _render(template, turns, add_generation_prompt, extra)


def template_turns(messages, history_id=None, thought_key="reasoning_content") -> list[dict]:
    """Checked OpenAI messages as chat templates that take tools read them (transformers'
    convention): `developer` turns are system turns, contents are text, an assistant turn's
    `tool_calls` are `{"id", "type": "function", "function": {"name", "arguments"}}` with the
    arguments as an object, a `tool` turn keeps its `tool_call_id`. An assistant turn's
    `reasoning_content` (a string) is given as its member `thought_key` (the format's
    `Thinking.history_key`: gpt-oss's template reads `thinking`), as vLLM passes it; the
    template writes it where its family shows an earlier thought (Qwen3's: the turns after the
    last user message) and leaves it out elsewhere.

    `history_id` (a format's, Mistral's) maps each call id and `tool_call_id` to the id the
    template accepts. Raises ToolError 400 naming `messages[i].tool_calls[j].id` when two
    different ids of the conversation map to one (they would name the same call)."""
    mapped: dict[str, str] = {}  # template id -> the conversation's id

    def template_id(call_id, where: str):
        if history_id is None or not isinstance(call_id, str):
            return call_id
        new = history_id(call_id)
        if mapped.setdefault(new, call_id) != call_id:
            raise invalid(
                where,
                f"'{where}' is {call_id!r}, which the chat template would write as {new!r}, "
                f"as it writes {mapped[new]!r}: give the calls ids that differ.",
            )
        return new

    turns: list[dict] = []
    for i, message in enumerate(messages):
        role = message["role"]
        turn: dict = {"role": "system" if role == "developer" else role}
        turn["content"] = message_text(message, i)
        if role == "assistant" and message.get("tool_calls"):
            ids = [
                template_id(c.get("id"), f"messages[{i}].tool_calls[{j}].id")
                for j, c in enumerate(message["tool_calls"])
            ]
            turn["tool_calls"] = [
                {"id": ids[j], "type": "function", "function": {"name": n, "arguments": a}}
                for j, (n, a) in enumerate(
                    (name, json.loads(arguments)) for name, arguments in message_calls(message, i)
                )
            ]
        thought = message.get("reasoning_content") if role == "assistant" else None
        if isinstance(thought, str):
            turn[thought_key or "reasoning_content"] = thought
        if role == "tool":
            call_id = message.get("tool_call_id")
            turn["tool_call_id"] = history_id(call_id) if history_id else call_id
        turns.append(turn)
    return turns


def one_call_per_turn(turns: list[dict]) -> list[dict]:
    """`template_turns` for a family whose answers hold one call (gpt-oss: `<|call|>` ends the
    answer; Llama 3.x): an assistant turn with several calls becomes one turn a call (its
    content on the first), each followed by the tool turns answering it (matched by
    `tool_call_id`, which `check_messages` checked), as the model would have made them one
    after the other. The template would otherwise write the first call alone (gpt-oss's) or
    refuse the conversation (Llama's). O(len(turns))."""
    out: list[dict] = []
    k = 0
    while k < len(turns):
        turn = turns[k]
        calls = turn.get("tool_calls") or []
        k += 1
        if turn["role"] != "assistant" or len(calls) < 2:
            out.append(turn)
            continue
        results: list[dict] = []
        while k < len(turns) and turns[k]["role"] == "tool":
            results.append(turns[k])
            k += 1
        for j, call in enumerate(calls):
            out.append({**turn, "content": turn["content"] if j == 0 else "", "tool_calls": [call]})
            answers = [r for r in results if r["tool_call_id"] == call["id"]]
            out += answers
            results = [r for r in results if r["tool_call_id"] != call["id"]]
    return out


def _render(template, turns: list[dict], add_generation_prompt: bool, extra: dict) -> PromptText:
    """The prompt, with the spans of the turns' contents (`render_prompt`): the turns rendered
    once more with a unique marker for each content; when the template copies content verbatim
    (SmolLM2's does), putting the contents back in place of the markers gives the prompt
    exactly, and the markers' places are the spans."""
    text = _render_text(template, turns, add_generation_prompt, extra)
    nonce = uuid.uuid4().hex
    marked = [
        {**turn, "content": f"<corral-{nonce}-{k}>"} if turn["content"] else turn
        for k, turn in enumerate(turns)
    ]
    skeleton = _render_text(template, marked, add_generation_prompt, extra)
    pieces, spans, at = [], [], 0
    for piece in re.split(f"<corral-{nonce}-([0-9]+)>", skeleton):
        if len(pieces) % 2:  # a marker's index
            content = turns[int(piece)]["content"]
            spans.append((at, at + len(content)))
            piece = content
        pieces.append(piece)
        at += len(piece)
    if "".join(pieces) != text:  # the template changed a content: no spans
        return PromptText(text)
    return PromptText(text, [(start, end) for start, end in spans if end > start])


def _render_text(template, turns: list[dict], add_generation_prompt: bool, extra: dict) -> str:
    try:
        if isinstance(template, str):
            return render_chat(template, turns, add_generation_prompt, **extra)
        render = getattr(template, "render_chat", template)
        return render(turns, add_generation_prompt=add_generation_prompt, **extra)
    except ChatTemplateError as error:
        if getattr(template, "chat_template", "") is None:
            raise invalid(
                "messages", "The model has no chat template (a base model): chat messages cannot "
                "be rendered into a prompt"
            ) from None  # fmt: skip
        raise invalid("messages", f"The chat template refused the conversation: {error}") from None


def _tool_json(tool) -> dict:
    if isinstance(tool, Tool):
        return tool.to_json()
    if isinstance(tool, dict):
        return tool
    raise TypeError(f"not a tool: {tool!r}")

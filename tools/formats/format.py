"""`TurnFormat`: how one model family writes a turn with tool calls (docs/tools.md, "Turn
formats"): the pieces its grammar is made of, the syntax its parser reads, its thinking block,
and the marker strings that detect it in a chat template."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from corral.tools.parser import CallSyntax

CALL_ID = "{id}"
"""Where a format's call id goes in `name_template` and `call_suffix`: the grammar writes the
format's `call_id` language there."""


@dataclass(frozen=True)
class Thinking:
    """A family's thinking block: `open` THOUGHT `close` `after`, THOUGHT any text without
    `close`.

    Attributes:
        open, close: the block's markup (`<think>`, `</think>`).
        after: what the model writes between the block and the rest (`\\n\\n`).
        prompt_opens: the generation prompt already ends with `open` when thinking is on
            (DeepSeek R1 distills), so the answer starts inside the thought.
        optional: the model may answer without the block (Qwen3) although thinking is on.
        history_key: the member of an assistant turn the family's chat template reads an
            earlier thought from (`reasoning_content`, as Qwen3's; gpt-oss's `thinking`).
    """

    open: str
    close: str
    after: str = "\n\n"
    prompt_opens: bool = False
    optional: bool = False
    history_key: str = "reasoning_content"


@dataclass(frozen=True)
class TurnFormat:
    """One family's turn format.

    A block of calls is `opener CALL (separator CALL)* closer`, CALL = `call_prefix(name)`
    ARGUMENTS `call_suffix` (ARGUMENTS the JSON objects of the tool's parameters); parallel
    calls are more CALLs in a block when `separator` is set, else more blocks joined by
    `block_separator`, at most `max_calls` in all. Under `auto`, a text `opener` is the lazy
    trigger; an opener that is a special token of the model needs no trigger (free text, whose
    bytes are UTF-8, can never write its symbol).

    Attributes:
        name: the `--tool-format` name.
        family: the models it is for, for docs and errors.
        opener, separator, closer, block_separator, call_suffix: grammar texts (special tokens
            by their text: `specials`).
        name_template: CALL's prefix with `{name}` for the name as a JSON string, `{bare}` for
            it written bare, `{id}` for the call's id (`call_id`; `call_suffix` may hold
            `CALL_ID` instead).
        syntax: the parser's `CallSyntax` (its `thinking` filled in by `parser_syntax`).
        specials: the texts of this format that are special tokens in the family's
            vocabularies (the grammar writes each as its symbol when the model's tokenizer
            has it as one special token).
        thinking: the thinking block, or None.
        markers: detection: the format fits a template holding every string of any one group.
        renders_tools: the chat template is given the tools and the calls (it writes them as
            the family was trained); False: corral describes the tools in a system message in
            the Hermes style (the template need not take tools).
        max_calls: the most calls in one answer.
        content_prefix: the markup before an answer's text (Harmony's final channel header),
            written by the grammar under `auto` when the opener is a special token.
        xml_parameters: the arguments are XML parameters (Qwen3-Coder), not a JSON object;
            then `string_parameters(tools)` gives each function's raw-text parameters.
        call_id: the regex of the id the model writes for each call where `CALL_ID` stands
            (Mistral's nine alphanumerics), or None when the format writes none.
        history_id: for a format with `call_id`, maps an id of the conversation (OpenAI's
            `call_abc123`) to one the template accepts, deterministically (`render`).
    """

    name: str
    family: str
    opener: str
    name_template: str
    call_suffix: str
    syntax: CallSyntax
    separator: str | None = None
    closer: str = ""
    block_separator: str = ""
    specials: tuple[str, ...] = ()
    thinking: Thinking | None = None
    markers: tuple[tuple[str, ...], ...] = ()
    renders_tools: bool = True
    max_calls: int = 4
    content_prefix: str = ""
    xml_parameters: bool = False
    string_parameters: Callable | None = None
    call_id: str | None = None
    history_id: Callable[[str], str] | None = None

    def call_prefix(self, name: str) -> str:
        """CALL's text before the arguments, for the function `name` (`CALL_ID` where the call's
        id goes)."""
        import json

        name_text = json.dumps(name, ensure_ascii=False)
        return self.name_template.format(name=name_text, bare=name, id=CALL_ID)

    def parser_syntax(self, thinking: bool, tools=()) -> CallSyntax:
        """The parser's syntax for an answer with thinking on or off (off: the template wrote
        the empty block in the prompt, so the answer holds none), for the request's `tools`
        (`Tool`s: XML parameters need to know which values are raw text)."""
        syntax = self.syntax
        if self.xml_parameters:
            syntax = replace(syntax, xml_strings=self.string_parameters(tools))
        if self.thinking is None or not thinking:
            return syntax
        t = self.thinking
        return replace(syntax, thinking=(t.open, t.close), starts_in_thought=t.prompt_opens)

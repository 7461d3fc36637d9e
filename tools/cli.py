"""The `corral` command line: `corral compile` (a pattern, schema or grammar to its DFA),
`corral generate` (the main job, docs/design.md section 7) and `corral serve` (the HTTP server).

Every input error is one line on stderr and exit status 2, found before the model loads; the
rules for the output file, Ctrl-C and `--max-tokens` are in docs/tools.md ("The command line").
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import importlib.util
import json
import math
import os
import signal
import socket
import sys
import urllib.parse
from pathlib import Path

import numpy as np
from corral.automata import (
    ConstrainError,
    Dfa,
    GrammarError,
    SchemaLimits,
    compile_grammar_text,
    compile_schema_dfa,
    json_schema_to_regex,
    regex_to_dfa,
)
from corral.kernels import Constraint, SamplingParams, TokenIndex
from corral.model import ContextLengthError, load_model
from corral.model.generate import GenerationRequest, iter_generate
from corral.model.generation_request import check_request
from corral.tools.batch import (
    ALLOWED_MASS_BELOW,
    DEFAULT_MAX_TOKENS,
    ForeignAnswerError,
    encoding_problem,
    input_lines,
    run_batch,
    unanswered,
)
from corral.tools.completions import Completions, served_name
from corral.tools.errors import ToolError, openai_error
from corral.tools.grammar import compile_dfa, regex_grammar, schema_grammar, text_grammar
from corral.tools.output_file import (
    NotBatchOutputError,
    OutputError,
    answered_counts,
    check_output,
    discard_if_empty,
    drop_torn_tail,
    held,
    nothing_written,
    open_output,
)
from corral.tools.request import MAX_JSON_OBJECT_DEPTH, json_int

INTERRUPTED = 130  # Ctrl-C
TERMINATED = 143  # SIGTERM: 128 + 15, as a shell reports it


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is, so a run stops the same way: the output file holds whole
    lines and the message says how many (a `kill` or a job scheduler's stop)."""


def _on_sigterm(signum, frame) -> None:
    raise Terminated


def _stop(error: BaseException) -> tuple[str, int]:
    """What stopped the run (`_interrupted(error)` is true): its word and exit status."""
    cause = error if isinstance(error, KeyboardInterrupt) else error.__context__
    return (
        ("terminated", TERMINATED)
        if isinstance(cause, Terminated)
        else ("interrupted", INTERRUPTED)
    )


class InputError(Exception):
    """A command-line input that cannot be used; its message is one line naming the culprit."""


def read_bytes(path: str) -> bytes:
    """The bytes of a file. Raises InputError: it does not exist, is a folder, or cannot be
    read."""
    file = Path(path)
    if not file.exists():
        raise InputError(f"{path}: no such file")
    if file.is_dir():
        raise InputError(f"{path}: is a folder, not a file")
    try:
        return file.read_bytes()
    except OSError as error:
        raise InputError(f"{path}: cannot read it: {error.strerror}") from None


def read_text(path: str) -> str:
    """The text of a UTF-8 file (a leading byte-order mark dropped).

    Raises InputError: as `read_bytes`, or the file is not UTF-8 (naming the line, and the byte
    offset in the line and in the file, of the first bad byte)."""
    data = read_bytes(path)
    start = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        return data[start:].decode("utf-8")
    except UnicodeDecodeError as error:
        at = start + error.start
        line = data.count(b"\n", 0, at) + 1
        column = at - (data.rfind(b"\n", 0, at) + 1)
        raise InputError(
            f"{path}: not UTF-8 at line {line}, byte {column} of the line (byte {at} of the "
            f"file): {error.reason}"
        ) from None


def read_json(path: str):
    """The JSON value of a UTF-8 file. Raises InputError as `read_text` does, or when the text is
    not JSON, holds an integer of more digits than are read (`corral.tools.request.json_int`,
    as a request's body) or is nested deeper than Python's recursion limit lets `json.loads`
    read."""
    text = read_text(path)
    try:
        return json.loads(text, parse_int=json_int)
    except ValueError as error:  # json.JSONDecodeError included
        raise InputError(f"{path}: not JSON: {error}") from None
    except RecursionError:
        raise InputError(_too_deep(path)) from None


def _too_deep(path: str) -> str:
    return (
        f"{path}: nested too deep to read (past Python's recursion limit of "
        f"{sys.getrecursionlimit()}); a schema may nest at most "
        f"max_depth={SchemaLimits().max_depth} levels"
    )


def _fail(command: str, message: object) -> int:
    """Print `corral COMMAND: MESSAGE` as one line on stderr; return exit status 2."""
    text = " ".join(str(message).splitlines())
    print(f"corral {command}: {text}", file=sys.stderr)
    return 2


def _compile(args: argparse.Namespace) -> int:
    """`corral compile`: a pattern's or a schema's DFA (a schema's regex text and samples too),
    as lines of text, or with `--json` as one JSON object on stdout (the same facts: `regex`
    null where the schema has no regex text, `trans` and `accept` the whole table)."""
    if args.pattern is not None and args.schema is not None:
        return _fail("compile", "give a pattern or --schema FILE, not both")
    if args.grammar is not None and (args.pattern is not None or args.schema is not None):
        return _fail("compile", "give --grammar FILE alone, not with a pattern or --schema")
    if args.pattern is None and args.schema is None and args.grammar is None:
        return _fail("compile", "give a pattern, --schema FILE or --grammar FILE")
    if args.samples is None:
        args.samples = 0 if args.pattern is not None else 5
    if args.samples < 0:
        return _fail("compile", f"--samples must be at least 0, not {args.samples}")
    regex = grammar = None
    try:
        if args.grammar is not None:
            syntax = args.syntax or ("lark" if args.grammar.endswith(".lark") else "gbnf")
            grammar = compile_grammar_text(read_text(args.grammar), syntax)
            dfa = grammar.dfa
        elif args.schema is not None:
            schema = read_json(args.schema)
            compiled = compile_schema_dfa(schema)  # exact, or narrowed (docs/subsets.md)
            dfa, bounds = compiled.result, compiled.schema_limits
            # the text may be refused where the tree is not: regex stays None
            with contextlib.suppress(ConstrainError):
                regex = json_schema_to_regex(schema, schema_limits=bounds)
        else:
            escaped = next(
                (i for i, c in enumerate(args.pattern) if "\udc80" <= c <= "\udcff"), None
            )
            if escaped is not None:  # a byte that is not UTF-8, as Python's argv holds it
                byte = ord(args.pattern[escaped]) - 0xDC00
                return _fail(
                    "compile",
                    f"the pattern is not UTF-8: byte 0x{byte:02X} at character {escaped}",
                )
            dfa = regex_to_dfa(args.pattern)
    except GrammarError as error:  # a line and column: of the file named
        return _fail("compile", f"{args.grammar}: {error}")
    except (ConstrainError, InputError) as error:
        return _fail("compile", error)
    except RecursionError:
        return _fail("compile", _too_deep(args.schema or args.grammar or "the pattern"))
    accepting = np.flatnonzero(dfa.accept).tolist()
    rng = np.random.default_rng(0)
    # a schema's strings are UTF-8; a pattern's may hold any bytes (shown as \xNN escapes)
    samples = [
        dfa.sample(rng).decode("utf-8", errors="backslashreplace") for _ in range(args.samples)
    ]
    depth = None
    if grammar is not None:  # exact, or cut at a depth (docs/grammars.md)
        depth = {"exact": grammar.exact, "max_recursion": grammar.max_recursion}
        depth["cut_rules"] = list(grammar.cut_rules)
    if args.json:
        facts = {"states": dfa.n_states, "live_edges": dfa.n_live_edges, "accepting": accepting}
        if depth is not None:
            facts |= depth | {"samples": samples}
        elif args.schema is not None:
            facts |= {"regex": regex, "samples": samples, "exact": compiled.exact}
            facts |= {k: getattr(bounds, k) for k in NARROWED_BOUNDS}
        elif samples:
            facts |= {"samples": samples}
        print(json.dumps(facts | {"trans": dfa.trans.tolist(), "accept": dfa.accept.tolist()}))
        return 0
    if grammar is not None:
        cut = f"cut at depth {grammar.max_recursion} ({', '.join(grammar.cut_rules)})"
        print(f"grammar: {'exact' if grammar.exact else cut}")
    if args.schema is not None:
        if regex is None:
            print("(this schema has no regex text; its DFA follows)")
        else:
            print(regex if len(regex) <= 2000 else f"{regex[:2000]}... ({len(regex)} characters)")
        print(
            f"states: {dfa.n_states}  live edges: {dfa.n_live_edges}  accepting: {len(accepting)}"
        )
        told = ", ".join(f"{k}={getattr(bounds, k)}" for k in NARROWED_BOUNDS)
        print(f"schema: {'exact' if compiled.exact else 'narrowed'} ({told})")
    else:
        print(f"states: {dfa.n_states}  live edges: {dfa.n_live_edges}  accepting: {accepting}")
    for sample in samples:
        print(sample)
    return 0


NARROWED_BOUNDS = ("max_string_length", "max_array_length", "max_recursion")
"""The `SchemaLimits` a schema's compile may lower to fit the state limits, as `corral compile`
reports them."""


QUICK_FLAGS = {
    "--prompt": ("prompt", None),
    "-n": ("n", 1),
    "--temperature": ("temperature", 1.0),
    "--top-p": ("top_p", 1.0),
    "--seed": ("seed", 0),
}
"""The flags of the quick form alone, flag -> (argument name, default): refused with an input file
(whose lines carry their own settings), never ignored; the parser leaves them None so that a
given one is told from a default."""


def _generate_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with `corral generate`'s arguments themselves (files are checked next);
    fills in the quick form's defaults."""
    given = [f for f in ("schema", "regex", "grammar") if getattr(args, f) is not None]
    if len(given) > 1:
        return "give one of --schema, --regex and --grammar"
    quick = bool(given)
    if args.syntax is not None and args.grammar is None:
        return "--syntax is --grammar's: give it with --grammar FILE"
    if not quick and args.input is None and args.ray and Path(args.ray).is_file():
        return (
            f"--ray took {args.ray!r} as its ADDRESS, leaving no input file; put --ray after "
            "the input file, or write --ray=ADDRESS"
        )
    if quick and args.input is not None:
        return (
            "an input file and the quick form's --schema/--regex/--grammar: give one or the other"
        )
    if not quick and args.input is None:
        return "give an input file, or --schema/--regex/--grammar with --prompt"
    for flag, (name, default) in QUICK_FLAGS.items():
        if getattr(args, name) is None:
            setattr(args, name, default)
        elif not quick:
            return (
                f"{flag} is the quick form's (with --schema, --regex or --grammar); an input "
                "file's lines "
                "set their own in each body"
            )
    if quick and args.prompt is None:
        return "--schema, --regex and --grammar need --prompt"
    if args.batch_size < 1:
        return f"--batch-size must be at least 1, not {args.batch_size}"
    if args.max_tokens is not None and args.max_tokens < 1:
        return f"--max-tokens must be at least 1, not {args.max_tokens}"
    if not (math.isfinite(args.temperature) and args.temperature >= 0):
        return f"--temperature must be a finite number >= 0, not {args.temperature}"
    if not 0 < args.top_p <= 1:
        return f"--top-p must be in (0, 1], not {args.top_p}"
    if args.seed < 0:
        return f"--seed must be >= 0, not {args.seed}"
    if args.n < 1:
        return f"-n must be at least 1, not {args.n}"
    if quick and args.ray is not None:
        return "--ray runs an input file, not the quick form"
    depth = args.json_object_depth
    if depth is not None:
        if quick:
            return "--json-object-depth is an input file's (its json_object lines), not quick"
        if not 1 <= depth <= MAX_JSON_OBJECT_DEPTH:
            return f"--json-object-depth must be 1 to {MAX_JSON_OBJECT_DEPTH}, not {depth}"
        if args.ray is not None:
            return "--json-object-depth is not supported with --ray"
    if args.allowed_mass and (quick or args.ray is not None):
        return "--allowed-mass is an input file's (its lines' answers), not " + (
            "the quick form's" if quick else "supported with --ray"
        )
    below = args.allowed_mass_below
    if below is not None and (quick or not 0 < below <= 1):
        return (
            "--allowed-mass-below is the summary line's, an input file's"
            if quick
            else f"--allowed-mass-below must be in (0, 1], not {below}"
        )
    if args.ray is not None and args.no_prefix_cache:
        return "--no-prefix-cache is not supported with --ray (its workers keep the cache on)"
    if args.ray is not None and importlib.util.find_spec("ray") is None:
        return "--ray needs Ray, which is not installed: pip install 'corral[ray]'"
    return None


def _quick_dfa(args: argparse.Namespace) -> Dfa:
    """The DFA of the quick form's --schema, --regex or --grammar (GBNF, or Lark for a `.lark`
    file or `--syntax lark`). Raises InputError, ToolError."""
    if args.schema is not None:
        found = schema_grammar(read_json(args.schema), "--schema")
    elif args.grammar is not None:
        syntax = args.syntax or ("lark" if args.grammar.endswith(".lark") else "gbnf")
        found = text_grammar(read_text(args.grammar), syntax, "--grammar")
    else:
        found = regex_grammar(args.regex, "--regex")
    return compile_dfa(found)


def _generate(args: argparse.Namespace) -> int:
    problem = _generate_problem(args)
    if problem is not None:
        return _fail("generate", problem)
    quick = args.input is None
    out = None
    try:
        if quick:
            dfa = _quick_dfa(args)
        else:
            source = Path(args.input)
            data = read_bytes(args.input)
            if encoding_problem(data):
                raise InputError(f"{args.input}: {encoding_problem(data)}")
            lines = input_lines(data)  # a line not UTF-8: its error line
            default = source.with_name(source.stem + ".output.jsonl")
            output = Path(args.output) if args.output else default
            check_output(source, output, args.resume)
            created = not output.exists()
            out = open_output(output, args.resume)
    except (InputError, OutputError) as error:
        return _fail("generate", error)
    except ToolError as error:
        return _fail("generate", error.message)
    except RecursionError:
        return _fail("generate", _too_deep(args.schema))
    if quick:
        return _load_and_run(args, lambda model: _generate_quick(args, model, dfa))
    try:
        return _resume_and_run(args, lines, output, out)
    finally:
        with contextlib.suppress(OSError):  # what a refused write left in its buffer
            out.close()
        discard_if_empty(output, created)


def _load_and_run(args: argparse.Namespace, run) -> int:
    """`run(model)` with the model of `--model` loaded (None for a `--ray` batch: its workers
    load their own). Exit status 2 when the model cannot load."""
    try:
        model = None if args.ray is not None and args.input else load_model(args.model)
    except ConstrainError as error:
        return _fail("generate", error)
    return run(model)


def _resume_and_run(args: argparse.Namespace, lines: list[str], output: Path, out) -> int:
    """The Batch form, with `output` open (and locked) as `out`: exit 0 at once, loading no
    model, when the input holds no request line (only blank lines, or nothing); for
    `--resume`, repair a torn last line and skip the custom_ids already answered (exit 0 at
    once when that is all of them); then load the model and run the rest."""
    if all(not text.strip() for text in lines):
        skipped = _blanks_skipped(lines)
        skipped = f" ({skipped})" if skipped else ""
        kept = "no output was written" if nothing_written(output) else f"{output} is unchanged"
        print(f"corral generate: nothing to run: {args.input} holds no request line{skipped}; "
              f"{kept}", file=sys.stderr)  # fmt: skip
        return 0
    numbers, used, skipped, blanks = None, {}, 0, _blanks_skipped(lines)
    if args.resume:
        try:  # before anything is written (the torn tail is in no count)
            numbers, rest, used = unanswered(lines, answered_counts(output))
        except ForeignAnswerError as error:
            return _fail("generate", f"{output} is not an output of {args.input}: {error}; "
                         "--resume appends only to this input's own output (nothing was "
                         "written)")  # fmt: skip
        try:
            dropped = drop_torn_tail(output)
        except NotBatchOutputError as error:
            return _fail("generate", f"{error}; --resume goes on only with corral's own output")
        if dropped:
            print(f"corral generate: dropped a torn last line of {output} ({dropped} bytes); "
                  "its request runs again", file=sys.stderr)  # fmt: skip
        skipped = sum(1 for text in lines if text.strip()) - len(rest)
        if not rest:
            print(f"corral generate: nothing to run: the {skipped} lines of {args.input} are "
                  f"all answered in {output}", file=sys.stderr)  # fmt: skip
            return 0
        lines = rest

    def run(model) -> int:
        resumed = (numbers, used, skipped)
        return _generate_batch(args, model, lines, output, out, resumed, blanks)

    return _load_and_run(args, run)


def max_tokens_problem(max_tokens: int | None, model) -> str | None:
    """What is wrong with `--max-tokens` for `model` before any line runs, by the engine's own
    rule (`check_request`, which `Generator.submit` and the server apply): a prompt has at least
    one token, so a max_tokens past the model's `context_length` less one fits no line. Returns
    the one-line message naming the flag, the value and the limit, or None."""
    if max_tokens is None:
        return None
    shortest = GenerationRequest([0], max_tokens)  # the shortest prompt: one token
    try:
        check_request(shortest, model.context_length, len(model.vocabulary.tokens))
    except ContextLengthError as error:
        return (
            f"--max-tokens must be at most {error.context_length - 1} (this model's context of "
            f"{error.context_length} tokens less a one-token prompt), not {max_tokens}"
        )
    return None


def blank_lines(lines: list[str]) -> int:
    """How many of the input file's `lines` are blank (whitespace only); the "" after a last newline
    ends the last line and is no line of its own."""
    blank = sum(1 for text in lines if not text.strip())
    return blank - (lines[-1] == "") if lines else 0


def _blanks_skipped(lines: list[str]) -> str:
    """ "N blank line(s) skipped" for the summary lines, or "" when the input has none."""
    blank = blank_lines(lines)
    return f"{blank} blank line{'' if blank == 1 else 's'} skipped" if blank else ""


def _generate_batch(
    args: argparse.Namespace, model, lines: list[str], output: Path, out,
    resumed: tuple, blanks: str,
) -> int:  # fmt: skip
    """Run the input file's `lines`, appending to `output` through its open stream `out`;
    `resumed` is `(numbers, used, skipped)`: the lines' numbers (None: 1, 2, ...), the
    custom_ids answered already (`batch.unanswered`) and how many lines were left out as
    answered (`--resume`); `blanks` says how many blank lines the input had ("" for none). Exit
    status 2 for a `--max-tokens` past the model's context (`max_tokens_problem`, before any
    line runs); 130 on Ctrl-C and 1 when the output cannot be written (a full disk), both
    saying how many whole lines the file holds."""
    max_tokens = args.max_tokens  # None: each line's own, else what the context leaves
    numbers, used, skipped = resumed
    if model is not None:  # None with --ray: the driver loads no model
        problem = max_tokens_problem(max_tokens, model)
        if problem is not None:
            return _fail("generate", problem)
    if args.ray is not None:  # Ray is imported only here (corral[ray]; checked installed before)
        from corral.tools.ray_batch import run_batch_ray
    try:
        if args.ray is not None:
            summary = run_batch_ray(lines, out, used, args.batch_size, max_tokens,
                                    not args.quiet, args.model, args.ray or None,
                                    numbers=numbers)  # fmt: skip
        else:
            try:
                engine = Completions(model, served_name(args.model), tool_format=args.tool_format)
            except ToolError as error:  # a --tool-format the model's template cannot render
                return _fail("generate", f"--tool-format: {error.message}")
            summary = run_batch(
                engine, lines, out, used, args.batch_size,
                max_tokens, not args.quiet, numbers,
                prefix_cache=not args.no_prefix_cache, json_object_depth=args.json_object_depth,
                allowed_mass=args.allowed_mass or None,
            )  # fmt: skip
    except (KeyboardInterrupt, SystemError) as error:
        if not _interrupted(error):
            raise
        word, status = _stop(error)
        print(f"corral generate: {word}; {held(output)} "
              "(run the same command with --resume to go on)", file=sys.stderr)  # fmt: skip
        return status
    except OSError as error:  # the output stream refused a line (OutputWriteError, Ray's writes)
        then = " (then run the same command with --resume)" if output.is_file() else ""
        print(f"corral generate: cannot write {output}: {error.strerror}; {held(output)}{then}",
              file=sys.stderr)  # fmt: skip
        return 1
    summary.skipped += skipped
    blanks = f", {blanks}" if blanks else ""
    written = "; no output was written" if nothing_written(output) else f" -> {output}"
    line = summary.line(args.allowed_mass_below)
    print(f"corral generate: {line}{blanks}{written}", file=sys.stderr)
    return 0


def _interrupted(error: BaseException) -> bool:
    """True for Ctrl-C: a KeyboardInterrupt, or the SystemError a compiled Numba function
    raises when the interrupt arrives while it returns (its `__context__` is the interrupt)."""
    return isinstance(error, KeyboardInterrupt) or isinstance(error.__context__, KeyboardInterrupt)


def _generate_quick(args: argparse.Namespace, model, dfa: Dfa) -> int:
    """`--schema FILE`, `--regex PATTERN` or `--grammar FILE` with `--prompt`: each answer on a
    line of stdout as soon as it finishes."""
    constraint = Constraint(TokenIndex(dfa, model.vocabulary))
    if model.chat_template is None:  # a base model continues the prompt as raw text
        prompt = model.raw_prompt(args.prompt)
    else:
        chat = model.render_chat([{"role": "user", "content": args.prompt}])
        prompt = model.tokenizer.encode(chat)
    max_tokens = args.max_tokens or DEFAULT_MAX_TOKENS
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    requests = [
        GenerationRequest(prompt, max_tokens, params, args.seed + i, (), constraint)
        for i in range(args.n)
    ]
    printed = 0
    try:
        prefix_cache = not args.no_prefix_cache
        for _, result in iter_generate(model, requests, args.batch_size, None, prefix_cache):
            print(result.text, flush=True)
            printed += 1
    except ConstrainError as error:  # a budget too small, a prompt past the context (submit)
        return _fail("generate", openai_error(error).message)
    except (KeyboardInterrupt, SystemError) as error:
        if not _interrupted(error):
            raise
        word, status = _stop(error)
        print(f"corral generate: {word}; {printed} of {args.n} answers were printed",
              file=sys.stderr)  # fmt: skip
        return status
    return 0


def _serve_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with `corral serve`'s arguments, found before the model loads: a number out
    of range, or an address this process cannot listen on (taken, not an address of this
    machine, a port it may not bind), tried with a socket bound and closed at once."""
    for name in ("batch_size", "max_len"):
        if getattr(args, name) < 1:
            return f"--{name.replace('_', '-')} must be at least 1, not {getattr(args, name)}"
    if args.max_waiting < 0:
        return f"--max-waiting must be at least 0, not {args.max_waiting}"
    if not 1 <= args.port <= 65535:
        return f"--port must be in 1..65535, not {args.port}"
    for origin in args.cors_origin:
        parts = urllib.parse.urlsplit(origin)
        bare = parts.scheme and parts.netloc and not (parts.path or parts.query or parts.fragment)
        if origin != "*" and not (bare and "@" not in parts.netloc):
            return (
                f"--cors-origin must be an origin, scheme://host[:port] without a path "
                f"(as a browser sends it in the Origin header), or *, not {origin!r}"
            )
    try:
        socket.create_server((args.host, args.port)).close()
    except OSError as error:  # socket.gaierror (an unknown host) is an OSError too
        reason = error.strerror or str(error)
        return f"cannot listen on {args.host}:{args.port}: {reason}"
    return None


def _tool_format_argument(command) -> None:
    """`--tool-format NAME`: the turn format of tool calls and thoughts, instead of the one
    detected from the model's chat template (docs/tools.md, "Turn formats")."""
    from corral.tools.formats import FORMATS

    command.add_argument(
        "--tool-format",
        choices=list(FORMATS),
        help="the tool-call format (default: detected from the chat template)",
    )


def _serve(args: argparse.Namespace) -> int:
    """`corral serve`: the OpenAI-compatible HTTP server (`corral.tools.server`)."""
    from corral.tools.server import ServerConfig, serve

    problem = _serve_problem(args)
    if problem is not None:
        return _fail("serve", problem)
    config = ServerConfig(
        batch_size=args.batch_size,
        max_len=args.max_len,
        max_waiting=args.max_waiting,
        api_key=args.api_key,
        prefix_cache=not args.no_prefix_cache,
        model_name=served_name(args.model),
        cors_origins=tuple(args.cors_origin),
        data_dir=args.data_dir,
        tool_format=args.tool_format,
    )
    try:
        serve(args.model, args.host, args.port, config)
    except ConstrainError as error:
        return _fail("serve", error)
    except ToolError as error:  # a --tool-format the model's template cannot render
        return _fail("serve", f"--tool-format: {error.message}")
    return 0


INFO_FEATURES = ("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vnni", "amx-tile", "amx-int8")
"""The CPU features `corral info` reports: those the plans' kernels use (`ComputePlan.needs`)."""

INFO_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT",
                  "NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                  "NUMBA_CPU_FEATURES")  # fmt: skip
"""The environment variables `corral info` prints (docs/numerics.md, "Threads")."""


def _info(args: argparse.Namespace) -> int:
    """`corral info`: the host's CPU features, the plan a fresh `load_model()` of the default
    (quantized) model chooses with its reason for each choice, and the thread settings."""
    import llvmlite.binding as llvm
    import numba
    from corral.kernels.compute.plan import ComputePlan, cpu_features

    features = cpu_features()
    print(f"cpu: {llvm.get_host_cpu_name()}")
    print("features: " + " ".join(f"{'+' if f in features else '-'}{f}" for f in INFO_FEATURES))
    plan = ComputePlan.detect()
    print("plan (load_model() of the default model):")
    for name, value in vars(plan).items():
        print(f"  {name}: {value}")
    print("int8 activations (load_model(plan=...)):")
    for activations in ("int8-amx", "int8-vnni"):
        reason = ComputePlan(activations, 16).missing()
        print(f"  {activations}: {'runs here' if reason is None else reason}")
    print(f"threads: numba {numba.config.NUMBA_NUM_THREADS} ({numba.config.THREADING_LAYER})")
    for name in INFO_VARIABLES:
        value = os.environ.get(name)
        if value is not None and len(value) > 60:
            value = value[:57] + "..."
        print(f"  {name}={value if value is not None else '(unset)'}")
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("corral")
    except PackageNotFoundError:
        return "unknown"


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `corral` console script. Returns the exit status: 0, 2 for an input
    error (one line on stderr), 130 when interrupted."""
    parser = _Parser(prog="corral", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"corral {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    compile_ = commands.add_parser(
        "compile", help="compile a regex or a JSON Schema (--schema FILE) to its canonical DFA"
    )
    compile_.add_argument("pattern", nargs="?", help="a regex (the subset docs/subsets.md lists)")
    compile_.add_argument(
        "--schema", help="a JSON Schema file: print its regex, DFA, exact or narrowed, samples"
    )
    compile_.add_argument(
        "--grammar", help="a GBNF or Lark grammar file: print exact or cut depth, DFA, samples"
    )
    compile_.add_argument(
        "--syntax", choices=["gbnf", "lark"], help="--grammar's syntax (default: .lark is lark)"
    )
    compile_.add_argument(
        "--samples", type=int, help="sample strings to print (a pattern: 0; else 5)"
    )
    compile_.add_argument("--json", action="store_true", help="print the whole table as JSON")
    compile_.set_defaults(run=_compile)
    generate = commands.add_parser(
        "generate",
        help="run an OpenAI Batch API input file (or a quick --schema/--regex/--grammar prompt)",
        description="Run an OpenAI Batch API input file of /v1/chat/completions requests and "
        "append the answers to the output file, a line each as it finishes; or, with --schema or "
        "--regex and --prompt, print -n answers as they finish. No output overwrites anything: "
        "an output that is the input file is refused, and so is an existing non-empty output "
        "unless --resume goes on with it.",
    )
    generate.add_argument("input", nargs="?", help="Batch API input file (.jsonl)")
    generate.add_argument(
        "-o", "--output", help="output file (default: INPUT.output.jsonl); never the input file"
    )
    generate.add_argument(
        "--resume",
        action="store_true",
        help="go on with an existing output: drop a torn last line, skip custom_ids it holds",
    )
    generate.add_argument("--model", help="Hugging Face folder or .gguf (default: SmolLM2-135M)")
    generate.add_argument("--batch-size", type=int, default=16, help="batch size (16)")
    generate.add_argument(
        "--max-tokens",
        type=int,
        help="max_tokens of lines that set none (batch: default what the context leaves, "
        "as in the OpenAI API; quick form: default 512)",
    )
    generate.add_argument("--quiet", action="store_true", help="no progress bars")
    generate.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="prefill every prompt whole (default: reuse the keys and values of a prompt "
        "prefix already prefilled, as vLLM's automatic prefix caching)",
    )
    generate.add_argument(
        "--ray",
        nargs="?",
        const="",
        metavar="ADDRESS",
        help="run the file on Ray actors (corral[ray]): a local Ray, or the cluster at ADDRESS",
    )
    _tool_format_argument(generate)
    generate.add_argument("--schema", help="quick form: a JSON Schema file")
    generate.add_argument("--regex", help="quick form: a regex")
    generate.add_argument("--grammar", help="quick form: a GBNF or Lark grammar file")
    generate.add_argument(
        "--syntax", choices=["gbnf", "lark"], help="--grammar's syntax (default: .lark is lark)"
    )
    generate.add_argument(
        "--prompt",
        help="quick form: the user message (the raw prompt for a model without a chat template)",
    )
    generate.add_argument(
        "--json-object-depth",
        type=int,
        help="input file: how deep json_object answers nest, for lines that set none (3)",
    )
    generate.add_argument(
        "--allowed-mass",
        action="store_true",
        help="input file: lines that set no allowed_mass report it (the probability mass the "
        "grammar's mask allowed each token, and each answer's minimum and mean)",
    )
    generate.add_argument(
        "--allowed-mass-below",
        type=float,
        metavar="P",
        help="input file: the summary line's share of answers whose minimum allowed mass is "
        f"below P, in (0, 1] ({ALLOWED_MASS_BELOW:g})",
    )
    generate.add_argument("-n", type=int, help="quick form: how many answers (1)")
    generate.add_argument(
        "--temperature", type=float, help="quick form: sampling temperature (1.0)"
    )
    generate.add_argument("--top-p", type=float, help="quick form: top_p (1.0)")
    generate.add_argument("--seed", type=int, help="quick form: first seed (0)")
    generate.set_defaults(run=_generate)
    serve = commands.add_parser(
        "serve",
        help="an OpenAI-compatible HTTP server (chat completions, tools, streaming, /metrics)",
    )
    serve.add_argument("--model", help="Hugging Face folder or .gguf (default: SmolLM2-135M)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
    serve.add_argument("--port", type=int, default=8000, help="port (8000)")
    serve.add_argument("--batch-size", type=int, default=16, help="requests decoding together")
    serve.add_argument("--max-len", type=int, default=2048, help="tokens per request (2048)")
    serve.add_argument(
        "--max-waiting", type=int, default=64, help="queued requests before a 429 (64)"
    )
    _tool_format_argument(serve)
    serve.add_argument("--api-key", help="require Authorization: Bearer KEY on /v1/*")
    serve.add_argument(
        "--cors-origin",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="answer browsers' cross-origin requests from ORIGIN (repeatable; * for any; "
        "default: none)",
    )
    serve.add_argument(
        "--data-dir",
        type=Path,
        help="folder of the Batch API's files and batches (default: corral/serve in the "
        "user's data folder)",
    )
    serve.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="prefill every prompt whole (default: reuse prompt prefixes already prefilled)",
    )
    serve.set_defaults(run=_serve)
    info = commands.add_parser(
        "info", help="the CPU features found, the numerics plan load_model() chooses, the threads"
    )
    info.set_defaults(run=_info)
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command they were given to, as its own parser names its errors
        commands.choices[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    previous = signal.signal(signal.SIGTERM, _on_sigterm)  # uvicorn sets its own for serve
    try:
        return args.run(args)
    except (KeyboardInterrupt, SystemError) as error:
        if not _interrupted(error):
            raise
        word, status = _stop(error)
        print(f"corral: {word}", file=sys.stderr)
        return status
    except BrokenPipeError:  # stdout closed early (`corral compile ... | head`): Python docs'
        # recipe (signal module, "Note on SIGPIPE"): no traceback, no second error at exit
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())

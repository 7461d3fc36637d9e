"""The `corral` command line: `corral compile` (a pattern or schema to its DFA),
`corral generate` (the main job, DESIGN.md section 7) and `corral serve` (the HTTP server).

The model and the Numba kernels are imported inside the command that needs them, so that
`corral --help` and `corral compile` start without loading them."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np


def _compile(args: argparse.Namespace) -> int:
    from corral.automata import ConstrainError, json_schema_to_regex, regex_to_dfa, schema_to_dfa

    if (args.pattern is None) == (args.schema is None):
        print("corral compile: give a pattern or --schema FILE", file=sys.stderr)
        return 2
    try:
        if args.schema is not None:
            schema = json.loads(Path(args.schema).read_text(encoding="utf-8"))
            dfa = schema_to_dfa(schema)
            try:
                regex = json_schema_to_regex(schema)
            except ConstrainError as error:  # the text may be refused where the tree is not
                regex = f"(no regex text: {error})"
            if len(regex) > 2000:
                regex = f"{regex[:2000]}... ({len(regex)} characters)"
            print(regex)
        else:
            dfa = regex_to_dfa(args.pattern)
    except (ConstrainError, OSError, json.JSONDecodeError) as error:
        print(f"corral compile: {error}", file=sys.stderr)
        return 2
    accepting = np.flatnonzero(dfa.accept).tolist()
    if args.schema is not None:
        n_accepting = len(accepting)
        print(f"states: {dfa.n_states}  live edges: {dfa.n_live_edges}  accepting: {n_accepting}")
        rng = np.random.default_rng(0)
        for _ in range(args.samples):
            print(dfa.sample(rng).decode("utf-8"))
    else:
        print(f"states: {dfa.n_states}  live edges: {dfa.n_live_edges}  accepting: {accepting}")
    if args.json:
        print(json.dumps({"trans": dfa.trans.tolist(), "accept": dfa.accept.tolist()}))
    return 0


def _generate_problem(args: argparse.Namespace) -> str | None:
    """What is wrong with `corral generate`'s arguments, checked before the model loads."""
    if args.schema is not None and args.regex is not None:
        return "give --schema or --regex, not both"
    quick = args.schema is not None or args.regex is not None
    if quick == (args.input is not None):
        return "give an input file, or --schema/--regex with --prompt"
    if quick and args.prompt is None:
        return "--schema and --regex need --prompt"
    if args.batch_size < 1:
        return f"--batch-size must be at least 1, not {args.batch_size}"
    if args.max_tokens is not None and args.max_tokens < 1:
        return f"--max-tokens must be at least 1, not {args.max_tokens}"
    if args.temperature < 0:
        return f"--temperature must be >= 0, not {args.temperature}"
    if args.n < 1:
        return f"-n must be at least 1, not {args.n}"
    if args.input is not None and not Path(args.input).is_file():
        return f"{args.input}: no such input file"
    if args.output is not None and not Path(args.output).resolve().parent.is_dir():
        return f"{args.output}: its folder does not exist"
    return None


def _generate(args: argparse.Namespace) -> int:
    from corral.automata import ConstrainError
    from corral.model import load_model
    from corral.tools.batch import Engine, done_ids, run_batch

    problem = _generate_problem(args)
    if problem is not None:
        print(f"corral generate: {problem}", file=sys.stderr)
        return 2
    try:
        model = load_model(args.model)
    except ConstrainError as error:
        print(f"corral generate: {error}", file=sys.stderr)
        return 2
    engine = Engine(model)
    if args.input is None:
        return _generate_quick(args, engine)
    source = Path(args.input)
    output = Path(args.output) if args.output else source.with_name(source.stem + ".output.jsonl")
    skip = done_ids(output) if args.resume else set()
    with source.open(encoding="utf-8") as lines, output.open("a" if args.resume else "w") as out:
        summary = run_batch(
            engine, lines, out, skip, args.batch_size, args.max_tokens or 512, not args.quiet
        )
    print(f"corral generate: {summary.line()} -> {output}", file=sys.stderr)
    return 0


def _generate_quick(args: argparse.Namespace, engine) -> int:
    """`--schema FILE` or `--regex PATTERN` with `--prompt`: one answer a line on stdout."""
    from corral.automata import ConstrainError
    from corral.kernels import Constraint, SamplingParams
    from corral.model.generate import GenerationRequest, generate
    from corral.tools.errors import ToolError
    from corral.tools.grammar import regex_grammar, schema_grammar

    try:
        if args.schema is not None:
            schema = json.loads(Path(args.schema).read_text(encoding="utf-8"))
            found = schema_grammar(schema, args.schema)
        else:
            found = regex_grammar(args.regex, "--regex")
        constraint = Constraint(engine.compiler.index(found))
        prompt = engine.model.render_chat([{"role": "user", "content": args.prompt}])
        ids = engine.model.tokenizer.encode(prompt)
        params = SamplingParams(temperature=args.temperature)
        requests = [
            GenerationRequest(ids, args.max_tokens or 512, params, args.seed + i, (), constraint)
            for i in range(args.n)
        ]
        for result in generate(engine.model, requests, args.batch_size):
            print(result.text, flush=True)
    except ToolError as error:
        print(f"corral generate: {error.message}", file=sys.stderr)
        return 2
    except (ConstrainError, OSError, json.JSONDecodeError) as error:
        print(f"corral generate: {error}", file=sys.stderr)
        return 2
    return 0


def _serve(args: argparse.Namespace) -> int:
    """`corral serve`: the OpenAI-compatible HTTP server (`corral.tools.server`)."""
    from corral.automata import ConstrainError
    from corral.tools.server import ServerConfig, serve

    for name in ("batch_size", "max_len", "port"):
        if getattr(args, name) < 1:
            print(f"corral serve: --{name.replace('_', '-')} must be at least 1", file=sys.stderr)
            return 2
    config = ServerConfig(
        batch_size=args.batch_size,
        max_len=args.max_len,
        max_waiting=args.max_waiting,
        api_key=args.api_key,
    )
    try:
        serve(args.model, args.host, args.port, config)
    except ConstrainError as error:
        print(f"corral serve: {error}", file=sys.stderr)
        return 2
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("corral")
    except PackageNotFoundError:
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `corral` console script."""
    parser = argparse.ArgumentParser(prog="corral", description=__doc__)
    parser.add_argument("--version", action="version", version=f"corral {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    compile_ = commands.add_parser(
        "compile", help="compile a regex or a JSON Schema (--schema FILE) to its canonical DFA"
    )
    compile_.add_argument("pattern", nargs="?", help="a regex (DESIGN.md section 2 subset)")
    compile_.add_argument("--schema", help="a JSON Schema file: print its regex, DFA, samples")
    compile_.add_argument("--samples", type=int, default=5, help="sample strings (--schema)")
    compile_.add_argument("--json", action="store_true", help="print the whole table as JSON")
    compile_.set_defaults(run=_compile)
    generate = commands.add_parser(
        "generate",
        help="run an OpenAI Batch API input file (or a quick --schema/--regex prompt)",
        description="Run an OpenAI Batch API input file of /v1/chat/completions requests and "
        "write the output file; or, with --schema or --regex and --prompt, print -n answers.",
    )
    generate.add_argument("input", nargs="?", help="Batch API input file (.jsonl)")
    generate.add_argument("-o", "--output", help="output file (default: INPUT.output.jsonl)")
    generate.add_argument("--resume", action="store_true", help="skip custom_ids in the output")
    generate.add_argument("--model", help="Hugging Face folder or .gguf (default: SmolLM2-135M)")
    generate.add_argument("--batch-size", type=int, default=16, help="batch size (16)")
    generate.add_argument("--max-tokens", type=int, help="default max_tokens (512)")
    generate.add_argument("--quiet", action="store_true", help="no progress bar")
    generate.add_argument("--schema", help="quick form: a JSON Schema file")
    generate.add_argument("--regex", help="quick form: a regex")
    generate.add_argument("--prompt", help="quick form: the user message")
    generate.add_argument("-n", type=int, default=1, help="quick form: how many answers")
    generate.add_argument(
        "--temperature", type=float, default=1.0, help="quick form: sampling temperature (1.0)"
    )
    generate.add_argument("--seed", type=int, default=0, help="quick form: first seed (0)")
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
    serve.add_argument("--api-key", help="require Authorization: Bearer KEY on /v1/*")
    serve.set_defaults(run=_serve)
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except KeyboardInterrupt:
        print("corral: interrupted (finished lines stay in the output; --resume goes on)",
              file=sys.stderr)  # fmt: skip
        return 130


if __name__ == "__main__":
    sys.exit(main())

"""The shape of the code: per package, lines of code, of docstrings and of comments (prose per
line of code), and the largest modules and functions. Counts source lines of corral's packages
only (not tests, not bench).

Usage: python bench/code_shape.py [--top N]
"""

import argparse
import ast
import io
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("automata", "kernels", "model", "tools", "integrations")


def line_kinds(path):
    """(code, docstring, comment) line counts of one file; blank lines count in none."""
    text = path.read_text()
    doc_lines = set()
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
            value = body[0].value
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                doc_lines.update(range(body[0].lineno, body[0].end_lineno + 1))
    code_lines, comment_lines = set(), set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            comment_lines.add(token.start[0])
        elif token.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            for line in range(token.start[0], token.end[0] + 1):
                if line not in doc_lines:
                    code_lines.add(line)
    comment_lines -= code_lines
    return len(code_lines), len(doc_lines), len(comment_lines)


def functions(path):
    """(lines, qualified name) of every function and method in one file."""
    tree = ast.parse(path.read_text())
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    found.append((child.end_lineno - child.lineno + 1, name))
                visit(child, name + ".")

    visit(tree, "")
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=10)
    args = parser.parse_args()
    modules, funcs = [], []
    print("| package | code lines | docstring lines | comment lines | prose per code line |")
    print("|---|---|---|---|---|")
    for package in PACKAGES:
        totals = [0, 0, 0]
        for path in sorted((ROOT / package).rglob("*.py")):
            kinds = line_kinds(path)
            totals = [a + b for a, b in zip(totals, kinds, strict=True)]
            rel = path.relative_to(ROOT)
            modules.append((len(path.read_text().splitlines()), str(rel)))
            funcs += [(n, f"{rel}:{name}") for n, name in functions(path)]
        code, doc, comment = totals
        print(f"| {package} | {code} | {doc} | {comment} | {(doc + comment) / max(code, 1):.2f} |")
    print("\nLargest modules (lines):")
    for n, name in sorted(modules, reverse=True)[: args.top]:
        print(f"  {n:5d}  {name}")
    print("\nLargest functions (lines):")
    for n, name in sorted(funcs, reverse=True)[: args.top]:
        print(f"  {n:5d}  {name}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Fails when a file or a function of the project's own code is longer than its limit (issue 44).

Usage: check-sizes.py [REPOSITORY_ROOT]         checks src/, include/, tests/, examples/, bench/,
                                                tools/ and scripts/ (default: this script's repository)
       check-sizes.py --list [REPOSITORY_ROOT]  also prints every function it measured, to audit it
       scripts/check-sizes-selftest.py          checks that planted violations are caught

Limits (a file that stays small is read in one sitting; a function that stays small, on one screen):
  * a file (C++ .cpp .cc .h .hpp, Python .py): at most 450 lines;
  * a function: at most 80 lines. C++: from the line of its opening brace to the line of its
    closing brace; lambdas and local classes count in the function that holds them; braces in
    strings, characters, comments and preprocessor lines are not counted; class, struct, union,
    enum and namespace bodies are not functions, nor are braced initialisers. Python: from the
    `def` line to its last line (a nested def counts in its own and in the enclosing one).
Skipped as not ours: folders named build*, hidden folders, __pycache__, third-party folders,
and files that say in their first lines that they are generated.

Exceptions: scripts/size-exceptions.txt, one a line, `path  reason` (a file) or
`path:function  reason` (a function, named as this check names it). Each needs its reason, and an
entry that silences nothing any more is itself reported, so that the list stays as short as the
truth (docs/design.md, 'What may include what').
"""
import ast
import bisect
import os
import re
import sys

import exception_list  # scripts/, beside this file

FILE_LIMIT = 450
FUNCTION_LIMIT = 80
FOLDERS = ("src", "include", "tests", "examples", "bench", "tools", "scripts")
CPP_ENDINGS = (".cpp", ".cc", ".h", ".hpp")
EXCEPTIONS = "scripts/size-exceptions.txt"
NOT_OURS = re.compile(r"^(build.*|third[-_]?party|vendor|external|_deps|__pycache__|\..*)$", re.I)
GENERATED = re.compile(r"@generated|this file (is|was) generated|do not edit", re.I)

# What the brace counter must not see: comments, string and character literals, preprocessor lines.
LEXEMES = re.compile(r"""
    (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>(?:u8|[uUL])?R"(?P<delim>[^ ()\\\t\n]{0,16})\(.*?\)(?P=delim)")
  | (?P<string>(?:u8|[uUL])?"(?:\\.|[^"\\\n])*")
  | (?P<char>(?<![\w.'])(?:u8|[uUL])?'(?:\\.|[^'\\\n])+')
  | (?P<directive>^[ \t]*\#(?:\\\n|[^\n])*)
""", re.S | re.M | re.X)
SCAN = re.compile(r"[{}();]")
BRACES = re.compile(r"[{}]")

# Read at the end of a declaration's text (compressed: each (...) is "()", each {...} is "{}").
SCOPE = [
    re.compile(r"\bnamespace\b[\w:\s]*$"),
    re.compile(r"\bextern\s*\"\"\s*$"),
    re.compile(r"\benum\b[^;(){}]*$"),
    # class KINDLING_API Name final : public Base (a function that returns a struct has its "()" before)
    re.compile(r"\b(class|struct|union)\b\s*(alignas\s*\(\)\s*)?([A-Z][A-Z0-9_]*\s+)?([\w:]+\s*(<.*>)?)?\s*"
               r"(final\s*)?(:[^;]*)?$"),
]
QUALIFIERS = r"(?:(?:const|volatile|noexcept(?:\s*\(\))?|throw\s*\(\)|override|final|mutable|&&|&|try)\s*)*"
INIT = r"[\w:]+\s*(?:<[^(){}]*>)?\s*(?:\(\)|\{\})(?:\s*\.\.\.)?"
FUNCTION_TAIL = re.compile(r"^\s*%s(?:(?:->[^;{}=]*)?(?:requires[^;{}]*)?|:\s*%s(?:\s*,\s*%s)*)\s*$"
                           % (QUALIFIERS, INIT, INIT))
LAMBDA = re.compile(r"=\s*\[[^\[\]]*\]\s*(?:\(\)\s*)?"
                    r"(?:(?:mutable|constexpr|noexcept|->[^;{}=\[\]]*)\s*)*$")
LAMBDA_VARIABLE = re.compile(r"(\w+)\s*=\s*\[[^\[\]]*\][^=]*$")
NAME = re.compile(r"((?:\w+\s*(?:<[^<>]*>)?\s*::\s*)*~?\s*(?:operator\s*(?:\(\)|[^\w\s()]+|\w[\w:\s*&]*?)|\w+))"
                  r"\s*(?:<[^<>]*>)?\s*$")
TEST_MACROS = ("TEST", "TEST_F", "TEST_P", "TYPED_TEST", "TYPED_TEST_P")
TEST_CASE = re.compile(r"\b(?:%s)\s*\(\s*(\w+)\s*,\s*(\w+)\s*\)\s*$" % "|".join(TEST_MACROS))
ACCESS = re.compile(r"\b(?:public|private|protected)\s*:(?!:)")
ATTRIBUTE = re.compile(r"\[\[.*?\]\]|__attribute__\s*\(\)|__declspec\s*\(\)")


class Unreadable(Exception):
    """The braces of a C++ file do not pair up: nothing in it can be measured."""


def blank(match):
    """A lexeme turned into spaces (newlines kept, so lines keep their numbers); literals keep their quotes."""
    text = match.group(0)
    inner = re.sub(r"[^\n]", " ", text)
    if match.group("string") or match.group("raw"):
        return '"' + inner[1:-1] + '"'
    return inner


def compress(header):
    """The text of a declaration with each parenthesised or braced group emptied, without its template
    heads, attributes and access specifiers."""
    out, depth = [], 0
    for c in header:
        if c in "({":
            if depth == 0:
                out.append(c)
            depth += 1
        elif c in ")}" and depth > 0:
            depth -= 1
            if depth == 0:
                out.append(c)
        elif depth == 0:
            out.append(c)
    text = re.sub(r"\s+", " ", "".join(out))
    return ATTRIBUTE.sub(" ", ACCESS.sub(" ", without_templates(text)))


def without_templates(text):
    """The text without its `template <...>` heads."""
    while True:
        m = re.search(r"\btemplate\s*<", text)
        if not m:
            return text
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"<": 1, ">": -1}.get(text[i], 0)
            i += 1
        text = text[:m.start()] + " " + text[i:]


def classify(header):
    """What a `{` at namespace or class level opens, from the declaration before it:
    ('scope', None), ('function', name) or ('initialiser', None): a braced initialiser, of a
    variable or of a member in a constructor's initialiser list, is read past as part of the declaration."""
    text = compress(header)
    if any(p.search(text) for p in SCOPE):
        return "scope", None
    if LAMBDA.search(text):
        m = LAMBDA_VARIABLE.search(text)
        return "function", m.group(1) if m else "lambda"
    for m in re.finditer(r"\(\)", text):
        if FUNCTION_TAIL.match(text[m.end():]):
            return "function", function_name(text[:m.start()], header)
    return "initialiser", None


def function_name(before, header):
    """The name of a function whose parameter list follows `before` (compressed) in `header`;
    Suite.Name for a GoogleTest case."""
    m = NAME.search(before)
    if not m:
        return "function"
    name = re.sub(r"\s+", "", m.group(1))
    test = TEST_CASE.search(header) if name in TEST_MACROS else None
    return "%s.%s" % test.groups() if test else name


def matching_brace(code, at):
    """Where the `}` that closes the `{` at `at` is."""
    depth = 0
    for m in BRACES.finditer(code, at):
        depth += 1 if m.group(0) == "{" else -1
        if depth == 0:
            return m.start()
    raise Unreadable("the '{' on line %d is never closed" % (code.count("\n", 0, at) + 1))


def cpp_functions(text):
    """(name, first line, last line) of each function defined in a C++ file's text."""
    code = LEXEMES.sub(blank, text)
    newlines = [i for i, c in enumerate(code) if c == "\n"]
    line = lambda offset: bisect.bisect_left(newlines, offset) + 1
    functions, scopes, start, parens, at = [], 0, 0, 0, 0
    while True:
        m = SCAN.search(code, at)
        if not m:
            break
        c, at = m.group(0), m.end()
        if c == "(":
            parens += 1
        elif c == ")":
            parens = max(0, parens - 1)
        elif c == "}":  # the end of a namespace, class or enum body
            scopes -= 1
            if scopes < 0:
                raise Unreadable("a '}' on line %d closes nothing" % line(m.start()))
            start, parens = at, 0
        elif c == ";":
            if parens == 0:
                start = at
        elif parens > 0:  # a braced argument: part of the declaration
            at = matching_brace(code, m.start()) + 1
        else:
            kind, name = classify(code[start:m.start()])
            if kind == "scope":
                scopes += 1
                start = at
            elif kind == "function":
                end = matching_brace(code, m.start())
                functions.append((name, line(m.start()), line(end)))
                start = at = end + 1
            else:
                at = matching_brace(code, m.start()) + 1
    if scopes:
        raise Unreadable("%d '{' never closed" % scopes)
    return functions


def python_functions(text, path):
    """(qualified name, first line, last line) of each def in a Python file's text."""
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                found.append((prefix + child.name, child.lineno, child.end_lineno))
                visit(child, prefix + child.name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse(text, filename=path), "")
    return found


def our_files(root):
    """Repository-relative paths of the files this check measures."""
    for top in FOLDERS:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if not NOT_OURS.match(d))
            for name in sorted(files):
                if name.endswith(CPP_ENDINGS + (".py",)):
                    yield os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")


def measure(root, listing=None):
    """Every size violation in the tree, before exceptions: (key, path, line, what, length, limit);
    the files that could not be read, as messages; the number of files and functions measured."""
    violations, unreadable, counts = [], [], [0, 0]
    for path in our_files(root):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            text = f.read()
        if GENERATED.search("\n".join(text.splitlines()[:5])):
            continue
        counts[0] += 1
        lines = text.count("\n") + (0 if text.endswith("\n") or not text else 1)
        if lines > FILE_LIMIT:
            violations.append((path, path, 1, "the file", lines, FILE_LIMIT))
        try:
            functions = python_functions(text, path) if path.endswith(".py") else cpp_functions(text)
        except SyntaxError as e:
            unreadable.append("%s:%d: Python cannot parse it (%s), so its functions cannot be measured: fix the file"
                              % (path, e.lineno or 1, e.msg))
            continue
        except Unreadable as e:
            unreadable.append("%s:1: its braces do not pair up (%s), so its functions cannot be measured: make each "
                              "#if branch open and close its own; if they do, fix the reader in this check" % (path, e))
            continue
        counts[1] += len(functions)
        for name, first, last in functions:
            if listing is not None:
                listing.append("%s:%d: %s %d" % (path, first, name, last - first + 1))
            if last - first + 1 > FUNCTION_LIMIT:
                violations.append(("%s:%s" % (path, name), path, first, "function %s" % name,
                                   last - first + 1, FUNCTION_LIMIT))
    return violations, unreadable, counts


def read_exceptions(root):
    """The declared exceptions, {key: line in the exceptions file}, and the problems of the file itself."""
    def parse(text):
        parts = text.split(None, 1)
        return parts[0], parts[0], parts[1] if len(parts) > 1 else ""
    return exception_list.read_entries(root, EXCEPTIONS, parse, "why it may stay this long")


def check(root, listing=None):
    """The lines to print for each violation not excepted, each stale exception, each bad entry;
    and a summary of what was measured."""
    violations, problems, counts = measure(root, listing)
    entries, bad_entries = read_exceptions(root)
    problems += bad_entries
    used = set()
    for key, path, line, what, length, limit in violations:
        if key in entries:
            used.add(key)
        else:
            todo = "split it into files" if what == "the file" else "split it into functions"
            problems.append("%s:%d: %s is %d lines, over the limit of %d: %s (or, with the reason it stays, "
                            "list '%s' in %s)" % (path, line, what, length, limit, todo, key, EXCEPTIONS))
    for key in sorted(set(entries) - used, key=entries.get):
        problems.append("%s:%d: '%s' names nothing over its limit any more: remove the entry"
                        % (EXCEPTIONS, entries[key], key))
    summary = (counts[0], counts[1], len(used))
    return problems, summary


def main(argv):
    args = argv[1:]
    listing = [] if args[:1] == ["--list"] else None
    args = args[1:] if listing is not None else args
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(__doc__)
        return 2
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    problems, (files, functions, excepted) = check(root, listing)
    for line in listing or []:
        print(line)
    for p in problems:
        print(p)
    if problems:
        print("check-sizes: %d problem(s); split what is too long, or list it with its reason in %s "
              "(docs/design.md, 'What may include what')" % (len(problems), EXCEPTIONS))
        return 1
    print("check-sizes: %d files and %d functions measured; none over %d and %d lines but the %d listed in %s"
          % (files, functions, FILE_LIMIT, FUNCTION_LIMIT, excepted, EXCEPTIONS))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

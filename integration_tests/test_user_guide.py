"""docs/user-guide.md stays true: its CPU examples run, its environment-variable table names exactly the
variables the code reads, and every ``conv-core`` command it shows parses with the real command line.

A guide whose examples stopped working, or that misses a variable someone added (or keeps one someone
removed), misleads exactly the users it is for; these checks make such a change fail here instead.
"""

from __future__ import annotations

import ast
import functools
import os
import re
import shlex
from pathlib import Path

import pytest
import torch

import conv_core
from conv_core import engine as engine_module
from conv_core.cli import build_parser
from conv_core.problem import ConvProblem
from conv_tools import bench_models, suites

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "user-guide.md"
SOURCES = [*sorted((ROOT / "packages").glob("*/src")), *sorted((ROOT / "plugins").glob("*/src"))]

#: A fenced block: its info string and its body.
FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
#: Blocks whose info string is this run in the tests (on the CPU, aten only).
RUNS_ON_CPU = "python cpu"
SHELL = {"sh", "bash", "console", "shell"}


def guide() -> str:
    return GUIDE.read_text()


def blocks(text: str) -> list[tuple[str, str]]:
    """``(info string, body)`` of every fenced code block, in order."""
    return [(m.group(1).strip(), m.group(2)) for m in FENCE.finditer(text)]


def cpu_examples() -> list[str]:
    return [body for info, body in blocks(guide()) if info == RUNS_ON_CPU]


# ---- the examples run ---------------------------------------------------------------------------------------


@pytest.fixture
def aten_only(tmp_path, monkeypatch):
    """A fresh engine that loads no plugin, a private tuning database, and PyTorch's global switches (and the
    environment) restored after the example, whatever it changed."""
    environment = dict(os.environ)
    switches = (torch.backends.cudnn.benchmark, torch.are_deterministic_algorithms_enabled())
    for name in [n for n in os.environ if n.startswith("CONV_CORE_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("CONV_CORE_PLUGINS", "aten")
    monkeypatch.setenv("CONV_CORE_TUNING_DB", str(tmp_path / "tuning.json"))
    monkeypatch.setattr(engine_module, "_engine", None)
    yield
    conv_core.reset()
    os.environ.clear()
    os.environ.update(environment)
    torch.backends.cudnn.benchmark = switches[0]
    torch.use_deterministic_algorithms(switches[1])


def test_the_guide_has_cpu_examples():
    assert len(cpu_examples()) >= 5


@pytest.mark.parametrize("index", range(len(cpu_examples())))
def test_a_cpu_example_runs(index, aten_only):
    code = cpu_examples()[index]
    exec(compile(code, f"{GUIDE.name}[python cpu #{index}]", "exec"), {"__name__": f"user_guide_{index}"})


# ---- the environment variables ------------------------------------------------------------------------------


def _is_environ(node: ast.AST) -> bool:
    """``os.environ`` (or a bare ``environ``)."""
    if isinstance(node, ast.Attribute):
        return node.attr == "environ" and isinstance(node.value, ast.Name) and node.value.id == "os"
    return isinstance(node, ast.Name) and node.id == "environ"


def _environ_call_argument(call: ast.Call) -> ast.expr | None:
    """The name argument of ``os.environ.get/pop/setdefault(...)`` or ``os.getenv(...)``, if the call is one."""
    func = call.func
    if not call.args or not isinstance(func, ast.Attribute):
        return None
    if func.attr in {"get", "pop", "setdefault"} and _is_environ(func.value):
        return call.args[0]
    if func.attr == "getenv" and isinstance(func.value, ast.Name) and func.value.id == "os":
        return call.args[0]
    return None


def _readers(tree: ast.Module) -> set[str]:
    """Functions of the module that read the variable named by their first parameter (``_flag(name)``)."""
    found = set()
    for function in ast.walk(tree):
        if isinstance(function, ast.FunctionDef) and function.args.args:
            parameter = function.args.args[0].arg
            for call in ast.walk(function):
                argument = isinstance(call, ast.Call) and _environ_call_argument(call)
                if isinstance(argument, ast.Name) and argument.id == parameter:
                    found.add(function.name)
    return found


def _literal(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def variables_read(tree: ast.Module) -> set[str]:
    """Names of the environment variables a module reads or sets by a literal name."""
    readers, names = _readers(tree), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and _is_environ(node.value):
            names.add(_literal(node.slice))
        elif isinstance(node, ast.Call):
            names.add(_literal(_environ_call_argument(node)))
            if isinstance(node.func, ast.Name) and node.func.id in readers and node.args:
                names.add(_literal(node.args[0]))
    return names - {None}


@functools.cache
def variables_in_code() -> frozenset[str]:
    found = set()
    for source in SOURCES:
        for path in source.rglob("*.py"):
            found |= variables_read(ast.parse(path.read_text(), str(path)))
    return frozenset(found)


def variables_in_guide() -> set[str]:
    """The first column of the table under the guide's "Environment variables" heading."""
    section = guide().split("\n## Environment variables\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([A-Z][A-Z0-9_]*)` \|", section, re.MULTILINE))


def test_the_variable_finder_sees_direct_reads_and_helpers():
    tree = ast.parse("import os\n"
                     "def _flag(variable):\n    return os.environ.get(variable, '') == '1'\n"
                     "A = _flag('ONE')\nB = os.environ['TWO']\nC = os.getenv('THREE')\nos.environ.pop('FOUR')\n"
                     "D = os.environ.get(name_in_a_variable)\n")
    assert variables_read(tree) == {"ONE", "TWO", "THREE", "FOUR"}


def test_every_variable_the_code_reads_is_in_the_guide():
    assert variables_in_code() - variables_in_guide() == set(), "document these in docs/user-guide.md"


def test_every_variable_in_the_guide_is_read_by_the_code():
    assert variables_in_guide() - variables_in_code() == set(), "the code no longer reads these"


def test_the_settings_are_all_in_the_guide():
    """The settings module's own table (its docstring) and the guide's agree on the ``CONV_CORE_*`` names."""
    from conv_core import settings

    assert set(re.findall(r"``(CONV_CORE_[A-Z_]+)``", settings.__doc__)) <= variables_in_guide()


# ---- the commands ---------------------------------------------------------------------------------------------


def subcommands() -> set[str]:
    parser = build_parser()
    action = next(a for a in parser._actions if a.choices and "backends" in a.choices)
    return set(action.choices)


def shell_commands() -> list[list[str]]:
    """Every ``conv-core`` command line of the guide's shell blocks, as words (environment assignments and
    comments dropped)."""
    found = []
    for info, body in blocks(guide()):
        if info not in SHELL:
            continue
        for line in body.splitlines():
            words = shlex.split(line, comments=True)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                words.pop(0)
            if words and words[0] == "conv-core":
                found.append(words[1:])
    return found


def inline_subcommands() -> set[str]:
    """The word after ``conv-core`` in every inline code span that starts with it."""
    return set(re.findall(r"`conv-core ([a-z][a-z-]*)", guide()))


def test_the_guide_names_only_real_subcommands():
    named = inline_subcommands() | {words[0] for words in shell_commands()}
    assert named, "the guide shows no conv-core command"
    assert named - subcommands() == set()


def test_every_command_line_in_the_guide_parses():
    parser = build_parser()
    for words in shell_commands():
        try:
            args = parser.parse_args(words)
        except SystemExit:
            pytest.fail(f"conv-core {shlex.join(words)} does not parse")
        if getattr(args, "key", None):
            assert ConvProblem.from_key(args.key).key == args.key
        if getattr(args, "suite", None):
            assert args.suite in suites.available_suites()
        if getattr(args, "model", None) and args.command == "bench":
            assert args.model in bench_models.MODELS


def test_the_suites_the_guide_lists_exist():
    listed = re.search(r"^Suites: (.*?)\. ", guide(), re.MULTILINE | re.DOTALL).group(1)
    assert set(re.findall(r"`([a-z0-9_]+)`", listed)) == set(suites.available_suites())

"""MkDocs hook: docs/cli.md's ``<!-- cli-reference -->`` marker becomes the
reference of every ``towerflow`` subcommand, generated from the parser the
command line itself uses (towerflow.cli's), so the page cannot drift from
``towerflow COMMAND --help``.

First the commands and the top-level usage; then for each subcommand its
one-line help, its usage as argparse prints it, and a table of its arguments
(the value it takes, its default, its help text).
tests/test_docs.py checks that every option of every subcommand is in it.
"""

import argparse

MARKER = "<!-- cli-reference -->"
PAGE = "cli.md"
USAGE_WIDTH = 88


def on_page_markdown(markdown, page, config, files):
    """MkDocs event: fill the marker of docs/cli.md; other pages pass through."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its {MARKER} marker")
    return markdown.replace(MARKER, reference())


def reference(parser=None):
    """The reference of every subcommand, as Markdown."""
    if parser is None:
        parser = command_parser()
    sections = [_command_section(name, help_text, subparser)
                for name, help_text, subparser in subcommands(parser)]
    return "\n".join([_overview(parser), _command_section("", "", parser, heading=False),
                      *sections])


def command_parser():
    """The parser ``towerflow`` itself parses with. NOTE: towerflow.cli keeps it
    private; should it move or be renamed, the docs build fails here, loudly."""
    from towerflow import cli
    return cli._parser()


def subcommands(parser):
    """(name, one-line help, parser) of each subcommand, in the order they were added."""
    action = next(action for action in parser._actions
                  if isinstance(action, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in action._choices_actions}
    return [(name, helps.get(name, ""), subparser)
            for name, subparser in action.choices.items()]


def _overview(parser):
    rows = [f"| [`{name}`](#towerflow-{name}) | {_cell(help_text)} |"
            for name, help_text, _ in subcommands(parser)]
    return "\n".join(["| command | what it does |", "|---|---|", *rows, ""])


def _command_section(name, help_text, subparser, heading=True):
    lines = [f"## towerflow {name}", "", _cell(help_text), ""] if heading else []
    lines += ["```text", _usage(subparser), "```", ""]
    arguments = [action for action in subparser._actions
                 if not isinstance(action, (argparse._HelpAction,
                                            argparse._SubParsersAction))]
    if arguments:
        lines += ["| argument | value | default | what it does |", "|---|---|---|---|"]
        lines += [_argument_row(subparser, action) for action in arguments]
    return "\n".join(lines + [""])


def _usage(subparser):
    """The usage lines ``towerflow COMMAND --help`` prints, at a fixed width (not the
    terminal's, so the page is the same wherever it is built)."""
    formatter = argparse.HelpFormatter(subparser.prog, width=USAGE_WIDTH)
    formatter.add_usage(subparser.usage, subparser._actions,
                        subparser._mutually_exclusive_groups)
    return formatter.format_help().strip()


def _argument_row(subparser, action):
    name = ", ".join(f"`{flag}`" for flag in action.option_strings) or f"`{action.dest}`"
    formatter = subparser._get_formatter()
    help_text = formatter._expand_help(action) if action.help else ""
    if action.required and action.option_strings:
        help_text = f"required: {help_text}"
    return f"| {name} | {_value(action)} | {_default(action)} | {_cell(help_text)} |"


def _value(action):
    """What the argument takes: its choices, its metavar, or its type's name."""
    if action.nargs == 0:
        return "flag"
    if action.choices:
        return " \\| ".join(f"`{choice}`" for choice in action.choices)
    kind = getattr(action.type, "__name__", None) or "text"
    described = {"positive_int": "whole number >= 1", "positive_seconds": "seconds > 0",
                 "int": "integer"}.get(kind, kind)
    many = " ..." if action.nargs in ("*", "+") else ""
    return f"`{action.metavar or action.dest.upper()}`{many} ({described})"


def _default(action):
    if action.default in (None, False, argparse.SUPPRESS) or action.nargs == 0:
        return ""
    if action.default == []:
        return ""
    return f"`{action.default}`"


def _cell(text):
    """One table cell: no newlines, and a literal | escaped."""
    return " ".join((text or "").split()).replace("|", "\\|")

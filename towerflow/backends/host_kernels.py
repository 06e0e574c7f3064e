"""Kernels that exist on the CPU only, as in TensorFlow: ``PrintV2`` and
``Print`` write to a Python stream, ``PyFunc`` calls Python. The placer keeps
their ops on the CPU (no GPU registers them); so do the candidate samplers."""

import sys
import threading

import numpy as np

from .candidate_sampling_kernels import build_candidate_sampling_kernels
from .debugging_kernels import summarize_value
from .script_kernels import build_script_kernels


def build_host_kernels():
    return {"PrintV2": _print_kernel, "Print": _print_v1_kernel, **build_script_kernels(),
            **build_candidate_sampling_kernels()}


def _print_v1_kernel(ctx):
    """tf.Print: passes its input on; writes ``message`` and each data value
    in brackets to stderr, on the first ``first_n`` runs (negative: every
    run) of this Session, as TensorFlow's PrintOp."""
    message, first_n, summarize = (ctx.attrs[key] for key in ("message", "first_n",
                                                                "summarize"))
    counter = ctx.resource(("print calls", ctx.op), _CallCounter)

    def print_and_pass(input_, *data):
        if first_n < 0 or counter.take_one_below(first_n):
            shown = "".join(f"[{summarize_value(value, summarize)}]" for value in data)
            sys.stderr.write(f"{message}{shown}\n")
        return input_
    return print_and_pass


class _CallCounter:
    """How many times a Print op printed in one Session (runs may be concurrent)."""

    def __init__(self):
        self._count, self._lock = 0, threading.Lock()

    def take_one_below(self, limit):
        with self._lock:
            if self._count >= limit:
                return False
            self._count += 1
            return True


def _print_kernel(ctx):
    attrs = ctx.attrs
    template, summarize = attrs["template"], attrs["summarize"]
    write = _writer(attrs["output_stream"], attrs["end"])

    def print_values(*values):
        pieces = [text if kind == "literal" else format_value(values[text], summarize)
                  for kind, text in template]
        write(attrs["sep"].join(pieces))
    return print_values


def format_value(value, summarize=3):
    """A tensor's value as tf.print shows it: scalars bare (strings decoded),
    arrays with ``summarize`` items at each end of every dimension::

        format_value(np.arange(10))           # '[0 1 2 ... 7 8 9]'
        format_value(np.array([b'a', b'b'], dtype=object))     # '["a" "b"]'
    """
    value = np.asarray(value)
    if value.ndim == 0:
        return _format_item(value[()], quote=False)
    edge = value.size if summarize is None or summarize < 0 else summarize
    return np.array2string(value, separator=" ", threshold=2 * edge, edgeitems=edge,
                           max_line_width=sys.maxsize,
                           formatter={"all": lambda item: _format_item(item, quote=True)})


def _format_item(item, quote):
    if isinstance(item, bytes):
        text = item.decode("utf-8", errors="replace")
        return f'"{text}"' if quote else text
    if isinstance(item, (float, np.floating)):
        return f"{item:g}"
    if isinstance(item, (bool, np.bool_)):
        return "1" if item else "0"
    return str(item)


def _writer(output_stream, end):
    """write(text) for a file object (None: the current sys.stderr), a logging
    function, or 'file://path'."""
    if output_stream is None:
        return lambda text: sys.stderr.write(text + end)
    if isinstance(output_stream, str):    # 'file://path' (tf.print checked it)
        path = output_stream[len("file://"):]
        return lambda text: _append(path, text + end)
    if hasattr(output_stream, "write"):
        return lambda text: output_stream.write(text + end)
    return output_stream     # tf.logging.info and the like: one record per print


def _append(path, text):
    with open(path, "a") as stream:
        stream.write(text)

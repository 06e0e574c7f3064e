"""``tf.contrib.framework``: ``arg_scope`` (default arguments for the
``tf.contrib.layers`` functions, slim style) and the global step::

    with tf.contrib.framework.arg_scope([tf.contrib.layers.conv2d], padding='VALID',
                                        activation_fn=tf.nn.tanh):
        net = tf.contrib.layers.conv2d(images, 32, 3)     # VALID, tanh
        net = tf.contrib.layers.conv2d(net, 64, 3, activation_fn=None)  # own wins

As TF 1.15: a call's own keyword arguments win over the scope's; an inner
``arg_scope`` adds to (and overrides) the outer one for the same function.
"""

import contextlib
import functools

from ...train import get_global_step, get_or_create_global_step
from .. import missing as _missing

__all__ = ["add_arg_scope", "arg_scope", "arg_scoped_arguments", "current_arg_scope",
           "get_global_step", "get_or_create_global_step", "has_arg_scope"]

_ARG_STACK = [{}]   # one dict per open arg_scope: function key -> default kwargs


def _key(function):
    return getattr(function, "_key_op", str(function))


def current_arg_scope():
    """The innermost scope: ``{function key: {argument: default}}``."""
    return _ARG_STACK[-1]


def add_arg_scope(function):
    """Decorate ``function`` so that ``arg_scope`` can set its keyword defaults."""
    key = _key(function)

    @functools.wraps(function)
    def with_scope_defaults(*args, **kwargs):
        defaults = current_arg_scope().get(key)
        if defaults:
            kwargs = {**defaults, **kwargs}
        return function(*args, **kwargs)

    with_scope_defaults._key_op = key
    with_scope_defaults._arg_scope_arguments = function.__code__.co_varnames[
        :function.__code__.co_argcount]
    return with_scope_defaults


def has_arg_scope(function):
    """True for a function decorated with ``add_arg_scope``."""
    return hasattr(function, "_arg_scope_arguments")


def arg_scoped_arguments(function):
    """The argument names ``arg_scope`` may set for ``function``."""
    return list(function._arg_scope_arguments)


@contextlib.contextmanager
def arg_scope(list_ops_or_scope, **kwargs):
    """Give the functions in ``list_ops_or_scope`` the keyword defaults
    ``kwargs`` inside the block; a dict (a scope yielded before) re-opens that
    scope. Errors as TF 1.15's: TypeError for another type, ValueError for
    a function without ``add_arg_scope`` or kwargs given with a dict."""
    if isinstance(list_ops_or_scope, dict):
        if kwargs:
            raise ValueError("When attempting to re-use a scope by suppling a dictionary, "
                             "kwargs must be empty.")
        scope = dict(list_ops_or_scope)
    else:
        scope = _extended_scope(list_ops_or_scope, kwargs)
    _ARG_STACK.append(scope)
    try:
        yield scope
    finally:
        _ARG_STACK.pop()


def _extended_scope(functions, kwargs):
    if not isinstance(functions, (list, tuple)):
        raise TypeError("list_ops_or_scope must either be a list/tuple or reused scope "
                        "(i.e. dict)")
    scope = dict(current_arg_scope())
    for function in functions:
        if not has_arg_scope(function):
            raise ValueError(f"{getattr(function, '__name__', function)} is not decorated "
                             "with @add_arg_scope")
        key = _key(function)
        scope[key] = {**scope.get(key, {}), **kwargs}
    return scope


__getattr__ = _missing.module_getattr("tf.contrib.framework")

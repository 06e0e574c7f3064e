"""What a TF1 program sees when it asks for a name towerflow lacks::

    >>> tf.nn.ctc_loss
    AttributeError: towerflow has no tf.nn.ctc_loss (not implemented; see the TF1
    compatibility page)

rather than Python's ``module 'towerflow.api.nn' has no attribute 'ctc_loss'``,
which names an internal module and does not say whether the name is a typo.
Each TF1 namespace module ends with a module-level ``__getattr__`` (PEP 562,
called only for names the module lacks)::

    __getattr__ = missing.module_getattr("tf.nn")

It raises AttributeError, so ``hasattr(tf.nn, 'ctc_loss')`` stays False.
Namespaces that are objects rather than modules (``tf.random``,
``tf.data.experimental``) are :func:`namespace` modules, which say the same.
"""

import types

COMPATIBILITY_PAGE = "see the TF1 compatibility page"


def no_such_name(dotted, reason="not implemented"):
    """The AttributeError for TF's name ``dotted`` ('tf.nn.foo')."""
    return AttributeError(f"towerflow has no {dotted} ({reason}; {COMPATIBILITY_PAGE})")


def module_getattr(namespace):
    """A module ``__getattr__`` for the TF1 namespace ``namespace`` ('tf.nn')."""
    def __getattr__(name):
        raise no_such_name(f"{namespace}.{name}")
    return __getattr__


class _Namespace(types.ModuleType):
    """A module made from a dict of names, whose missing names say so."""

    def __getattr__(self, name):
        raise no_such_name(f"{self.__dict__['_tf_name']}.{name}")

    def __dir__(self):
        return [name for name in self.__dict__ if not name.startswith("_")]


def namespace(tf_name, doc=None, **names):
    """A module holding ``names`` for the TF1 namespace ``tf_name``::

        random = namespace('tf.random', normal=random_normal, uniform=random_uniform)
    """
    module = _Namespace("towerflow" + tf_name[len("tf"):], doc)
    module.__dict__["_tf_name"] = tf_name
    module.__dict__.update(names)
    return module


class MissingModuleFinder:
    """The last finder on ``sys.meta_path``: an import under ``towerflow.contrib``
    or ``towerflow.python`` that no other finder found (``import
    towerflow.contrib.slim``) fails with what is missing, in TF's name."""

    def find_spec(self, fullname, path=None, target=None):
        for prefix, tf_prefix in (("towerflow.contrib.", "tf.contrib."),
                                  ("towerflow.api.contrib.", "tf.contrib."),
                                  ("towerflow.python.", "tensorflow.python.")):
            if fullname.startswith(prefix):
                raise _module_error(fullname, tf_prefix + fullname[len(prefix):])


def _module_error(fullname, tf_name):
    error = no_such_name(tf_name)
    if tf_name.startswith("tf.contrib."):
        from .contrib import SUPPORTED, unsupported
        part = ".".join(tf_name.split(".")[:3])      # tf.contrib.slim
        error = error if part in SUPPORTED else unsupported(part)
    # NOTE: no ``name``: ``from towerflow.contrib import slim`` would swallow an
    # error naming the module it tried and raise "cannot import name" instead.
    return ModuleNotFoundError(str(error))

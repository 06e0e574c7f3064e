"""``tf.flags`` and ``tf.app.flags``: absl's flags, as TensorFlow 1.15 re-exports
them::

    flags = tf.app.flags
    flags.DEFINE_integer('batch_size', 128, 'Examples per step.')
    FLAGS = flags.FLAGS
    ...
    print(FLAGS.batch_size)     # parses sys.argv on first use, as TF1 does

Every name of ``absl.flags`` is here. The differences from absl are TF's:
``FLAGS`` parses ``sys.argv`` the first time a flag is read before anything
parsed it (absl's own FLAGS raises ``UnparsedFlagAccessError`` then), and
``DEFINE_string/boolean/bool/float/integer`` also take TF's old keyword names
``flag_name``, ``default_value`` and ``docstring``.
"""

import functools as _functools
import sys as _sys

from absl import flags as _absl_flags

from ..log import logger as _logger

globals().update({name: getattr(_absl_flags, name) for name in _absl_flags.__all__})

# NOTE: the DEFINE wrappers below call absl from this module; disclaiming it
# makes absl credit each flag to the user's module that called the wrapper
# (what ``--help`` lists as the main module's flags).
_absl_flags.disclaim_key_flags()

_RENAMED_ARGUMENTS = {"flag_name": "name", "default_value": "default", "docstring": "help"}


def _accept_old_argument_names(define):
    @_functools.wraps(define)
    def define_flag(*args, **kwargs):
        old = [name for name in _RENAMED_ARGUMENTS if name in kwargs]
        for name in old:
            kwargs[_RENAMED_ARGUMENTS[name]] = kwargs.pop(name)
        if old:
            _logger.warning("The keyword argument names (flag_name, default_value, "
                            "docstring) are deprecated: use (name, default, help)")
        return define(*args, **kwargs)
    return define_flag


class _FlagValuesWrapper:
    """absl's FLAGS, except that reading a flag before anything parsed the
    command line parses ``sys.argv`` first (TensorFlow 1.15's behaviour)."""

    def __init__(self, flag_values):
        self.__dict__["_wrapped"] = flag_values

    def __getattr__(self, name):
        wrapped = self.__dict__["_wrapped"]
        try:  # FlagValues' own methods (is_parsed, flag_values_dict...) parse nothing
            return object.__getattribute__(wrapped, name)
        except AttributeError:
            pass
        if not wrapped.is_parsed():
            wrapped(_sys.argv)      # unknown flags raise absl's UnrecognizedFlagError
        return getattr(wrapped, name)

    def __setattr__(self, name, value):
        setattr(self.__dict__["_wrapped"], name, value)

    def __delattr__(self, name):
        delattr(self.__dict__["_wrapped"], name)

    def __dir__(self):
        return dir(self.__dict__["_wrapped"])

    def __getitem__(self, name):
        return self.__dict__["_wrapped"][name]

    def __setitem__(self, name, flag):
        self.__dict__["_wrapped"][name] = flag

    def __contains__(self, name):
        return name in self.__dict__["_wrapped"]

    def __len__(self):
        return len(self.__dict__["_wrapped"])

    def __iter__(self):
        return iter(self.__dict__["_wrapped"])

    def __str__(self):
        return str(self.__dict__["_wrapped"])

    def __call__(self, *args, **kwargs):
        return self.__dict__["_wrapped"](*args, **kwargs)


DEFINE_string = _accept_old_argument_names(_absl_flags.DEFINE_string)
DEFINE_boolean = _accept_old_argument_names(_absl_flags.DEFINE_boolean)
DEFINE_bool = DEFINE_boolean
DEFINE_float = _accept_old_argument_names(_absl_flags.DEFINE_float)
DEFINE_integer = _accept_old_argument_names(_absl_flags.DEFINE_integer)

FLAGS = _FlagValuesWrapper(_absl_flags.FLAGS)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.flags")

"""``import horovod.tensorflow as hvd`` served by towerflow.horovod, on request.

NOTE: never automatic. A real Horovod may be installed beside towerflow (for
TensorFlow programs); towerflow must not shadow it. And towerflow does not
alias ``tensorflow`` either: a TF1 program runs on towerflow with
``import towerflow as tf``, so its Horovod import changes the same way
(``import towerflow.horovod as hvd``). install_alias() is for a program that
cannot be edited: a launcher script calls it, then runs the program.
"""

import importlib.util
import sys

ALIASED_NAMES = ("horovod", "horovod.tensorflow")


def install_alias():
    """Make ``import horovod`` and ``import horovod.tensorflow`` give
    towerflow.horovod in this process; ImportError naming the real Horovod if
    one is installed (it is left as it is).

    Example::

        >>> import towerflow.horovod
        >>> towerflow.horovod.install_alias()
        >>> import horovod.tensorflow as hvd
        >>> hvd is towerflow.horovod
        True
    """
    from .. import horovod as ours
    present = sys.modules.get("horovod")
    if present is ours:
        return
    real = present.__file__ if present is not None else _installed_horovod()
    if real is not None:
        raise ImportError(f"install_alias(): a real Horovod is installed ({real}); towerflow "
                          "leaves it alone. Import towerflow.horovod as hvd instead")
    for name in ALIASED_NAMES:
        sys.modules[name] = ours
    # `import horovod.tensorflow as hvd` binds the attribute 'tensorflow' of 'horovod'
    ours.tensorflow = ours


def _installed_horovod():
    """The path of an importable real ``horovod`` package, else None."""
    try:
        spec = importlib.util.find_spec("horovod")
    except (ImportError, ValueError):
        return None
    return None if spec is None else (spec.origin or str(spec.submodule_search_locations))

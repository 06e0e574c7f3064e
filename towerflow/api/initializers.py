"""``tf.initializers``: the variable initializers of towerflow/ops/init_ops.py,
as a namespace of their own (so a missing one says so)::

    w = tf.get_variable('w', [784, 10], initializer=tf.initializers.he_normal())
"""

from ..ops.init_ops import (  # noqa: F401
                            Constant,
                            Initializer,
                            Ones,
                            RandomNormal,
                            RandomUniform,
                            TruncatedNormal,
                            VarianceScaling,
                            Zeros,
                            constant_initializer,
                            glorot_normal_initializer,
                            glorot_uniform_initializer,
                            he_normal,
                            he_uniform,
                            ones_initializer,
                            random_normal_initializer,
                            random_uniform_initializer,
                            truncated_normal_initializer,
                            variance_scaling_initializer,
                            zeros_initializer,
)

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.initializers")

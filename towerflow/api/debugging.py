"""``tf.debugging``: TF1's asserts and numerics checks
(towerflow/ops/check_ops.py, towerflow/ops/numerics_ops.py)."""

from ..ops.check_ops import (  # noqa: F401
                             Assert,
                             assert_equal,
                             assert_greater,
                             assert_greater_equal,
                             assert_less,
                             assert_less_equal,
                             assert_negative,
                             assert_non_negative,
                             assert_non_positive,
                             assert_none_equal,
                             assert_positive,
                             assert_rank,
                             assert_type,
)
from ..ops.math_ops import is_finite, is_inf, is_nan  # noqa: F401
from ..ops.numerics_ops import check_numerics  # noqa: F401
from ..ops.numerics_ops import verify_tensor_all_finite as assert_all_finite  # noqa: F401

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.debugging")

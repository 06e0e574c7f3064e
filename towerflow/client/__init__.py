"""TensorFlow's ``tf.python.client`` names that TF1 programs import:
``from towerflow.client import timeline`` (``tf.client.timeline``)."""

from . import timeline

__all__ = ["timeline"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from ..api import missing as _missing

__getattr__ = _missing.module_getattr("tf.client")

"""``tf.lookup``: TF 1.15's static hash tables and their initializers (see
towerflow/ops/lookup_ops.py). ``StaticVocabularyTable`` is missing: its
out-of-vocabulary buckets are TF's Fingerprint64 hashes of the keys."""

from ..ops.lookup_ops import (
                              KeyValueTensorInitializer,
                              StaticHashTable,
                              TextFileIndex,
                              TextFileInitializer,
)

__all__ = ["KeyValueTensorInitializer", "StaticHashTable", "TextFileIndex",
           "TextFileInitializer"]

# A name TF 1.15 has and towerflow lacks says so (towerflow/api/missing.py).
from . import missing as _missing

__getattr__ = _missing.module_getattr("tf.lookup")

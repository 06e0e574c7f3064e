"""Recipes: what ``towerflow train NAME`` trains. Each module defines
``RECIPE``, an object with

- ``name`` and ``defaults`` (batch_size, epochs, ...);
- ``load(data_dir)`` -> ``towerflow.data.Splits``;
- ``pipeline_options(train_split)`` -> keyword arguments of ``data.Pipeline``
  (augmentation and normalisation);
- ``logits(images, training)`` -> the model, built once per tower
  (``training`` is a bool tensor);
- ``optimizer(global_step, steps_per_epoch, epochs)``;
- ``label_smoothing``.
"""

import importlib

NAMES = ("digits", "cifar10")


def get(name):
    """The RECIPE of recipe ``name``; ValueError listing the recipes otherwise."""
    if name not in NAMES:
        raise ValueError(f"unknown recipe {name!r}; the recipes are: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}").RECIPE

"""Recipes: what ``towerflow train NAME`` trains. Each module defines
``RECIPE``, an object with

- ``name`` and ``defaults`` (batch_size, epochs, ...);
- ``load(data_dir)`` -> ``towerflow.data.Splits``;
- ``pipeline_options(train_split)`` -> keyword arguments of ``data.Pipeline``
  (augmentation and normalisation);
- ``logits(images, training)`` -> the model, built once per tower
  (``training`` is a bool tensor);
- ``optimizer(global_step, total_steps)``: its learning-rate schedule spans
  ``total_steps``, the run's length (``--steps``, ``--epochs``, or the smaller);
- ``label_smoothing``;
- ``test_time_flip`` (optional, default False): evaluate on each image plus
  its mirror image (the logits added).

A *script* recipe is a program that is not a classifier on a dataset
(towerflow/cli_train.py runs it instead of training.fit). Its ``RECIPE`` has

- ``name`` and ``kind = "script"``;
- ``flags``: the ``towerflow train`` options it uses, e.g. ``("steps",)``
  (``--seed``, ``--json-out`` and ``--quiet`` always apply; others are refused);
- ``run(args)`` -> dict, given the parsed ``towerflow train`` options: the
  JSON summary's keys (devices, steps, final_loss, ... and its own);
- ``summary(result)`` -> the line printed unless ``--quiet``.
"""

import importlib

NAMES = ("digits", "cifar10", "linear_regression", "mnist_softmax", "text_sample")


def get(name):
    """The RECIPE of recipe ``name``; ValueError listing the recipes otherwise."""
    if name not in NAMES:
        raise ValueError(f"unknown recipe {name!r}; the recipes are: {', '.join(NAMES)}")
    return importlib.import_module(f"{__name__}.{name}").RECIPE

"""What a thin TF1 namespace module answers for a TF 1.15 name it does not
provide: an AttributeError that says the name is TF's but not implemented,
instead of Python's bare "has no attribute"."""


def not_implemented(namespace, known_missing):
    """A module ``__getattr__`` for ``namespace`` ('tf.math'); ``known_missing``
    are TF 1.15's names it leaves out."""
    def __getattr__(name):
        if name in known_missing:
            raise AttributeError(f"{namespace}.{name} is part of TensorFlow 1.15 but not "
                                 "implemented in towerflow")
        raise AttributeError(f"module '{namespace}' has no attribute '{name}'")
    return __getattr__

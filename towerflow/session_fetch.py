"""Fetch and feed structures for ``Session.run``: flatten any nesting of
lists, tuples, namedtuples and dicts of fetchable elements to a flat target
list, and rebuild the same nesting from the flat values; flatten feed_dict
keys that are (nested) tuples of tensors, as TF 1.15's
``nest.flatten_dict_items``. A SparseTensor or IndexedSlices is fetched as
its tensors and comes back as a SparseTensorValue / IndexedSlicesValue (their
``_fetch_parts``); feeding a SparseTensor feeds its tensors (``expand_feeds``)."""

from . import errors
from .graph.core import Operation, Tensor
from .ops import nest


def flat_feed_dict(feed_dict):
    """``feed_dict`` with each tuple key (an ``LSTMStateTuple`` of
    placeholders, a tuple of them) paired leaf by leaf with its value, which
    must have the same structure; ``feed_dict`` itself if no key is a tuple.

    Example: ``{(c, h): (c_value, h_value)}`` -> ``{c: c_value, h: h_value}``.
    """
    if not isinstance(feed_dict, dict):
        raise TypeError("input must be a dictionary")
    for key in feed_dict:
        if isinstance(key, tuple):
            return _flatten_items(feed_dict)
    return feed_dict


def _flatten_items(feed_dict):
    """TF 1.15's nest.flatten_dict_items, with its ValueErrors."""
    flat = {}
    for key, value in feed_dict.items():
        keys, values = ([key], [value]) if not isinstance(key, tuple) else \
            (nest.flatten(key), nest.flatten(value))
        if len(keys) != len(values):
            raise ValueError(f"Could not flatten dictionary. Key had {len(keys)} elements, "
                             f"but value had {len(values)} elements. Key: {keys}, "
                             f"value: {values}.")
        for leaf_key, leaf_value in zip(keys, values):
            if leaf_key in flat:
                raise ValueError(f"Could not flatten dictionary: key {leaf_key} is not "
                                 "unique.")
            flat[leaf_key] = leaf_value
    return flat


def structure_key(fetches):
    """A hashable key naming the structure and elements of ``fetches``
    (TypeError if an element is unhashable)."""
    if isinstance(fetches, Tensor):
        return fetches
    # NOTE: the exact type is part of the key: a namedtuple equals a plain tuple
    # (and an OrderedDict a dict) of the same items, yet must be rebuilt as itself.
    kind = type(fetches)
    if kind is list or kind is tuple or _is_namedtuple(fetches):
        return kind, tuple([structure_key(item) for item in fetches])
    if isinstance(fetches, dict):
        return kind, tuple([(key, structure_key(value)) for key, value in fetches.items()])
    return fetches


class FetchMapper:
    """``targets``: the flat list of Tensors/Operations to evaluate;
    ``build(values)``: the user's structure with values in place."""

    def __init__(self, graph, fetches):
        self._graph = graph
        self.targets = []
        self.build = self._builder(fetches)

    def _builder(self, fetches):
        if isinstance(fetches, (list, tuple)) and not _is_namedtuple(fetches):
            children = [self._builder(item) for item in fetches]
            if all(getattr(child, "leaf", False) for child in children):
                indices = [child.index for child in children]
                if type(fetches) is list:
                    return lambda values: [values[i] for i in indices]
                return lambda values: type(fetches)(values[i] for i in indices)
            return lambda values: type(fetches)(child(values) for child in children)
        if _is_namedtuple(fetches):
            children = [self._builder(item) for item in fetches]
            return lambda values: type(fetches)(*[child(values) for child in children])
        if hasattr(fetches, "_fetch_parts"):
            make_value, parts = fetches._fetch_parts()
            children = [self._builder(part) for part in parts]
            return lambda values: make_value(*[child(values) for child in children])
        if isinstance(fetches, dict):
            children = {key: self._builder(value) for key, value in fetches.items()}
            return lambda values: type(fetches)(
                (key, child(values)) for key, child in children.items())
        return self._leaf(fetches)

    def _leaf(self, element):
        index = len(self.targets)
        self.targets.append(self._resolve(element))

        def pick(values):
            return values[index]
        pick.leaf, pick.index = True, index
        return pick

    def _resolve(self, element):
        if not isinstance(element, (Tensor, Operation, str)) and \
                not hasattr(element, "_as_graph_element"):
            raise TypeError(f"Fetch argument {element!r} has invalid type "
                            f"{type(element)}: must be a Tensor, Operation, Variable, a "
                            "name such as 'MatMul:0', or a list/tuple/dict of those.")
        try:
            return self._graph.as_graph_element(element)
        except (KeyError, ValueError) as err:
            message = str(err).strip('"')
            raise errors.InvalidArgumentError(
                None, None, f"Cannot fetch {element!r}: {message}") from None


def _is_namedtuple(value):
    return isinstance(value, tuple) and hasattr(type(value), "_fields")


def expand_feeds(feed_dict):
    """``feed_dict`` with each SparseTensor key (``_feeds_of``) replaced by the
    feeds of its tensors; the dict itself when it has none."""
    if not any(hasattr(key, "_feeds_of") for key in feed_dict):
        return feed_dict
    expanded = {}
    for key, value in feed_dict.items():
        if hasattr(key, "_feeds_of"):
            expanded.update(key._feeds_of(value))
        else:
            expanded[key] = value
    return expanded

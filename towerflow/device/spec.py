"""Device specifications: the only place that parses device strings.

A :class:`DeviceSpec` names a device, or a set of devices when some fields
are left unset: ``job``, ``replica``, ``task``, ``device_type`` and
``device_index``.  It is immutable and hashable, so it can key caches::

    >>> spec = DeviceSpec.from_string('/job:localhost/replica:0/task:0/gpu:1')
    >>> spec.device_type, spec.device_index
    ('GPU', 1)
    >>> str(spec)
    '/job:localhost/replica:0/task:0/device:GPU:1'
"""

import dataclasses
import operator
import re

ACCEPTED_FORMS = (
    "'/cpu:0', '/gpu:1', 'gpu:1', '/GPU:1', '/device:GPU:1', '/device:gpu:1', "
    "'/job:localhost/replica:0/task:0/device:GPU:1', '/job:worker/task:1/cpu:0', "
    "partial specs such as '/job:localhost', '/device:GPU' or '/gpu:*', "
    "and '' (any device)"
)

_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*\Z")
_INDEX_RE = re.compile(r"[0-9]+\Z")
# Types that may be written without the 'device:' prefix ('/gpu:0').
_SHORT_TYPES = ("CPU", "GPU")
_FIELDS = ("job", "replica", "task", "device_type", "device_index")


def _check_name(value, field):
    if value is None:
        return None
    if not isinstance(value, str) or not _NAME_RE.match(value):
        raise ValueError(
            f"DeviceSpec {field} must be None or a name of letters, digits and "
            f"'_' starting with a letter (e.g. 'localhost', 'GPU'); got {value!r}")
    return value


def _check_index(value, field):
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"DeviceSpec {field} must be None or an int >= 0; got {value!r}")
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(
            f"DeviceSpec {field} must be None or an int >= 0; got {value!r}") from None
    if number < 0:
        raise ValueError(f"DeviceSpec {field} must be None or an int >= 0; got {value!r}")
    return number


@dataclasses.dataclass(frozen=True, init=False, repr=False)
class DeviceSpec:
    """An immutable, possibly partial, device specification.

    Unset fields are None and match anything.  ``device_type`` is stored
    upper-case, so ``DeviceSpec(device_type='gpu') == DeviceSpec(device_type='GPU')``.

    Example::

        >>> DeviceSpec(device_type='gpu', device_index=2).to_string()
        '/device:GPU:2'
    """

    job: str = None
    replica: int = None
    task: int = None
    device_type: str = None
    device_index: int = None

    def __init__(self, job=None, replica=None, task=None, device_type=None,
                 device_index=None):
        device_type = _check_name(device_type, "device_type")
        values = {
            "job": _check_name(job, "job"),
            "replica": _check_index(replica, "replica"),
            "task": _check_index(task, "task"),
            "device_type": device_type.upper() if device_type else None,
            "device_index": _check_index(device_index, "device_index"),
        }
        for field, value in values.items():
            # NOTE: frozen dataclass; object.__setattr__ is the sanctioned way in.
            object.__setattr__(self, field, value)

    @classmethod
    def from_string(cls, spec):
        """Parse a device string written in any of TensorFlow's forms.

        Example::

            >>> DeviceSpec.from_string('/job:worker/task:1/cpu:0')
            DeviceSpec(job='worker', task=1, device_type='CPU', device_index=0)
            >>> DeviceSpec.from_string('/gpu:*')
            DeviceSpec(device_type='GPU')
        """
        if not isinstance(spec, str):
            raise TypeError(
                f"device spec must be a str such as '/gpu:0'; got {type(spec).__name__} "
                f"{spec!r}")
        fields = {}
        for part in spec.strip().split("/"):
            if part:
                for field, value in _parse_part(part, spec):
                    _set_once(fields, field, value, spec)
        return cls(**fields)

    def to_string(self):
        """The canonical string of the set fields, in TensorFlow's order.

        Example::

            >>> DeviceSpec(job='localhost', device_type='CPU').to_string()
            '/job:localhost/device:CPU:*'
        """
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None or self.device_index is not None:
            kind = self.device_type or "*"
            index = "*" if self.device_index is None else self.device_index
            parts.append(f"/device:{kind}:{index}")
        return "".join(parts)

    def __str__(self):
        return self.to_string()

    def __repr__(self):
        fields = ", ".join(f"{name}={getattr(self, name)!r}" for name in _FIELDS
                           if getattr(self, name) is not None)
        return f"DeviceSpec({fields})"

    def make_merged_spec(self, other):
        """A new spec: ``other``'s set fields win, field by field.

        Example::

            >>> outer = DeviceSpec.from_string('/job:worker/gpu:0')
            >>> str(outer.make_merged_spec(DeviceSpec.from_string('/cpu:1')))
            '/job:worker/device:CPU:1'
        """
        other = _as_spec(other)
        merged = {name: getattr(other, name) if getattr(other, name) is not None
                  else getattr(self, name) for name in _FIELDS}
        return DeviceSpec(**merged)

    def replace(self, **fields):
        """A copy with the given fields replaced (None unsets a field).

        Example::

            >>> str(DeviceSpec.from_string('/gpu:0').replace(device_index=3))
            '/device:GPU:3'
        """
        unknown = sorted(set(fields) - set(_FIELDS))
        if unknown:
            raise TypeError(
                f"DeviceSpec.replace got unknown field(s) {unknown}; "
                f"fields are {list(_FIELDS)}")
        values = {name: getattr(self, name) for name in _FIELDS}
        values.update(fields)
        return DeviceSpec(**values)

    def matches(self, full_spec):
        """True if every set field of self equals that field of ``full_spec``.

        Example::

            >>> DeviceSpec.from_string('/gpu:*').matches(
            ...     '/job:localhost/replica:0/task:0/device:GPU:3')
            True
        """
        full_spec = _as_spec(full_spec)
        return all(getattr(self, name) is None
                   or getattr(self, name) == getattr(full_spec, name)
                   for name in _FIELDS)

    @property
    def is_empty(self):
        """True when no field is set (the spec matches every device)."""
        return all(getattr(self, name) is None for name in _FIELDS)


def _parse_part(part, spec):
    """The (field, value) pairs one '/'-separated part of ``spec`` sets."""
    pieces = part.split(":")
    key = pieces[0].lower()
    if key in ("job", "replica", "task") and len(pieces) == 2:
        return [(key, _parse_value(key, pieces[1], spec))]
    if key == "device" and len(pieces) in (2, 3):
        return _parse_type_and_index(pieces[1], pieces[2:], spec, any_type=True)
    if key.upper() in _SHORT_TYPES and len(pieces) in (1, 2):
        return _parse_type_and_index(pieces[0], pieces[1:], spec, any_type=False)
    raise _bad_spec(spec, f"cannot parse {part!r}")


def _parse_type_and_index(kind, index, spec, any_type):
    if not _NAME_RE.match(kind) or not (any_type or kind.upper() in _SHORT_TYPES):
        raise _bad_spec(spec, f"{kind!r} is not a device type such as 'CPU' or 'GPU'")
    fields = [("device_type", kind.upper())]
    if index:
        fields.append(("device_index", _parse_value("device_index", index[0], spec)))
    return fields


def _parse_value(field, text, spec):
    if text == "*":
        return None
    if field == "job":
        if not _NAME_RE.match(text):
            raise _bad_spec(spec, f"job name {text!r} is not a name like 'worker'")
        return text
    if not _INDEX_RE.match(text):
        raise _bad_spec(spec, f"{field} {text!r} is not an int >= 0 or '*'")
    return int(text)


def _set_once(fields, field, value, spec):
    if field in fields and fields[field] != value:
        raise _bad_spec(spec, f"{field} is given twice ({fields[field]!r} and {value!r})")
    fields[field] = value


def _bad_spec(spec, detail):
    return ValueError(
        f"Invalid device specification {spec!r}: {detail}. Accepted forms: {ACCEPTED_FORMS}.")


def _as_spec(value):
    """A DeviceSpec from a DeviceSpec or a device string."""
    if isinstance(value, DeviceSpec):
        return value
    if isinstance(value, str):
        return DeviceSpec.from_string(value)
    raise TypeError(
        f"expected a DeviceSpec or a device string such as '/gpu:0'; "
        f"got {type(value).__name__} {value!r}")


def merge_device_scopes(outer, inner):
    """The spec in force inside ``with device(inner)`` nested in ``outer``.

    ``inner`` wins field by field; ``inner=None`` clears every field (TF's
    ``tf.device(None)``).  ``outer`` may be None (no enclosing scope).

    Example::

        >>> outer = DeviceSpec.from_string('/job:worker/gpu:0')
        >>> str(merge_device_scopes(outer, '/device:GPU:1'))
        '/job:worker/device:GPU:1'
        >>> merge_device_scopes(outer, None)
        DeviceSpec()
    """
    if inner is None:
        return DeviceSpec()
    if not isinstance(inner, (str, DeviceSpec)):
        raise TypeError(
            f"a device scope must be a device string, a DeviceSpec or None; "
            f"got {type(inner).__name__} {inner!r}")
    if outer is None:
        return _as_spec(inner)
    return _as_spec(outer).make_merged_spec(inner)


def canonical(spec, job="localhost", replica=0, task=0):
    """``spec`` with job, replica, task and device_index filled in.

    Missing job/replica/task take the given defaults and a missing index
    becomes 0; ``device_type`` is left as given (None stays None, since only
    placement may choose a device type).

    Example::

        >>> str(canonical('/gpu:1'))
        '/job:localhost/replica:0/task:0/device:GPU:1'
        >>> str(canonical('/cpu:*', job='worker', task=2))
        '/job:worker/replica:0/task:2/device:CPU:0'
    """
    spec = _as_spec(spec)
    defaults = DeviceSpec(job=job, replica=replica, task=task, device_index=0)
    return defaults.make_merged_spec(spec)

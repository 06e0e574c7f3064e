"""What a user asks of one logical device: :class:`LogicalDeviceConfiguration`
(``VirtualDeviceConfiguration`` is its TensorFlow 2.0-era alias), validated
when made so a bad value fails at the line that wrote it."""

import dataclasses
import math
import numbers


@dataclasses.dataclass(frozen=True)
class LogicalDeviceConfiguration:
    """How much of a physical device one logical device gets.

    ``memory_limit`` is in megabytes; ``memory_fraction`` (a towerflow
    extension) is a share of the physical GPU's memory in (0, 1], turned into
    megabytes when the configuration is set.  Give at most one of them.

    Example::

        >>> LogicalDeviceConfiguration(memory_limit=1024)
        LogicalDeviceConfiguration(memory_limit=1024, ...)
        >>> LogicalDeviceConfiguration(memory_fraction=0.3).memory_fraction
        0.3
    """

    memory_limit: float = None
    experimental_priority: int = None
    memory_fraction: float = None

    def __post_init__(self):
        _check_memory_limit(self.memory_limit)
        _check_memory_fraction(self.memory_fraction)
        if self.memory_limit is not None and self.memory_fraction is not None:
            raise ValueError(
                f"give memory_limit (MB) or memory_fraction, not both; got "
                f"memory_limit={self.memory_limit!r}, memory_fraction={self.memory_fraction!r}")
        priority = self.experimental_priority
        if priority is not None and (isinstance(priority, bool)
                                     or not isinstance(priority, numbers.Integral)):
            raise ValueError(
                f"experimental_priority must be an int or None; got {priority!r}")


VirtualDeviceConfiguration = LogicalDeviceConfiguration


def _is_number(value):
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _check_memory_limit(limit):
    if limit is None:
        return
    if not _is_number(limit) or math.isnan(limit) or limit <= 0:
        raise ValueError(
            f"memory_limit must be a positive number of megabytes (e.g. 1024) or None; "
            f"got {limit!r}")
    if limit < 1:
        raise ValueError(
            f"memory_limit is in megabytes, so memory_limit={limit!r} asks for less than "
            f"1 MB; for {limit * 100:g} % of the GPU's memory write "
            f"memory_fraction={limit!r} instead")


def _check_memory_fraction(fraction):
    if fraction is None:
        return
    if not _is_number(fraction) or not 0 < fraction <= 1:
        raise ValueError(
            f"memory_fraction must be a number in (0, 1] (e.g. 0.3 for 30 %) or None; "
            f"got {fraction!r}")

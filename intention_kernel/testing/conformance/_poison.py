"""Poison data: nothing a caller, a model or a stored row sends can brick a thread or hide an
outcome. Every value is refused with a typed error before anything is written, or it reads back
equal; one unreadable stored row stays its own thread's problem."""

from ._poison_records import PoisonRecords
from ._poison_values import PoisonValues

__all__ = ["PoisonData"]


class PoisonData(PoisonValues, PoisonRecords):
    """Every poison-data test: values and ids, then effects, reconciliations and corrupt rows."""

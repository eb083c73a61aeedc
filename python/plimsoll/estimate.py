"""Memory of input batches before anything runs (docs/estimate.md)."""
from . import _plimsoll


def batch(shape, batch, dtype="float32", queue=10, workers=4, budget=None):
    """Bytes of one batch, the prefetch queue, the batches in flight and the consumer's, as a dict.

    shape is one sample without the batch dimension ("224x224x3" or a tuple); budget a size ("2GiB") or bytes.
    The keys are those of `plimsoll estimate batch --json` (without its budget_note sentence).
    """
    if not isinstance(shape, str):
        shape = "x".join(str(int(d)) for d in shape)
    if budget is not None and not isinstance(budget, str):
        budget = str(int(budget))
    return _plimsoll.estimate_batch(shape, int(batch), dtype, int(queue), int(workers), budget)

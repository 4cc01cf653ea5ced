"""``trainnet``'s checkpoints: written atomically by one worker, found and read back.

A checkpoint is one ``torch.save`` file, ``net_checkpoint__<iteration>__<date>.pt``,
holding plain dicts, lists, numbers and CPU tensors (read back with
``weights_only=True``): the network, the solver state, the position, the shuffle seed and
the histories (see ``trainer.trainnet``).
"""

import os
import re
import time

from ..errors import SpmdValueError
from .files import write_atomic
from .netdata import _torch, call

__all__ = ["CHECKPOINT_FORMAT", "cpu_copy", "latest_checkpoint", "read_checkpoint",
           "to_device", "write_checkpoint"]

CHECKPOINT_FORMAT = "spmdlab-trainnet-checkpoint-1"
_CHECKPOINT_NAME = re.compile(r"^net_checkpoint__(\d+)__.*\.pt$")


def write_checkpoint(folder, state):
    """Write ``state`` to a new file in ``folder`` atomically; returns its path.

    The file is written under a temporary name, flushed to disk, then renamed
    (``files.write_atomic``): a crash at any point leaves either no new file or a
    complete one.
    """
    torch = _torch()
    stamp = time.strftime("%Y_%m_%d__%H_%M_%S")
    path = os.path.join(folder, f"net_checkpoint__{state['iteration']}__{stamp}.pt")
    return write_atomic(path, lambda f: torch.save(state, f))


def latest_checkpoint(path):
    """``path`` if it is a checkpoint file, else the checkpoint of ``path`` (a folder)
    with the highest iteration. Raises SpmdValueError when there is none."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise SpmdValueError(f"{call()}: resume_from={path!r} is neither a checkpoint file "
                             f"nor a folder")
    found = [(int(m.group(1)), name) for name in os.listdir(path)
             for m in [_CHECKPOINT_NAME.match(name)] if m]
    if not found:
        raise SpmdValueError(f"{call()}: no checkpoint (net_checkpoint__*.pt) in {path!r}")
    return os.path.join(path, max(found)[1])


def read_checkpoint(path):
    torch = _torch()
    path = latest_checkpoint(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        raise SpmdValueError(f"{call()}: cannot read checkpoint {path!r}: "
                             f"{type(exc).__name__}: {exc}") from None
    if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
        raise SpmdValueError(f"{call()}: {path!r} is not a trainnet checkpoint")
    state["path"] = path
    return state


def cpu_copy(tree):
    """A copy of a dict of tensors (or None) on the CPU."""
    if tree is None:
        return None
    return {k: (v.detach().cpu().clone() if v is not None else None) for k, v in tree.items()}


def to_device(tree, device):
    if tree is None:
        return None
    return {k: (v.to(device) if v is not None else None) for k, v in tree.items()}

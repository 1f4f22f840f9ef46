"""Arrays of other libraries, read in place: CPU torch tensors, JAX arrays and any other
DLPack producer become numpy views of their own memory (never copies).

torch tensors go through `Tensor.numpy()`, which is a C call that views the tensor's memory
(a third of the cost of a DLPack exchange, and this runs on every call with a tensor).
Everything else that speaks DLPack goes through `np.from_dlpack`, which shares memory or fails.
bfloat16, which numpy holds only through ml_dtypes (and DLPack's numpy import refuses), is
viewed by hand: a torch tensor as int16 bits relabelled ml_dtypes.bfloat16 (the same memory),
a JAX array through its own `__array__` (JAX's bfloat16 is ml_dtypes').
Failures are explained: a tensor on a GPU or another device, a dtype jitcore does not
support, a tensor that requires grad.
"""
from __future__ import annotations

import sys

import numpy as np

from jitcore.ir import dtypes as dt
from jitcore.ir.errors import DTypeError

_DLPACK_CPU = 1          # DLPack's kDLCPU device type


def is_foreign(x) -> bool:
    """Whether x is read through this module (a DLPack producer that is not an ndarray)."""
    return hasattr(type(x), "__dlpack__") and not isinstance(x, np.ndarray)


def steady_type(args: tuple):
    """(type, view function) when every foreign argument has exactly one type (a torch
    subclass such as Parameter is left to the slow path), else None: what a steady fast
    path may view without the checks of `views`."""
    types = {type(a) for a in args if is_foreign(a)}
    if len(types) != 1:
        return None
    t = types.pop()
    if any(_is_bfloat16(a) for a in args if is_foreign(a)):
        return t, _view_bfloat16
    if t.__module__.startswith("torch"):
        return (t, t.numpy) if t.__name__ == "Tensor" else None
    return t, np.from_dlpack


def view(x, label: str) -> np.ndarray:
    """A numpy view of x's own memory (same data pointer and strides)."""
    try:
        if _is_bfloat16(x):
            return _view_bfloat16(x)
        if type(x).__module__.startswith("torch"):
            return x.numpy()                   # raises for GPU, requires_grad
        return np.from_dlpack(x)
    except DTypeError:                         # (bfloat16 without ml_dtypes: says so)
        raise
    except Exception as e:                     # noqa: BLE001 -- explained below
        raise _explain(x, label, e) from None


def _is_bfloat16(x) -> bool:
    return str(getattr(x, "dtype", "")).rpartition(".")[2] == "bfloat16"


def _view_bfloat16(x) -> np.ndarray:
    """A bfloat16 array of x's memory: torch's bits viewed as int16, then as ml_dtypes'
    bfloat16 (no copy); a JAX (or other) array through np.asarray. Arrays of other dtypes
    (a steady path's other arguments) are viewed as `view` views them."""
    torch = type(x).__module__.startswith("torch")
    if not _is_bfloat16(x):
        return x.numpy() if torch else np.from_dlpack(x)
    if torch:
        int16 = sys.modules["torch"].int16      # (x is a tensor: torch is imported)
        return x.view(int16).numpy().view(dt.bfloat16.np)
    return np.asarray(x, dtype=dt.bfloat16.np)


def _explain(x, label: str, error: Exception) -> Exception:
    what = f"{label}: a {type(x).__name__}"
    device = _device(x)
    if device is not None:
        return TypeError(f"{what} on device {device}: jitcore reads CPU memory in place "
                         "only; move it to the CPU first (e.g. x.cpu(), jax.device_put(x, "
                         "jax.devices('cpu')[0]))")
    dtype = str(getattr(x, "dtype", "")).rpartition(".")[2]
    if dtype:
        try:
            dt.as_dtype(dtype)
        except DTypeError:
            return DTypeError(f"{what} of dtype {dtype}: not supported; supported: "
                              f"{dt.SUPPORTED_NAMES}")
    return TypeError(f"{what}: cannot be read in place: {error}")


def _device(x) -> str | None:
    """The device x lives on when it is not the CPU, else None."""
    is_cpu = getattr(x, "is_cpu", None)       # torch says so directly
    if isinstance(is_cpu, bool):
        return None if is_cpu else str(x.device)
    try:
        kind, ident = x.__dlpack_device__()
    except Exception:                          # noqa: BLE001 -- no device to tell of
        return str(getattr(x, "device", "unknown"))
    if kind == _DLPACK_CPU:
        return None
    return f"{getattr(x, 'device', kind)} (DLPack device {kind}:{ident})"


def views(args: tuple, out):
    """(args, out) with each foreign array viewed in place (out= torch tensors too, so the
    kernels write into the tensors themselves); None when there is none, or when one cannot
    be viewed (then to_array says why, naming the argument)."""
    outs = out if isinstance(out, (tuple, list)) else () if out is None else (out,)
    if not any(map(is_foreign, args)) and not any(map(is_foreign, outs)):
        return None
    try:
        viewed = tuple([view(a, "") if is_foreign(a) else a for a in args])
        viewed_outs = [view(o, "") if is_foreign(o) else o for o in outs]
    except (TypeError, ValueError):
        return None
    if out is None or isinstance(out, (tuple, list)):
        return viewed, (type(out)(viewed_outs) if out is not None else None)
    return viewed, viewed_outs[0]


def out_arrays(out):
    """out= with each foreign array viewed in place (errors name out[i]); out itself when it
    holds none."""
    items = out if isinstance(out, (tuple, list)) else (out,)
    if not any(map(is_foreign, items)):
        return out
    viewed = [view(o, f"out[{i}]") if is_foreign(o) else o for i, o in enumerate(items)]
    return type(out)(viewed) if isinstance(out, (tuple, list)) else viewed[0]

"""A fake CUDA device for CPU-only test machines: catches tensors made on the wrong device, as a GPU would.

On a CPU box every tensor sits on the CPU, so code that forgets `device=` never fails there and crashes on a
GPU ("Expected all tensors to be on the same device"). `FakeCuda` is a TorchFunctionMode that keeps the
arithmetic on the CPU but gives each tensor a virtual device: a tensor is "on cuda" when it was made from the
model's parameters, by an op on such tensors, by a factory called with a cuda `device=`, or by `.to(cuda)`;
everything else is "on cpu". Tensors on cuda report `device == cuda:0`, so `torch.tensor(..., device=x.device)`
and `lm.device` behave as on a GPU. CUDA's rules are then enforced on every call:

- an op mixing cuda tensors with cpu tensors of one element or more fails, except the cases CUDA allows (a
  0-dim cpu tensor as a scalar; cpu index tensors in `cuda_tensor[...]`; copies between devices);
- `.numpy()` of a cuda tensor fails, and so does a draw on a cuda tensor with a cpu generator;
- host syncs (`.item()`, `.tolist()`, `int()`, `float()`, `bool()`, `.cpu()` of a cuda tensor) are counted.

It models CUDA's device rules, not its numerics; `tests/test_cuda.py` checks numerics on a real GPU.
"""

from __future__ import annotations

import contextlib
import traceback

import torch
from torch.overrides import TorchFunctionMode

CUDA = torch.device("cuda", 0)
_TAG = "_fake_cuda"
_DEVICE_GETTER = torch._C.TensorBase.__dict__["device"]
_IS_CUDA_GETTER = torch._C.TensorBase.__dict__["is_cuda"]
_DATA = torch._C.TensorBase.__dict__["data"]
_SYNCS = {"item", "tolist", "__int__", "__float__", "__bool__", "__index__"}
_RANDOM = {"multinomial", "rand", "randn", "randint", "bernoulli", "normal", "randperm", "exponential_",
           "uniform_", "normal_"}
# Calls that never touch values on two devices at once, or that CUDA allows across devices.
_FREE = {"__set__", "size", "dim", "numel", "__len__", "__repr__", "__format__", "__str__",
         "is_floating_point", "is_complex", "element_size", "stride", "is_contiguous", "data_ptr",
         "storage_offset", "requires_grad_", "__hash__", "copy_", "__reduce_ex__",
         "__deepcopy__", "register_hook", "untyped_storage", "get_device", "ndimension", "nelement", "has_names",
         "is_inference", "_is_view", "__array__", "__dlpack__", "__contains__",
         "_has_compatible_shallow_copy_type"}


class DeviceError(RuntimeError):
    """What CUDA would raise: tensors on two devices in one op."""


def on_cuda(value) -> bool:
    return isinstance(value, torch.Tensor) and getattr(value, _TAG, False)


def _mark(tensor: torch.Tensor, cuda: bool) -> torch.Tensor:
    try:
        setattr(tensor, _TAG, cuda)
    except (AttributeError, RuntimeError):
        pass
    return tensor


def _tensors(value, out):
    if isinstance(value, torch.Tensor):
        out.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _tensors(item, out)
    elif isinstance(value, dict):
        for item in value.values():
            _tensors(item, out)
    return out


def _is_cuda_device(value) -> bool:
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, str):
        return value.startswith("cuda")
    return False


def _is_device(value) -> bool:
    if isinstance(value, torch.device):
        return True
    return isinstance(value, str) and (value == "cpu" or value.startswith("cuda") or value.startswith("cpu:"))


def _tag_outputs(value, cuda: bool) -> None:
    for tensor in _tensors(value, []):
        _mark(tensor, cuda)


class FakeCuda(TorchFunctionMode):
    """Enter it (`with FakeCuda() as fake:`) after `fake.put_on_cuda(model)`; `fake.syncs` counts host syncs."""

    def __init__(self):
        super().__init__()
        self.syncs = 0
        self.sync_sites: dict[str, int] = {}

    @staticmethod
    def put_on_cuda(module: torch.nn.Module) -> torch.nn.Module:
        for tensor in list(module.parameters()) + list(module.buffers()):
            _mark(tensor, True)
        return module

    def _count_sync(self) -> None:
        self.syncs += 1
        site = _caller()
        self.sync_sites[site] = self.sync_sites.get(site, 0) + 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        name = getattr(func, "__name__", "")
        owner = getattr(func, "__self__", None)
        if owner is _DEVICE_GETTER and args and on_cuda(args[0]):
            return CUDA
        if owner is _IS_CUDA_GETTER and args and on_cuda(args[0]):
            return True
        if name == "__set__" and owner is _DATA and len(args) == 2:     # `param.data = t` moves param to t's device
            func(*args, **kwargs)
            _mark(args[0], on_cuda(args[1]))
            return None
        if name == "__get__":        # properties: .T, .mT, .data, .shape, ...
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor) and args and on_cuda(args[0]):
                _mark(result, True)
            return result
        if name in _SYNCS and args and on_cuda(args[0]):
            self._count_sync()
            return func(*args, **kwargs)
        if name == "numpy" and args and on_cuda(args[0]):
            raise DeviceError("can't convert cuda:0 device type tensor to numpy. Use Tensor.cpu() to copy the tensor "
                              "to host memory first.")
        if name in ("to", "cpu", "cuda", "tensor", "as_tensor") or "device" in kwargs:
            return self._convert(func, name, args, kwargs)
        if name in _FREE:
            return func(*args, **kwargs)
        inputs = _tensors(args, []) + _tensors(kwargs, [])
        any_cuda = any(on_cuda(t) for t in inputs)
        if name in _RANDOM and any_cuda:
            generator = kwargs.get("generator")
            if generator is not None and generator.device.type == "cpu":
                raise DeviceError(f"{name}: a cpu generator for a cuda tensor (Expected a 'cuda' device type for "
                                  "generator)")
        if any_cuda:
            self._check_mix(name, args, kwargs, inputs)
        result = func(*args, **kwargs)
        if any_cuda:
            _tag_outputs(result, True)
        return result

    def _check_mix(self, name, args, kwargs, inputs) -> None:
        if name == "__getitem__":
            # cuda[cpu indices] is fine; cpu[cuda indices] is not (0-dim cuda indices are read as ints).
            if not on_cuda(args[0]) and any(on_cuda(t) and t.dim() > 0 for t in _tensors(args[1:], [])):
                raise DeviceError("indexing a cpu tensor with cuda indices")
            return
        if name == "__setitem__":
            target, index, value = args[0], args[1], args[2]
            advanced = bool(_tensors(index, []))
            value_cuda = on_cuda(value) if isinstance(value, torch.Tensor) else on_cuda(target)
            if isinstance(value, torch.Tensor) and value.dim() == 0 and not on_cuda(value):
                value_cuda = on_cuda(target)
            if advanced and (value_cuda != on_cuda(target)):
                raise DeviceError("index_put_: values on another device than the indexed tensor")
            if not on_cuda(target) and any(on_cuda(t) and t.dim() > 0 for t in _tensors(index, [])):
                raise DeviceError("indexing a cpu tensor with cuda indices")
            return
        if any(not on_cuda(t) and t.dim() > 0 for t in inputs):
            shapes = ", ".join(f"{'cuda:0' if on_cuda(t) else 'cpu'}{tuple(t.shape)}" for t in inputs)
            raise DeviceError(f"Expected all tensors to be on the same device, but found at least two devices in "
                              f"{name}: {shapes}")

    def _convert(self, func, name, args, kwargs):
        """to / cpu / cuda / tensor / as_tensor / factories with device=: run on the cpu, then tag the result."""
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name == "cuda":
            result = source.clone() if not on_cuda(source) else source
            return _mark(result, True)
        if name == "cpu":
            if on_cuda(source):
                self._count_sync()
                return _mark(source.clone(), False)
            return func(*args, **kwargs)
        explicit = None
        new_args = list(args)
        for i, value in enumerate(args[1:] if source is not None else args, start=1 if source is not None else 0):
            if isinstance(value, torch.Tensor) and name == "to":
                explicit = on_cuda(value)
            elif _is_device(value):
                explicit = _is_cuda_device(value)
                new_args[i] = "cpu"
        if "device" in kwargs and kwargs["device"] is not None:
            explicit = _is_cuda_device(kwargs["device"])
            kwargs["device"] = "cpu"
        if explicit is None:
            if name in ("tensor", "as_tensor"):
                explicit = on_cuda(source) if source is not None else False
            elif source is not None:
                explicit = on_cuda(source) if name == "to" else any(on_cuda(t) for t in _tensors(args, []))
            else:
                explicit = False
        result = func(*new_args, **kwargs)
        if isinstance(result, torch.Tensor):
            if result is source and on_cuda(source) != explicit:
                if on_cuda(source) and not explicit:
                    self._count_sync()
                result = source.clone()
            _mark(result, explicit)
        else:
            _tag_outputs(result, explicit)
        return result


def _caller() -> str:
    """file:line of the innermost multidraft frame (where a sync happens), for the sync report."""
    for frame in reversed(traceback.extract_stack(limit=30)):
        if "/multidraft/" in frame.filename and "/tests/" not in frame.filename:
            return f"{frame.filename.split('/multidraft/')[-1]}:{frame.lineno}"
    return "elsewhere"


@contextlib.contextmanager
def fake_cuda(lm, *others):
    """Put `lm` (and other LMs / modules) on the fake cuda device for the duration of the block."""
    mode = FakeCuda()
    for item in (lm,) + others:
        mode.put_on_cuda(getattr(item, "model", item))
    try:
        with mode:
            yield mode
    finally:
        for item in (lm,) + others:
            module = getattr(item, "model", item)
            for tensor in list(module.parameters()) + list(module.buffers()):
                _mark(tensor, False)

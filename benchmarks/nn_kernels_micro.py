"""The NN kernels (conv, max pool, softmax cross-entropy) beside PyTorch on the
same shapes, forward and forward + backward, on the CPU.

    python benchmarks/nn_kernels_micro.py [--repeats 15] [--json FILE]

towerflow runs its kernels directly (Conv2D, then Conv2DBackpropInput and
Conv2DBackpropFilter; MaxPool then MaxPoolGrad; the fused cross-entropy and
the Mul the graph's gradient adds). PyTorch runs its functional ops and
autograd, with NCHW tensors and with channels-last ones (converted once,
outside the timed region). Every time is the median over ``--repeats`` of
the mean of a batch of calls, in µs; ratio = towerflow's time / the other's.
Writes JSON (default: benchmarks/results/nn_kernels_micro.json).

Importing towerflow keeps freed memory in the process (glibc mallopt, see
``towerflow.backends.numpy_backend.retain_freed_memory``), for both
contenders; ``TOWERFLOW_RETAIN_FREED_MEMORY=0`` measures glibc's defaults.
"""

import argparse
import json
import os
import platform
import statistics
import time
import types

import numpy as np

from towerflow.backends.nn_kernels import build_nn_kernels

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

KERNELS = build_nn_kernels(np)
CASES = {
    "conv3x3 3->32 64x32x32": ("conv", (64, 32, 32, 3), 32),
    "conv3x3 32->64 64x16x16": ("conv", (64, 16, 16, 32), 64),
    "maxpool 2x2/2 64x32x32x32": ("maxpool", (64, 32, 32, 32), None),
    "softmax-CE 128x10": ("xent", (128, 10), None),
}


def time_us(fn, repeats, min_batch_s=0.02, settle_s=0.3):
    """(median, min) over ``repeats`` of the mean time of one call of ``fn``, µs.

    NOTE: OpenBLAS and PyTorch's OpenMP threads spin for a while after each
    call; interleaving the two libraries call by call makes each fight the
    other's spinning threads. So every contender runs in a block of its own,
    after a pause that lets the other's threads fall asleep."""
    time.sleep(settle_s)
    fn()
    start = time.perf_counter()
    fn()
    calls = max(1, int(min_batch_s / max(time.perf_counter() - start, 1e-7)))
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples), min(samples)


def kernel(name, attrs, dtype=np.float32):
    ctx = types.SimpleNamespace(attrs=attrs, output_dtypes=[np.dtype(dtype)] * 5, op=None,
                                resource=lambda key, make: make())
    return KERNELS[name](ctx)


# -- towerflow --------------------------------------------------------------------


def towerflow_conv(x, w, g):
    attrs = {"strides": (1, 1), "padding": "SAME"}
    conv = kernel("Conv2D", attrs)
    grad_input = kernel("Conv2DBackpropInput", attrs)
    grad_filter = kernel("Conv2DBackpropFilter", {"filter_shape": w.shape})

    def forward_backward():
        _, patches = conv(x, w)
        return grad_input(x, w, g), grad_filter(patches, g)
    return (lambda: conv(x, w)), forward_backward


def towerflow_maxpool(x, g):
    attrs = {"ksize": (2, 2), "strides": (2, 2), "padding": "VALID"}
    pool, pool_grad = kernel("MaxPool", attrs), kernel("MaxPoolGrad", attrs)
    return (lambda: pool(x)), (lambda: pool_grad(x, pool(x)[1], g))


def towerflow_xent(logits, labels, g):
    xent = kernel("SoftmaxCrossEntropyWithLogits", {})
    column = g[:, None]

    def forward_backward():
        _, backprop = xent(logits, labels)
        return backprop * column
    return (lambda: xent(logits, labels)), forward_backward


# -- PyTorch -----------------------------------------------------------------------


def nchw(array, channels_last):
    tensor = torch.from_numpy(np.ascontiguousarray(array.transpose(0, 3, 1, 2)))
    return tensor.contiguous(memory_format=torch.channels_last) if channels_last else tensor


def torch_pair(forward, inputs, grad):
    """(forward without autograd, forward + backward)."""
    def plain():
        with torch.no_grad():
            return forward(*inputs)

    def with_backward():
        for tensor in inputs:
            tensor.grad = None
        forward(*inputs).backward(grad)
    return plain, with_backward


def torch_conv(x, w, g, channels_last):
    x_t = nchw(x, channels_last).requires_grad_()
    w_t = nchw(w.transpose(3, 0, 1, 2), channels_last).requires_grad_()   # OHWI -> OIHW
    return torch_pair(lambda a, b: F.conv2d(a, b, padding=1), [x_t, w_t],
                      nchw(g, channels_last))


def torch_maxpool(x, g, channels_last):
    return torch_pair(lambda a: F.max_pool2d(a, 2, 2), [nchw(x, channels_last)
                                                        .requires_grad_()],
                      nchw(g, channels_last))


def torch_xent(logits, labels, g):
    labels_t = torch.from_numpy(labels)
    return torch_pair(lambda z: F.cross_entropy(z, labels_t, reduction="none"),
                      [torch.from_numpy(logits).requires_grad_()], torch.from_numpy(g))


# -- the table -----------------------------------------------------------------------


def case_inputs(kind, shape, out_channels, rng):
    def normal(*dims):
        return rng.standard_normal(dims, dtype=np.float32)
    if kind == "conv":
        n, h, w, c = shape
        return normal(*shape), normal(3, 3, c, out_channels) * 0.1, normal(n, h, w, out_channels)
    if kind == "maxpool":
        n, h, w, c = shape
        return normal(*shape), normal(n, h // 2, w // 2, c)
    labels = rng.random(shape, dtype=np.float32)
    return normal(*shape), labels / labels.sum(axis=1, keepdims=True), normal(shape[0])


def contenders(kind, inputs):
    """{name: (forward, forward + backward)}."""
    makers = {"conv": (towerflow_conv, torch_conv), "maxpool": (towerflow_maxpool, torch_maxpool),
              "xent": (towerflow_xent, None)}
    ours, theirs = makers[kind]
    found = {"towerflow": ours(*inputs)}
    if torch is not None:
        if kind == "xent":
            found["torch"] = torch_xent(*inputs)
        else:
            found["torch NCHW"] = theirs(*inputs, channels_last=False)
            found["torch NHWC"] = theirs(*inputs, channels_last=True)
    return found


def measure(repeats):
    rng = np.random.default_rng(0)
    results = {}
    for case, (kind, shape, out_channels) in CASES.items():
        results[case] = {}
        for name, (forward, both) in contenders(kind, case_inputs(kind, shape, out_channels,
                                                                   rng)).items():
            (fwd, fwd_min), (fwd_bwd, fwd_bwd_min) = time_us(forward, repeats), \
                time_us(both, repeats)
            results[case][name] = {"forward_us": fwd, "forward_backward_us": fwd_bwd,
                                   "forward_min_us": fwd_min,
                                   "forward_backward_min_us": fwd_bwd_min}
    return results


def print_table(results):
    """One line per case and contender; ratio = towerflow's time / this contender's."""
    print(f"{'case':27s}{'contender':12s}{'fwd µs':>10s}{'f+b µs':>10s}"
          f"{'ratio fwd':>11s}{'ratio f+b':>11s}")
    for case, row in results.items():
        ours = row["towerflow"]
        for name, times in row.items():
            print(f"{case if name == 'towerflow' else '':27s}{name:12s}"
                  f"{times['forward_us']:10.0f}{times['forward_backward_us']:10.0f}"
                  f"{ours['forward_us'] / times['forward_us']:11.2f}"
                  f"{ours['forward_backward_us'] / times['forward_backward_us']:11.2f}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=os.path.join(
        os.path.dirname(__file__), "results", "nn_kernels_micro.json"))
    args = parser.parse_args()
    retained = os.environ.get("TOWERFLOW_RETAIN_FREED_MEMORY", "1") != "0"
    if torch is not None:
        torch.set_num_threads(os.cpu_count())
    results = measure(args.repeats)
    print_table(results)
    meta = {"numpy": np.__version__, "torch": torch.__version__ if torch else None,
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "load_average": os.getloadavg(), "repeats": args.repeats, "dtype": "float32",
            "retain_memory": retained}
    os.makedirs(os.path.dirname(args.json), exist_ok=True)
    with open(args.json, "w") as out:
        json.dump({"meta": meta, "results": results}, out, indent=2)
    print(f"load average {os.getloadavg()[0]:.2f}; wrote {args.json}")


if __name__ == "__main__":
    main()

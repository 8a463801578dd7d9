#!/usr/bin/env python3
"""ONNX Runtime baseline for the bench (see bench/src/ort.rs and bench/README.md).

The bench starts this once and drives it over stdin/stdout, one command per line, one
answer per line (`ok ...` or `err <message>`):

  load <json>   build the ONNX graph of one workload and an ORT session on the CPU
                ({"op": "softmax" | "layer_norm" | "rms_norm" | "row_min" | "max_pool" |
                "matmul" | "einsum" | "conv", "inputs": [[path, shape], ...], "output": [path, shape],
                "threads": 2, "constant": [input numbers made initializers], ...op
                attributes});
                inputs are raw little-endian f32 files; answers `ok <ort version>`
  run           one call; writes the output (raw f32) to the output path; `ok`
  time <n>      n calls, each timed on its own; answers `ok <median seconds per call>`
  quit

Calls go through an IOBinding with the input and output bound once to preallocated numpy
arrays, so a timed call is ORT's run plus the Python call around it (a few microseconds),
without allocation or copies.
"""
import json
import sys
import time


def reply(text):
    sys.stdout.write(text.replace("\n", " ") + "\n")
    sys.stdout.flush()


def graph(spec, arrays):
    """The ONNX model of `spec` and the names of its inputs that stay graph inputs.

    `arrays` are the kernel's inputs in parameter order; those listed in
    `spec["constant"]` become initializers (a layer's weights: ORT may prepack them).
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    op = spec["op"]
    shapes = [list(a.shape) for a in arrays]
    out_shape = spec["output"][1]
    if op in ("softmax", "layer_norm", "rms_norm", "row_min", "max_pool"):
        names = ["x", "scale", "bias"][: len(shapes)]
    else:
        names = ["a", "b"][: len(shapes)]
    constant = set(spec.get("constant", []))
    inputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
        for i, (n, s) in enumerate(zip(names, shapes))
        if i not in constant
    ]
    initializers = [numpy_helper.from_array(arrays[i], names[i]) for i in sorted(constant)]
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, out_shape)
    opset = 13
    if op == "softmax":
        node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    elif op == "layer_norm":
        node = helper.make_node(
            "LayerNormalization", ["x", "scale", "bias"], ["y"], axis=-1, epsilon=spec["epsilon"]
        )
        opset = 17
    elif op == "rms_norm":
        # ORT's own fused RMS norm (a contrib op in the default domain); its graph optimizer
        # turns the ONNX RMSNormalization pattern into this same kernel.
        node = helper.make_node(
            "SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=spec["epsilon"]
        )
        opset = 17
    elif op == "row_min":
        node = helper.make_node("ReduceMin", ["x"], ["y"], axes=[-1], keepdims=0)
    elif op == "max_pool":
        k, s, p = spec["kernel"], spec["stride"], spec["pad"]
        node = helper.make_node(
            "MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[p, p, p, p]
        )
    elif op == "matmul":
        node = helper.make_node("MatMul", ["a", "b"], ["y"])
    elif op == "einsum":
        node = helper.make_node("Einsum", ["a", "b"], ["y"], equation=spec["equation"])
    elif op == "conv":
        (r, s), st, p = spec["kernel"], spec["stride"], spec["pad"]
        node = helper.make_node(
            "Conv", ["a", "b"], ["y"], kernel_shape=[r, s], strides=[st, st], pads=[p, p, p, p]
        )
    else:
        raise ValueError(f"unknown op {op}")
    g = helper.make_graph([node], op, inputs, [output], initializer=initializers)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    if op != "rms_norm":  # the checker knows only ONNX's own operators
        onnx.checker.check_model(model)
    return model, [n for i, n in enumerate(names) if i not in constant]


class Session:
    def __init__(self, spec):
        import numpy as np
        import onnxruntime as ort

        arrays = [
            np.fromfile(path, dtype=np.float32).reshape(shape) for path, shape in spec["inputs"]
        ]
        model, names = graph(spec, arrays)
        so = ort.SessionOptions()
        so.intra_op_num_threads = int(spec.get("threads", 2))
        so.inter_op_num_threads = 1
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.sess = ort.InferenceSession(
            model.SerializeToString(), so, providers=["CPUExecutionProvider"]
        )
        constant = set(spec.get("constant", []))
        self.inputs = [a for i, a in enumerate(arrays) if i not in constant]
        self.out_path, out_shape = spec["output"]
        self.out = np.empty(out_shape, dtype=np.float32)
        self.io = self.sess.io_binding()
        for n, a in zip(names, self.inputs):
            self.io.bind_cpu_input(n, a)
        self.io.bind_output("y", "cpu", 0, np.float32, list(out_shape), self.out.ctypes.data)
        self.version = ort.__version__

    def call(self):
        self.sess.run_with_iobinding(self.io)


def main():
    session = None
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        try:
            if cmd == "load":
                session = None
                session = Session(json.loads(arg))
                session.call()
                reply(f"ok {session.version}")
            elif cmd == "run":
                session.call()
                session.out.tofile(session.out_path)
                reply("ok")
            elif cmd == "time":
                n = max(1, int(arg))
                times = []
                for _ in range(n):
                    t = time.perf_counter()
                    session.call()
                    times.append(time.perf_counter() - t)
                times.sort()
                m = times[n // 2] if n % 2 else 0.5 * (times[n // 2 - 1] + times[n // 2])
                reply(f"ok {m:.9e}")
            elif cmd == "quit":
                return
            else:
                reply(f"err unknown command {cmd!r}")
        except Exception as e:  # every failure is an answer, never a dead pipe
            reply(f"err {type(e).__name__}: {e}")


if __name__ == "__main__":
    try:
        import numpy  # noqa: F401
        import onnx  # noqa: F401
        import onnxruntime  # noqa: F401
    except ImportError as e:
        reply(f"err {e} (pip install onnxruntime onnx numpy)")
        sys.exit(0)
    reply("ready")
    main()

"""TensorFlow timing backend: Keras layers in a ``tf.function``, timed as Justus et al. (2018).

The layer step runs in a ``tf.function`` (forward only, or a training step: forward +
backward + ``optimizer.apply``), ``warmup`` untimed calls, then ``reps`` repetitions, each the
mean of ``runs`` calls (see :class:`~layerwise.backends.base.TimingPlan`). A training step
starts the backward pass from a random upstream gradient of the output's shape
(``backward="upstream"``) and also differentiates the layer input (``grad_input=True``);
``backward="mse"`` with ``grad_input=False`` reproduces Justus et al.'s MSE-loss timing.
fp32 only (TensorFlow's own TF32 default applies on Ampere and later GPUs).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from fleet.quiet_tf import quiet_import
from layerwise.backends.base import (
    Backend,
    BackendError,
    TimingPlan,
    adapt_runs,
    check_precision,
    summarise,
)
from layerwise.kinds import get_kind as get_layer

# --------------------------------------------------------------------------- optimizers

OPTIMIZERS: dict[str, Callable[[Any], Any]] = {
    "sgd": lambda keras: keras.optimizers.SGD(learning_rate=0.01),
    "momentum": lambda keras: keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
    "adadelta": lambda keras: keras.optimizers.Adadelta(),
    "adagrad": lambda keras: keras.optimizers.Adagrad(),
    "adam": lambda keras: keras.optimizers.Adam(),
    "rmsprop": lambda keras: keras.optimizers.RMSprop(),
}

def _make_step(tf: Any, keras: Any, row: dict, grad_input: bool,
               backward: str = "upstream") -> tuple[Callable, tuple]:
    """Build the layer and return (tf.function step, its arguments)."""
    spec = get_layer(str(row["layer"]))
    layer = spec.build(keras, row)
    in_shape = spec.input_shape(row)
    seed = int(row.get("index", 0) or 0)
    inputs = [
        tf.random.stateless_normal(in_shape, seed=[seed, j]) for j in range(spec.n_inputs)
    ]
    layer_input = inputs if spec.n_inputs > 1 else inputs[0]
    out = layer(layer_input)  # builds the weights eagerly
    optimizer_name = str(row.get("optimizer", "none"))
    if optimizer_name == "none":

        @tf.function
        def forward(x: Any) -> Any:
            return layer(x, training=False)

        return forward, (layer_input,)

    if optimizer_name not in OPTIMIZERS:
        raise BackendError(f"unknown optimizer {optimizer_name!r}")
    optimizer = OPTIMIZERS[optimizer_name](keras)
    variables = list(layer.trainable_variables)
    if variables:
        optimizer.build(variables)
    target = tf.random.stateless_normal(tuple(out.shape), seed=[seed, 99])
    watch_input = grad_input or not variables
    upstream = backward == "upstream"

    @tf.function
    def train_step(x: Any, y: Any) -> Any:
        with tf.GradientTape() as tape:
            if watch_input:
                tape.watch(x)
            pred = layer(x, training=True)
            if not upstream:
                loss = tf.reduce_mean(tf.square(pred - y))
        sources = list(variables) + ([x] if watch_input else [])
        if upstream:  # y is the gradient arriving from the next layer
            grads = tape.gradient(pred, sources, output_gradients=y)
        else:
            grads = tape.gradient(loss, sources)
        if variables:
            optimizer.apply(grads[: len(variables)], variables)
        # return the output and the input gradient so that neither is pruned from the graph
        return (pred, *tf.nest.flatten(grads[len(variables):]))

    return train_step, (layer_input, target)


def _sync(result: Any) -> None:
    """Wait for the device: fetch one element of the last result to the host."""
    tensor = result[0] if isinstance(result, (list, tuple)) else result
    rank = len(tensor.shape)
    (tensor[(0,) * rank] if rank else tensor).numpy()


def time_config(row: dict, device: str = "cpu", plan: TimingPlan | None = None) -> dict:
    """Time one configuration on ``device``; returns time_ms_* plus ``runs``.

    Raises for invalid configurations (``InvalidLayerConfig``) and TensorFlow errors (OOM…);
    the campaign turns those into failed rows.
    """
    keras = quiet_import("keras")
    tf = quiet_import("tensorflow")

    from layerwise.local_device import tf_device_string

    plan = plan or TimingPlan()
    check_precision(BACKEND, row.get("precision", 32))
    get_layer(str(row["layer"])).validate(row)
    with tf.device(tf_device_string(device)):
        step, args = _make_step(tf, keras, row, plan.grad_input, plan.backward)
        result = step(*args)  # traces
        for _ in range(max(0, plan.warmup - 1)):
            result = step(*args)
        _sync(result)
        runs = adapt_runs(plan, lambda: step(*args), _sync)
        times = []
        for _ in range(plan.reps):
            start = time.perf_counter()
            for _ in range(runs):
                result = step(*args)
            _sync(result)
            times.append((time.perf_counter() - start) / runs * 1000.0)
    return summarise(times, runs)


def detect(device: str) -> dict:
    """``device``, ``gpu``, ``hw_*`` and ``sw_*`` columns of a TensorFlow device."""
    from layerwise.local_device import detect_device

    return detect_device(device)


BACKEND = Backend(name="tensorflow", framework="tensorflow", time_config=time_config,
                  detect=detect, precisions=("fp32",), module="tensorflow")

"""Multilayer perceptrons on log time relative to the roofline estimate.

* :class:`MlpEstimator` - the Justus et al. (2018) design: ReLU hidden layers, dropout after the
  last hidden layer only, L2 weight decay, log-time target, Adam with a step-decayed learning
  rate (halved every ``decay_every`` epochs).
* :class:`ResMlpEstimator` - a residual MLP in the spirit of ResPerfNet (Wang et al. 2021):
  an input projection followed by blocks ``h + Dense(ReLU(Dense(h)))``.

TensorFlow/Keras is imported only inside ``fit``. The trained weights are exported to numpy
and prediction runs in numpy, so a saved model loads and predicts without TensorFlow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pandas as pd
from typing_extensions import override

from fleet.quiet_tf import quiet_import
from layerwise.estimators.base import OFFSET, Estimator, check_fitted


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0.0)


@dataclass
class MlpEstimator(Estimator):
    """Justus-style MLP (see module docstring). ``max_rows`` subsamples large training sets."""

    name: ClassVar[str] = "mlp"
    needs_tensorflow: ClassVar[bool] = True
    residual: ClassVar[bool] = False

    hidden: tuple[int, ...] = (256, 256, 256, 256)
    dropout: float = 0.1
    l2: float = 1e-6
    learning_rate: float = 1e-3
    decay_every: int = 10
    epochs: int = 40
    batch_size: int = 512
    max_rows: int | None = None
    random_state: int = 0
    threads: int | None = None


    # ---------------------------------------------------------------- preprocessing
    def _prepare(self, X: pd.DataFrame) -> np.ndarray:
        matrix = X[self.feature_names_].to_numpy(np.float64, copy=True)
        matrix[:, self.log_cols_] = np.log1p(np.maximum(matrix[:, self.log_cols_], 0.0))
        return ((matrix - self.mean_) / self.scale_).astype(np.float32)

    def _learn_scaling(self, X: pd.DataFrame) -> None:
        self.feature_names_ = list(X.columns)
        matrix = X.to_numpy(np.float64, copy=True)
        self.log_cols_ = np.flatnonzero((matrix.min(axis=0) >= 0) & (matrix.max(axis=0) > 32))
        matrix[:, self.log_cols_] = np.log1p(matrix[:, self.log_cols_])
        self.mean_ = matrix.mean(axis=0)
        scale = matrix.std(axis=0)
        self.scale_ = np.where(scale > 1e-9, scale, 1.0)

    # ---------------------------------------------------------------- keras model
    def _build(self, n_inputs: int) -> Any:
        keras = quiet_import("keras")
        from keras import layers, regularizers

        reg = regularizers.l2(self.l2) if self.l2 > 0 else None
        inputs = keras.Input((n_inputs,))
        h = inputs
        if self.residual:
            width = self.hidden[0]
            h = layers.Dense(width, activation="relu", kernel_regularizer=reg, name="fc0")(h)
            for i, _ in enumerate(self.hidden[1:], start=1):
                z = layers.Dense(width, activation="relu", kernel_regularizer=reg,
                                 name=f"fc{2 * i - 1}")(h)
                z = layers.Dense(width, kernel_regularizer=reg, name=f"fc{2 * i}")(z)
                h = layers.Activation("relu")(layers.Add()([h, z]))
        else:
            for i, width in enumerate(self.hidden):
                h = layers.Dense(width, activation="relu", kernel_regularizer=reg, name=f"fc{i}")(h)
        if self.dropout > 0:
            h = layers.Dropout(self.dropout)(h)
        out = layers.Dense(1, name="out")(h)
        return keras.Model(inputs, out)

    @override
    def fit(self, X: pd.DataFrame, y_log: np.ndarray, gpu: np.ndarray) -> MlpEstimator:
        keras = quiet_import("keras")

        if self.threads:
            tf = quiet_import("tensorflow")

            try:
                tf.config.threading.set_intra_op_parallelism_threads(self.threads)
                tf.config.threading.set_inter_op_parallelism_threads(self.threads)
            except RuntimeError:  # already initialised in this process
                pass
        rng = np.random.default_rng(self.random_state)
        y = np.asarray(y_log, dtype=np.float64) - X[OFFSET].to_numpy()
        if self.max_rows is not None and len(X) > self.max_rows:
            keep = np.sort(rng.choice(len(X), self.max_rows, replace=False))
            X, y = X.iloc[keep], y[keep]
        self._learn_scaling(X)
        self.y_mean_, self.y_scale_ = float(y.mean()), float(max(y.std(), 1e-6))
        inputs = self._prepare(X)
        target = ((y - self.y_mean_) / self.y_scale_).astype(np.float32)

        keras.utils.set_random_seed(self.random_state)
        model = self._build(inputs.shape[1])
        steps = max(1, int(np.ceil(len(inputs) / self.batch_size)))
        schedule = keras.optimizers.schedules.ExponentialDecay(
            self.learning_rate, decay_steps=steps * self.decay_every, decay_rate=0.5,
            staircase=True,
        )
        model.compile(optimizer=keras.optimizers.Adam(schedule), loss="mse")
        model.fit(inputs, target, batch_size=self.batch_size, epochs=self.epochs, verbose=0,
                  shuffle=True)
        names = sorted((layer.name for layer in model.layers if layer.name.startswith("fc")),
                       key=lambda n: int(n[2:]))
        weights: list[np.ndarray] = []
        for name in [*names, "out"]:
            kernel, bias = model.get_layer(name).get_weights()
            weights += [kernel.astype(np.float32), bias.astype(np.float32)]
        self.weights_ = weights
        return self

    # ---------------------------------------------------------------- numpy inference
    def _forward(self, x: np.ndarray) -> np.ndarray:
        w = self.weights_
        pairs = [(w[i], w[i + 1]) for i in range(0, len(w), 2)]
        *hidden, (w_out, b_out) = pairs
        if self.residual:
            h = _relu(x @ hidden[0][0] + hidden[0][1])
            for (w1, b1), (w2, b2) in zip(hidden[1::2], hidden[2::2], strict=True):
                h = _relu(h + _relu(h @ w1 + b1) @ w2 + b2)
        else:
            h = x
            for kernel, bias in hidden:
                h = _relu(h @ kernel + bias)
        return (h @ w_out + b_out)[:, 0]

    @override
    def predict(self, X: pd.DataFrame, gpu: np.ndarray) -> np.ndarray:
        check_fitted(self, "weights_")
        z = self._forward(self._prepare(X)).astype(np.float64)
        return z * self.y_scale_ + self.y_mean_ + X[OFFSET].to_numpy()

    @override
    def state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        check_fitted(self, "weights_")
        meta = {
            "feature_names": self.feature_names_,
            "y_mean": self.y_mean_,
            "y_scale": self.y_scale_,
            "n_weights": len(self.weights_),
        }
        arrays = {f"w{i}": w for i, w in enumerate(self.weights_)}
        arrays.update(log_cols=self.log_cols_, mean=self.mean_, scale=self.scale_)
        return meta, arrays

    def _load_state(self, meta: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        self.feature_names_ = list(meta["feature_names"])
        self.y_mean_, self.y_scale_ = float(meta["y_mean"]), float(meta["y_scale"])
        self.weights_ = [arrays[f"w{i}"] for i in range(int(meta["n_weights"]))]
        self.log_cols_ = arrays["log_cols"].astype(np.int64)
        self.mean_, self.scale_ = arrays["mean"], arrays["scale"]


@dataclass
class ResMlpEstimator(MlpEstimator):
    """Residual MLP (ResPerfNet spirit): ``hidden[0]`` is the width, one block per extra entry."""

    name: ClassVar[str] = "resmlp"
    residual: ClassVar[bool] = True

    hidden: tuple[int, ...] = (256, 256, 256, 256)

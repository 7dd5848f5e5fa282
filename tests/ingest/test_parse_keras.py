"""Keras console-output parser on real captured ``fit`` output, and a live tiny training run
checked against the jobcast JSON-lines logger attached to the same ``fit``."""

from __future__ import annotations

import contextlib
import io
import math

import pytest
from paths import DATA

from ingest.events import ParseContext, ParseError
from ingest.parsers import caffe, jsonl, keras_stdout, tf_cnn

KERAS = DATA / "keras"
CTX = ParseContext(source="test")
# tests/data/keras/make_samples.py: 1280 train / 256 validation samples, batch 32, 3 epochs
STEPS, VAL_STEPS, EPOCHS = math.ceil(1280 / 32), math.ceil(256 / 32), 3


def raw(verbose: int) -> str:
    with open(KERAS / f"fit_verbose{verbose}.txt", newline="") as f:  # keep the \r
        return f.read()


def train_and_test(runs):
    segments = [s for run in runs for s in run.segments]
    return ([s for s in segments if s.phase == "train"], [s for s in segments if s.phase == "test"])


@pytest.mark.parametrize("verbose", [1, 2])
@pytest.mark.parametrize("split", ["newlines", "splitlines"])
def test_real_samples(verbose, split):
    text = raw(verbose)
    assert ("\r" in text) == (verbose == 1)
    lines = text.split("\n") if split == "newlines" else text.splitlines()
    assert keras_stdout.sniff(lines[:200])
    (run,) = keras_stdout.parse(lines, CTX)
    train, test = train_and_test([run])
    assert [s.epoch_start for s in train] == [1.0, 2.0, 3.0]
    assert all(s.iterations == STEPS for s in train)
    assert [s.iterations for s in test] == [VAL_STEPS]  # the model.evaluate after fit
    assert run.stack == "Keras 3"
    assert run.meta["validation_in_train_time"]
    assert run.meta["needs"] == ["network", "batch_size", "deployment"]
    assert run.meta["keras_verbose"] == [verbose]
    assert run.network is None and run.deployment is None and run.start_time is None
    for segment in run.segments:
        assert segment.points[-1] == (segment.iterations, segment.seconds)
        for (i0, s0), (i1, s1) in zip(segment.points, segment.points[1:], strict=False):
            assert i1 > i0 and s1 >= s0
    if verbose == 1:  # the redrawn bar gives intermediate points
        assert all(len(s.points) >= 2 for s in train)


def test_stdout_and_jsonl_of_the_same_fit_agree():
    for verbose in (1, 2):
        stdout_runs = keras_stdout.parse(raw(verbose).splitlines(), CTX)
        jsonl_runs = jsonl.parse((KERAS / f"fit_verbose{verbose}.jsonl").read_text()
                                 .splitlines(), CTX)
        stdout_train, _ = train_and_test(stdout_runs)
        jsonl_train, jsonl_test = train_and_test(jsonl_runs[:1])
        assert [s.iterations for s in stdout_train] == [s.iterations for s in jsonl_train]
        # the console epoch time includes validation: it is at least the train phase alone
        for console, train, test in zip(stdout_train, jsonl_train, jsonl_test, strict=True):
            assert console.seconds >= train.seconds * 0.5
            assert console.seconds <= train.seconds + test.seconds + 1.0


def test_ctx_batch_size_and_overrides_reduce_needs():
    ctx = ParseContext(network="tinycnn", batch_size=32, deployment="1x cpu")
    (run,) = keras_stdout.parse(raw(2).splitlines(), ctx)
    assert run.batch_size == 32 and "needs" not in run.meta
    assert all(s.batch_size == 32 for s in run.segments)


def test_sniff_rejects_other_formats():
    lines = raw(1).splitlines()
    assert not caffe.sniff(lines[:200]) and not tf_cnn.sniff(lines[:200])
    assert not jsonl.sniff(lines[:200])
    assert not keras_stdout.sniff((KERAS / "fit_verbose1.jsonl").read_text().splitlines())


def test_killed_mid_epoch_keeps_finished_epochs():
    text = raw(1)
    lines = text.split("\n")
    third = next(i for i, line in enumerate(lines) if line.startswith("Epoch 3/"))
    bar = lines[third + 1]
    cut_bar = "\r".join(bar.split("\r")[:2])  # only the epoch's first record, 1/K
    assert f"1/{STEPS}" in cut_bar and f"{STEPS}/{STEPS}" not in cut_bar
    (run,) = keras_stdout.parse([*lines[: third + 1], cut_bar], CTX)
    train, _ = train_and_test([run])
    assert [s.epoch_start for s in train] == [1.0, 2.0]
    assert run.meta["truncated"]


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda line: "Epoch 3/", "epoch header"),
        (lambda line: "Epoch x/3", "epoch header"),
        (lambda line: f"{STEPS}/{STEPS} ━━━━━━━━━━", "without a time"),
        (lambda line: line.replace("loss: ", "loss: 1.x", 1), "non-numeric"),
    ],
)
def test_cut_or_garbled_line_is_an_error_with_its_line(edit, reason):
    lines = raw(2).splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("Epoch 3/"))
    if reason != "epoch header":
        index += 1
    changed = [*lines[:index], edit(lines[index])]
    with pytest.raises(ParseError, match=reason) as err:
        keras_stdout.parse(changed, CTX)
    assert err.value.line == index + 1


def test_keras2_layouts():
    """Keras 2 progress lines, written here in the layout tf.keras 2.x printed."""
    verbose1 = [
        "Epoch 1/2",
        " 1/40 [..............................] - ETA: 23s - loss: 1.4962\b\b\b\r"
        "12/40 [=====>........................] - ETA: 0s - loss: 1.4000\b\b\b\r"
        "40/40 [==============================] - 1s 6ms/step - loss: 1.4035 - val_loss: 1.3982",
        "Epoch 2/2",
        "40/40 [==============================] - 0s 3ms/step - loss: 1.3900 - val_loss: 1.3900",
    ]
    verbose2 = [
        "Epoch 1/2",
        "40/40 - 1s - loss: 1.4035 - val_loss: 1.3982 - 1s/epoch - 24ms/step",
        "Epoch 2/2",
        "40/40 - 0s - loss: 1.3900 - val_loss: 1.3900 - 120ms/epoch - 3ms/step",
    ]
    for lines in (verbose1, verbose2):
        (run,) = keras_stdout.parse(lines, CTX)
        assert run.stack == "Keras 2"
        assert [s.iterations for s in run.segments] == [40, 40]
        first, second = run.segments
        assert 0.5 <= first.seconds <= 1.5  # printed "1s" elapsed, whole seconds
        assert second.seconds < first.seconds
    assert keras_stdout.parse(verbose2, CTX)[0].segments[1].seconds == pytest.approx(0.12)


def test_noise_lines_are_tolerated():
    lines = raw(2).splitlines()
    index = next(i for i, line in enumerate(lines) if line.startswith("Epoch 2/"))
    noise = ["Epoch 1: val_loss improved from inf to 1.39820, saving model to m.keras",
             "Epoch time: 3s", "3/4 - loading shards", "WARNING:absl:You are saving"]
    (clean,) = keras_stdout.parse(lines, CTX)
    (noisy,) = keras_stdout.parse([*lines[:index], *noise, *lines[index:]], CTX)
    assert [(s.phase, s.iterations) for s in noisy.segments] == \
        [(s.phase, s.iterations) for s in clean.segments]


def test_no_epochs_is_an_error():
    lines = raw(2).splitlines()
    with pytest.raises(ParseError, match="no training progress"):
        keras_stdout.parse([line for line in lines if not line.startswith("Epoch")][:6], CTX)


# --- a live tiny training run -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("verbose", [2, 1])
def test_live_fit_jsonl_and_stdout_agree(tmp_path, verbose):
    keras = pytest.importorskip("keras")
    import numpy as np

    from jobcast.instrument.jsonl import JobcastLogger

    n_train, n_valid, batch = 200, 50, 32
    rng = np.random.default_rng(verbose)
    x = rng.random((n_train + n_valid, 6, 6, 1), dtype=np.float32)
    y = rng.integers(0, 3, n_train + n_valid)
    model = keras.Sequential([
        keras.Input((6, 6, 1)),
        keras.layers.Conv2D(2, 3, activation="relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(3, activation="softmax"),
    ])
    model.compile("sgd", "sparse_categorical_crossentropy")
    path = tmp_path / "fit.jsonl"
    logger = JobcastLogger(path, every_n_steps=2, network="tiny", deployment="1x cpu",
                           batch_size=batch)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        model.fit(x[:n_train], y[:n_train], batch_size=batch, epochs=2, verbose=verbose,
                  validation_data=(x[n_train:], y[n_train:]), callbacks=[logger])

    (run,) = jsonl.parse(path.read_text().splitlines(), CTX)
    train, test = train_and_test([run])
    assert len(train) == 2 and len(test) == 2
    assert all(s.iterations == math.ceil(n_train / batch) for s in train)
    assert all(s.iterations == math.ceil(n_valid / batch) for s in test)
    assert [s.epoch_start for s in run.segments] == [1.0, 1.0, 2.0, 2.0]
    assert run.network == "tiny" and run.batch_size == batch
    assert run.deployment.key == "cpu-x1"
    assert run.meta["status"] == "completed"
    assert len(train[0].points) == math.ceil(n_train / batch) // 2 + 1

    text = out.getvalue()
    assert ("\r" in text) == (verbose == 1)
    (console,) = keras_stdout.parse(text.split("\n"), CTX)
    console_train, _ = train_and_test([console])
    assert [s.epoch_start for s in console_train] == [1.0, 2.0]
    assert [s.iterations for s in console_train] == [s.iterations for s in train]

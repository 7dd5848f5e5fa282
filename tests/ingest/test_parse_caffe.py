"""Caffe glog parser on real logs (tests/data/caffe, shared data) and small built logs."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from paths import DATA, SHARED_LOGS

from ingest.events import ParseContext, ParseError
from ingest.parsers import caffe, jsonl, keras_stdout, tf_cnn

CAFFE = DATA / "caffe"
SHARED = SHARED_LOGS
RESNET_2016 = "ethanhe42_resnet-20_logs_resnet-20__2016-08-14_00-25-56.log"
RESNET_2018 = "ethanhe42_resnet-20_logs_resnet-20__2018-10-19_01-43-18.log"
CAFFENET_KILLED = "ducha_caffenet128_lsuv_bs128_lr002.log"
CTX = ParseContext(source="test")


def read(name: str) -> list[str]:
    return (CAFFE / name).read_text().splitlines()


def glog_time(line: str, year: int) -> float:
    """Unix time of a raw glog line, read independently of the parser."""
    m = re.match(r"^[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d{6})", line)
    assert m, line
    month, day, hour, minute, second, micro = map(int, m.groups())
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC).timestamp()


def lines_with(lines: list[str], text: str) -> list[int]:
    """0-based indexes of the lines containing ``text``."""
    return [i for i, line in enumerate(lines) if text in line]


def check_points(segment) -> None:
    points = segment.points
    assert points, segment
    assert points[-1] == pytest.approx((segment.iterations, segment.seconds))
    for (i0, s0), (i1, s1) in zip(points, points[1:], strict=False):
        assert i1 >= i0 and s1 >= s0


# --- real samples -------------------------------------------------------------


def test_sniff_accepts_caffe_and_rejects_the_other_formats():
    for name in (RESNET_2016, RESNET_2018, CAFFENET_KILLED):
        assert caffe.sniff(read(name)[:200])
    others = [DATA / "tf_cnn" / "lambda_7742-8xA100_real_fp16_resnet50-448.txt",
              *sorted((DATA / "keras").glob("fit_*"))]
    for path in others:
        assert not caffe.sniff(path.read_text().splitlines()[:200]), path
    for name in (RESNET_2016, CAFFENET_KILLED):
        head = read(name)[:200]
        assert not tf_cnn.sniff(head) and not keras_stdout.sniff(head) and not jsonl.sniff(head)


def test_resnet20_multi_gpu_old_iteration_format():
    lines = read(RESNET_2016)
    (run,) = caffe.parse(lines, CTX)
    assert run.network == "resnet3-cifar10"  # the prototxt's own name
    assert run.stack == "Caffe"
    assert run.deployment.accelerator == "GeForce GTX TITAN X"
    assert run.deployment.per_node == 4
    assert run.meta["batch_per_device"] == 128
    assert run.batch_size == 4 * 128
    assert not run.meta.get("truncated")
    assert "2016-08-14" in run.meta["year_source"]

    testing = lines_with(lines, "Testing net (#0)")
    outputs = lines_with(lines, "Test net output")
    tests = [s for s in run.segments if s.phase == "test"]
    train = [s for s in run.segments if s.phase == "train"]
    assert len(tests) == len(testing) == 65
    assert len(train) == len(testing) - 1
    assert [s.phase for s in run.segments[:4]] == ["test", "train", "test", "train"]
    assert all(s.iterations == 100 and s.batch_size == 128 for s in tests)  # test_iter
    assert all(s.iterations == 1000 for s in train)  # test_interval
    assert sum(s.iterations for s in train) == run.meta["solver_max_iter"]
    assert all(s.batch_size == 512 for s in train)

    solving = lines_with(lines, "] Solving ")[0]
    assert run.start_time == glog_time(lines[solving], 2016)
    assert run.segments[0].start_time == glog_time(lines[testing[0]], 2016)
    last_end = run.segments[-1].start_time + run.segments[-1].seconds
    assert last_end == pytest.approx(glog_time(lines[outputs[-1]], 2016))
    total = sum(s.seconds for s in run.segments)
    assert total == pytest.approx(last_end - run.segments[0].start_time, abs=1e-3)
    for segment in run.segments:
        check_points(segment)
    # train points: one per display line (display 100, test interval 1000)
    assert len(train[1].points) == 11
    assert train[0].iteration_start == 0 and train[-1].iteration_end == 63999


def test_resnet20_single_gpu_rate_iteration_format():
    lines = read(RESNET_2018)
    (run,) = caffe.parse(lines, CTX)
    assert run.deployment.accelerator == "GeForce GTX 1080 Ti"
    assert run.deployment.per_node == 1
    assert run.deployment.key == "nvidia-gtx-1080-ti-x1"
    assert run.batch_size == 128 and run.meta["test_batch_size"] == 100
    rate_lines = [line for line in lines if re.search(r"Iteration \d+ \(.* iter/s", line)]
    assert len(rate_lines) > 600
    train = [s for s in run.segments if s.phase == "train"]
    assert len(train) == 64
    display_marks = sum(len(s.points) - 1 for s in train)
    # every display line but the final "Iteration 64000, loss" is a point before a segment end
    assert display_marks == len(rate_lines)
    # the train segments' speed agrees with Caffe's own "x iter/s" figures
    rates = sorted(float(re.search(r"\(([\d.]+) iter/s", line)[1]) for line in rate_lines)
    median_rate = rates[len(rates) // 2]
    segment_rate = sum(s.iterations for s in train[1:]) / sum(s.seconds for s in train[1:])
    assert segment_rate == pytest.approx(median_rate, rel=0.05)
    last_glog = [line for line in lines if re.match(r"^I\d{4} ", line)][-1]
    assert run.segments[-1].start_time + run.segments[-1].seconds <= glog_time(last_glog, 2018)


def test_killed_caffenet_keeps_complete_segments_and_marks_truncation():
    lines = read(CAFFENET_KILLED)
    (run,) = caffe.parse(lines, CTX)
    assert run.network == "caffenet"
    assert run.deployment is None and run.meta["needs"] == ["deployment"]
    assert run.meta["devices"] == 1
    assert run.meta["truncated"] and run.meta["last_segment_partial"]
    assert run.meta["year_source"].startswith("line")  # from '*** Aborted at <unix>'
    assert datetime.fromtimestamp(run.start_time, tz=UTC).year == 2016
    test, train = run.segments
    assert test.phase == "test" and test.iterations == 1000 and test.batch_size == 50
    assert train.phase == "train" and train.batch_size == 128
    last_display = lines_with(lines, "solver.cpp:237] Iteration")[-1]
    assert train.iterations == int(re.search(r"Iteration (\d+)", lines[last_display])[1])
    assert train.start_time + train.seconds == pytest.approx(glog_time(lines[last_display], 2016))
    check_points(train)


def test_two_runs_in_one_file_are_split():
    first, second = read(CAFFENET_KILLED), read(RESNET_2016)
    runs = caffe.parse(first + second, CTX)
    assert len(runs) == 2
    assert runs[0].network == "caffenet" and runs[0].meta["truncated"]
    assert runs[1].network == "resnet3-cifar10" and not runs[1].meta.get("truncated")
    assert runs[0].last_line <= len(first) < runs[1].first_line
    assert runs[1].deployment.per_node == 4 and runs[0].deployment is None
    assert runs[0].start_time < runs[1].start_time


# --- built logs: restarts, year rollover, testing at every display -----------------


def glog(moment: datetime, message: str, src: str = "solver.cpp:228", tid: int = 4242) -> str:
    return f"I{moment:%m%d %H:%M:%S}.{moment.microsecond:06d} {tid} {src}] {message}"


def built_log(start: datetime, *, tid: int = 4242, resume: bool = False,
              done: bool = True) -> list[str]:
    """A tiny Caffe log in the real format: tests at every display (20 iterations)."""
    from datetime import timedelta

    t = start
    out = [
        glog(t, "Using GPUs 0", "caffe.cpp:218", tid),
        glog(t, "GPU 0: Tesla V100-SXM2-16GB", "caffe.cpp:223", tid),
        glog(t, "Initializing solver from parameters: ", "solver.cpp:44", tid),
        "test_iter: 5", "test_interval: 20", "base_lr: 0.1", "display: 20",
        "max_iter: 60", 'net: "tiny.prototxt"',
        glog(t, "Creating training net from net file: tiny.prototxt", "solver.cpp:87", tid),
        glog(t, "Initializing net from parameters: ", "net.cpp:51", tid),
        'name: "TinyNet"', "state {", "  phase: TRAIN", "}", "layer {", '  name: "data"',
        "  data_param {", "    batch_size: 64", "  }", "}",
        glog(t, "Creating test net (#0) specified by net file: tiny.prototxt",
             "solver.cpp:172", tid),
        glog(t, "Initializing net from parameters: ", "net.cpp:51", tid),
        'name: "TinyNet"', "state {", "  phase: TEST", "}", "layer {", '  name: "data"',
        "  data_param {", "    batch_size: 32", "  }", "}",
        glog(t, "Solving TinyNet", "solver.cpp:272", tid),
    ]
    first = 20 if resume else 0
    if resume:
        out.append(glog(t, "Restoring previous solver status from tiny_iter_20.solverstate",
                        "sgd_solver.cpp:318", tid))
    for iteration in range(first, 61, 20):
        out.append(glog(t, f"Iteration {iteration}, Testing net (#0)", "solver.cpp:330", tid))
        t += timedelta(seconds=3)
        out.append(glog(t, "    Test net output #0: accuracy = 0.5", "solver.cpp:397", tid))
        if iteration == 60:
            break
        t += timedelta(seconds=1)
        out.append(glog(t, f"Iteration {iteration} (2 iter/s, 10s/20 iters), loss = 1.5",
                        "solver.cpp:218", tid))
        t += timedelta(seconds=9)
        if not done and iteration == 40:
            return out
    out.append(glog(t, "Optimization Done.", "solver.cpp:315", tid))
    return out


def test_year_rollover_keeps_time_monotone():
    lines = built_log(datetime(2000, 12, 31, 23, 59, 30))
    (run,) = caffe.parse(lines, CTX)
    assert run.meta["year_source"] == "assumed"
    starts = [s.start_time for s in run.segments]
    assert starts == sorted(starts)
    years = {datetime.fromtimestamp(s, tz=UTC).year for s in starts}
    assert years == {2000, 2001}
    train = [s for s in run.segments if s.phase == "train"]
    assert [s.iterations for s in train] == [20, 20, 20]
    # every train stretch lasts 10 s here, including the one across midnight
    assert [s.seconds for s in train] == pytest.approx([10, 10, 10])
    assert run.deployment.key == "nvidia-v100-sxm2-16gb-x1"
    assert run.batch_size == 64 and run.meta["test_batch_size"] == 32


def test_year_from_a_printed_date_applies_across_the_rollover():
    lines = ["Logging output to logs/tiny__2019-12-31_23-59-29.log",
             *built_log(datetime(2000, 12, 31, 23, 59, 30))]
    (run,) = caffe.parse(lines, CTX)
    first = datetime.fromtimestamp(run.segments[0].start_time, tz=UTC)
    last = datetime.fromtimestamp(run.segments[-1].start_time, tz=UTC)
    assert (first.year, first.month, last.year, last.month) == (2019, 12, 2020, 1)


def test_testing_at_every_display_interval():
    (run,) = caffe.parse(built_log(datetime(2000, 6, 1, 12, 0, 0)), CTX)
    phases = [s.phase for s in run.segments]
    assert phases == ["test", "train", "test", "train", "test", "train", "test"]
    for segment in run.segments:
        check_points(segment)
    train = run.segments[1]
    assert train.points[0] == pytest.approx((0.0, 1.0))  # display line 1 s after the test


def test_restart_with_restore_is_a_second_run():
    lines = built_log(datetime(2000, 6, 1, 12, 0, 0), done=False)
    lines += built_log(datetime(2000, 6, 1, 13, 0, 0), tid=5151, resume=True)
    first, second = caffe.parse(lines, CTX)
    assert first.meta["truncated"] and not second.meta.get("truncated")
    assert second.meta["resumed_from"] == "tiny_iter_20.solverstate"
    assert second.first_line == first.last_line + 1
    assert [s.iteration_start for s in second.segments if s.phase == "train"] == [20, 40]
    assert second.start_time - first.start_time == pytest.approx(3600)


# --- errors -----------------------------------------------------------------------


def test_cut_last_line_is_an_error_with_its_line():
    lines = read(RESNET_2016)
    index = lines_with(lines, "] Iteration 5000, loss")[0]
    for cut in (lines[index][:60], lines[index][:15]):
        with pytest.raises(ParseError) as err:
            caffe.parse([*lines[:index], cut], CTX)
        assert err.value.line == index + 1


def test_killed_mid_training_is_truncated_not_an_error():
    lines = read(RESNET_2016)
    index = lines_with(lines, "] Iteration 5500, loss")[0]
    (run,) = caffe.parse(lines[: index + 4], CTX)
    assert run.meta["truncated"]
    train = [s for s in run.segments if s.phase == "train"]
    assert train[-1].iterations == 500 and train[-1].iteration_start == 5000
    assert sum(s.iterations for s in train) == 5500


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("Iteration 5000, loss", "Iteration 5x00, loss"),
        ("Iteration 5000, loss = ", "Iteration 5000, loss = abc"),
        ("I0814 00:", "I0814 99:"),
        ("I0814 00:", "I0813 00:"),  # the clock jumps back a day
        ("Iteration 5000, loss", "Iteration 4000, loss"),  # iterations go backwards
    ],
)
def test_garbled_line_is_an_error_with_its_line(old, new):
    lines = read(RESNET_2016)
    index = lines_with(lines, "] Iteration 5000, loss")[0]
    garbled = list(lines)
    garbled[index] = garbled[index].replace(old, new, 1)
    assert garbled[index] != lines[index]
    with pytest.raises(ParseError) as err:
        caffe.parse(garbled, CTX)
    assert err.value.line == index + 1, err.value


def test_log_without_training_is_an_error():
    lines = read(RESNET_2016)
    header = lines[: lines_with(lines, "] Solving ")[0]]
    with pytest.raises(ParseError, match="Solving"):
        caffe.parse(header, CTX)
    with pytest.raises(ParseError):
        caffe.parse(["just some text", "nothing here"], CTX)


def test_ctx_batch_size_fills_a_missing_batch():
    lines = [line for line in built_log(datetime(2000, 6, 1)) if "batch_size: 64" not in line]
    (run,) = caffe.parse(lines, ParseContext(batch_size=256))
    assert run.batch_size == 256 and run.meta["batch_from_ctx"]
    (run,) = caffe.parse(lines, CTX)
    assert run.batch_size is None and "batch_size" in run.meta["needs"]


# --- all real Caffe logs in the shared data --------------------------------------

IMAGENET_TRAIN = 1_281_167
CIFAR10_TRAIN = 50_000


@pytest.mark.skipif(not (SHARED / "caffe").is_dir(), reason="shared data not present")
@pytest.mark.parametrize("path", sorted((SHARED / "caffe").glob("*.log")), ids=lambda p: p.name)
def test_every_real_caffe_log_parses_plausibly(path):
    lines = path.read_text().splitlines()
    assert caffe.sniff(lines[:200])
    runs = caffe.parse(lines, ParseContext(source=str(path)))
    assert runs
    for run in runs:
        train = [s for s in run.segments if s.phase == "train"]
        assert train and run.batch_size and run.network
        wall = run.segments[-1].start_time + run.segments[-1].seconds - run.segments[0].start_time
        assert sum(s.seconds for s in run.segments) == pytest.approx(wall, rel=0.01)
        starts = [s.start_time for s in run.segments]
        assert starts == sorted(starts)
        for segment in run.segments:
            check_points(segment)
        per_iteration = sum(s.seconds for s in train) / sum(s.iterations for s in train)
        images = IMAGENET_TRAIN if "imagenet" in str(run.meta.get("train_source")) \
            else CIFAR10_TRAIN
        epoch_seconds = images / run.batch_size * per_iteration
        low, high = (60, 4 * 3600) if images == IMAGENET_TRAIN else (1, 1800)
        assert low < epoch_seconds < high, epoch_seconds


def test_a_net_without_a_name_still_starts_a_run():
    """Caffe logs ``Solving `` (trailing space, nothing after) for a net whose prototxt has no
    name (ducha-aiki's SqueezeNet128 log): the run is read, named by the prototxt or the
    user, not rejected as having no ``Solving`` line."""
    lines = read(CAFFENET_KILLED)
    [at] = [i for i, line in enumerate(lines) if line.endswith("] Solving CaffeNet")]
    unnamed = lines[:at] + [lines[at].removesuffix("CaffeNet")] + lines[at + 1:]
    (run,) = caffe.parse(unnamed, CTX)
    (ref,) = caffe.parse(lines, CTX)
    assert run.network == ref.network == "caffenet"  # the prototxt's name
    assert [(s.phase, s.iterations, s.seconds) for s in run.segments] == [
        (s.phase, s.iterations, s.seconds) for s in ref.segments]

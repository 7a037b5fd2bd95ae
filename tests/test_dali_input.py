"""The DALI input path (workflow_scripts/train/dali_input.py) on the CPU (DALI's CPU pipeline;
CI has no GPU): the LMDB's own labels, RandomResizedCrop's crop distribution, half the images
flipped, the CPU path's normalization and resize filter; and a training run that uses it."""

import json
import math
import subprocess

import numpy as np
import pytest
from helpers import REPO, interpreter, launched, run_script, trainer_command

pytestmark = pytest.mark.stage

# Two-sample Kolmogorov-Smirnov critical value at a 0.1% significance level for 4,000 draws
# each: c(0.001) * sqrt((n + m) / (n m)) with c = 1.949 (fixed before any run).
KS_CRITICAL = 1.949 * math.sqrt(2 / 4000)


@pytest.fixture(scope="module")
def lmdb(small_lmdb):
    return small_lmdb


@pytest.fixture(scope="module")
def got(lmdb, tmp_path_factory):
    return run_script("pytorch", "dali_input_check.py", lmdb, tmp_path_factory.mktemp("dali_check"))


def _labels(batches):
    return [y for batch in batches for y in batch]


def test_reader_gives_every_record_once_with_its_own_label(got):
    records = [tuple(r) for r in got["records"]]
    shards = got["reader_shards"]
    read = [(digest, label) for shard in shards for digest, label, _ in shard]
    # Each sample is an LMDB record's JPEG bytes with that record's label, and the two shards
    # of one epoch hold every record exactly once.
    assert sorted(read) == sorted(records)
    for shard in shards:
        for digest, label, source in shard:
            position = int(source.rsplit(" ", 1)[1])  # DALI names the record it read: "<path> at key <key>"
            assert records[position] == (digest, label), source
    assert len(shards[0]) == len(shards[1]) == len(records) // 2


def test_batches_carry_the_lmdb_labels(got):
    labels = [label for _, label in got["records"]]
    # Unshuffled, one rank: the LMDB's order, batch after batch.
    assert _labels(got["unshuffled"]["labels"]) == labels
    # Shuffled, two ranks: one epoch of both is every record once; each rank moves to the other
    # shard in its next epoch, so its two epochs are every record once too.
    rank0, rank1 = (r["labels"] for r in got["ranks"])
    per_epoch = len(rank0) // 2
    assert sorted(_labels(rank0[:per_epoch] + rank1[:per_epoch])) == sorted(labels)
    assert sorted(_labels(rank0)) == sorted(labels)
    assert _labels(rank0[:per_epoch]) != _labels(rank0[per_epoch:])
    for r in got["ranks"]:
        assert (r["x_shape"], r["x_dtype"], r["y_dtype"], r["channels_last"]) == (
            [3, 3, 32, 32],
            "torch.float32",
            "torch.int64",
            True,
        )


def _parts(labels, rank, world, batch, epochs, k=2):
    """The labels dual's batches hold, unshuffled: each batch the next `batch`/k records of each of
    the rank's k parts of its shard (shards k rank .. k rank + k - 1 of k world, contiguous), as long
    as every part lasts; every epoch each part moves to the next shard."""
    n, shards, h = len(labels), k * world, batch // k
    start = [s * n // shards for s in range(shards + 1)]
    out = []
    for epoch in range(epochs):
        mine = [(k * rank + j + epoch) % shards for j in range(k)]
        steps = min(start[s + 1] - start[s] for s in mine) // h
        out += [sum((labels[start[s] + h * i : start[s] + h * (i + 1)] for s in mine), []) for i in range(steps)]
    return out


def test_two_pipelines_a_rank_give_each_batch_half_from_each_half_of_the_shard(got):
    """dali_decoder dual: one pipeline decodes on the CPU, the other on the GPU (here both on the
    CPU, as without a GPU): each batch is half of each, from the two halves of the rank's shard;
    where one half holds a record fewer (30 records in 4 shards: 7, 8, 7, 8) both give the batches
    of the smaller and move on together, so no record comes twice in an epoch."""
    labels = [label for _, label in got["records"]]
    one = got["dual"]
    assert (one["decoder"], one["dual_threads"]) == ("dual", [1, 1])
    assert (one["x_shape"], one["channels_last"]) == ([6, 3, 32, 32], True)
    assert one["labels"] == _parts(labels, 0, 1, 6, 2) and one["epochs"] == 1
    ranks = got["dual_ranks"]
    for r, ran in enumerate(ranks):
        assert ran["labels"] == _parts(labels, r, 2, 4, 2), r
        assert ran["epochs"] == 1


def test_dual_in_parts_gives_a_part_of_each_batch_from_each_reader(got):
    """dali_dual_parts k: every batch is k parts, one from each of k readers over the rank's k parts
    of its shard, k - 1 of them in the CPU's pipeline and the last in the GPU's; where a reader's
    shard holds a record fewer (30 records in 4 shards: 7, 8, 7, 8) all give the batches of the
    smallest and move on together, so no record comes twice in an epoch; where the shards would give
    different numbers of runs, the readers of one pipeline would drift apart: refused, naming the
    key."""
    labels = [label for _, label in got["records"]]
    four = got["dual_parts"]
    assert (four["decoder"], four["dual_parts"], four["dual_threads"]) == ("dual", 4, [1, 1])
    assert four["labels"] == _parts(labels, 0, 1, 8, 2, k=4) and four["epochs"] == 1
    assert "dali_dual_parts 4: 30 records in 4 shards of 7 and 8, runs of 1 images" in got["dual_parts_drifting"]
    for r, ran in enumerate(got["dual_parts_ranks"]):
        assert ran["labels"] == _parts(labels, r, 2, 3, 2, k=3), r
        assert ran["dual_parts"] == 3 and ran["epochs"] == 1


def _ks(x, y):
    grid = np.sort(np.concatenate([x, y]))
    cdf = [np.searchsorted(np.sort(v), grid, side="right") / len(v) for v in (x, y)]
    return float(np.abs(cdf[0] - cdf[1]).max())


def test_a_run_of_several_batches_hands_out_the_same_batches_one_by_one(got):
    """run_batches 2: each run of the pipeline prepares two of the step's batches and next() hands
    them out in order, each of the step's size: unshuffled, the LMDB's order in both epochs, as a
    run of one batch gives it (30 records: 3 runs an epoch, none dropped)."""
    one, runs = got["unshuffled"], got["unshuffled_runs"]
    assert runs["x_shape"] == one["x_shape"] and all(len(y) == 5 for y in runs["labels"])
    per_epoch = len(one["labels"])
    assert runs["labels"][:per_epoch] == runs["labels"][per_epoch:] == one["labels"]
    assert one["epochs"] == 0 and runs["epochs"] == 1


def test_crops_follow_random_resized_crop(got):
    c = got["crops"]
    height, width = c["image"]

    def measures(boxes):
        b = np.array(boxes, dtype=float)  # top, left, h, w
        return {
            "area": b[:, 2] * b[:, 3] / (height * width),
            "log_aspect": np.log(b[:, 3] / b[:, 2]),
            "centre_x": (b[:, 1] + b[:, 3] / 2) / width,
            "centre_y": (b[:, 0] + b[:, 2] / 2) / height,
        }

    ours, theirs = measures(c["dali"]), measures(c["torchvision"])
    for name in ours:
        assert _ks(ours[name], theirs[name]) < KS_CRITICAL, name
    assert abs(ours["area"].mean() - theirs["area"].mean()) < 0.02
    assert abs(ours["log_aspect"].mean() - theirs["log_aspect"].mean()) < 0.02
    boxes = np.array(c["dali"])
    assert (boxes[:, :2] >= 0).all() and (boxes[:, 0] + boxes[:, 2] <= height).all()
    assert (boxes[:, 1] + boxes[:, 3] <= width).all()
    assert c["not_the_region"] == 0  # each crop holds exactly its region's pixels


def test_half_the_images_are_flipped(got):
    flipped = got["augment"]["ramp_flipped"]
    n = len(flipped)
    assert n >= 400
    assert abs(sum(flipped) / n - 0.5) < 4 * math.sqrt(0.25 / n)  # 4 standard deviations


def test_normalization_matches_the_cpu_path(got):
    a = got["augment"]
    # A constant JPEG: every crop, resized and normalized, is the colour the CPU path gives, to
    # float rounding (both decoders are libjpeg-turbo here).
    for lo, hi, cpu_lo, cpu_hi, level in zip(
        a["flat_dali"]["min"], a["flat_dali"]["max"], a["flat_cpu"]["min"], a["flat_cpu"]["max"], a["level"]
    ):
        assert cpu_lo == pytest.approx(cpu_hi)
        assert abs(lo - cpu_lo) < 0.01 * level and abs(hi - cpu_lo) < 0.01 * level
    # ... and that is the JPEG's colour normalized with the ImageNet mean and std (the JPEG moves
    # it by at most 2 levels).
    for value, expected, level in zip(a["flat_cpu"]["min"], a["flat_expected"], a["level"]):
        assert abs(value - expected) <= 2 * level + 1e-6


def test_resize_is_the_antialiased_bilinear_of_the_other_paths(got):
    for name, r in got["resize"].items():
        # Against F.interpolate(antialias=True), the GPU path's filter: the same numbers inside the
        # image. Shrinking, DALI repeats the edge pixels where torchvision and Pillow shorten the
        # filter: only the outermost ring of output pixels differs (dali_input's docstring).
        assert r["interpolate"]["inner_max"] < 1e-3, (name, r)
        # Against the CPU path's Pillow, which rounds to 8 bits.
        assert r["pillow"]["inner_max"] <= 1.0 and r["pillow"]["mean"] < 0.5, (name, r)
    assert got["resize"]["up_512"]["interpolate"]["max"] < 1e-3  # enlarging, no ring either


def _train(lmdb, out, ranks=2, **flags):
    """pytorch_ddp on the DALI path (`flags` over it), on `ranks` processes."""
    cmd = trainer_command(**{"data": lmdb, "input": "dali", "batch_per_gpu": 3, "out": out, **flags})
    if ranks > 1:
        cmd = launched(cmd, ranks, python=interpreter("pytorch"))
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=900)


def test_training_with_dali_input(lmdb, tmp_path):
    proc = _train(lmdb, tmp_path)
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["input"] == summary["pytorch"]["input"] == "dali"
    assert summary["gpu_input"]["decoder"] == "cpu" and summary["world_size"] == 2
    assert summary["timed_steps"] == 2
    losses = [json.loads(line)["loss"] for line in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["weights_sha256"] == ranks[1]["weights_sha256"]


def test_bad_dali_options_are_named(lmdb, tmp_path):
    proc = _train(lmdb, tmp_path / "a", hw_decoder_load="1.5", ranks=1)
    assert proc.returncode != 0 and "--hw-decoder-load" in proc.stderr and "1.5" in proc.stderr
    proc = _train(lmdb, tmp_path / "c", dali_decoder="gpu", ranks=1)
    assert proc.returncode == 2 and "--dali-decoder" in proc.stderr and "'gpu'" in proc.stderr
    proc = _train(lmdb, tmp_path / "b", prefetch="-1", ranks=1)
    assert proc.returncode == 2 and "--prefetch -1" in proc.stderr
    proc = _train(lmdb, tmp_path / "d", dali_device_mb="-1", ranks=1)
    assert proc.returncode == 2 and "--dali-device-mb -1: an integer, at least 0, or auto" in proc.stderr, proc.stderr[
        -2000:
    ]


def test_gpu_pipeline_decodes_where_asked_and_augments_on_the_gpu():
    """The GPU pipeline's graph (defined without a GPU; CI has none): --dali-decoder cpu decodes in
    DALI's CPU threads and hands the crops to the GPU, mixed decodes on the GPU (hardware engine +
    nvJPEG), split sends each image to one of the two by a coin of its own and merges their crops on
    the GPU; either way resize and normalize run on the GPU, and the rest of the graph is the same."""
    got = run_script("pytorch", "dali_placement.py")
    ops = {decoder: dict(graph) for decoder, graph in got.items()}
    assert ops["cpu"]["decoders__ImageRandomCrop"] == "cpu"
    assert ops["mixed"]["decoders__ImageRandomCrop"] == "mixed"
    split = got["split"]
    decoders = [device for name, device in split if name == "decoders__ImageRandomCrop"]
    assert sorted(decoders) == ["cpu", "mixed"] and ops["split"]["_conditional__Merge"] == "gpu", split
    assert [name for name, _ in split if not name.startswith("_conditional")] == [
        name for name, _ in got["cpu"][:1] + [("random__CoinFlip", "")] + got["cpu"][1:2] * 2 + got["cpu"][2:]
    ]
    for decoder in ("cpu", "mixed", "split"):
        assert ops[decoder]["Resize"] == ops[decoder]["CropMirrorNormalize"] == "gpu", got
        assert ops[decoder]["readers__Caffe2"] == "cpu"
    assert [name for name, _ in got["cpu"]] == [name for name, _ in got["mixed"]]


def test_dali_threads_leave_cores_to_the_training_thread():
    """With no --loader-workers, DALI gets a rank's share of the cores, at most 14, where the share
    is 12 or more (the cpu decoder's), below that the share less the 2 its trainer uses (at least 1)
    (docs/decisions.md#loader_workers); the DataLoader paths keep theirs (share - 1; at most 4 for
    input gpu). Asked of the trainer's own rule for machines of 16, 14, 12, 6 and 32 cores (CI has 2)."""
    code = """
import json, os, sys
from types import SimpleNamespace as NS
from workflow_scripts.cluster import cpus
from workflow_scripts.train import pytorch_options
args = NS(loader_workers=0, decode_threads=0)
out = {}
for cores, ranks in ((16, 1), (14, 1), (12, 1), (6, 1), (32, 2), (16, 8), (2, 1)):
    share = cpus.CPUs(allowed=cores, cores=cores, bound=False, local_size=ranks).per_rank
    out[f"{cores}/{ranks}"] = {i: pytorch_options.loader_workers(args, NS(input=i), share)
                               for i in ("dali", "cpu", "gpu")}
print(json.dumps(out))
"""
    proc = subprocess.run([interpreter("pytorch"), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got == {
        "16/1": {"dali": 14, "cpu": 15, "gpu": 4},
        "14/1": {"dali": 14, "cpu": 13, "gpu": 4},
        "12/1": {"dali": 12, "cpu": 11, "gpu": 4},
        "6/1": {"dali": 4, "cpu": 5, "gpu": 4},
        "32/2": {"dali": 14, "cpu": 15, "gpu": 4},
        "16/8": {"dali": 1, "cpu": 1, "gpu": 1},
        "2/1": {"dali": 1, "cpu": 1, "gpu": 1},
    }


@pytest.mark.parametrize("source", ["dali", "cpu"])
def test_fetching_ahead_and_reading_losses_late_change_when_not_which(lmdb, tmp_path, source):
    """--fetch-ahead (on with CUDA) takes the next batch while the GPU still runs the step, and
    --loss-lag 1 (also on with CUDA) reads a step's loss after the next step is queued: the same
    batches in the same order, so the same losses, each logged as its own step, as taking each
    batch at the start of its step and reading its loss at the end. Whichever way, a wait for the
    input is logged with the step during which it happened, and the summary's input_wait_s_timed is
    those of the timed steps: a share of their time between 0 and 1."""
    losses = {}
    for name, ahead, lag in (("plain", "off", "0"), ("ahead", "on", "0"), ("lag", "on", "1")):
        proc = _train(
            lmdb, tmp_path / name, input=source, fetch_ahead=ahead, loss_lag=lag, steps=4, loader_workers=1, ranks=1
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        summary = json.loads((tmp_path / name / "summary.json").read_text())
        assert summary["fetch_ahead"] == (ahead == "on") and summary["pytorch"]["loss_lag"] == int(lag)
        steps = [json.loads(x) for x in (tmp_path / name / "steps.jsonl").read_text().splitlines()]
        assert [x["phase"] for x in steps] == ["warmup"] + ["timed"] * 4
        losses[name] = [x["loss"] for x in steps]
        timed = [x for x in steps if x["phase"] == "timed"]
        assert summary["input_wait_s_timed"] == pytest.approx(sum(x["input_wait_s"] for x in timed), rel=1e-9, abs=0)
        assert all(0 <= x["input_wait_s"] <= x["wall_s"] for x in timed), name
        assert 0 <= summary["input_wait_s_timed"] / summary["seconds_timed"] <= 1, name
    assert losses["plain"] == losses["ahead"] == losses["lag"]


def test_copying_dali_output_changes_no_batch_and_the_run_says_where_its_cpus_went(lmdb, tmp_path):
    """--dali-copy hands the step copies of DALI's output instead of views of its buffers: the same
    batches, so the same losses. Each run records its threads' CPU use over the timed steps
    (thread_cpu): the training thread as 'main', every group's share in cores, their sum the total."""
    summaries, losses = {}, {}
    for name, copy in (("views", False), ("copies", True)):
        proc = _train(lmdb, tmp_path / name, steps=3, loader_workers=1, ranks=1, dali_copy=copy)
        assert proc.returncode == 0, proc.stderr[-4000:]
        summaries[name] = json.loads((tmp_path / name / "summary.json").read_text())
        losses[name] = [json.loads(x)["loss"] for x in (tmp_path / name / "steps.jsonl").read_text().splitlines()]
        assert summaries[name]["gpu_input"]["copy"] is copy
    assert losses["views"] == losses["copies"] and len(losses["views"]) == 4
    assert summaries["views"]["gpu_input"]["fast_idct"] is False
    cpu = summaries["copies"]["timed_cpu"]
    assert cpu["seconds"] > 0 and "main" in cpu["by_thread"]
    assert cpu["cores"] == pytest.approx(sum(cpu["by_thread"].values()), abs=0.01)
    assert all(v >= 0 for v in cpu["by_thread"].values()) and cpu["by_thread"]["main"] > 0


def test_fast_idct_and_the_dual_decoders_threads_reach_dali(lmdb, tmp_path):
    """--dali-fast-idct (a benchmark's lever) and dali_decoder dual with dali_gpu_threads reach DALI:
    it accepts DALI's fast IDCT, builds the two pipelines with the threads asked, the run trains
    and its summary says so."""
    proc = _train(
        lmdb,
        tmp_path,
        steps=2,
        loader_workers=3,
        ranks=1,
        batch_per_gpu=4,
        dali_fast_idct=True,
        dali_decoder="dual",
        dali_gpu_threads=1,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    dali = summary["gpu_input"]
    assert dali["fast_idct"] is True and (dali["decoder"], dali["dual_threads"], dali["threads"]) == ("dual", [2, 1], 3)
    losses = [json.loads(x)["loss"] for x in (tmp_path / "steps.jsonl").read_text().splitlines()]
    assert len(losses) == 3 and all(math.isfinite(x) for x in losses)

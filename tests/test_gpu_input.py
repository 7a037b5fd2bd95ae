"""The GPU input path (workflow_scripts/train/gpu_input.py) computes what the CPU loader does:
run on CPU tensors here (CI has no GPU), against the CPU loader's Pillow transform with the
same crop boxes and flips, over an LMDB with the ImageNet quirks (re-encoded CMYK, PNG, gray)."""

import pytest
from helpers import run_script

pytestmark = pytest.mark.stage


@pytest.fixture(scope="module")
def lmdb(small_lmdb):
    return small_lmdb


@pytest.fixture(scope="module")
def got(lmdb):
    return run_script("pytorch", "gpu_preprocess.py", lmdb, 64)


def test_gpu_preprocessing_matches_the_cpu_loader(got):
    assert got["images"] == 30 and got["shape"] == [30, 3, 64, 64] and got["channels_last"] and got["labels_equal"]
    # Same decoder (libjpeg-turbo) on the CPU; the resizes differ only in rounding: Pillow
    # rounds to 8 bits, the tensor path stays in float.
    assert got["mean_abs_levels"] < 0.5 and got["max_abs_levels"] <= 1.5, got


def test_batched_resize_is_torchvisions_antialiased_resize(got):
    # Two matrix products per batch against F.interpolate(antialias=True) image by image
    # (float32 on the CPU): the same filter, so only float rounding differs.
    assert got["batched_resize_max_levels"] < 1e-3, got


def test_crop_boxes_follow_random_resized_crop(got):
    ours, tv = got["ours"], got["torchvision"]
    # 4,000 draws each: the means agree to within a few standard errors.
    assert abs(ours["area"] - tv["area"]) < 0.02 and abs(ours["aspect"] - tv["aspect"]) < 0.03
    assert abs(ours["centre_x"] - 0.5) < 0.02


def test_input_lanes_keep_the_batch_order_and_are_deterministic(lmdb):
    got = run_script("pytorch", "gpu_batches.py", lmdb)
    # Batches come out in the loader's order whatever the number of lanes and thread timing,
    # and each lane's crops are seeded: two runs give the same pixels.
    assert got["one"]["labels"] == got["two"]["labels"] == got["expected_labels"]
    assert got["two"]["pixels"] == got["two_again"]["pixels"]
    assert (got["one"]["stats_lanes"], got["two"]["stats_lanes"]) == (1, 2)


def test_nvimagecodec_decoder_gives_the_same_batches(lmdb):
    got = run_script("pytorch", "gpu_batches.py", lmdb)
    # nvImageCodec (its CPU backend here, libjpeg-turbo as torchvision's CPU decode_jpeg) in
    # place of torchvision's decoder: same order, same crops, same pixels.
    assert got["nvimgcodec"]["labels"] == got["expected_labels"]
    assert got["nvimgcodec_vs_torchvision_levels"] == 0.0 and got["nvimgcodec"]["pixels"] == got["one"]["pixels"]
    assert min(got["nvimgcodec"]["max"]) > 1.0  # normalized images, not zeros

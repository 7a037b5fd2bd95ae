"""Probing and encoding images as ImageNet really has them."""

import io

import numpy as np
import pytest
from PIL import Image

from workflow_scripts.data import image_records

pytestmark = pytest.mark.unit


def _jpeg(mode="RGB", size=(64, 48), fmt="JPEG"):
    buf = io.BytesIO()
    Image.new("RGB", size, (200, 30, 30)).convert(mode).save(buf, format=fmt)
    return buf.getvalue()


@pytest.mark.parametrize(
    "data, fmt, mode",
    [
        (_jpeg(), "JPEG", "RGB"),
        (_jpeg("CMYK"), "JPEG", "CMYK"),
        (_jpeg("L"), "JPEG", "L"),
        (_jpeg(fmt="PNG"), "PNG", "RGB"),
    ],
    ids=["rgb", "cmyk", "gray", "png-as-jpeg"],
)
def test_quirks_are_reencoded_to_rgb_jpeg(data, fmt, mode):
    p = image_records.probe(data)
    assert (p.ok, p.fmt, p.mode, p.width, p.height) == (True, fmt, mode, 64, 48)
    out, w, h, action = image_records.encode(data, p, image_records.Encoding())
    im = Image.open(io.BytesIO(out))
    assert (im.format, im.mode, im.size, (w, h)) == ("JPEG", "RGB", (64, 48), (64, 48))
    assert (out == data) == (action == "passthrough") == ((fmt, mode) == ("JPEG", "RGB"))


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty file"),
        (b"<html>not found</html>", "not an image"),
        (_jpeg(size=(640, 480))[:2000], "cannot decode"),
    ],
    ids=["empty", "html", "truncated"],
)
def test_broken_files_are_rejected_with_a_reason(data, reason):
    assert image_records.probe(data).reason.startswith(reason)


def test_resize_shorter_side():
    data = _jpeg(size=(500, 375))
    out, w, h, action = image_records.encode(
        data, image_records.probe(data), image_records.Encoding(resize_shorter=160)
    )
    assert (w, h, action) == (213, 160, "resized")
    assert Image.open(io.BytesIO(out)).size == (213, 160)


def test_a_shorter_side_cap_shrinks_only_the_larger_images():
    enc = image_records.Encoding(shorter_cap=360)
    small, large = _jpeg(size=(500, 333)), _jpeg(size=(2000, 1500))
    out, w, h, action = image_records.encode(small, image_records.probe(small), enc)
    assert (out, w, h, action) == (small, 500, 333, "passthrough")
    out, w, h, action = image_records.encode(large, image_records.probe(large), enc)
    assert (w, h, action) == (480, 360, "resized") and Image.open(io.BytesIO(out)).size == (480, 360)
    assert enc.describe()["mode"] == "cap"


def test_a_16_bit_grayscale_png_is_converted_by_its_depth_not_clipped_to_white():
    """Pillow's own convert clips every 16-bit value over 255: a photograph became an all-white JPEG."""
    ramp = (np.arange(64 * 64).reshape(64, 64) * 16).astype(np.uint16)  # 0 .. 65,520
    buf = io.BytesIO()
    Image.fromarray(ramp).save(buf, format="PNG")
    probe = image_records.probe(buf.getvalue())
    assert probe.ok and probe.mode.startswith("I")
    jpeg, w, h, action = image_records.encode(buf.getvalue(), probe, image_records.Encoding(0, 95, 0))
    out = np.asarray(Image.open(io.BytesIO(jpeg)).convert("L"), dtype=np.float64)
    assert (w, h) == (64, 64) and action.startswith("reencoded-png-")
    assert out.min() < 10 and out.max() > 245 and abs(out.mean() - 127.5) < 5  # the ramp, not white

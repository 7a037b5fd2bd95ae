"""The ImageNet-like benchmark set: ILSVRC2012's raw layout, its quirks, its sizes, reproducible."""

import hashlib
import shutil
from pathlib import Path

import matplotlib
import numpy as np
import pytest
from PIL import Image

from benchmarks import imagenet_like
from workflow_scripts.data import image_records, layout

pytestmark = pytest.mark.stage  # the generator runs in worker processes


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """One photograph a package here ships (the registry's wheels are not fetched in the tests)."""
    d = tmp_path_factory.mktemp("photos")
    shutil.copy(Path(matplotlib.get_data_path()) / imagenet_like.MATPLOTLIB_PHOTO, d)
    return imagenet_like.folder_photos(d)


def _digests(root):
    return {p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*.JPEG"))}


def test_the_set_is_in_the_raw_layout_with_ilsvrc_quirks_and_reproducible(tmp_path, sources):
    a, b = tmp_path / "a", tmp_path / "b"
    stats = imagenet_like.make(a, sources, classes=4, train_per_class=6, val_per_class=2, seed=7, workers=1)
    imagenet_like.make(b, sources, classes=4, train_per_class=6, val_per_class=2, seed=7, workers=2)
    assert _digests(a) == _digests(b) and len(_digests(a)) == 4 * 6 + 4 * 2
    label_file, _ = layout.check(a)
    items = layout.discover(a)
    assert label_file and len(items.train) == 24 and len(items.val) == 8
    kinds = {}
    for path in (a / "train").rglob("*.JPEG"):
        p = image_records.probe(path.read_bytes())
        assert p.ok, path
        kinds[(p.fmt, p.mode)] = kinds.get((p.fmt, p.mode), 0) + 1
    assert kinds[("JPEG", "CMYK")] == imagenet_like.CMYK_COUNT and kinds[("PNG", "RGB")] == imagenet_like.PNG_COUNT
    assert stats["train"]["quirks"]["cmyk"] == imagenet_like.CMYK_COUNT and stats["train"]["images"] == 24


def test_sizes_follow_the_mix():
    rng = np.random.default_rng(0)
    sizes = [imagenet_like.draw_size(rng) for _ in range(4000)]
    share = lambda pred: sum(map(pred, sizes)) / len(sizes)
    common = share(lambda s: sorted(s) in ([375, 500], [333, 500]))
    assert abs(common - 0.66) < 0.03
    assert abs(share(lambda s: s[0] * s[1] > 1.5e6) - 0.02) < 0.01
    assert abs(share(lambda s: s[1] > s[0]) - imagenet_like.PORTRAIT) < 0.03
    assert max(s[0] * s[1] for s in sizes) <= 4e6 and min(min(s) for s in sizes) >= 40


def test_a_folder_without_photos_is_named(tmp_path):
    with pytest.raises(Exception, match=str(tmp_path)):
        imagenet_like.folder_photos(tmp_path)


def test_pictures_are_photographs_not_flat(sources):
    im = imagenet_like.picture(imagenet_like.load(sources), np.random.default_rng(1), 500, 375)
    assert im.size == (500, 375) and np.asarray(im).std() > 20
    assert Image.Image.getbands(im) == ("R", "G", "B")

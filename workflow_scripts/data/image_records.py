"""What an ILSVRC2012 file really is, and the bytes a record stores for it.

ImageNet's .JPEG files include CMYK JPEGs, a PNG and grayscale JPEGs; the frameworks' readers
expect RGB JPEG, so those are re-encoded. Anything that does not decode is rejected with a reason.
"""

import io
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

# A decompression bomb is not an ImageNet image; keep Pillow's guard but name the file if it trips.
Image.MAX_IMAGE_PIXELS = 200_000_000


@dataclass(frozen=True)
class Probe:
    fmt: str = ""
    mode: str = ""
    width: int = 0
    height: int = 0
    reason: str = ""  # non-empty: rejected

    @property
    def ok(self):
        return not self.reason

    @property
    def needs_reencode(self):
        return self.fmt != "JPEG" or self.mode != "RGB"


def probe(data: bytes) -> Probe:
    """Decode `data` far enough to know it is a whole image; return its format and mode.

    JPEGs are decoded in Pillow's draft mode (DCT scaling to 1/8), which still reads every
    entropy-coded byte, so a truncated file fails here at a fraction of a full decode's cost.
    """
    if not data:
        return Probe(reason="empty file")
    try:
        im = Image.open(io.BytesIO(data))
        fmt, mode, (width, height) = im.format or "", im.mode, im.size
        if fmt == "JPEG":
            im.draft(mode, (max(1, width // 8), max(1, height // 8)))
        im.load()
    except UnidentifiedImageError:
        return Probe(reason="not an image")
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        return Probe(reason=f"cannot decode: {exc}")
    if width < 1 or height < 1:
        return Probe(reason="zero-sized image")
    return Probe(fmt=fmt, mode=mode, width=width, height=height)


@dataclass(frozen=True)
class Encoding:
    """How records store images: the source JPEG bytes; or every image resized so its shorter side
    is resize_shorter; or only the images whose shorter side is over shorter_cap shrunk to it (the
    rest passed through), which takes the decoding cost of the multi-megapixel tail away and leaves
    ordinary photos byte for byte."""

    resize_shorter: int = 0  # 0: pass-through
    quality: int = 95
    shorter_cap: int = 0  # 0: no cap

    def describe(self):
        mode = "resize" if self.resize_shorter else "cap" if self.shorter_cap else "passthrough"
        return {
            "mode": mode,
            "resize_shorter": self.resize_shorter,
            "shorter_cap": self.shorter_cap,
            "jpeg_quality": self.quality,
        }

    def target_shorter(self, width, height):
        """The shorter side this image is to be resized to, or None to keep its size."""
        if self.resize_shorter:
            return self.resize_shorter
        if self.shorter_cap and min(width, height) > self.shorter_cap:
            return self.shorter_cap
        return None


WIDE_MODES = ("I;16", "I;16B", "I;16L", "I;16N", "I", "F")  # more than 8 bits a sample: Pillow clips them


def _eight_bit(im):
    """A 16-bit (or 32-bit) grayscale image as 8-bit grayscale, scaled by its bit depth: Pillow's
    own convert clips every value over 255 to white. Others pass as they are."""
    if im.mode not in WIDE_MODES:
        return im
    import numpy as np  # only the rare wide image needs it

    a = np.asarray(im, dtype=np.float64)
    top = 65535.0 if im.mode.startswith("I;16") or a.max() <= 65535 else float(a.max())
    return Image.fromarray(np.clip(a * (255.0 / top) + 0.5, 0, 255).astype(np.uint8))


def encode(data: bytes, probe_: Probe, enc: Encoding):
    """Return (jpeg_bytes, width, height, action) for one image; action is what was done."""
    shorter = enc.target_shorter(probe_.width, probe_.height)
    if shorter is None and not probe_.needs_reencode:
        return data, probe_.width, probe_.height, "passthrough"
    im = Image.open(io.BytesIO(data))
    w, h = im.size
    target = None
    if shorter is not None:
        scale = shorter / min(w, h)
        target = (max(1, round(w * scale)), max(1, round(h * scale)))
        if im.format == "JPEG":
            im.draft("RGB", target)  # decode at the smallest DCT scale still >= target
    im = _eight_bit(im).convert("RGB")
    if target and im.size != target:
        im = im.resize(target, Image.Resampling.BILINEAR, reducing_gap=None)
    out = io.BytesIO()
    im.save(out, format="JPEG", quality=enc.quality)
    action = "resized" if shorter is not None else f"reencoded-{probe_.fmt.lower()}-{probe_.mode}"
    return out.getvalue(), im.size[0], im.size[1], action

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
    im = im.convert("RGB")
    if target and im.size != target:
        im = im.resize(target, Image.Resampling.BILINEAR, reducing_gap=None)
    out = io.BytesIO()
    im.save(out, format="JPEG", quality=enc.quality)
    action = "resized" if shorter is not None else f"reencoded-{probe_.fmt.lower()}-{probe_.mode}"
    return out.getvalue(), im.size[0], im.size[1], action

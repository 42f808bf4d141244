"""trove.vision against Pillow on the same crop boxes."""

import io
import unittest

import numpy as np
from PIL import Image

from trove import vision

# Mean absolute difference (0-255 scale) allowed between trove.vision and Pillow on the same
# box: the decoders' IDCT and chroma upsampling round differently, nothing more.
MAD_MAX = 2.0


def jpeg(seed: int, w: int, h: int, quality: int = 90) -> bytes:
    """A photo-like JPEG written by Pillow (smooth fields, edges, grain)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    img = np.zeros((h, w, 3), np.float32)
    for c in range(3):
        fx, fy, ph = rng.uniform(0.005, 0.05, 3)
        img[..., c] = 128 + 60 * np.sin(x * fx + y * fy + ph * 50)
    for _ in range(5):
        cx, cy, r = rng.uniform(0, w), rng.uniform(0, h), rng.uniform(10, min(w, h) / 2)
        img[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 6, img.shape)
    buf = io.BytesIO()
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def mad(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a.astype(np.int16) - b.astype(np.int16)).mean())


class VisionAgainstPillow(unittest.TestCase):
    def test_decode_matches_pillow(self):
        data = jpeg(1, 500, 375)
        self.assertEqual(vision.jpeg_size(data), (500, 375))
        ours = vision.decode(data)
        theirs = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
        self.assertEqual(ours.shape, theirs.shape)
        self.assertLess(mad(ours, theirs), MAD_MAX)

    def test_random_resized_crops_match_pillow_on_the_same_boxes(self):
        worst = 0.0
        for seed in range(12):
            data = jpeg(seed, 500 - 7 * seed, 375 + 3 * seed)
            pil = Image.open(io.BytesIO(data)).convert("RGB")
            out, (left, top, w, h, flipped) = vision.transform(data, size=224, crop="random", flip=0.0, seed=seed, return_plan=True)
            self.assertEqual((left, top, w, h), vision.random_resized_crop_box(pil.width, pil.height, seed=seed))
            self.assertTrue(0 <= left and left + w <= pil.width and 0 <= top and top + h <= pil.height)
            self.assertFalse(flipped)
            ref = np.asarray(pil.crop((left, top, left + w, top + h)).resize((224, 224), Image.BILINEAR))
            self.assertEqual(out.shape, (224, 224, 3))
            worst = max(worst, mad(out, ref))
            # The same box given explicitly, and flipped.
            boxed = vision.transform(data, size=224, box=(left, top, w, h), flip=1.0)
            self.assertLess(mad(boxed, np.ascontiguousarray(ref[:, ::-1])), MAD_MAX)
        self.assertLess(worst, MAD_MAX, f"worst mean absolute difference {worst}")

    def test_center_crop_resize_and_normalize(self):
        data = jpeg(20, 320, 240)
        pil = Image.open(io.BytesIO(data)).convert("RGB")
        out = vision.transform(data, size=(120, 160), crop="full", flip=0.0)
        self.assertLess(mad(out, np.asarray(pil.resize((160, 120), Image.BILINEAR))), MAD_MAX)
        u8 = vision.transform(data, size=64, crop="center", fraction=0.5, flip=0.0)
        f32 = vision.transform(data, size=64, crop="center", fraction=0.5, flip=0.0, normalize=True)
        self.assertEqual((f32.shape, f32.dtype), ((3, 64, 64), np.float32))
        mean, std = np.array(vision.IMAGENET_MEAN, np.float32), np.array(vision.IMAGENET_STD, np.float32)
        expect = ((u8.astype(np.float32) / 255 - mean) / std).transpose(2, 0, 1)
        self.assertLess(float(np.abs(f32 - expect).max()), 1e-4)

    def test_batches_equal_single_samples(self):
        datas = [jpeg(30 + i, 300 + 10 * i, 200 + 5 * i) for i in range(6)]
        seeds = list(range(100, 106))
        batch, plans = vision.transform_batch(datas, size=96, seeds=seeds, threads=3, return_plans=True)
        self.assertEqual(batch.shape, (6, 96, 96, 3))
        for i in range(6):
            one, plan = vision.transform(datas[i], size=96, seed=seeds[i], return_plan=True)
            self.assertTrue((batch[i] == one).all())
            self.assertEqual(tuple(plans[i]), tuple(plan))
        norm = vision.transform_batch(datas, size=32, seeds=seeds, normalize=True)
        self.assertEqual(norm.shape, (6, 3, 32, 32))

    def test_bad_input_is_refused_with_a_reason(self):
        with self.assertRaises(ValueError) as e:
            vision.decode(b"definitely not a jpeg")
        self.assertIn("JPEG", str(e.exception))
        data = jpeg(40, 100, 80)
        with self.assertRaises(ValueError):
            vision.transform(data, box=(90, 0, 20, 10))
        with self.assertRaises(ValueError):
            vision.transform(data, size=0)
        with self.assertRaises(ValueError):
            vision.transform_batch([data, b"junk"], size=16, seeds=[1, 2])
        # Round trip through our encoder.
        img = vision.decode(data)
        again = vision.decode(vision.encode_jpeg(img, 95))
        self.assertLess(mad(img, again), 3.0)


if __name__ == "__main__":
    unittest.main()

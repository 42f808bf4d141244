"""`trove dataset` end to end and the datasets of trove.torch (without PyTorch): every file or
record of the tree exactly once per epoch, split over ranks and workers without overlap."""

import collections
import io
import itertools
import os
import sys
import unittest

import trove
from trove import data as tdata
from trove.data import Split
from support import client, fresh_dir, trove_cli

IMAGES = 48
CLASSES = 4


class Datasets(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.c = client()
        cls.d = fresh_dir("ds")
        trove_cli("dataset", "synth", "--out", f"{cls.d}/synth", "--images", str(IMAGES), "--classes", str(CLASSES), "--seed", "7")
        trove_cli("dataset", "pack", "--src", f"{cls.d}/synth", "--out", f"{cls.d}/tar", "--format", "tar", "--samples-per-shard", "5")
        trove_cli("dataset", "pack", "--src", f"{cls.d}/synth", "--out", f"{cls.d}/tfr", "--format", "tfrecord", "--samples-per-shard", "7")
        cls.files = {}
        for dirpath, _, names in cls.c.walk(f"{cls.d}/synth"):
            for n in names:
                cls.files[f"{dirpath}/{n}"] = cls.c.read(f"{dirpath}/{n}")

    def test_synth_makes_class_folders_of_real_jpegs(self):
        from PIL import Image

        self.assertEqual(len(self.files), IMAGES)
        self.assertEqual(sorted(self.c.listdir(f"{self.d}/synth")), [f"class_{i:04d}" for i in range(CLASSES)])
        sizes = []
        for p, b in self.files.items():
            img = Image.open(io.BytesIO(b))
            img.load()
            self.assertEqual(img.format, "JPEG")
            self.assertTrue(300 <= img.width <= 500, p)
            sizes.append(len(b))
        self.assertTrue(20_000 < sum(sizes) / len(sizes) < 200_000, sum(sizes) / len(sizes))
        # Reproducible by seed.
        other = fresh_dir("synth-again")
        trove_cli("dataset", "synth", "--out", f"{other}/s", "--images", "6", "--classes", "2", "--seed", "7")
        self.assertEqual(self.c.read(f"{other}/s/class_0001/img_0000005.jpg"), self.files[f"{self.d}/synth/class_0001/img_0000005.jpg"])

    def test_image_folder_splits_every_file_once_per_epoch(self):
        from trove.torch import ImageFolder

        ds = ImageFolder(f"{self.d}/synth", read_ahead=8)
        self.assertEqual(len(ds), IMAGES)
        self.assertEqual(ds.classes, [f"class_{i:04d}" for i in range(CLASSES)])
        self.assertEqual(sorted(p for p, _ in ds.samples), sorted(self.files))
        data, target = ds[5]
        self.assertEqual(data, self.files[ds.samples[5][0]])
        self.assertEqual(target, ds.class_to_idx[ds.samples[5][0].split("/")[-2]])
        orders = []
        for epoch in range(2):
            seen = []
            for rank, worker in itertools.product(range(2), range(3)):
                mine = ds.indices(epoch, Split(rank, 2, worker, 3))
                seen += mine
                got = list(ds.iter_epoch(epoch, Split(rank, 2, worker, 3)))
                self.assertEqual([t for _, t in got], [ds.samples[i][1] for i in mine])
                self.assertEqual([d for d, _ in got], [self.files[ds.samples[i][0]] for i in mine])
            self.assertEqual(sorted(seen), list(range(IMAGES)), "each sample exactly once per epoch")
            orders.append(seen)
        self.assertNotEqual(orders[0], orders[1], "the order changes with the epoch")
        batch = ds.__getitems__([3, 1, 4])
        self.assertEqual([d for d, _ in batch], [self.files[ds.samples[i][0]] for i in (3, 1, 4)])

    def test_image_folder_with_the_vision_transform(self):
        from trove.torch import ImageFolder, vision_transform

        ds = ImageFolder(f"{self.d}/synth", transform=vision_transform(size=64, seed=3))
        a, _ = ds[0]
        b, _ = ds[0]
        self.assertEqual(a.shape, (64, 64, 3))
        self.assertTrue((a == b).all(), "same seed, epoch and index: same augmentation")
        ds.set_epoch(1)
        c, _ = ds[0]
        self.assertFalse((a == c).all(), "another epoch: another augmentation")

    def _shard_keys(self, ds, splits):
        per = {}
        for s in splits:
            ds._split_args = (s.rank, s.world_size, s.worker, s.num_workers)
            per[s] = [x["__key__"] for x in ds]
        return per

    def test_tar_shards_hold_every_file_once_split_without_overlap(self):
        from trove.torch import ShardDataset

        shards = self.c.listdir(f"{self.d}/tar")
        self.assertEqual(len([s for s in shards if s.endswith(".tar")]), (IMAGES + 4) // 5)
        self.assertIn("shard-000000.tar.idx", shards)
        expected = {p[len(self.d) + len("/synth/") :].rsplit(".", 1)[0]: b for p, b in self.files.items()}
        splits = [Split(r, 2, w, 2) for r in range(2) for w in range(2)]
        ds = ShardDataset(f"{self.d}/tar", shuffle_buffer=8, seed=1, read_ahead=2)
        firsts = []
        for epoch in range(2):
            ds.set_epoch(epoch)
            per = self._shard_keys(ds, splits)
            every = [k for keys in per.values() for k in keys]
            self.assertEqual(collections.Counter(every), collections.Counter(expected.keys()), "each file once per epoch")
            for a, b in itertools.combinations(per.values(), 2):
                self.assertFalse(set(a) & set(b), "no two readers share a sample")
            firsts.append(ds.my_shards(splits[0]))
        self.assertNotEqual(firsts[0], firsts[1], "shard order shuffled per epoch")
        # Sample contents: the image and its class label.
        ds = ShardDataset(f"{self.d}/tar", shuffle_shards=False, read_ahead=0, rank=0, world_size=1, worker=0, num_workers=1)
        samples = list(ds)
        self.assertEqual(len(samples), IMAGES)
        for s in samples:
            self.assertEqual(s["jpg"], expected[s["__key__"]])
            self.assertEqual(int(s["cls"]), int(s["__key__"].split("/")[0].split("_")[1]))
        # The index names every member at its offset.
        shard = self.c.read(f"{self.d}/tar/shard-000000.tar")
        for line in self.c.read(f"{self.d}/tar/shard-000000.tar.idx").decode().splitlines():
            name, off, size = line.split()
            key, ext = tdata.sample_key(name)
            if ext == "jpg":
                self.assertEqual(shard[int(off) : int(off) + int(size)], expected[key])

    def test_read_ahead_stops_with_its_consumer(self):
        import threading
        import time

        from trove.torch import ShardDataset

        ds = ShardDataset(f"{self.d}/tar", read_ahead=1, rank=0, world_size=1, worker=0, num_workers=1)
        it = iter(ds)
        self.assertEqual(len([next(it) for _ in range(3)]), 3)
        it.close()
        deadline = time.monotonic() + 10
        while any(t.name == "trove-read-ahead" for t in threading.enumerate()) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertFalse(any(t.name == "trove-read-ahead" for t in threading.enumerate()), "the read-ahead thread outlived its iterator")

    def test_tfrecord_shards_hold_every_record_once(self):
        from trove.torch import ShardDataset

        by_content = collections.Counter(self.files.values())
        splits = [Split(r, 3, 0, 1) for r in range(3)]
        ds = ShardDataset(f"{self.d}/tfr", shuffle_buffer=4, seed=2)
        per = self._shard_keys(ds, splits)
        every = [k for keys in per.values() for k in keys]
        self.assertEqual(len(every), IMAGES)
        self.assertEqual(len(set(every)), IMAGES)
        ds = ShardDataset(f"{self.d}/tfr", read_ahead=3, rank=0, world_size=1, worker=0, num_workers=1)
        images = []
        for s in ds:
            ex = tdata.parse_example(s["tfrecord"])
            self.assertEqual(ex["image/format"], [b"jpeg"])
            self.assertIn(ex["image/class/label"][0], range(CLASSES))
            images.append(ex["image/encoded"][0])
        self.assertEqual(collections.Counter(images), by_content)
        # Damage is reported with the shard and offset.
        raw = bytearray(self.c.read(f"{self.d}/tfr/shard-000000.tfrecord"))
        raw[20] ^= 0xFF
        with self.assertRaises(tdata.FormatError) as e:
            list(tdata.iter_tfrecord(bytes(raw), "bad"))
        self.assertIn("bad", str(e.exception))

    def test_expand_and_resize_as_in_the_isilon_paper(self):
        import json

        from PIL import Image

        trove_cli("dataset", "expand", "--src", f"{self.d}/tfr", "--out", f"{self.d}/tfr-x3", "--copies", "3")
        names = self.c.listdir(f"{self.d}/tfr-x3")
        src = self.c.listdir(f"{self.d}/tfr")
        self.assertEqual(len(names), 3 * len(src))
        self.assertEqual(self.c.read(f"{self.d}/tfr-x3/shard-000001-copy002.tfrecord"), self.c.read(f"{self.d}/tfr/shard-000001.tfrecord"))
        big_dir = f"{self.d}/big/class_0002"
        trove_cli("dataset", "resize", "--src", f"{self.d}/synth/class_0002", "--out", big_dir, "--scale", "3", "--quality", "100")
        big = self.c.listdir(big_dir)
        self.assertEqual(len(big), IMAGES // CLASSES)
        for n in big:
            small = Image.open(io.BytesIO(self.files[f"{self.d}/synth/class_0002/{n}"]))
            img = Image.open(io.BytesIO(self.c.read(f"{big_dir}/{n}")))
            img.load()
            self.assertEqual(img.size, (small.width * 3, small.height * 3))
        # The paper's large-image set, end to end: the resized images packed as TFRecords,
        # expanded, and read by `trove bench train` in place (ResNet-50 on V100: batches of 64,
        # at least two steps per epoch).
        trove_cli("dataset", "pack", "--src", f"{self.d}/big", "--out", f"{self.d}/big-tfr", "--format", "tfrecord", "--samples-per-shard", "4")
        trove_cli("dataset", "expand", "--src", f"{self.d}/big-tfr", "--out", f"{self.d}/big-tfr-x11", "--copies", "11")
        out = trove_cli("bench", "train", "--root", "/", "--data-path", f"{self.d}/big-tfr-x11", "--existing", "--workload", "resnet50", "--accelerator", "v100", "--accelerators", "1", "--epochs", "1", "--min-steps", "1", "--no-drop-caches", "--json", "--quiet")
        train = json.loads(out)["train"][0]
        self.assertEqual((train["dataset"]["files"], train["dataset"]["samples_per_file"]), (33, 4))
        self.assertEqual(train["generated"], False)
        self.assertEqual(train["runs"][0]["steps_per_epoch"], 2, "132 samples make two batches of 64")
        self.assertGreater(train["runs"][0]["au"], 0)
        self.assertNotIn("dataset.json", self.c.listdir(f"{self.d}/big-tfr-x11"), "nothing written into the set")
        # The expanded TFRecord set is read by `trove bench scan` (every record's CRCs checked).

        out = trove_cli("bench", "scan", "--root", "/", "--data-path", f"{self.d}/tfr-x3", "--readers-max", "1", "--duration", "0.5", "--no-drop-caches", "--json")
        scan = json.loads(out)["scan"][0]
        self.assertEqual(scan["files"], len([n for n in names if n.endswith(".tfrecord")]))
        self.assertGreater(scan["levels"][0]["records_per_s"], 0)
        # Bad input is refused with a reason.
        import subprocess

        bad = subprocess.run([os.environ["TROVE_BIN"], "dataset", "resize", "--src", f"{self.d}/nope", "--out", f"{self.d}/x"], capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("nope", bad.stderr)

    def test_torch_is_not_needed(self):
        import trove.torch as tt

        if "torch" not in sys.modules:
            self.assertIs(tt._MapBase, object)


class Splitting(unittest.TestCase):
    def test_deal_and_shuffle_buffer(self):
        items = list(range(103))
        shares = [tdata.deal(items, Split(r, 3, w, 4)) for r in range(3) for w in range(4)]
        self.assertEqual(sorted(x for s in shares for x in s), items)
        import random

        out = list(tdata.shuffle_buffer(iter(items), 10, random.Random(1)))
        self.assertEqual(sorted(out), items)
        self.assertNotEqual(out, items)
        with self.assertRaises(ValueError):
            Split(3, 3, 0, 1).check()

    def test_split_follows_the_environment(self):
        os.environ["RANK"], os.environ["WORLD_SIZE"] = "1", "4"
        try:
            s = tdata.current_split()
            self.assertEqual((s.rank, s.world_size), (1, 4))
        finally:
            del os.environ["RANK"], os.environ["WORLD_SIZE"]


if __name__ == "__main__":
    unittest.main()
